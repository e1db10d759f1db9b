"""One process of the loader rows of `make bench` (bench_pskd.py): shuffled epochs of
trove.data.TorchDataset through a torch DataLoader, each timed from the loader's start to its last
batch (its workers start again each epoch, as they do without persistent_workers).

    pskd_loader.py --batch B --epochs K --workers N [--rank R --world-size W] [--zeros] SOURCE...

--zeros: the same number of batches of the same shapes and dtypes, zeros made on the spot instead
of read: what the DataLoader itself costs (its workers hand every batch to this process through
shared memory), the anchor of each loader row. Prints "ready" once the dataset is open and waits
for a line on stdin (so that several ranks start together), then one JSON line: samples read per
epoch, the seconds of each epoch, this process's anonymous resident memory before the first epoch
(KiB), and for every process that produced batches in the last epoch (each worker, or this process
when N is 0) its peak resident set (VmHWM) and, at the end of the epoch, its anonymous,
file-backed and shared-memory resident pages (RssAnon, RssFile, RssShmem), in KiB.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import warnings

import torch
import torch.utils.data

import trove.data

FIELDS = ("VmHWM", "RssAnon", "RssFile", "RssShmem")


def memory():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in FIELDS:
                out[key] = int(value.split()[0])
    return out


def report(directory):
    with open(os.path.join(directory, f"{os.getpid()}.json"), "w") as f:
        json.dump(memory(), f)


class Measured(trove.data.TorchDataset):
    """Reports the memory of the process that iterated it, when its share of the epoch ends."""

    report_dir = ""

    def __iter__(self):
        yield from super().__iter__()
        report(self.report_dir)


class Zeros(torch.utils.data.IterableDataset):
    """The batches `real` would yield, split among workers the same way, as fresh zeros."""

    report_dir = ""

    def __init__(self, real):
        super().__init__()
        self.batches = len(real)
        probe = next(iter(trove.data.open(real._paths, framework="pt").batches(real.batch, take=1)))
        self.leaves = [(tuple(t.shape), t.dtype) for t in probe]

    def __len__(self):
        return self.batches

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for _ in range(worker, self.batches, workers):
            yield tuple(torch.zeros(shape, dtype=dtype) for shape, dtype in self.leaves)
        report(self.report_dir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--zeros", action="store_true")
    ap.add_argument("sources", nargs="+")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores: on purpose
    with tempfile.TemporaryDirectory() as reports:
        real = Measured(args.sources, args.batch, seed=1, rank=args.rank, world_size=args.world_size)
        ds = Zeros(real) if args.zeros else real
        ds.report_dir = reports
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=args.workers)
        before = memory()["RssAnon"]
        print("ready", flush=True)
        sys.stdin.readline()
        seconds = []
        for epoch in range(args.epochs):
            if not args.zeros:
                real.set_epoch(epoch)
            for name in os.listdir(reports):
                os.remove(os.path.join(reports, name))
            samples = 0
            start = time.perf_counter()
            for batch in loader:
                samples += batch[0].shape[0]
            seconds.append(time.perf_counter() - start)
        rss = []
        for name in sorted(os.listdir(reports)):
            with open(os.path.join(reports, name)) as f:
                rss.append(json.load(f))
    print(json.dumps({"samples": samples, "seconds": seconds, "anon_before": before, "rss": rss}), flush=True)


if __name__ == "__main__":
    main()
