# mypy: ignore-errors
# (private: it reaches trove.data's private names, which the public stubs leave out on purpose)
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


class _Shared:
    """The slots of TorchDataset._shared, a shared-memory int64 tensor every worker sees."""
    EPOCH = 0              # the epoch the next iteration reads
    RESUMED_EPOCH = 1      # the epoch of a loaded state...
    SKIP = 2               # ...and its batches already read
    READ_UNCOUNTED = 3     # 1 once workers of a DataLoader not made by loader() have iterated the
                           # dataset, until the position is known again (an iteration counted here,
                           # a loaded state)


_SHARED_SLOTS = 4
# state_dict's layout; load_state_dict refuses any other.
_STATE_VERSION = 1
# Epochs go to 2**64 - 1, as presk's --epoch: a slot holds an epoch's 64 bits as an int64.
_EPOCH_BITS = (1 << 64) - 1


def _epoch_slot(epoch: int) -> int:
    return epoch - (1 << 64) if epoch >= 1 << 63 else epoch


def _slot_epoch(slot: Any) -> int:
    return int(slot.item()) & _EPOCH_BITS


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
                 with_indices: bool = False, windows: Optional[int] = None, stride: Optional[int] = None) -> None:
        super().__init__()
        data = Dataset(_source_list(sources), framework="pt", windows=windows, stride=stride)
        # The shards as they were expanded here: workers reopen these files, never the pattern again.
        self._paths = data.paths
        self._windows = data.windows
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
        self._batches = data._data.batches_per_rank(self.batch, self.take, self.world_size, self._count)
        # Shared with every worker, persistent ones included: the epoch, and a resumed epoch with the
        # batches of it already read (load_state_dict), and whether workers have read batches this
        # process cannot count.
        self._shared = torch.zeros(_SHARED_SLOTS, dtype=torch.int64).share_memory_()
        # True in the copies loader() hands its workers as it starts them: their batches are counted
        # where they reach the training loop.
        self._workers_counted = False
        self.set_epoch(epoch)
        # (epoch, batches of it this process has handed out), counted where batches reach the training loop.
        self._position: Optional[list] = None
        self._data: Optional[Dataset] = data
        self._pid = os.getpid()

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (its shuffle), in every worker. A state loaded for this
        epoch (load_state_dict) still applies; for any other epoch the iteration starts at its start."""
        self._shared[_Shared.EPOCH] = _epoch_slot(_count("epoch", epoch))

    @property
    def epoch(self) -> int:
        return _slot_epoch(self._shared[_Shared.EPOCH])

    def __len__(self) -> int:
        """The batches this rank reads an epoch (the same on every rank)."""
        return self._batches

    def _dataset(self) -> Dataset:
        # A forked worker must not share the parent's lazily mapped state; reopening costs a header each.
        if self._data is None or self._pid != os.getpid():
            windows, stride = self._windows if self._windows is not None else (None, None)
            data = Dataset(self._paths, framework="pt", windows=windows, stride=stride)
            if len(data) != self._count:
                raise _error("io", f"the dataset changed since it was opened ({self._count} samples, now {len(data)})")
            self._data, self._pid = data, os.getpid()
        return self._data

    def _skip(self, epoch: int) -> int:
        """The batches of `epoch` already read by the run that saved the loaded state (0 without one)."""
        shared = self._shared
        return int(shared[_Shared.SKIP].item()) if _slot_epoch(shared[_Shared.RESUMED_EPOCH]) == epoch else 0

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch = self.epoch
        skip = self._skip(epoch)
        data = self._dataset()
        if skip == 0:
            batches = data.batches(self.batch, self.seed, epoch, self.take, self.rank, self.world_size,
                                   worker, workers, with_indices=self.with_indices)
        else:
            # The rank's batches from `skip` on, dealt to the workers in turn as a whole epoch is
            # (the j-th remaining batch to worker j mod n), so the loader yields them in order.
            order = data.batch_indices(self.batch, self.seed, epoch, self.take, self.rank, self.world_size)
            batches = data._batches_of(order[skip:][worker::workers], self.with_indices)
        if info is not None:
            if not self._workers_counted:
                self._shared[_Shared.READ_UNCOUNTED] = 1
            return batches
        return self._counted(batches)

    def _counted(self, batches: Iterator[Any]) -> Iterator[Any]:
        # Called in the process that hands batches to the training loop: records where it is.
        epoch = self.epoch
        position = [epoch, self._skip(epoch)]
        self._position = position
        self._shared[_Shared.READ_UNCOUNTED] = 0

        def counting() -> Iterator[Any]:
            for item in batches:
                position[1] += 1
                yield item
            if self._skip(epoch):  # the resumed epoch is over: the next pass over it is whole
                self._shared[_Shared.SKIP] = 0
        return counting()

    def state_dict(self) -> dict:
        """Where this rank is in its epochs, as plain ints and strings (torch.save and
        torch.load(weights_only=True) take it): the epoch and the batches of it already handed to
        the training loop, and the pipeline they belong to. Batches are counted as the loop
        receives them, whether the dataset is iterated directly or through `loader()` (with or
        without workers: batches prefetched by workers are not counted); a DataLoader built
        otherwise with workers cannot be counted, and this raises once its workers have read the
        dataset, until the position is known again (an iteration counted, a loaded state)."""
        shared = self._shared
        if int(shared[_Shared.READ_UNCOUNTED].item()):
            raise _error("usage", "this dataset was read by DataLoader workers whose batches it cannot count: "
                                  "build the loader with dataset.loader(num_workers=...) to save its state")
        epoch = self.epoch
        done = self._position[1] if self._position is not None and self._position[0] == epoch else self._skip(epoch)
        return {"version": _STATE_VERSION, "epoch": epoch, "batches": done, **self._pipeline_state()}

    def load_state_dict(self, state: dict) -> None:
        """Resumes where `state` (state_dict()) was saved: the next iteration reads the rest of
        that epoch, in every worker; set_epoch to another epoch reads that epoch whole. The state
        must come from the same pipeline (files' sample count, batch, seed, take, world size,
        windows), else UsageError naming what differs."""
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise _error("usage", f"not a TorchDataset state of version {_STATE_VERSION}: {state!r:.200}")
        for key, want in self._pipeline_state().items():
            if state.get(key) != want:
                raise _error("usage", f"the state was saved with {key}={state.get(key)!r}, this dataset has {key}={want!r}")
        epoch = _count("epoch", state.get("epoch"))
        done = _count("batches", state.get("batches"), 0, len(self))
        shared = self._shared
        shared[_Shared.EPOCH] = shared[_Shared.RESUMED_EPOCH] = _epoch_slot(epoch)
        shared[_Shared.SKIP] = done
        shared[_Shared.READ_UNCOUNTED] = 0
        self._position = [epoch, done]

    def _pipeline_state(self) -> dict:
        windows, stride = self._windows if self._windows is not None else (0, 0)
        # Seeds may reach 2^64 - 1: kept as text, since the state's ints are meant to fit an int64. The
        # sample count comes last: a different batch or windows= also changes it, and is named first.
        return {"batch": self.batch, "seed": "" if self.seed is None else str(self.seed),
                "take": -1 if self.take is None else self.take, "world_size": self.world_size,
                "windows": windows, "stride": stride, "samples": self._count}

    def loader(self, **kwargs: Any) -> torch.utils.data.DataLoader:
        """torch.utils.data.DataLoader(self, batch_size=None, **kwargs): num_workers, pin_memory..."""
        if kwargs.get("batch_size") is not None:
            raise _error("usage", "the dataset yields whole batches: the DataLoader's batch_size must be None")
        kwargs["batch_size"] = None
        return _CountingLoader(self, **kwargs)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_data"] = None  # reopened in the process that iterates
        return state

    def __repr__(self) -> str:
        return (f"<trove.data.TorchDataset {self._count} samples in {len(self._paths)} shard(s), batch {self.batch}, "
                f"rank {self.rank} of {self.world_size}, {len(self)} batches an epoch>")


class _CountingLoader(torch.utils.data.DataLoader):
    """TorchDataset.loader(): a DataLoader that counts, in this process, the batches its workers'
    output hands to the training loop, so that the dataset's state_dict() knows where the loop is
    (the workers run ahead by their prefetch). Without workers the dataset counts itself."""

    def __iter__(self) -> Any:
        ds = self.dataset
        ds._workers_counted = True  # in the copies of it the workers started now get
        try:
            batches = super().__iter__()
        finally:
            ds._workers_counted = False
        if self.num_workers == 0:
            return batches
        return ds._counted(batches)
