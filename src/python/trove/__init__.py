"""trove: zero-copy tensors from ML tensor containers, and a torch.load that never runs code.

Reads PyTorch checkpoints (.pt .pth .bin .ckpt), tensordict memmap directories and .tdz archives,
.psk.d sample files and .safetensors (single or sharded) with trove's C++ readers: nothing a file
contains is ever imported or executed.

    import trove
    with trove.open("model.pt", framework="pt") as f:
        print(f.keys())
        w = f.get_tensor("model/embed.weight")      # a view of the file: no copy
        head = f.get_slice("model/embed.weight")[0:4]
    state = trove.load("model.pt")                 # what torch.load(weights_only=True) returns
    trove.save(state, "copy.safetensors")

Tensors stored C-contiguous or strided, little-endian and uncompressed are views of a private
copy-on-write mapping of the file: they cost no memory until read, tensors sharing a storage in
the file share memory, and writing into one changes this process's copy only, never the file.
Big-endian, compressed (.tdz) and otherwise encoded storages are copied once per storage.
If another program truncates the file while its tensors are alive, reading past the new end gives
zeros and raises trove.IoError ("...: changed while being read") instead of killing the process.
trove.data is the .psk.d training pipeline: batches as `presk data batches` forms them, split among
the ranks of a torch.distributed run and their loader workers (trove.data.TorchDataset).
See docs/python.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import threading
import warnings
from typing import Any, Callable, Iterable, Iterator, Optional

from . import _trove

__all__ = [
    "open", "load", "save", "verify", "scan", "convert", "diff", "stats", "data",
    "File", "Slice", "TensorRef", "Global", "Object", "Dict", "Report", "Finding", "DiffReport",
    "Error", "UsageError", "IoError", "NotFoundError", "CorruptError", "RefusedError",
    "UnsupportedError", "LimitError", "UnknownObjectsWarning",
]


# --- errors -------------------------------------------------------------------------------------

class Error(Exception):
    """Every error trove raises. `code` is the library's ErrorCode name ("corrupt", "refused",
    "not-found", "io", "usage", "unsupported", "limit"); `message` the full message; the fields
    saying what and where, copied from the C++ trove::Error (None when unset): `reason` (the
    message without where), `file`, `entry` (record, member or key inside it), `offset` (bytes, in
    the entry when there is one), `spec_code` (the format spec's own number, 9004 for .psk.d's
    E9004), `refused_global` (the pickle global refused, "posix.system"), `contexts` (the other
    phrases of the message, outermost first)."""

    code: str = "unknown"
    reason: str = ""
    file: Optional[str] = None
    entry: Optional[str] = None
    offset: Optional[int] = None
    spec_code: Optional[int] = None
    refused_global: Optional[str] = None
    contexts: list = []

    def __init__(self, message: str = "", *args: Any) -> None:
        super().__init__(message, *args) if args else super().__init__(message)
        self.message = message
        self.reason = message
        self.contexts = []

    def __str__(self) -> str:
        return self.message


class UsageError(Error, ValueError):
    """The call makes no sense (a bad option, a bad key path)."""
    code = "usage"


class IoError(Error, OSError):
    """The operating system refused, or the file changed while being read."""
    code = "io"


class NotFoundError(Error, FileNotFoundError):
    """A named file, record or key does not exist."""
    code = "not-found"


class CorruptError(Error, ValueError):
    """The bytes do not follow the format."""
    code = "corrupt"


class RefusedError(Error):
    """Well-formed but not allowed: code execution, unknown globals, path escapes."""
    code = "refused"


class UnsupportedError(Error, NotImplementedError):
    """A valid feature trove (or the chosen framework) does not handle."""
    code = "unsupported"


class UnknownObjectsWarning(UserWarning):
    """A file holds objects of classes trove gives no data meaning: they are read as inert
    trove.Object records (nothing of them is run); its tensors are read as usual."""


class LimitError(Error):
    """A resource cap was exceeded (the message names it)."""
    code = "limit"


_ERROR_CLASSES = {c.code: c for c in (UsageError, IoError, NotFoundError, CorruptError, RefusedError,
                                      UnsupportedError, LimitError)}
_trove._register_errors(_ERROR_CLASSES)


def _error(code: str, message: str, reason: Optional[str] = None, file: Optional[str] = None) -> Error:
    e = _ERROR_CLASSES[code](message)
    e.code, e.message = code, message
    e.reason = message if reason is None else reason
    e.file = file
    return e


def _on_sigbus(signum: int, frame: Any) -> None:
    path = _trove._take_changed_path()
    if path is not None:
        raise _error("io", f"{path}: changed while being read", "changed while being read", path)


# The truncation guard for arrays read outside trove's calls (see the module docstring). Python
# runs signal handlers on the main thread only, so the exception needs the module imported there;
# imported elsewhere, a truncated file still reads zeros and the next call on it raises.
_trove._install_sigbus(_on_sigbus if threading.current_thread() is threading.main_thread() else None)


# --- dtypes -------------------------------------------------------------------------------------

_NUMPY_DTYPES = {
    "float16": "<f2", "float32": "<f4", "float64": "<f8",
    "int8": "i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
    "uint8": "u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
    "bool": "?", "complex64": "<c8", "complex128": "<c16",
}
# numpy has no such dtype: with raw=True, the stored bits as unsigned integers of the same size.
_RAW_DTYPES = {
    "bfloat16": "<u2", "complex32": "<u4",
    "float8_e4m3fn": "u1", "float8_e5m2": "u1", "float8_e4m3fnuz": "u1", "float8_e5m2fnuz": "u1",
    "float8_e8m0fnu": "u1", "float4_e2m1fn_x2": "u1",
    "bits8": "u1", "bits16": "<u2", "bits1x8": "u1", "bits2x4": "u1", "bits4x2": "u1",
}

_numpy = None
_torch = None


def _np():
    global _numpy
    if _numpy is None:
        import numpy
        _numpy = numpy
    return _numpy


def _pt():
    global _torch
    if _torch is None:
        try:
            import torch
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise _error("unsupported", f"framework='pt' needs torch: {e}") from None
        _torch = torch
    return _torch


def _numpy_array(info: tuple, raw: bool, key: str):
    storage, dtype, torch_name, shape, strides, offset, _rg, _param, _sid, has_data, _zc, quantizer, _bare = info
    if not has_data:
        raise _error("unsupported", f"{key}: a meta tensor has no data")
    if quantizer is not None:
        if not raw:
            raise _error("unsupported", f"{key}: a quantized tensor ({dtype}, {quantizer[0]}): numpy has no such dtype "
                                        "(framework='pt' gives the quantized tensor, raw=True its stored integers)")
        dtype = torch_name
    np = _np()
    spelled = _NUMPY_DTYPES.get(dtype)
    if spelled is None:
        if raw and dtype in _RAW_DTYPES:
            spelled = _RAW_DTYPES[dtype]
        else:
            hint = " (raw=True gives its bits as unsigned integers; framework='pt' gives the true dtype)" \
                if dtype in _RAW_DTYPES else ""
            raise _error("unsupported", f"{key}: numpy has no dtype {dtype}{hint}")
    nd = np.dtype(spelled)
    size = nd.itemsize
    return np.ndarray(tuple(shape), dtype=nd, buffer=storage, offset=offset * size,
                      strides=tuple(s * size for s in strides))


_ELEMENT_SIZES: dict = {}


def _element_size(torch: Any, dtype: Any) -> int:
    size = _ELEMENT_SIZES.get(dtype)
    if size is None:  # torch 1.13's dtypes have no itemsize
        size = dtype.itemsize if hasattr(dtype, "itemsize") else torch.empty((), dtype=dtype).element_size()
        _ELEMENT_SIZES[dtype] = size
    return size


class _TorchStorages:
    """One uint8 torch tensor per storage, so that views of one storage share it."""

    def __init__(self) -> None:
        self.by_id: dict = {}
        self.typed: dict = {}  # (storage id, torch dtype) -> the storage viewed as that dtype

    def tensor(self, info: tuple, key: str, parameters: bool = True):
        (storage, dtype, torch_name, shape, strides, offset, requires_grad, is_parameter, sid, has_data, _zc, quantizer,
         bare_storage) = info
        torch = _pt()
        tdt = getattr(torch, torch_name, None)
        if tdt is None:
            raise _error("unsupported", f"{key}: this torch ({torch.__version__}) has no dtype {torch_name}")
        if not has_data:
            t = torch.empty_strided(tuple(shape), tuple(strides), dtype=tdt, device="meta")
        else:
            typed = self.typed.get((sid, tdt))
            if typed is None:
                base = self.by_id.get(sid)
                if base is None:
                    base = torch.from_numpy(storage)
                    self.by_id[sid] = base
                size = _element_size(torch, tdt)
                usable = base if base.numel() % size == 0 else base[: base.numel() - base.numel() % size]
                typed = usable.view(tdt)
                self.typed[(sid, tdt)] = typed
            t = typed.as_strided(tuple(shape), tuple(strides), offset)
        if quantizer is not None:
            # The stored integers made a quantized tensor again, as torch's _rebuild_qtensor does.
            if quantizer[0] == "per_tensor_affine":
                t = torch._make_per_tensor_quantized_tensor(t, quantizer[1], quantizer[2])
            else:
                scales = self.tensor(quantizer[1], key + " (scales)", False)
                zero_points = self.tensor(quantizer[2], key + " (zero points)", False)
                t = torch._make_per_channel_quantized_tensor(t, scales, zero_points, quantizer[3])
        if bare_storage:  # a storage saved by itself, as torch.load gives it back
            return t.storage()
        if parameters and is_parameter:
            return torch.nn.Parameter(t, requires_grad=requires_grad)
        if requires_grad:
            t.requires_grad_(True)
        return t


# --- non-tensor values --------------------------------------------------------------------------

class TensorRef:
    """A tensor's place in File.values(): its key path, dtype and shape (no data read)."""

    __slots__ = ("key", "dtype", "shape")

    def __init__(self, key: Optional[str], dtype: str, shape: tuple) -> None:
        self.key, self.dtype, self.shape = key, dtype, shape

    def __repr__(self) -> str:
        return f"TensorRef({self.key!r}, {self.dtype}, {list(self.shape)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorRef) and (self.key, self.dtype, self.shape) == (other.key, other.dtype, other.shape)

    def __hash__(self) -> int:
        return hash((self.key, self.dtype, self.shape))


class Global:
    """A Python name the file used as a value (e.g. a class), never imported."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Global({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Global) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class Object:
    """An object the file describes (class name, constructor arguments, state): a record of what the
    file said, never constructed."""

    __slots__ = ("type_name", "args", "state")

    def __init__(self, type_name: str, args: Any, state: Any) -> None:
        self.type_name, self.args, self.state = type_name, args, state

    def __repr__(self) -> str:
        return f"Object({self.type_name!r}, args={self.args!r}, state={self.state!r})"


class Dict(dict):
    """A dict of a class trove does not import (a dict or OrderedDict subclass) whose pickle also
    set attributes on it: the entries as a dict, the class's name as `type_name`, and the attributes
    (their tensors included, as the file holds them) as attributes of this object. A dict subclass
    without attributes comes back as a plain dict."""

    def __init__(self, type_name: str, entries: dict, attributes: dict) -> None:
        super().__init__(entries)
        self.type_name = type_name
        for name, value in attributes.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"Dict({self.type_name!r}, {dict.__repr__(self)}, attributes={list(vars(self))[1:]!r})"


def _global_for(framework: Optional[str]):
    def convert(name: str):
        if framework == "pt" and name.startswith("torch."):
            torch = _pt()
            value = getattr(torch, name[len("torch."):], None)
            if isinstance(value, torch.dtype):
                return value
        return Global(name)
    return convert


# What a defaultdict's factory can be when trove gives one back: Python's own data types.
_DEFAULT_FACTORIES = {"builtins.list": list, "builtins.dict": dict, "builtins.set": set, "builtins.int": int,
                      "builtins.float": float, "builtins.str": str, "builtins.tuple": tuple,
                      "builtins.bool": bool, "builtins.bytes": bytes, "collections.OrderedDict": collections.OrderedDict}


def _dict_for(type_name: str, d: dict, args: Any, state: Any = None):
    """A dict of another class (its entries already in d): collections.defaultdict (with its
    factory when that is a Python data type, else none), argparse.Namespace, and any dict subclass
    as the dict itself (its class is only a name here, never imported), or as a trove.Dict when its
    pickle set attributes (state: a dict of them) so that none of them is lost."""
    if isinstance(state, tuple) and len(state) == 2 and all(isinstance(p, (dict, type(None))) for p in state):
        state = {**(state[0] or {}), **(state[1] or {})}  # (instance dict, slots) as pickle's BUILD takes it
    if isinstance(state, dict) and state and all(isinstance(k, str) and k.isidentifier() and k != "type_name"
                                                  for k in state):
        return Dict(type_name, d, state)
    if type_name == "collections.defaultdict":
        factory = args[0] if isinstance(args, tuple) and args else None
        out = collections.defaultdict(_DEFAULT_FACTORIES.get(factory.name) if isinstance(factory, Global) else None)
        out.update(d)
        return out
    if type_name == "argparse.Namespace" and all(isinstance(k, str) for k in d):
        return argparse.Namespace(**d)
    return d


def _policy(strict: bool, permissive: bool) -> str:
    if strict and permissive:
        raise _error("usage", "strict and permissive exclude each other")
    return "strict" if strict else "permissive" if permissive else "default"


def _object_for(framework: Optional[str]):
    def convert(type_name: str, args: Any, state: Any):
        if type_name == "torch.Size" and isinstance(args, tuple) and args and isinstance(args[0], tuple):
            return _pt().Size(args[0]) if framework == "pt" else tuple(args[0])
        if (type_name == "torch.device" and framework == "pt" and isinstance(args, tuple) and 1 <= len(args) <= 2
                and isinstance(args[0], str) and all(isinstance(a, int) for a in args[1:])):
            return _pt().device(*args)  # a device is data: torch.device("cuda", 0)
        if type_name in ("builtins.set", "builtins.frozenset") and isinstance(args, tuple) and args:
            return set(args[0]) if type_name == "builtins.set" else frozenset(args[0])
        return Object(type_name, args, state)
    return convert


# --- open ---------------------------------------------------------------------------------------

class Slice:
    """A tensor not yet read: index it (f.get_slice(key)[0:4]) to get a view of only those
    elements; with a zero-copy tensor, only the pages those rows lie on are ever read."""

    def __init__(self, file: "File", key: str) -> None:
        self._file, self._key = file, key

    def get_shape(self) -> list:
        return list(self._file._info(self._key, with_data=False)[3])

    def get_dtype(self) -> str:
        return self._file._info(self._key, with_data=False)[1]

    def __getitem__(self, index: Any):
        return self._file.get_tensor(self._key)[index]


class File:
    """An open file (trove.open). Thread-safe for reading: many threads may call get_tensor at once.

    framework="np" returns numpy arrays, "pt" torch tensors (of any dtype torch has: bfloat16 and
    float8 too). Tensors stored little-endian in the file's own bytes (uncompressed) are zero-copy
    views of a private copy-on-write mapping: writing into them changes this process's memory, never
    the file. Strided views stay strided (the same strides as in the file). Big-endian and
    compressed storages are copied (gathered and byte-swapped) once per storage, so views of one
    storage still share memory. The mapping lives as long as any array or tensor made from it.
    """

    def __init__(self, path: str | os.PathLike, framework: str = "np", raw: bool = False,
                 permissive: bool = False, strict: bool = False) -> None:
        if framework not in ("np", "numpy", "pt", "torch"):
            raise _error("usage", f"framework must be 'np' or 'pt' (not {framework!r})")
        self.framework = "pt" if framework in ("pt", "torch") else "np"
        self.raw = raw
        self._lock = threading.RLock()
        self._doc = _trove._open(os.fspath(path), _policy(strict, permissive))
        unknown = self._doc.unknown_classes()
        if unknown:
            # Class names come from the file: repr() escapes what would act on a terminal.
            classes = [repr(c) for c in dict.fromkeys(unknown)]
            warnings.warn(f"{os.fspath(path)}: {len(unknown)} object(s) of classes trove does not know, read as inert "
                          f"trove.Object records (nothing run): {', '.join(classes[:8])}"
                          f"{' and more' if len(classes) > 8 else ''}", UnknownObjectsWarning, stacklevel=3)
        self._torch = _TorchStorages()

    # context manager: closing drops this object's references; arrays keep their mapping alive
    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._doc = None
        self._torch = _TorchStorages()

    def _document(self):
        if self._doc is None:
            raise _error("usage", "the file is closed")
        return self._doc

    @property
    def path(self) -> str:
        return self._document().path

    @property
    def format(self) -> str:
        return self._document().format

    def keys(self) -> list:
        """The tensors' key paths, in file order, as `trove info` lists them."""
        return self._document().keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._document().contains(key)

    def metadata(self) -> dict:
        """What `trove info --json` says, without the value tree: format, path, file_size,
        properties, records, tensors (key, dtype, shape, strides, storage, shared...), tensor_bytes,
        warnings."""
        return self._document().metadata()

    def _info(self, key: str, with_data: bool = True) -> tuple:
        doc = self._document()
        if with_data:
            with self._lock:
                return doc.tensor_info(key)
        return doc.tensor_meta(key)

    def get_tensor(self, key: str):
        """The tensor at `key`: a zero-copy view when it is stored so (see the class docstring)."""
        info = self._info(key)
        if self.framework == "np":
            return _numpy_array(info, self.raw, key)
        with self._lock:
            return self._torch.tensor(info, key)

    def __getitem__(self, key: str):
        return self.get_tensor(key)

    def get_slice(self, key: str) -> Slice:
        """A Slice: get_slice(key)[0:4] is the first four rows (a view, reading only those)."""
        if key not in self:
            raise _error("not-found", f"no tensor '{key}' in {self.path}")
        return Slice(self, key)

    def values(self) -> Any:
        """The whole value tree as plain Python objects (dict, OrderedDict, list, tuple, int,
        float, complex, str, bytes, None, bool), each tensor as a TensorRef (its key, dtype and
        shape: no data is read); names as Global, other objects as Object records."""
        doc = self._document()

        def tensor(info: tuple, key: Optional[str]):
            return TensorRef(key, info[1], tuple(info[3]))

        with self._lock:
            return doc.tree(tensor, _global_for(None), _object_for(None), False, _dict_for)

    def tree(self, parameters: bool = True) -> Any:
        """The value tree with the tensors themselves (what trove.load returns)."""
        doc = self._document()
        if self.framework == "np":
            def tensor(info: tuple, key: Optional[str]):
                return _numpy_array(info, self.raw, key or "a tensor")
        else:
            def tensor(info: tuple, key: Optional[str]):
                return self._torch.tensor(info, key or "a tensor", parameters)
        with self._lock:
            return doc.tree(tensor, _global_for(self.framework), _object_for(self.framework), True, _dict_for)

    def __repr__(self) -> str:
        if self._doc is None:
            return "<trove.File closed>"
        return f"<trove.File {self.path!r} {self.format} framework={self.framework!r}>"


def open(path: str | os.PathLike, framework: str = "np", raw: bool = False, permissive: bool = False,  # noqa: A001
         strict: bool = False) -> File:
    """Opens any file trove reads (by content): `with trove.open(path, framework="pt") as f:`.

    framework: "np" (numpy arrays) or "pt" (torch tensors). raw: with "np", dtypes numpy lacks
    (bfloat16, float8...) come as their bits (uint16/uint8) instead of raising UnsupportedError.
    The read policy (docs/security.md): by default pickle globals with a data meaning are read as
    data, dangerous ones (os.system, eval, getattr...) raise RefusedError naming them, and objects
    of any other class become inert Object records (an UnknownObjectsWarning names the classes).
    strict: every global without a data meaning raises RefusedError; permissive: even dangerous
    ones become Object records. Nothing is executed either way. Raises NotFoundError,
    CorruptError, RefusedError... (all trove.Error).
    """
    return File(path, framework, raw, permissive, strict)


def load(path: str | os.PathLike, map_location: Any = None, weights_only: bool = True, framework: str = "pt",
         mmap: bool = True, strict: bool = False) -> Any:
    """What torch.load(path, weights_only=True) returns, read by trove (nothing is executed).

    dicts, collections.OrderedDict (with a state_dict's _metadata), collections.defaultdict,
    argparse.Namespace, lists, tuples, numbers, str, bytes, None, torch.Size and tensors; numpy
    arrays in the file come back as tensors (numpy arrays with framework="np"), numpy scalars as
    numbers, torch.__version__ as a str, other dict subclasses as dicts; Parameters come back as
    torch.nn.Parameter; tensors sharing a storage in the file (tied weights, views) share one
    storage. Objects of other classes are trove.Object records (an UnknownObjectsWarning names
    them); strict=True refuses them instead. Any format trove reads (a tensordict, .tdz, .psk.d or
    .safetensors gives its dict of tensors). Tensors are zero-copy views of the file (see File);
    map_location (a device, a str, or a dict/callable as torch.load takes for CPU) moves them after
    loading. weights_only=False is refused: trove never runs a file's code.
    """
    if not weights_only:
        raise _error("refused", "trove.load never executes a file's code: weights_only=False is not available "
                                "(use torch.load for files you trust)")
    f = File(path, framework, strict=strict)
    try:
        tree = f.tree()
    finally:
        f.close()
    if map_location is not None and framework == "pt":
        tree = _move(tree, map_location)
    return tree


def _move(tree: Any, map_location: Any) -> Any:
    """torch.load's map_location, applied per storage as torch applies it: a callable gets each
    storage (untyped) and the location it was saved at ("cpu": every storage trove reads is on the
    CPU) and returns the storage to use, or None to keep it; a dict maps location names; a str or
    device is the target. Tensors that shared a storage share the moved one."""
    torch = _pt()
    if callable(map_location) and not isinstance(map_location, (str, torch.device)):
        def place(storage):
            moved = map_location(storage, "cpu")
            return storage if moved is None else moved
    else:
        target = map_location.get("cpu", "cpu") if isinstance(map_location, dict) else map_location
        device = torch.device(target)
        if device.type == "cpu":
            return tree

        def place(storage):
            whole = torch.empty(0, dtype=torch.uint8).set_(
                torch.storage.TypedStorage(wrap_storage=storage, dtype=torch.uint8))
            return whole.to(device).storage().untyped()
    memo: dict = {}
    storages: dict = {}

    def moved_tensor(t):
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()
        key = (storage.data_ptr(), storage.nbytes(), str(storage.device))
        if key not in storages:
            storages[key] = place(storage)
        target = storages[key]
        out = torch.empty(0, dtype=t.dtype, device=target.device).set_(
            torch.storage.TypedStorage(wrap_storage=target, dtype=t.dtype), t.storage_offset(), t.size(), t.stride())
        if t.requires_grad:
            out.requires_grad_(True)
        if isinstance(t, torch.nn.Parameter):
            out = torch.nn.Parameter(out, requires_grad=t.requires_grad)
        return out

    def walk(o: Any) -> Any:
        if id(o) in memo:
            return memo[id(o)]
        if isinstance(o, torch.Tensor):
            out = moved_tensor(o)
        elif isinstance(o, dict):
            out = type(o)()
            for k, v in o.items():
                out[k] = walk(v)
            if hasattr(o, "_metadata"):
                out._metadata = o._metadata
        elif isinstance(o, list):
            out = [walk(v) for v in o]
        elif isinstance(o, tuple):
            # a torch.Size stays one (its items are ints, nothing to replace)
            out = o if torch is not None and isinstance(o, torch.Size) else tuple(walk(v) for v in o)
        else:
            out = o
        memo[id(o)] = out
        return out
    return walk(tree)


# --- save ---------------------------------------------------------------------------------------

class _TensorSpec:
    __slots__ = ("storage_id", "storage", "dtype", "shape", "strides", "offset", "requires_grad", "is_parameter")

    def __init__(self, storage_id, storage, dtype, shape, strides, offset, requires_grad, is_parameter):
        self.storage_id, self.storage, self.dtype = storage_id, storage, dtype
        self.shape, self.strides, self.offset = shape, strides, offset
        self.requires_grad, self.is_parameter = requires_grad, is_parameter


def _torch_dtype_name(dtype) -> str:
    return str(dtype)[len("torch."):]


def _to_specs(obj: Any) -> tuple:
    """Replaces tensors and arrays by _TensorSpecs (one storage per torch storage, one per array);
    returns the tree and the objects to keep alive during the write."""
    keep: list = []
    storages: dict = {}
    memo: dict = {}
    torch = None
    try:
        import torch as _t
        torch = _t
    except ImportError:  # pragma: no cover
        pass
    np = _np()

    def storage_spec_of_torch(t):
        if t.device.type != "cpu":
            t = t.cpu()
        if t.is_sparse or t.is_quantized:
            raise _error("unsupported", "trove.save writes dense tensors only")
        t = t.detach()
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()
        ptr = st.data_ptr()
        entry = storages.get(("pt", ptr, st.nbytes()))
        if entry is None:
            flat = torch.empty(0, dtype=torch.uint8)
            flat.set_(st, 0, (st.nbytes(),), (1,))
            arr = flat.numpy()
            entry = (len(storages), arr)
            storages[("pt", ptr, st.nbytes())] = entry
            keep.extend((t, flat, arr))
        return entry

    def walk(o: Any) -> Any:
        if id(o) in memo:
            return memo[id(o)]
        if torch is not None and isinstance(o, torch.Tensor):
            sid, arr = storage_spec_of_torch(o)
            out = _TensorSpec(sid, arr, _torch_dtype_name(o.dtype), tuple(o.shape), tuple(o.stride()),
                              o.storage_offset(), bool(o.requires_grad) and not isinstance(o, torch.nn.Parameter)
                              or (isinstance(o, torch.nn.Parameter) and o.requires_grad),
                              isinstance(o, torch.nn.Parameter))
        elif isinstance(o, np.ndarray) or isinstance(o, np.generic):
            a = np.asarray(o)
            name = next((k for k, v in _NUMPY_DTYPES.items() if np.dtype(v) == a.dtype.newbyteorder("<")
                         or np.dtype(v) == a.dtype), None)
            if name is None:
                raise _error("unsupported", f"trove.save cannot write numpy dtype {a.dtype}")
            a = np.ascontiguousarray(a, dtype=np.dtype(_NUMPY_DTYPES[name]))
            flat = a.reshape(-1).view(np.uint8) if a.size else np.zeros(0, dtype=np.uint8)
            keep.extend((a, flat))
            sid = len(storages)
            storages[("np", id(a))] = (sid, flat)
            strides = []
            acc = 1
            for d in reversed(a.shape):
                strides.append(acc)
                acc *= max(d, 1)
            out = _TensorSpec(sid, flat, name, tuple(a.shape), tuple(reversed(strides)), 0, False, False)
        elif isinstance(o, dict):
            out = collections.OrderedDict() if isinstance(o, collections.OrderedDict) else {}
            memo[id(o)] = out
            for k, v in o.items():
                out[walk(k)] = walk(v)
            if isinstance(o, collections.OrderedDict) and getattr(o, "__dict__", None):
                out.__dict__.update({k: walk(v) for k, v in o.__dict__.items()})
        elif isinstance(o, list):
            out = []
            memo[id(o)] = out
            out.extend(walk(v) for v in o)
        elif isinstance(o, tuple):
            # a torch.Size stays one (its items are ints, nothing to replace)
            out = o if torch is not None and isinstance(o, torch.Size) else tuple(walk(v) for v in o)
        else:
            out = o
        memo[id(o)] = out
        keep.append(o)
        return out

    return walk(obj), keep


def save(obj: Any, path: str | os.PathLike, format: Optional[str] = None,  # noqa: A002
         progress: Optional[Callable[[int, int], Any]] = None, note: Optional[Callable[[str], Any]] = None,
         compression: Optional[str] = None, metadata: Optional[dict[str, str]] = None,
         max_shard_size: Optional[int | str] = None) -> None:
    """Writes nested dicts/lists/tuples of torch tensors, numpy arrays and plain values.

    format: "pt", "safetensors", "tensordict", "tdz" or "pskd"; None: from the name (.pt .pth .bin
    .ckpt, .safetensors, .tdz, .psk.d; a name without extension is a tensordict directory). Written
    under a temporary name and renamed, like every trove writer; torch.load of a .pt result equals
    `obj` (tensors sharing a storage stay shared, Parameters stay Parameters). An existing
    destination is replaced only when it is what trove writes there: trove never deletes a file it
    did not write (docs/security.md). Formats without a value tree (safetensors) take a dict of
    tensors.

    progress(done, total): called as the tensor bytes are written (done never decreases; the last
    call is (total, total)); note(text): the writer's remarks. Either may be called from another
    thread; an exception either raises abandons the write (nothing appears at `path`) and is
    raised here. compression: the .tdz payloads' method ("stored", "deflate", "bzip2", "lzma").
    metadata: a .safetensors file's "__metadata__" (str to str). max_shard_size: bytes or "5GB"
    (with format "safetensors" or "pt"): `path` is a directory of shards and their index, named and
    filled as the Hugging Face tools do.
    """
    tree, keep = _to_specs(obj)
    _trove._save(tree, os.fspath(path), format or "", _TensorSpec, progress, note, compression or "", metadata,
                 max_shard_size)
    del keep


# --- checks, convert, diff, stats ---------------------------------------------------------------

class Finding:
    """One finding of verify or scan: severity ("info", "medium", "high", "critical"), the entry
    inside the container, the byte offset, the message, the key path involved (or "") and, for a
    call the pickle asks for, that call with its arguments in Python-like text (or "")."""

    __slots__ = ("severity", "entry", "offset", "message", "key", "call")

    def __init__(self, severity: str, entry: str, offset: int, message: str, key: str, call: str = "") -> None:
        self.severity, self.entry, self.offset, self.message, self.key = severity, entry, offset, message, key
        self.call = call

    def __repr__(self) -> str:
        where = f"{self.entry} @ {self.offset}: " if self.entry else ""
        return f"<Finding {self.severity}: {where}{self.message}>"


class Report:
    """What verify or scan found. `ok` is true when no finding above "info" was made."""

    def __init__(self, d: dict) -> None:
        self.path: str = d["path"]
        self.format: str = d["format"]
        self.entries_checked: int = d["entries_checked"]
        self.bytes_checked: int = d["bytes_checked"]
        self.bytes_without_checksum: int = d["bytes_without_checksum"]
        self.findings: list = [Finding(**f) for f in d["findings"]]
        self.globals: list = d["globals"]

    @property
    def ok(self) -> bool:
        return not any(f.severity != "info" for f in self.findings)

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return f"<trove.Report {self.path!r} {self.format}: {len(self.findings)} findings>"


def verify(path: str | os.PathLike) -> Report:
    """Checks every structure and checksum (`trove verify`); the GIL is released meanwhile."""
    return Report(_trove._verify(os.fspath(path)))


def scan(path: str | os.PathLike) -> Report:
    """The security report (`trove scan`): every pickle global (Report.globals), code records,
    container anomalies, as findings."""
    return Report(_trove._scan(os.fspath(path)))


def convert(src: str | os.PathLike, dst: str | os.PathLike, to: Optional[str] = None,
            keys: Optional[Iterable[str] | str] = None, dtype: Optional[str] = None,
            drop_values: bool = False, progress: Optional[Callable[[int, int], Any]] = None,
            note: Optional[Callable[[str], Any]] = None, compression: Optional[str] = None,
            metadata: Optional[dict[str, str]] = None, max_shard_size: Optional[int | str] = None,
            strict: bool = False, permissive: bool = False, keep_unknown: bool = False,
            drop_unknown: bool = False, dequantize: bool = False) -> None:
    """`trove convert`: between any formats, streaming, written atomically; keys are key-path globs
    of the tensors to keep, dtype casts floating tensors ("bfloat16", "float16"...), drop_values
    leaves out values a .safetensors file cannot hold instead of refusing. The GIL is released.
    progress, note, compression, metadata: as for save (`--compression`, `--metadata`);
    max_shard_size: bytes or "5GB" (`--max-shard-size`, with to="safetensors" or "pt"): dst is a
    directory of shards and their index. strict, permissive: the read policy (as for open);
    objects of classes trove does not know are an error unless keep_unknown (to .pt: written back
    as read) or drop_unknown (left out, with what they hold; note says which). dequantize: quantized
    tensors become float32 tensors of their values (`--dequantize`; else only .pt takes them)."""
    if isinstance(keys, str):
        keys = [keys]
    _trove._convert(os.fspath(src), os.fspath(dst), to or "", list(keys or []), dtype or "", drop_values,
                    progress, note, compression or "", metadata, max_shard_size, _policy(strict, permissive),
                    keep_unknown, drop_unknown, dequantize)


class DiffReport:
    """What differs between two files: only_in_a, only_in_b (keys), tensors (one dict per common
    key: dtypes, shapes, identical, max_abs, l2, relative_l2...), values (differing non-tensor
    leaves), equal."""

    def __init__(self, d: dict) -> None:
        self.only_in_a: list = d["only_in_a"]
        self.only_in_b: list = d["only_in_b"]
        self.tensors: list = d["tensors"]
        self.values: list = d["values"]
        self.bytes_compared: int = d["bytes_compared"]
        self.equal: bool = d["equal"]

    def __bool__(self) -> bool:
        return self.equal

    def __repr__(self) -> str:
        return f"<trove.DiffReport equal={self.equal} tensors={len(self.tensors)}>"


def diff(a: str | os.PathLike, b: str | os.PathLike, rtol: float = 0.0, atol: float = 0.0) -> DiffReport:
    """`trove diff`: across formats, tensors matched by key path."""
    return DiffReport(_trove._diff(os.fspath(a), os.fspath(b), rtol, atol))


def stats(path: str | os.PathLike, keys: Optional[Iterable[str] | str] = None, threads: int = 0) -> dict:
    """`trove stats`: {key: {count, finite, min, max, mean, std, mean_abs, zeros, nan, pos_inf,
    neg_inf, subnormal}} in float64, over every tensor (or those matching the key globs); tensors
    whose dtype has no figures (quantized, bit containers, meta) are left out."""
    if isinstance(keys, str):
        keys = [keys]
    out, _skipped = _trove._stats(os.fspath(path), list(keys or []), threads)
    return out


# --- the data pipeline (trove.data: needs the names above) --------------------------------------

from . import data  # noqa: E402
