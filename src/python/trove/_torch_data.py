"""trove.data.TorchDataset: a .psk.d dataset as a torch IterableDataset for data-parallel training.

Imported by trove.data when TorchDataset is first asked for (it needs torch). docs/python.md ("Data")
and docs/pskd.md ("Sharding") say which batches each rank and each loader worker reads.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional

import torch
import torch.utils.data

from . import _error
from .data import _MAX_BATCH, Dataset, _count, _optional_count, _source_list, _Sources


def _distributed_world() -> Optional[tuple]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class TorchDataset(torch.utils.data.IterableDataset):
    """The batches of one rank of a data-parallel run, as torch tensors, for a DataLoader built
    with batch_size=None (each item already is a batch; `loader()` builds one).

    rank and world_size: by default those of the initialised torch.distributed process group
    (read here, in the process making the dataset), else 0 and 1; a WORLD_SIZE above 1 in the
    environment (torchrun) without a process group is an error rather than every rank reading
    everything. Each epoch, rank r reads the epoch's batches r, r + W, r + 2W, ... (after shuffle,
    batch and take), and the last (batches mod W) go to no rank, so that every rank takes
    len(self) steps. Inside a DataLoader with n workers, worker k reads the rank's batches k,
    k + n, ...; the DataLoader takes one batch from each worker in turn, so it yields the rank's
    batches in the same order whatever n is: those `presk data batches ... --rank r --world-size W`
    prints. Call set_epoch(e) before each epoch, as with DistributedSampler (without it every epoch
    is epoch 0); the epoch is kept in shared memory, so persistent workers see it too.

    Items are tuples of tensors nested as the sample type (a type of one leaf: the tensor itself):
    index leaves int64, reals float64, float32 or bfloat16; with_indices=True yields
    (indices, batch), indices the int64 sample indices of the batch in the dataset.
    """

    def __init__(self, sources: _Sources, batch: int, seed: Optional[int] = None, take: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None, epoch: int = 0,
                 with_indices: bool = False) -> None:
        super().__init__()
        data = Dataset(_source_list(sources), framework="pt")
        # The shards as they were expanded here: workers reopen these files, never the pattern again.
        self._paths = data.paths
        self._count = len(data)
        self.batch = _count("batch", batch, 1, _MAX_BATCH)
        self.seed = _optional_count("seed", seed)
        self.take = _optional_count("take", take)
        self.with_indices = bool(with_indices)
        world = _distributed_world() if rank is None or world_size is None else None
        if world is None and (rank is None or world_size is None):
            launched = os.environ.get("WORLD_SIZE", "")
            if launched.isdigit() and int(launched) > 1:
                raise _error("usage", f"WORLD_SIZE={launched} but no torch.distributed process group is initialised: "
                                      "call init_process_group() before making the dataset, or pass rank and world_size")
            world = (0, 1)
        self.rank = _count("rank", world[0] if rank is None else rank)
        self.world_size = _count("world_size", world[1] if world_size is None else world_size, 1)
        if self.rank >= self.world_size:
            raise _error("usage", f"rank {self.rank} of a world of {self.world_size}")
        self._batches = data._data.batches_per_rank(self.batch, self.take, self.world_size)
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self.set_epoch(epoch)
        self._data: Optional[Dataset] = data
        self._pid = os.getpid()

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (its shuffle), in every worker."""
        self._epoch.fill_(_count("epoch", epoch))

    @property
    def epoch(self) -> int:
        return int(self._epoch.item())

    def __len__(self) -> int:
        """The batches this rank reads an epoch (the same on every rank)."""
        return self._batches

    def _dataset(self) -> Dataset:
        # A forked worker must not share the parent's lazily mapped state; reopening costs a header each.
        if self._data is None or self._pid != os.getpid():
            data = Dataset(self._paths, framework="pt")
            if len(data) != self._count:
                raise _error("io", f"the dataset changed since it was opened ({self._count} samples, now {len(data)})")
            self._data, self._pid = data, os.getpid()
        return self._data

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return self._dataset().batches(self.batch, self.seed, self.epoch, self.take, self.rank, self.world_size,
                                       worker, workers, with_indices=self.with_indices)

    def loader(self, **kwargs: Any) -> torch.utils.data.DataLoader:
        """torch.utils.data.DataLoader(self, batch_size=None, **kwargs): num_workers, pin_memory..."""
        if kwargs.get("batch_size") is not None:
            raise _error("usage", "the dataset yields whole batches: the DataLoader's batch_size must be None")
        kwargs["batch_size"] = None
        return torch.utils.data.DataLoader(self, **kwargs)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_data"] = None  # reopened in the process that iterates
        return state

    def __repr__(self) -> str:
        return (f"<trove.data.TorchDataset {self._count} samples in {len(self._paths)} shard(s), batch {self.batch}, "
                f"rank {self.rank} of {self.world_size}, {len(self)} batches an epoch>")
