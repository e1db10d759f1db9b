"""The ranks of test_distributed.py: `python3 distributed_ranks.py OUT.json SOURCE...` starts WORLD
processes with torch.multiprocessing.spawn, each in a gloo process group over loopback, each reading
its share of one epoch of trove.data.TorchDataset through a DataLoader with 2 workers.

Every rank reads the epoch twice (a new dataset and loader each time) and all_gathers the sample
indices of the batches it saw each time (checking each batch's content says the same); then a tiny
model takes one step per batch, its gradients all_reduced, to the end of the epoch, and the ranks
all_gather their parameters and step counts. Rank 0 writes it all to OUT.json. Every collective has
a deadline (a rank left waiting fails instead of hanging), and the store listens on 127.0.0.1 on a
port the system chose (no port is guessed). One launch serves both tests: starting torch in five
processes is most of the time.
"""

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 4
WORKERS = 2
BATCH = 3
SEED = 20
EPOCH = 1
DEADLINE = datetime.timedelta(seconds=40)
# Loader workers forked, as under torchrun: inside torch.multiprocessing.spawn the default would be
# to spawn them, each importing torch again (test_data.py covers spawned workers).
WORKER_START = "fork"


def read_epoch(trove_data, sources):
    """The sample indices of this rank's batches of the epoch, through a new dataset and DataLoader."""
    ds = trove_data.TorchDataset(sources, BATCH, seed=SEED, with_indices=True)  # rank and world from the group
    assert (ds.rank, ds.world_size) == (dist.get_rank(), WORLD), (ds.rank, ds.world_size)
    ds.set_epoch(EPOCH)
    seen = []
    for indices, (first, values) in ds.loader(num_workers=WORKERS, multiprocessing_context=WORKER_START):
        assert first.tolist() == indices.tolist(), "leaf 0 holds each sample's own index"
        assert values[:, 0].tolist() == [i / 2 for i in indices.tolist()]
        seen.append(indices)
    return len(ds), torch.stack(seen) if seen else torch.zeros((0, BATCH), dtype=torch.int64)


def gathered(tensor):
    everyone = [torch.zeros_like(tensor) for _ in range(WORLD)]
    dist.all_gather(everyone, tensor)
    return [t.tolist() for t in everyone]


def train(trove_data, sources):
    """One step per batch of the epoch, gradients all_reduced; the parameters and the step count."""
    ds = trove_data.TorchDataset(sources, BATCH, seed=SEED)
    ds.set_epoch(EPOCH)
    torch.manual_seed(0)  # the same initial model on every rank
    model = torch.nn.Linear(1, 1, dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    for first, values in ds.loader(num_workers=WORKERS, multiprocessing_context=WORKER_START):
        opt.zero_grad()
        loss = ((model(values).squeeze(1) - first.to(torch.float64) / 100) ** 2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= WORLD
        opt.step()
        steps += 1
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()] + [torch.tensor([float(steps)], dtype=torch.float64)])


def rank_main(rank, port, out, sources, pydir):
    sys.path.insert(0, pydir)
    import trove.data

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    store = dist.TCPStore("127.0.0.1", port, WORLD, False, timeout=DEADLINE)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD, timeout=DEADLINE)
    length, first = read_epoch(trove.data, sources)
    _, second = read_epoch(trove.data, sources)  # a second run: new dataset, new loader, new workers
    result = {"length": length, "first": gathered(first), "second": gathered(second),
              "train": gathered(train(trove.data, sources))}
    dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def main():
    out, sources = sys.argv[1], sys.argv[2:]
    pydir = os.environ["TROVE_PYTHON_DIR"]
    store = dist.TCPStore("127.0.0.1", 0, WORLD + 1, True, timeout=DEADLINE, wait_for_workers=False)
    mp.spawn(rank_main, args=(store.port, out, sources, pydir), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main()
