"""trove.data: the .psk.d training-data pipeline, the same batches as `presk data batches`.

    ds = trove.data.open("train-*.psk.d")          # a file, a pattern, a manifest, or a list of them
    len(ds), ds.type, ds[0]                        # a sample: a tuple of arrays, nested as its type
    for x, y in trove.data.batches("train.psk.d", 64, seed=1, epoch=0):
        ...                                        # stacked batches [64, ...], numpy arrays

    loader = trove.data.TorchDataset("train-*.psk.d", 64, seed=1).loader(num_workers=2)

`stream |> shuffle(seed) |> batch(B) |> take(k)` over the dataset (all its shards, in order, as one),
split among the ranks of a data-parallel run and the loader workers of each rank as docs/pskd.md
("Sharding") says. See docs/python.md ("Data").
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional, Sequence, Union

from . import UsageError, _error, _integer, _np, _pt, _trove

__all__ = ["open", "batches", "batch_indices", "Dataset", "TorchDataset"]

_Sources = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]


def _source_list(sources: _Sources) -> list:
    """The sources as the bytes the operating system takes (any str os.fsdecode gives, any bytes)."""
    try:
        if isinstance(sources, (str, bytes, os.PathLike)):
            sources = [sources]
        out = [os.fsencode(s) for s in sources]
    except (TypeError, UnicodeError):
        raise _error("usage", "sources must be a path, a pattern or a list of them") from None
    if any(b"\0" in s for s in out):
        raise _error("usage", "a source holds a NUL character, which no file name can")
    if not out:
        raise _error("usage", "a dataset needs at least one .psk.d file")
    return out


# The largest batch: batch_indices is a numpy array [batches, batch] of uint64, and numpy's arrays
# (even empty ones) span at most 2**63 bytes; no dataset has 2**48 samples.
_MAX_BATCH = 1 << 48
# The longest window of the windows view: lm-windows's cap (kMaxWindowTokens), for the same reason:
# a batch holds batch x (seq + 1) token indices at once.
_MAX_WINDOW_TOKENS = 1 << 24


class SampleIndexError(UsageError, IndexError):
    """A sample index outside the dataset: a UsageError, and an IndexError as sequences raise."""


def _count(name: str, value: Any, minimum: int = 0, maximum: int = (1 << 64) - 1) -> int:
    n = _integer(value)
    if n is None or n < minimum or n > maximum:
        raise _error("usage", f"{name} must be an integer from {minimum} to {maximum} (not {value!r})")
    return n


def _optional_count(name: str, value: Any) -> Optional[int]:
    return None if value is None else _count(name, value)


def _framework(framework: str) -> str:
    if framework in ("np", "numpy"):
        return "np"
    if framework in ("pt", "torch"):
        return "pt"
    raise _error("usage", f"framework must be 'np' or 'pt' (not {framework!r})")


def _nest(node, leaves: list):
    # A module function, not a closure over `leaves`: a recursive closure is a reference cycle, which
    # would keep every batch's arrays alive until the garbage collector runs.
    return leaves[node] if isinstance(node, int) else tuple([_nest(c, leaves) for c in node])


class Dataset:
    """The samples of one or more .psk.d shards of one sample type, indexed in shard order as one
    file (trove.data.open). Opening reads each shard's header; a shard is mapped when first read.

    framework="np" gives numpy arrays in the leaves' on-disk types (indices as the smallest
    unsigned integer holding their bound, reals as float64/float32; bfloat16 leaves need raw=True,
    which gives their bits as uint16). framework="pt" gives torch tensors: index leaves as int64,
    reals as float64, float32 or bfloat16.
    """

    def __init__(self, sources: _Sources, framework: str = "np", raw: bool = False, windows: Optional[int] = None,
                 stride: Optional[int] = None) -> None:
        self.framework = _framework(framework)
        self.raw = raw
        self._data = _trove._data_open(_source_list(sources))
        self._tree = self._data.tree()
        self._leaves = self._data.leaves()
        self._count = self._data.count
        self._type = self._data.type
        self._window: Optional[tuple] = None
        if windows is not None:
            self._open_windows(windows, stride)
        elif stride is not None:
            raise _error("usage", "stride is the step between windows: it needs windows=")
        if self.framework == "np" and not raw:
            for k, leaf in enumerate(self._leaves):
                if leaf["dtype"] == "bfloat16":
                    raise _error("unsupported", f"leaf {k} ({leaf['type']}) is bfloat16, which numpy lacks "
                                                "(raw=True gives its bits as uint16; framework='pt' gives bfloat16)")
        self._shards = [tuple(s) for s in self._data.shards()]

    def _open_windows(self, seq: Any, stride: Any) -> None:
        # The windows view of a token stream (docs/pskd.md, "Windows of a token stream"): sample k is
        # (tokens[kS .. kS+T], tokens[kS+1 .. kS+T+1]), as `presk data lm-windows` would have stored it.
        leaves = self._leaves
        if len(leaves) != 1 or leaves[0]["kind"] != "index" or tuple(leaves[0]["shape"]) != ():
            raise _error("usage", f"windows= reads a token stream, one idx[V][] sample a token (presk data tokens), "
                                  f"not samples of {self._type}")
        seq = _count("windows", seq, 1, _MAX_WINDOW_TOKENS)
        stride = seq if stride is None else _count("stride", stride, 1, _MAX_BATCH)
        tokens = self._data.count
        self._window = (seq, stride)
        self._count = 0 if tokens < seq + 1 else (tokens - seq - 1) // stride + 1
        bound = leaves[0]["bound"]
        leaf = dict(leaves[0], type=f"idx[{bound}][seq: {seq}]", shape=(seq,))
        self._leaves = [leaf, dict(leaf)]
        self._tree = (0, 1)
        self._type = f"({leaf['type']}, {leaf['type']})"

    def __len__(self) -> int:
        return self._count

    @property
    def type(self) -> str:
        """The sample type, as the first shard's header spells it (with windows=, the windows' type)."""
        return self._type

    @property
    def windows(self) -> Optional[tuple]:
        """(seq, stride) of the windows view, or None for the file's own samples."""
        return self._window

    @property
    def leaves(self) -> list:
        """One dict a leaf, in sample order: type, dtype (on disk), shape, kind ("index" or
        "real"), bound (indices) and encoding."""
        return [dict(leaf) for leaf in self._leaves]

    @property
    def shards(self) -> list:
        """(path, samples, index of its first sample in the dataset) for each shard, in order."""
        return list(self._shards)

    @property
    def paths(self) -> list:
        """The shard files, in order: what a pattern or manifest expanded to."""
        return [s[0] for s in self._shards]

    def __getitem__(self, index: int):
        at = _integer(index)
        if at is None:
            raise _error("usage", f"a sample index is an integer (not {index!r})")
        n = len(self)
        if at < 0:
            at += n
        if not 0 <= at < n:
            raise SampleIndexError(f"sample {at} of a dataset of {n}")
        leaves = self._leaves_of(_np().array([at], dtype="uint64"), None)
        return self._shape([leaf[0] for leaf in leaves])

    def batch_indices(self, batch: int, seed: Optional[int] = None, epoch: int = 0, take: Optional[int] = None,
                      rank: int = 0, world_size: int = 1, worker: int = 0, workers: int = 1):
        """The sample indices of the partition's batches of one epoch: a uint64 array
        [batches, batch], row i what `presk data batches` prints on its line i with the same
        options (--shuffle seed, --epoch, --take, --rank/--world-size, --worker/--workers)."""
        return self._data.order(_count("batch", batch, 1, _MAX_BATCH), _optional_count("seed", seed), _count("epoch", epoch),
                                _optional_count("take", take), _count("rank", rank), _count("world_size", world_size, 1),
                                _count("worker", worker), _count("workers", workers, 1), self._count)

    def batches(self, batch: int, seed: Optional[int] = None, epoch: int = 0, take: Optional[int] = None,
                rank: int = 0, world_size: int = 1, worker: int = 0, workers: int = 1,
                with_indices: bool = False) -> Iterator[Any]:
        """The partition's batches of one epoch, in order, each the samples of a row of
        batch_indices stacked under a leading batch axis (nested as the type, like a sample).
        A batch of consecutive samples of one shard (file order) is a view of the shard's mapping
        where its elements are aligned; other batches are gathered. with_indices: yields
        (indices, batch), indices the batch's sample indices (uint64 numpy array, or int64 tensor)."""
        order = self.batch_indices(batch, seed, epoch, take, rank, world_size, worker, workers)
        return self._batches_of(order, with_indices)

    def _batches_of(self, order, with_indices: bool) -> Iterator[Any]:
        # The batches of the rows of `order` (a uint64 array [batches, batch]), in order.
        empty = order[:0].reshape(-1)
        for i in range(order.shape[0]):
            nxt = order[i + 1] if i + 1 < order.shape[0] else empty
            data = self._shape(self._leaves_of(order[i], nxt))
            if with_indices:
                idx = order[i]
                yield (_pt().from_numpy(idx.astype("int64")) if self.framework == "pt" else idx.copy()), data
            else:
                yield data

    def _leaves_of(self, indices, nxt) -> list:
        np = _np()
        if nxt is None:
            nxt = np.zeros(0, dtype="uint64")
        if self._window is not None:
            # Each window's tokens are read once; inputs and targets are two copies of that read.
            seq, stride = self._window
            tokens = (indices[:, None] * np.uint64(stride) + np.arange(seq + 1, dtype="uint64")).reshape(-1)
            (flat,) = self._data.batch(tokens, nxt[:0], self.framework == "pt")
            rows = flat.reshape(len(indices), seq + 1)
            arrays = [np.ascontiguousarray(rows[:, :seq]), np.ascontiguousarray(rows[:, 1:])]
            return [_pt().from_numpy(a) for a in arrays] if self.framework == "pt" else arrays
        arrays = self._data.batch(indices, nxt, self.framework == "pt")
        out = []
        for leaf, a in zip(self._leaves, arrays):
            if self.framework == "pt":
                torch = _pt()
                if leaf["dtype"] == "bfloat16":
                    out.append(torch.from_numpy(a.view(np.int16)).view(torch.bfloat16))
                else:
                    out.append(torch.from_numpy(a))
            else:
                out.append(a)
        return out

    def _shape(self, leaves: list):
        return _nest(self._tree, leaves)

    def __repr__(self) -> str:
        return f"<trove.data.Dataset {len(self)} samples of {self.type} in {len(self._shards)} shard(s)>"


def open(sources: _Sources, framework: str = "np", raw: bool = False, windows: Optional[int] = None,  # noqa: A001
         stride: Optional[int] = None) -> Dataset:
    """A Dataset over `sources`: a .psk.d file, a manifest, a glob pattern, or a list of them.
    windows=T (stride=S, default T) reads a token stream (`presk data tokens`) as the windows
    `presk data lm-windows --seq T --stride S` would store."""
    return Dataset(sources, framework, raw, windows, stride)


def batches(sources: _Sources, batch: int, seed: Optional[int] = None, epoch: int = 0, take: Optional[int] = None,
            rank: int = 0, world_size: int = 1, worker: int = 0, workers: int = 1, framework: str = "np",
            raw: bool = False, with_indices: bool = False, windows: Optional[int] = None,
            stride: Optional[int] = None) -> Iterator[Any]:
    """The batches of `presk data batches SOURCES --batch batch [--shuffle seed] [--epoch epoch]
    [--take take] [--rank rank --world-size world_size] [--worker worker --workers workers]`,
    stacked (Dataset.batches)."""
    return open(sources, framework, raw, windows, stride).batches(batch, seed, epoch, take, rank, world_size, worker,
                                                                  workers, with_indices)


def batch_indices(sources: _Sources, batch: int, seed: Optional[int] = None, epoch: int = 0,
                  take: Optional[int] = None, rank: int = 0, world_size: int = 1, worker: int = 0,
                  workers: int = 1, windows: Optional[int] = None, stride: Optional[int] = None):
    """What `presk data batches` prints, as a uint64 array [batches, batch] (Dataset.batch_indices);
    with windows=, the window indices of the windows view."""
    return open(sources, raw=True, windows=windows, stride=stride).batch_indices(batch, seed, epoch, take, rank,
                                                                                world_size, worker, workers)


def __getattr__(name: str) -> Any:
    # TorchDataset subclasses torch's IterableDataset: torch is imported when it is first asked for.
    if name == "TorchDataset":
        from ._torch_data import TorchDataset
        return TorchDataset
    raise AttributeError(f"module 'trove.data' has no attribute {name!r}")
