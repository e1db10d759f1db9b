"""The ranks of test_distributed.py: `python3 distributed_ranks.py OUT.json SOURCE...` starts WORLD
processes with torch.multiprocessing.spawn, each in a gloo process group over loopback, each reading
its share of one epoch of trove.data.TorchDataset through a DataLoader with 2 workers.

Every rank reads the epoch twice (a new dataset and loader each time) and all_gathers the sample
indices of the batches it saw each time (checking each batch's content says the same); then a tiny
model takes one step per batch, its gradients all_reduced, to the end of the epoch, and the ranks
all_gather their parameters and step counts. Rank 0 writes it all to OUT.json. Every collective has
a deadline (a rank left waiting fails instead of hanging). The ranks meet through a file (no port
is chosen, so none can be taken) and connect over 127.0.0.1 (GLOO_SOCKET_IFNAME=lo); each checks
that its sockets have no other address. One launch serves both tests: starting torch in five
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


def socket_addresses():
    """The local addresses of this process's TCP sockets, in any state (/proc/net/tcp*, hex)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    out.append(fields[1].split(":")[0])
    return out


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1


def rank_main(rank, store_file, out, sources, pydir):
    sys.path.insert(0, pydir)
    import trove.data

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's connections: on 127.0.0.1
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=WORLD, timeout=DEADLINE)
    dist.barrier()
    addresses = socket_addresses()
    assert addresses, "gloo connects the ranks through TCP sockets"
    assert set(addresses) <= LOOPBACK, f"rank {rank} has sockets beyond the loopback interface: {addresses}"
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
    store_file = out + ".store"  # a fresh file: the rendezvous, instead of a port that might be taken
    mp.spawn(rank_main, args=(store_file, out, sources, pydir), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main()
