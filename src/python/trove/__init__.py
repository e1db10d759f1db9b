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
import builtins
import collections
import difflib
import numbers
import operator
import os
import re
import signal
import tempfile
import threading
import urllib.parse
import warnings
from typing import IO, Any, Callable, Iterable, Iterator, Optional, Union

from . import _trove

__version__: str = _trove.__version__

__all__ = [
    "open", "load", "save", "verify", "scan", "convert", "diff", "stats", "data",
    "set_threads", "get_threads", "set_io", "get_io",
    "File", "Slice", "TensorRef", "Global", "Object", "Dict", "Report", "Finding", "DiffReport",
    "Error", "UsageError", "IoError", "NotFoundError", "KeyNotFoundError", "CorruptError", "RefusedError",
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


class KeyNotFoundError(NotFoundError, KeyError):
    """A key the file has no tensor at (`f["nope"]`, `f.get_tensor("nope")`): a KeyError too, as a
    dict's or safetensors' safe_open's missing key is; the message suggests the closest keys."""


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


# The library words its messages in the command line's options ("--keep-unknown writes it
# back"); the same settings are arguments here, so an error reaching Python names those instead.
_FORMAT_NAMES = "safetensors|pt|tensordict|tdz|pskd|npy|npz"
# (An option is matched only where no name goes on before it: a file "run--strict.pt" keeps its name.)
_PYTHON_SPELLINGS = tuple((re.compile(pattern), python) for pattern, python in (
    (r"(?<![\w/.-])--(\w+) must be one of ([^(]*) \(not '([^']*)'\)", r"\1='\3' is not one of \2"),
    (rf"(?<![\w/.-])--to '?({_FORMAT_NAMES})\b'?", r"to='\1'"),
    (r"(?<![\w/.-])--dtype '?((?:b?float|u?int|complex)\d+|bool)\b'?", r"dtype='\1'"),
    (r"(?<![\w/.-])--keys '([^']*)'", r"keys='\1'"),
    (r"(?<![\w/.-])--exclude '([^']*)'", r"keys (a selection without '\1')"),
    (r"(?<![\w/.-])--exclude\b", "keys= (a selection)"),
    (r"(?<![\w/.-])--keys/--exclude select fewer", "keys= and exclude= select fewer"),
    # a rule as the command line spells it, FROM=TO: here an item of the rename dict
    (r"(?<![\w/.-])--rename '([^=]*)=(.*?)': ", lambda m: f"rename={{{m[1]!r}: {m[2]!r}}}: "),
    (r"(?<![\w/.-])--rename\b", "rename"),
    (r"(?<![\w/.-])--metadata KEY=VALUE\b", "metadata={KEY: VALUE}"),
    (r"(?<![\w/.-])--allow-expand\b", "allow_expand=True"),
    (r"(?<![\w/.-])--max-shard-size\b", "max_shard_size"),
    (r"(?<![\w/.-])--keep-unknown\b", "keep_unknown=True"),
    (r"(?<![\w/.-])--drop-unknown\b", "drop_unknown=True"),
    (r"(?<![\w/.-])--drop-values\b", "drop_values=True"),
    (r"(?<![\w/.-])--dequantize\b", "dequantize=True"),
    (r"(?<![\w/.-])--permissive\b", "permissive=True"),
    (r"(?<![\w/.-])--strict\b", "strict=True"),
    (r"(?<![\w/.-])--(to|dtype|keys|compression|metadata)\b(?= \()", r"\1="),  # "pass to= (pt, safetensors...)"
    (r"(?<![\w/.-])--(to|dtype|keys|compression|metadata)\b", r"\1"),
))


def _in_python_terms(e: "Error", spellings: tuple = ()) -> "Error":
    """The error with the command line's option names replaced by the arguments that are the
    same settings here (in message, reason, contexts and args; `spellings`, the calling
    function's own, first); returns it."""
    def spelled(text: str) -> str:
        for pattern, python in spellings + _PYTHON_SPELLINGS:
            text = pattern.sub(python, text)
        return text
    if "--" in e.message or "--" in e.reason:
        e.message, e.reason = spelled(e.message), spelled(e.reason)
        e.contexts = [spelled(c) for c in e.contexts]
        e.args = tuple(spelled(a) if isinstance(a, str) else a for a in e.args)
    return e


def _path(path: Any, what: str = "path") -> bytes:
    """A path argument as the bytes the operating system takes: any str (os.fsdecode's too, with
    its escaped bytes) or bytes or os.PathLike; anything else is a UsageError."""
    try:
        encoded = os.fsencode(path)
    except (TypeError, UnicodeError):
        raise _error("usage", f"{what} must be a str, bytes or os.PathLike naming a file (not {path!r})") from None
    if b"\0" in encoded:
        # The operating system would take the name up to the NUL: another file than the one named.
        raise _error("usage", f"{what} holds a NUL character, which no file name can: {path!r}")
    return encoded


def _is_utf8(text: str) -> bool:
    """Whether the str is text UTF-8 has bytes for: not when it holds a lone surrogate (a str
    pickle keeps, os.fsdecode's escape of a byte), which the library takes nowhere."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _texts(what: str, value: Any) -> list:
    """A str or an iterable of str (key globs) as a list; anything else is a UsageError."""
    items = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple, set, frozenset)) \
        else None if value is not None else []
    if items is None or not all(isinstance(v, str) for v in items):
        raise _error("usage", f"{what} must be a str or a list of str (not {value!r})")
    for v in items:
        _text(what, v)
    return items


def _text(what: str, value: Any) -> str:
    """An optional str option ("" when None); anything else is a UsageError."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _error("usage", f"{what} must be a str (not {value!r})")
    if not _is_utf8(value):
        raise _error("usage", f"{what} holds a lone surrogate, which is no text UTF-8 has bytes for: {value!r}")
    return value


def _metadata(value: Any) -> Optional[dict]:
    """save's and convert's metadata: None, or a dict of str to str that is UTF-8 text (a
    .safetensors header is JSON); anything else is a UsageError."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _error("usage", f"metadata must be a dict of str to str (not {value!r:.200})")
    for k, v in value.items():
        _text("metadata", k)
        _text(f"metadata[{k!r}]", v)
    return value


def _integer(value: Any) -> Optional[int]:
    """An integer argument as an int: any int but a bool, or what operator.index takes (numpy's
    integers); None for anything else."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _count(what: str, value: Any) -> int:
    """A non-negative int option; anything else is a UsageError."""
    n = _integer(value)
    if n is None or not 0 <= n < 1 << 32:
        raise _error("usage", f"{what} must be an integer from 0 (not {value!r})")
    return n


def _flag(what: str, value: Any) -> bool:
    """A True/False option (numpy's bool, 0 and 1 too); anything else is a UsageError."""
    if isinstance(value, (bool, _np().bool_)) or (type(value) is int and value in (0, 1)):
        return bool(value)
    raise _error("usage", f"{what} must be True or False (not {value!r})")


def _shard_size(value: Any) -> Any:
    """max_shard_size: None, a size such as "5GB", or a number of bytes (numpy's integers too)
    below 2**63, as the library takes it; anything else is a UsageError."""
    if value is None:
        return None
    if isinstance(value, str):
        return _text("max_shard_size", value)
    n = _integer(value)
    if n is None or not 0 < n < 1 << 63:
        raise _error("usage", f"max_shard_size must be a number of bytes from 1 to 2**63 - 1 or a size such as "
                              f"'5GB' (not {value!r})")
    return n


def _real(what: str, value: Any) -> float:
    """A non-negative number option (a tolerance; numpy's numbers too); anything else is a UsageError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
        raise _error("usage", f"{what} must be a number >= 0 (not {value!r})")
    return float(value)


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
# ggml's block-quantized types (GGUF): with raw=True, their blocks as stored (uint8, zero-copy,
# the last axis bytes of blocks); File.dequantize(key) gives their values.
_BLOCK_DTYPES = {
    "ggml_" + n for n in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_k",
                          "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "iq1_m",
                          "tq1_0", "tq2_0", "mxfp4")
}
_RAW_DTYPES.update({name: "u1" for name in _BLOCK_DTYPES})

# numpy's scalar classes as trove's reader names them (a number numpy pickled), and their dtypes.
_NUMPY_SCALARS = {
    "numpy.float16": "<f2", "numpy.float32": "<f4", "numpy.float64": "<f8",
    "numpy.int8": "i1", "numpy.int16": "<i2", "numpy.int32": "<i4", "numpy.int64": "<i8",
    "numpy.uint8": "u1", "numpy.uint16": "<u2", "numpy.uint32": "<u4", "numpy.uint64": "<u8",
    "numpy.bool_": "?", "numpy.complex64": "<c8", "numpy.complex128": "<c16",
}

# The torch names a file may use as values (a dtype in a config, a layout, a memory format) and
# the dtypes trove hands tensors out in: a fixed list, each name looked up on torch once. Nothing a
# file names is ever looked up on a module (with torch >= 2.1 an attribute lookup may import a
# submodule, running its code); a name not in this list stays a trove.Global.
_TORCH_VALUE_NAMES = (
    "float32", "float", "float64", "double", "float16", "half", "bfloat16", "complex32", "chalf", "complex64",
    "cfloat", "complex128", "cdouble", "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "bool",
    "uint16", "uint32", "uint64", "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2",
    "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged",
    "contiguous_format", "channels_last", "channels_last_3d", "preserve_format",
)
# torch.device's device types (what torch.device("cuda", 0) in a file may name).
_TORCH_DEVICE_TYPES = frozenset((
    "cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "ort", "maia", "xla", "lazy",
    "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone", "xpu", "ipu",
))
# torch.Size's and torch.device's numbers are C++ int64 and int8 (device index; -1: none).
_INT64 = range(-(1 << 63), 1 << 63)
_DEVICE_INDEX = range(-1, 1 << 7)

_numpy = None
_torch = None
_torch_values: Optional[dict] = None


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


def _torch_value(name: str) -> Any:
    """torch's dtype, layout or memory format named "torch.<name>" (_TORCH_VALUE_NAMES), or None."""
    global _torch_values
    if _torch_values is None:
        torch = _pt()
        kinds = tuple(k for k in (getattr(torch, "dtype", None), getattr(torch, "layout", None),
                                  getattr(torch, "memory_format", None)) if isinstance(k, type))
        table = {}
        for n in _TORCH_VALUE_NAMES:
            value = getattr(torch, n, None)
            if isinstance(value, kinds):
                table["torch." + n] = value
        _torch_values = table
    return _torch_values.get(name)


def _numpy_scalar(type_name: str, raw: bytes):
    """A number numpy pickled, as the numpy scalar it was (bit for bit)."""
    spelled = _NUMPY_SCALARS.get(type_name)
    if spelled is None or len(raw) != _np().dtype(spelled).itemsize:
        raise _error("corrupt", f"a numpy scalar of class {type_name} holding {len(raw)} bytes")
    return _np().frombuffer(raw, dtype=spelled)[0]


def _numpy_view(storage, nd, shape: tuple, strides: tuple, offset: int, key: str):
    """The elements as numpy's view of `storage` (strides and offset in elements). numpy checks
    the view against the buffer; where it refuses what torch takes (an empty array anywhere, a
    huge stride of a dimension of size 1: no element lies outside the storage, the library has
    checked that), the view is made from its first element without that check. numpy's own
    limits (an empty array whose other dimensions multiply past 2**63 bytes) are
    UnsupportedError."""
    np = _np()
    size = nd.itemsize
    steps = tuple(s * size for s in strides)
    try:
        return np.ndarray(shape, dtype=nd, buffer=storage, offset=offset * size, strides=steps)
    except (ValueError, OverflowError):
        pass
    try:
        first = np.zeros(1, dtype=nd) if 0 in shape else np.ndarray((1,), dtype=nd, buffer=storage, offset=offset * size)
        try:
            return np.lib.stride_tricks.as_strided(first, shape, steps)
        except OverflowError:  # a stride past numpy's int64 bytes, of a dimension never stepped along
            return np.lib.stride_tricks.as_strided(first, shape, tuple(0 if n <= 1 else s for n, s in zip(shape, steps)))
    except (ValueError, OverflowError) as e:
        raise _error("unsupported", f"{key}: numpy cannot make an array of shape {list(shape)} ({e})") from None


def _numpy_array(info: tuple, raw: bool, key: str, numpy_array: bool = False):
    """The tensor as a numpy array, little-endian; numpy_array: an array numpy pickled, in the
    byte order numpy unpickles it in (big-endian where the file's view says so: a copy)."""
    (storage, dtype, torch_name, shape, strides, offset, _rg, _param, _sid, has_data, _zc, quantizer, _bare,
     big_endian) = info
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
            if dtype in _BLOCK_DTYPES:
                hint = " (a block-quantized tensor: File.dequantize(key) gives its values, raw=True its blocks as uint8)"
            elif dtype in _RAW_DTYPES:
                hint = " (raw=True gives its bits as unsigned integers; framework='pt' gives the true dtype)"
            else:
                hint = ""
            raise _error("unsupported", f"{key}: numpy has no dtype {dtype}{hint}")
    nd = np.dtype(spelled)
    if numpy_array and big_endian and nd.itemsize > 1:
        # the storage's elements swapped back (a copy), viewed big-endian with the same layout
        whole = storage.size - storage.size % nd.itemsize
        storage = storage[:whole].view(nd).byteswap().view(np.uint8)
        nd = nd.newbyteorder(">")
    return _numpy_view(storage, nd, tuple(shape), tuple(strides), offset, key)


_ELEMENT_SIZES: dict = {}


def _element_size(torch: Any, dtype: Any) -> int:
    size = _ELEMENT_SIZES.get(dtype)
    if size is None:  # torch 1.13's dtypes have no itemsize
        size = dtype.itemsize if hasattr(dtype, "itemsize") else torch.empty((), dtype=dtype).element_size()
        _ELEMENT_SIZES[dtype] = size
    return size


class _TorchStorages:
    """One uint8 torch tensor per storage, so that views of one storage share it. `place`
    (trove.load's map_location) moves each storage once, as it is first used."""

    def __init__(self, place: Optional[Callable[[Any], Any]] = None) -> None:
        self.by_id: dict = {}
        self.typed: dict = {}  # (storage id, torch dtype) -> the storage viewed as that dtype
        self.place = place

    def _storage(self, sid: int, storage) -> Any:
        base = self.by_id.get(sid)
        if base is None:
            torch = _pt()
            # torch.from_numpy gives an empty array stride 0, which no .view(dtype) takes
            base = torch.from_numpy(storage) if storage.size else torch.empty(0, dtype=torch.uint8)
            if self.place is not None:
                base = self.place(base)
            self.by_id[sid] = base
        return base

    def tensor(self, info: tuple, key: str, parameters: bool = True):
        (storage, dtype, torch_name, shape, strides, offset, requires_grad, is_parameter, sid, has_data, _zc, quantizer,
         bare_storage, _big_endian) = info
        torch = _pt()
        tdt = _torch_value("torch." + torch_name)
        if tdt is None:
            raise _error("unsupported", f"{key}: this torch ({torch.__version__}) has no dtype {torch_name}")
        if not has_data:
            t = torch.empty_strided(tuple(shape), tuple(strides), dtype=tdt, device="meta")
        else:
            typed = self.typed.get((sid, tdt))
            if typed is None:
                base = self._storage(sid, storage)
                size = _element_size(torch, tdt)
                if base.data_ptr() % size:
                    # A storage at an offset of the file that is no multiple of its element size
                    # (legacy files, safetensors place them so): torch's kernels assume aligned
                    # elements (a misaligned complex128 crashes a copy), so it is copied once, to
                    # memory torch allocates aligned; its views of other dtypes are made anew.
                    base = torch.empty_like(base).copy_(base)
                    self.by_id[sid] = base
                    self.typed = {k: v for k, v in self.typed.items() if k[0] != sid}
                whole = base.numel() - base.numel() % size
                # the storage as elements of this dtype (an empty one: an empty tensor of it)
                typed = base[:whole].view(tdt) if whole else torch.empty(0, dtype=tdt, device=base.device)
                self.typed[(sid, tdt)] = typed
            # as torch.load makes it: any shape and strides, zero strides and empty views included
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
    """An object the file describes (class name, constructor arguments, state, and what its pickle
    appended to it and set in it: a list or dict subclass's items and entries, `entries` a list of
    (key, value) pairs): a record of what the file said, never constructed."""

    __slots__ = ("type_name", "args", "state", "items", "entries")

    def __init__(self, type_name: str, args: Any, state: Any, items: Optional[list] = None,
                 entries: Optional[list] = None) -> None:
        self.type_name, self.args, self.state = type_name, args, state
        self.items = [] if items is None else items
        self.entries = [] if entries is None else entries

    def __repr__(self) -> str:
        more = (f", items={self.items!r}" if self.items else "") + (f", entries={self.entries!r}" if self.entries else "")
        return f"Object({self.type_name!r}, args={self.args!r}, state={self.state!r}{more})"


class Dict(dict):
    """A dict of a class trove does not import (a dict or OrderedDict subclass) whose pickle also
    set attributes on it: the entries as a dict, the class's name as `type_name`, and the attributes
    (their tensors included, as the file holds them) as attributes of this object. A dict subclass
    without attributes comes back as a plain dict."""

    def __init__(self, type_name: str, entries: dict, attributes: dict) -> None:
        super().__init__(entries)
        self.type_name = type_name
        # into the instance's __dict__, as pickle's BUILD puts them ('__class__' changes nothing)
        self.__dict__.update(attributes)

    def __repr__(self) -> str:
        return f"Dict({self.type_name!r}, {dict.__repr__(self)}, attributes={list(vars(self))[1:]!r})"


def _global_for(framework: Optional[str]):
    def convert(name: str):
        if framework == "pt" and name.startswith("torch."):
            value = _torch_value(name)  # a dtype, layout or memory format, from the fixed list
            if value is not None:
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
    if type_name == "tensordict:TensorDict" and isinstance(state, dict) and "_batch_size" in state:
        # A TensorDict the file pickled: what torch.load gives without tensordict's code run, the
        # object with its pickled state (its entries under _tensordict), as for any class trove
        # does not import.
        items = list(state.items())
        pickled = dict(items[:1] + [("_tensordict", d)] + items[1:])
        return Object("tensordict._td.TensorDict", (), pickled)
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
        namespace = argparse.Namespace()
        namespace.__dict__.update(d)  # as pickle restores one (a '__class__' key changes nothing)
        return namespace
    return d


def _policy(strict: bool, permissive: bool) -> str:
    if strict and permissive:
        raise _error("usage", "strict and permissive exclude each other")
    return "strict" if strict else "permissive" if permissive else "default"


def _torch_device(args: Any) -> Any:
    """torch.device(type[, index]) or torch.device("type:index") when the arguments are a device
    of a type in _TORCH_DEVICE_TYPES that this torch knows; else None."""
    if not isinstance(args, tuple) or not 1 <= len(args) <= 2 or not isinstance(args[0], str):
        return None
    kind, colon, number = args[0].partition(":")
    index = args[1] if len(args) == 2 else int(number) if colon and number.isdigit() and len(number) < 4 else None
    if (kind not in _TORCH_DEVICE_TYPES or (colon and (len(args) == 2 or index is None))
            or not (index is None or (type(index) is int and index in _DEVICE_INDEX))):
        return None
    try:
        return _pt().device(kind) if index is None or index < 0 else _pt().device(kind, index)
    except RuntimeError:  # a device type this torch does not have
        return None


def _object_for(framework: Optional[str]):
    def convert(type_name: str, args: Any, state: Any, items: list, entries: list):
        if (type_name == "torch.Size" and isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], tuple)
                and all(isinstance(n, int) and n in _INT64 for n in args[0])):
            return _pt().Size(args[0]) if framework == "pt" else tuple(args[0])
        if type_name == "torch.device" and framework == "pt":
            device = _torch_device(args)  # a device is data: torch.device("cuda", 0)
            if device is not None:
                return device
        if (type_name in ("builtins.set", "builtins.frozenset") and isinstance(args, tuple) and len(args) == 1
                and isinstance(args[0], (list, tuple, set, frozenset, dict))):
            try:
                return set(args[0]) if type_name == "builtins.set" else frozenset(args[0])
            except TypeError:
                raise _error("corrupt", f"a {type_name[len('builtins.'):]} of unhashable items (Python cannot build "
                                        "it, nor can torch.load)") from None
        return Object(type_name, args, state, items, entries)
    return convert


# --- open ---------------------------------------------------------------------------------------

# A key path component as EncodeKeyComponent writes a str key's (include/trove/document.h):
# text with %XX escapes only. Typed components (`%int:1`, `%attr:...`) match no such text.
_ESCAPED_COMPONENT = re.compile(r"(?:[^%]|%[0-9A-F]{2})*")


def _verbatim_component(component: str) -> str:
    """A key path component as the file names it ("model/x" for "model%2Fx"); a component that is
    no str key's (a typed one, `%int:1`) or whose bytes are not UTF-8 (a bytes key) stays escaped,
    so that every name is a str."""
    if "%" not in component:
        return component
    if component == "%":
        return ""
    if not _ESCAPED_COMPONENT.fullmatch(component):
        return component
    try:
        return urllib.parse.unquote_to_bytes(component).decode("utf-8")
    except UnicodeDecodeError:
        return component


def _verbatim_names(encoded: list) -> list:
    """Each tensor's name as the file spells it: its key path's components unescaped, joined by
    '/' (a safetensors name "model/x" is "model/x"; a .pt file's {"model": {"x": t}} is "model/x"
    too). Names that would then be equal (a file holding both of those) keep their escaped key
    paths, which are unique."""
    verbatim = ["/".join(_verbatim_component(c) for c in key.split("/")) for key in encoded]
    counts = collections.Counter(verbatim)
    names = [v if counts[v] == 1 else k for k, v in zip(encoded, verbatim)]
    return names if len(set(names)) == len(names) else list(encoded)


class _Content:
    """A file's content handed to open()/load() as bytes or a file-like object, copied once into
    an anonymous in-memory file (memfd) that the readers open and map like any file. Tensors made
    from it keep their mapping after close(). Errors name it as `<bytes>`, `<BytesIO>`..."""

    def __init__(self, source: Any) -> None:
        self.shown = f"<{type(source).__name__}>"
        if hasattr(os, "memfd_create"):
            self._file = builtins.open(os.memfd_create("trove-content", os.MFD_CLOEXEC), "w+b")
        else:  # pragma: no cover - no memfd on this system: an unlinked temporary file
            self._file = tempfile.TemporaryFile()
        try:
            if isinstance(source, (bytes, bytearray, memoryview)):
                self._file.write(source)
            else:
                while True:
                    chunk = source.read(_COPY_CHUNK)
                    if not chunk:
                        break
                    if not isinstance(chunk, (bytes, bytearray, memoryview)):
                        raise _error("usage", f"the file-like object's read() gave {type(chunk).__name__}, not bytes "
                                              "(open the file in binary mode, 'rb')")
                    self._file.write(chunk)
            self._file.flush()
        except (TypeError, BufferError, ValueError) as e:
            self._file.close()
            if isinstance(e, Error):
                raise
            raise _error("usage", f"cannot read the content given ({self.shown}): {e}") from None
        except BaseException:
            self._file.close()
            raise
        self.path = f"/proc/self/fd/{self._file.fileno()}"

    def renamed(self, e: Error) -> Error:
        """The error with the in-memory file's name replaced by what the caller gave."""
        e.message = e.message.replace(self.path, self.shown)
        e.args = tuple(a.replace(self.path, self.shown) if isinstance(a, str) else a for a in e.args)
        if e.file == self.path:
            e.file = self.shown
        return e

    def close(self) -> None:
        self._file.close()


def _dtype_name(dtype: Any) -> str:
    """A dtype argument as its name: a str, or numpy's or torch's dtype (np.float32, torch.float32)."""
    np = _np()
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        return np.dtype(dtype).name
    if _torch is not None and isinstance(dtype, _torch.dtype):
        return str(dtype)[len("torch."):]
    if not isinstance(dtype, str):
        raise _error("usage", f"dtype must be a str such as 'float32', or numpy's or torch's dtype (not {dtype!r})")
    return _text("dtype", dtype)


def _torch_device_for(device: Any, framework: str, what: str = "device") -> Any:
    """open()'s device (load's map_location: `what`) as a torch.device, None for the CPU (where
    every tensor trove reads is); a device this process cannot use is a UsageError naming the
    argument."""
    if device is None or device == "cpu":
        return None
    if framework != "pt":
        raise _error("usage", f"{what}={device!r} needs framework='pt' (numpy arrays live on the CPU)")
    torch = _pt()
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise _error("usage", f"{what}={device!r} is not a device (e.g. 'cpu', 'cuda:0', 0)") from None
    if target.type == "cpu":
        return None
    try:
        torch.empty(0, device=target)
    except Exception as e:  # torch raises RuntimeError, AssertionError ("not compiled with CUDA")...
        first = str(e).strip().splitlines()[0] if str(e).strip() else "no such device"
        raise _error("usage", f"{what}={device!r} is not available in this process ({type(e).__name__}: "
                              f"{first})") from None
    return target


def _int_slice(part: slice) -> Optional[slice]:
    """The slice with its bounds and step as ints (numpy's too), or None when one is no integer."""
    try:
        return slice(*(None if b is None else operator.index(b) for b in (part.start, part.stop, part.step)))
    except TypeError:
        return None


def _within(index: Any, longest: int) -> Any:
    """The index with slice bounds and steps beyond +-(longest + 1) brought to that: they select
    the same elements along any dimension of at most `longest` (torch 1.13 fails on bounds near
    2**63, and past them: "Overflow when unpacking long")."""
    def bounded(part: Any) -> Any:
        whole = _int_slice(part) if isinstance(part, slice) else None
        if whole is None:
            return part
        return slice(*(None if b is None else max(-longest - 1, min(longest + 1, b))
                       for b in (whole.start, whole.stop, whole.step)))
    return tuple(bounded(p) for p in index) if isinstance(index, tuple) else bounded(index)


class Slice:
    """A tensor not yet read: index it (f.get_slice(key)[0:4]) to get a view of only those
    elements; with a zero-copy tensor, only the pages those rows lie on are ever read; with one
    assembled from a checkpoint's chunks or ranks (DCP, ZeRO), indexed by rows first (an int or a
    slice of step 1), only the chunks those rows lie in are read."""

    def __init__(self, file: "File", key: str) -> None:
        self._file, self._key = file, key

    def get_shape(self) -> list:
        return list(self._file._info(self._key, with_data=False)[3])

    def get_dtype(self) -> str:
        return self._file._info(self._key, with_data=False)[1]

    def __getitem__(self, index: Any):
        # indexed on the CPU (a view), then only those elements are moved to the device
        asked = _within(index, max(self.get_shape(), default=0))
        rows = self._file._rows_on_cpu(self._key, asked)
        if rows is not None:
            whole, asked = rows
        else:
            whole = self._file._tensor_on_cpu(self._key)
        try:
            part = whole[asked]
        except ValueError as e:  # a step of 0; torch: "step must be greater than zero"
            hint = (" (torch tensors take no negative step; framework='np' does, or index with a positive step and "
                    "flip)") if self._file.framework == "pt" else ""
            raise _error("usage", f"get_slice({self._key!r})[{index!r}]: {e}{hint}") from None
        except (IndexError, TypeError, OverflowError, RuntimeError) as e:
            # what numpy or torch says of an index it does not take (a str, an int past int64...)
            raise _error("usage", f"get_slice({self._key!r})[{index!r}]: {e}") from None
        return self._file._placed(part)


class File:
    """An open file (trove.open). Thread-safe for reading: many threads may call get_tensor at once.

    framework="np" returns numpy arrays, "pt" torch tensors (of any dtype torch has: bfloat16 and
    float8 too). Tensors stored little-endian in the file's own bytes (uncompressed) are zero-copy
    views of a private copy-on-write mapping: writing into them changes this process's memory, never
    the file. Strided views stay strided (the same strides as in the file). Big-endian and
    compressed storages are copied (gathered and byte-swapped) once per storage, so views of one
    storage still share memory. The mapping lives as long as any array or tensor made from it.
    """

    def __init__(self, path: str | os.PathLike | bytes | bytearray | memoryview | IO[bytes], framework: str = "np",
                 raw: bool = False, permissive: bool = False, strict: bool = False, device: Any = "cpu") -> None:
        if not isinstance(framework, str) or framework not in _FRAMEWORKS:
            raise _error("usage", f"framework={framework!r} is not one of {', '.join(map(repr, _FRAMEWORKS))}")
        self.framework = "pt" if framework in ("pt", "torch") else "np"
        self.raw = raw
        self._doc = None
        self._content: Optional[_Content] = None
        self._on_device: Optional[_TorchStorages] = None
        self.device = _torch_device_for(device, self.framework)
        self._lock = threading.RLock()
        self._name_table: Optional[tuple] = None
        policy = _policy(strict, permissive)
        if isinstance(path, (bytes, bytearray, memoryview)) or hasattr(path, "read"):
            self._content = _Content(path)
            try:
                self._doc = _trove._open(os.fsencode(self._content.path), policy)
            except Error as e:
                self._content.close()
                if isinstance(path, bytes) and len(path) <= 4096 and b"\0" not in path:
                    e.message += " (bytes are a file's content here, as safetensors.torch.load takes them; " \
                                 "a path is a str or os.PathLike)"
                    e.args = (e.message,)
                raise _in_python_terms(self._content.renamed(e)) from None
        else:
            try:
                self._doc = _trove._open(_path(path), policy)
            except Error as e:
                raise _in_python_terms(e) from None
        unknown = self._doc.unknown_classes()
        if unknown:
            # Class names come from the file: repr() escapes what would act on a terminal.
            classes = [repr(c) for c in dict.fromkeys(unknown)]
            warnings.warn(f"{self.path}: {len(unknown)} object(s) of classes trove does not know, read as inert "
                          f"trove.Object records (nothing run): {', '.join(classes[:8])}"
                          f"{' and more' if len(classes) > 8 else ''}", UnknownObjectsWarning, stacklevel=3)
        self._torch = _TorchStorages()
        if self.device is not None:
            target = self.device
            self._on_device = _TorchStorages(lambda base: base.to(target))

    # context manager: closing drops this object's references; arrays keep their mapping alive
    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._doc = None
        self._name_table = None
        self._torch = _TorchStorages()
        self._on_device = None
        if self._content is not None:
            self._content.close()

    def _document(self):
        if self._doc is None:
            raise _error("usage", "the file is closed")
        return self._doc

    @property
    def path(self) -> str:
        """The path opened, or `<bytes>`, `<BytesIO>`... for content given as such."""
        return self._content.shown if self._content is not None else self._document().path

    @property
    def format(self) -> str:
        return self._document().format

    def _names(self) -> tuple:
        """(names in file order, name -> key path, key path -> name): see _verbatim_names."""
        with self._lock:
            if self._name_table is None:
                encoded = self._document().keys()
                names = _verbatim_names(encoded)
                self._name_table = (names, dict(zip(names, encoded)), dict(zip(encoded, names)))
            return self._name_table

    def keys(self) -> list:
        """The tensors' names, in file order, verbatim: a safetensors name "model/x" is "model/x",
        a nested .pt dict's tensor "model/x" too (see docs/python.md, "Names")."""
        self._document()
        return list(self._names()[0])

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        # (a key path is UTF-8: a name that is not comes escaped)
        doc = self._document()
        return isinstance(key, str) and (key in self._names()[1] or (_is_utf8(key) and doc.contains(key)))

    def metadata(self) -> Optional[dict]:
        """A safetensors file's `__metadata__` (str to str), as safetensors' safe_open(...).metadata()
        gives it; a sharded checkpoint's index "metadata"; None when the file has none (every
        other format). trove's own description of the file is info()."""
        found = {k[len("metadata."):]: str(v) for k, v in self.info()["properties"].items() if k.startswith("metadata.")}
        return found or None

    def gguf_metadata(self) -> dict:
        """A GGUF file's metadata, every key in the file's order, typed and whole: {key: (type,
        value)}, the type "u8" ... "u64", "i8" ... "i64", "f32", "f64", "bool", "string" or
        "array"; an array's value is (element type, [every item]), nested arrays alike (info()
        summarises long arrays). Strings are decoded as UTF-8, invalid bytes replaced. An
        UnsupportedError for a file of another format."""
        doc = self._document()
        if doc.format != "gguf":
            raise _error("unsupported", f"{self.path} is not a GGUF file ({doc.format}): gguf_metadata() reads GGUF's typed metadata")
        source = self._content.path if self._content is not None else doc.path
        try:
            out = _trove._gguf_metadata(os.fsencode(source))
        except Error as e:
            raise _in_python_terms(self._content.renamed(e) if self._content is not None else e) from None
        doc.check_changed()
        return out

    def info(self) -> dict:
        """What `trove info --json` says, without the value tree: format, path, file_size,
        properties, records, tensors (key, dtype, shape, strides, storage, shared...), tensor_bytes,
        warnings."""
        out = self._document().metadata()
        if self._content is not None:
            out["path"] = self._content.shown
        return out

    def _info(self, key: str, with_data: bool = True) -> tuple:
        doc = self._document()
        if not isinstance(key, str):
            raise _error("usage", f"a tensor's key is a str (not {key!r})")
        path = self._names()[1].get(key, key)
        if not _is_utf8(path):
            raise self._missing_key(key, _error("not-found", f"no tensor {key!r} in {self.path}"))
        try:
            if with_data:
                with self._lock:
                    return doc.tensor_info(path)
            return doc.tensor_meta(path)
        except NotFoundError as e:
            if key in self:
                raise self._content.renamed(e) if self._content is not None else e
            raise self._missing_key(key, e) from None
        except Error as e:
            raise self._content.renamed(e) if self._content is not None else e

    def _missing_key(self, key: str, cause: Error) -> "KeyNotFoundError":
        close = difflib.get_close_matches(key, self.keys(), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(repr(k) for k in close)}?)" if close else ""
        if self._content is not None:
            cause = self._content.renamed(cause)
        e = KeyNotFoundError(f"{cause.message}{hint}")
        for field in ("code", "reason", "file", "entry", "offset", "spec_code"):
            setattr(e, field, getattr(cause, field, None))
        e.message = f"{cause.message}{hint}"
        return e

    def _tensor_on_cpu(self, key: str):
        info = self._info(key)
        if self.framework == "np":
            return _numpy_array(info, self.raw, key)
        with self._lock:
            return self._torch.tensor(info, key)

    def _rows_on_cpu(self, key: str, index: Any):
        """For a tensor assembled from a checkpoint's chunks or ranks (DCP, ZeRO) indexed by rows
        first (an int, or a slice of step 1): (those rows only, the rest of the index), reading
        only the chunks they lie in. None for any other tensor or index (the whole is viewed)."""
        first, rest = (index[0], index[1:]) if isinstance(index, tuple) and index else (index, ())
        if isinstance(first, bool) or not isinstance(first, (int, slice)):
            return None
        if isinstance(first, slice):
            first = _int_slice(first)
            if first is None or first.step not in (None, 1):
                return None
        shape = self._info(key, with_data=False)[3]
        if not shape:
            return None
        n = shape[0]
        if isinstance(first, int):
            at = first + n if first < 0 else first
            if not 0 <= at < n:
                return None  # torch says it is out of range
            start, stop, first = at, at + 1, 0
        else:
            start, stop, _ = first.indices(n)
            stop = max(start, stop)
            first = slice(None)
        doc = self._document()
        try:
            with self._lock:
                info = doc.tensor_rows_info(self._names()[1].get(key, key), start, stop)
        except Error as e:
            raise self._content.renamed(e) if self._content is not None else e
        if info is None:
            return None
        if self.framework == "np":
            rows = _numpy_array(info, self.raw, key)
        else:
            rows = _TorchStorages().tensor(info, key)  # storage id -1: its own storages, not shared
        return rows, (first,) + tuple(rest)

    def _placed(self, tensor: Any) -> Any:
        return tensor if self.device is None else tensor.to(self.device)

    def get_tensor(self, key: str):
        """The tensor named `key`: a zero-copy view when it is stored so (see the class docstring),
        moved to `device` when open() was given one."""
        return self._placed(self._tensor_on_cpu(key))

    def __getitem__(self, key: str):
        return self.get_tensor(key)

    def dequantize(self, key: str, dtype: Any = "float32", out=None):
        """The values of the quantized tensor at `key` as a new array of `dtype` ("float32",
        "float16" or "float64"; a torch tensor with framework="pt"), shaped as its values: a
        GGUF block type (ggml_q4_k ...) dequantized bit for bit as ggml's reference does, a
        torch quantized tensor as torch's dequantize(). The whole tensor's values are held.
        `out=` (as numpy's): an existing numpy array of `dtype`, that shape, C-contiguous and
        writeable, to write the values into (no fresh array's page faults); it is returned.
        dtype may also be numpy's or torch's dtype of that name (np.float32, torch.float32)."""
        doc = self._document()
        self._known(key)
        with self._lock:
            values = doc.dequantized(key, _dtype_name(dtype), out)
        if self.framework == "pt":
            return _pt().from_numpy(values)
        return values

    def get_slice(self, key: str) -> Slice:
        """A Slice: get_slice(key)[0:4] is the first four rows (a view, reading only those)."""
        return Slice(self, self._known(key))

    def _known(self, key: Any) -> str:
        """key, when the file has a tensor named so; else a UsageError (no str) or KeyNotFoundError."""
        if not isinstance(key, str):
            raise _error("usage", f"a tensor's key is a str (not {key!r})")
        if key not in self:
            raise self._missing_key(key, _error("not-found", f"no tensor {key!r} in {self.path}"))
        return key

    def values(self) -> Any:
        """The whole value tree as plain Python objects (dict, OrderedDict, list, tuple, int,
        float, complex, str, bytes, None, bool, numpy scalars), each tensor (and numpy array) as
        a TensorRef (its key, dtype and shape: no data is read); names as Global, other objects
        as Object records."""
        doc = self._document()

        names = self._names()[2]

        def tensor(info: tuple, key: Optional[str], numpy_array: bool):
            return TensorRef(names.get(key, key) if key is not None else None, info[1], tuple(info[3]))

        with self._lock:
            return doc.tree(tensor, _global_for(None), _object_for(None), False, _dict_for, _numpy_scalar)

    def tree(self, parameters: bool = True) -> Any:
        """The value tree with the tensors themselves (what trove.load returns): numpy arrays
        and scalars the file holds (numpy pickled them) as numpy arrays and scalars, the other
        tensors as the framework's."""
        doc = self._document()

        def tensor(info: tuple, key: Optional[str], numpy_array: bool):
            if self.framework == "np" or numpy_array:
                return _numpy_array(info, self.raw and not numpy_array, key or "a numpy array", numpy_array)
            storages = self._on_device if self._on_device is not None else self._torch
            return storages.tensor(info, key or "a tensor", parameters)
        with self._lock:
            return doc.tree(tensor, _global_for(self.framework), _object_for(self.framework), True, _dict_for,
                            _numpy_scalar)

    def __repr__(self) -> str:
        if self._doc is None:
            return "<trove.File closed>"
        return f"<trove.File {self.path!r} {self.format} framework={self.framework!r}>"


_FRAMEWORKS = ("pt", "np", "numpy", "torch")


def open(path: str | os.PathLike | bytes | bytearray | memoryview | IO[bytes],  # noqa: A001
         framework: str = "np", raw: bool = False, permissive: bool = False, strict: bool = False,
         device: Any = "cpu") -> File:
    """Opens any file trove reads (by content): `with trove.open(path, framework="pt") as f:`.

    framework: "np" (numpy arrays) or "pt" (torch tensors). raw: with "np", dtypes numpy lacks
    (bfloat16, float8...) come as their bits (uint16/uint8) instead of raising UnsupportedError.
    The read policy (docs/security.md): by default pickle globals with a data meaning are read as
    data, dangerous ones (os.system, eval, getattr...) raise RefusedError naming them, and objects
    of any other class become inert Object records (an UnknownObjectsWarning names the classes).
    strict: every global without a data meaning raises RefusedError; permissive: even dangerous
    ones become Object records. Nothing is executed either way. Raises NotFoundError,
    CorruptError, RefusedError... (all trove.Error).

    As safetensors' safe_open: keys() (names verbatim), get_tensor, get_slice, metadata() (the
    header's __metadata__, None when absent); device: "cpu", or with framework="pt" a torch device
    ("cuda:0", 0) the tensors are moved to as they are read. path may also be the file's content:
    bytes, bytearray, memoryview or a file-like object (read() to its end), copied once into memory.
    """
    return File(path, framework, raw, permissive, strict, device)


def load(path: str | os.PathLike | bytes | bytearray | memoryview | IO[bytes], map_location: Any = None, weights_only: bool = True, framework: str = "pt",
         mmap: bool = True, strict: bool = False) -> Any:
    """What torch.load(path, weights_only=True) returns, read by trove (nothing is executed).

    dicts, collections.OrderedDict (with a state_dict's _metadata), collections.defaultdict,
    argparse.Namespace, lists, tuples, numbers, str, bytes, None, torch.Size and tensors (of any
    shape and strides torch takes); numpy arrays and scalars as numpy arrays and scalars (numpy's
    RNG states too), torch.__version__ as a str, other dict subclasses as dicts; Parameters come
    back as torch.nn.Parameter; tensors sharing a storage in the file (tied weights, views) share
    one storage, and a value referred to twice is one object. Objects of other classes are
    trove.Object records (an UnknownObjectsWarning names them); strict=True refuses them instead.
    Any format trove reads (a tensordict, .tdz, .psk.d or .safetensors gives its dict of tensors).
    Tensors are zero-copy views of the file (see File); map_location (a device, a str, or a
    dict/callable as torch.load takes for CPU) places each storage as it is first used.
    weights_only=False is refused: trove never runs a file's code. Whatever the file holds, errors
    are trove.Error subclasses (docs/python.md, "Errors").
    """
    if not weights_only:
        raise _error("refused", "trove.load never executes a file's code: weights_only=False is not available "
                                "(use torch.load for files you trust)")
    f = File(path, framework, strict=strict)
    try:
        if f.format == "torchscript":
            # torch.load hands these to torch.jit.load, which makes a ScriptModule by running
            # their code; trove never does. trove.open reads their parameters and buffers.
            raise _error("refused", f"{f.path}: a TorchScript archive (constants.pkl, code/): refused by "
                                    "trove.load, which would have to run its code to give what torch.load gives "
                                    "(trove.open reads its parameters and buffers)", file=f.path)
        if map_location is not None and f.framework == "pt":
            f._torch = _TorchStorages(_placement(map_location))
        return f.tree()
    finally:
        f.close()


def _placement(map_location: Any) -> Optional[Callable[[Any], Any]]:
    """torch.load's map_location as a function from a storage (a uint8 tensor over all of it) to
    the storage to use, applied once per storage as torch applies it (tensors sharing a storage
    share the placed one): a callable gets the storage (untyped) and the location it was saved
    at ("cpu": every storage trove reads is on the CPU) and returns the storage to use, or None to
    keep it; a dict maps location names; a str or device is the target. None: nothing to move."""
    torch = _pt()
    if callable(map_location) and not isinstance(map_location, (str, torch.device)):
        def place(base):
            storage = base.untyped_storage() if hasattr(base, "untyped_storage") else base.storage().untyped()
            moved = map_location(storage, "cpu")
            if moved is None:
                return base
            if isinstance(moved, torch.TypedStorage):
                moved = moved.untyped()
            if not isinstance(moved, torch.UntypedStorage):
                raise _error("usage", f"map_location(storage, 'cpu') returned a value of type {type(moved).__name__}, "
                                      "not a storage or None")
            if moved.nbytes() != storage.nbytes():
                raise _error("usage", f"map_location(storage, 'cpu') returned a storage of {moved.nbytes()} bytes "
                                      f"for one of {storage.nbytes()} bytes")
            return torch.empty(0, dtype=torch.uint8, device=moved.device).set_(
                torch.storage.TypedStorage(wrap_storage=moved, dtype=torch.uint8))
        return place
    target = map_location.get("cpu", "cpu") if isinstance(map_location, dict) else map_location
    device = _torch_device_for(target, "pt", "map_location")
    if device is None:
        return None
    return lambda base: base.to(device)


# --- save ---------------------------------------------------------------------------------------

class _TensorSpec:
    __slots__ = ("storage_id", "storage", "dtype", "shape", "strides", "offset", "requires_grad", "is_parameter")

    def __init__(self, storage_id, storage, dtype, shape, strides, offset, requires_grad, is_parameter):
        self.storage_id, self.storage, self.dtype = storage_id, storage, dtype
        self.shape, self.strides, self.offset = shape, strides, offset
        self.requires_grad, self.is_parameter = requires_grad, is_parameter


class _ValueSpec:
    """A value trove.load gives that is more than its Python builtin type, as the readers model it
    (the bridge's FromPython.Typed): kind "dict" (items: (key, value) pairs; args; state: its
    attributes), "set"/"frozenset" (items), "global" (a name), "object" (args, state)."""
    __slots__ = ("kind", "type_name", "items", "args", "state")

    def __init__(self, kind: str, type_name: str = "", items: Optional[list] = None, args: Any = None,
                 state: Any = None) -> None:
        self.kind, self.type_name, self.items, self.args, self.state = kind, type_name, items or [], args, state


# A defaultdict's factory written as its name (the readers' _DEFAULT_FACTORIES, reversed).
_FACTORY_NAMES = {v: k for k, v in _DEFAULT_FACTORIES.items()}


def _torch_dtype_name(dtype) -> str:
    return str(dtype)[len("torch."):]


def _numpy_storage(a: Any, stored: Any) -> tuple:
    """An array as trove.save hands it to the writers: (its storage, a C-contiguous uint8 array
    of `stored` elements, little-endian; its strides in elements over that storage). Elements the
    array repeats (a dimension of stride 0, as np.broadcast_to makes; overlapping windows, as
    sliding_window_view makes) stay a view of the bytes they repeat, as a torch view is, so that
    the writers' expansion rule judges it alike (.pt keeps it a view; formats without strides
    refuse to write it whole beyond kMaxExpandRatio) instead of numpy expanding it here. The
    rest is copied C-contiguous (not at all when it already is): a slice of a large array writes
    only its own elements."""
    np = _np()
    size = a.itemsize
    repeated = tuple(n > 1 and s == 0 for n, s in zip(a.shape, a.strides))
    core = a[tuple(slice(0, 1) if r else slice(None) for r in repeated)] if any(repeated) else a
    span = size + sum((n - 1) * abs(s) for n, s in zip(core.shape, core.strides)) if core.size else 0
    if core.nbytes > span:  # overlapping windows
        if any(s < 0 or s % size for s in core.strides):
            raise _error("unsupported", f"trove.save cannot write a numpy array whose elements overlap with negative "
                                        f"or unaligned strides ({a.strides} bytes): pass np.ascontiguousarray(a), "
                                        "a copy")
        # the bytes from its first element to its last, which a view with these strides reads
        spanned = np.lib.stride_tricks.as_strided(core, (span // size,), (size,), writeable=False)
        flat = np.ascontiguousarray(spanned, dtype=stored).view(np.uint8)  # a copy only to swap bytes
        strides = [s // size for s in core.strides]
    else:
        c = np.ascontiguousarray(core, dtype=stored)
        flat = c.reshape(-1).view(np.uint8) if c.size else np.zeros(0, dtype=np.uint8)
        strides, step = [], 1
        for n in reversed(core.shape):
            strides.insert(0, step)
            step *= max(n, 1)
    return flat, tuple(0 if r else s for r, s in zip(repeated, strides))


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
        # Judged before anything is copied: a tensor of another layout or of no data fails only
        # once moved or asked for its storage, a meta one after the CPU allocated all its bytes.
        if t.layout != torch.strided or t.is_quantized:
            kind = "quantized" if t.is_quantized else t.layout
            raise _error("unsupported", f"trove.save writes dense tensors only (not {kind})")
        if t.device.type == "meta":
            raise _error("unsupported", f"trove.save cannot write a meta tensor (shape {list(t.shape)}): it holds no "
                                        "data")
        if t.device.type != "cpu":
            t = t.cpu()
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

    torch_names = tuple(k for k in (getattr(torch, "dtype", None), getattr(torch, "layout", None),
                                    getattr(torch, "memory_format", None)) if isinstance(k, type)) if torch else ()

    def typed_dict(o: Any, type_name: str, entries: Any, args: Any = None, state: Any = None) -> Iterator:
        out = _ValueSpec("dict", type_name)
        memo[id(o)] = out
        for k, v in entries:
            out.items.append(((yield k), (yield v)))
        out.args = (yield args) if args is not None else None
        out.state = (yield state) if state else None
        return out

    def walk(o: Any) -> Iterator:
        # A generator: it yields each value inside `o` and is sent back that value's conversion
        # (converted() runs them), so that nesting costs no Python stack.
        if id(o) in memo:
            return memo[id(o)]
        if isinstance(o, argparse.Namespace):
            out = yield from typed_dict(o, "argparse.Namespace", vars(o).items())
        elif isinstance(o, collections.defaultdict):
            factory = o.default_factory
            if factory is not None and factory not in _FACTORY_NAMES:
                raise _error("usage", f"trove.save cannot write a defaultdict whose default_factory is {factory!r} "
                                      "(only None or a Python type: list, dict, set, int...)")
            named = None if factory is None else _ValueSpec("global", _FACTORY_NAMES[factory])
            out = yield from typed_dict(o, "collections.defaultdict", o.items(), (named,))
        elif isinstance(o, Dict):
            attributes = {k: v for k, v in vars(o).items() if k != "type_name"}
            out = yield from typed_dict(o, o.type_name, o.items(), None, attributes)
        elif isinstance(o, (set, frozenset)):
            out = _ValueSpec("set" if isinstance(o, set) else "frozenset")
            memo[id(o)] = out
            for v in o:
                out.items.append((yield v))
        elif isinstance(o, Global):
            out = _ValueSpec("global", o.name)
        elif isinstance(o, Object):
            raise _error("unsupported", f"trove.save cannot write a trove.Object (an object of class {o.type_name!r} "
                                        "read as an inert record; trove.convert(..., keep_unknown=True) copies a file "
                                        "holding one)")
        elif torch_names and isinstance(o, torch_names):
            out = _ValueSpec("global", str(o))  # torch.float32, torch.strided, torch.channels_last
        elif torch is not None and isinstance(o, torch.device):
            out = _ValueSpec("object", "torch.device", args=(o.type,) if o.index is None else (o.type, o.index))
        elif isinstance(o, np.generic) and not isinstance(o, np.ndarray):
            # A numpy scalar (an RNG state's, a metric's) as the Python number it holds: what
            # torch.load(weights_only=True) reads back (numpy's own pickle of it is not allowed there).
            out = o.item()
            if not isinstance(out, (bool, int, float, complex, str, bytes)):
                raise _error("usage", f"trove.save cannot write a numpy {o.dtype} scalar")
        elif torch is not None and isinstance(o, torch.Tensor):
            sid, arr = storage_spec_of_torch(o)
            out = _TensorSpec(sid, arr, _torch_dtype_name(o.dtype), tuple(o.shape), tuple(o.stride()),
                              o.storage_offset(), bool(o.requires_grad) and not isinstance(o, torch.nn.Parameter)
                              or (isinstance(o, torch.nn.Parameter) and o.requires_grad),
                              isinstance(o, torch.nn.Parameter))
        elif isinstance(o, np.ndarray):
            a = np.asarray(o)
            name = next((k for k, v in _NUMPY_DTYPES.items() if np.dtype(v) == a.dtype.newbyteorder("<")
                         or np.dtype(v) == a.dtype), None)
            if name is None:
                raise _error("unsupported", f"trove.save cannot write numpy dtype {a.dtype}")
            flat, strides = _numpy_storage(a, np.dtype(_NUMPY_DTYPES[name]))
            keep.extend((a, flat))
            sid = len(storages)
            storages[("np", id(flat))] = (sid, flat)
            out = _TensorSpec(sid, flat, name, tuple(a.shape), strides, 0, False, False)
        elif isinstance(o, dict):
            out = collections.OrderedDict() if isinstance(o, collections.OrderedDict) else {}
            memo[id(o)] = out
            for k, v in o.items():
                key = yield k
                out[key] = yield v
            if isinstance(o, collections.OrderedDict) and getattr(o, "__dict__", None):
                for k, v in o.__dict__.items():
                    out.__dict__[k] = yield v
        elif isinstance(o, list):
            out = []
            memo[id(o)] = out
            for v in o:
                out.append((yield v))
        elif isinstance(o, tuple):
            # a torch.Size stays one (its items are ints, nothing to replace)
            if torch is not None and isinstance(o, torch.Size):
                out = o
            else:
                items = []
                for v in o:
                    items.append((yield v))
                out = tuple(items)
        else:
            out = o
        memo[id(o)] = out
        keep.append(o)
        return out

    def converted(root: Any) -> Any:
        # walk(root), its walks of inner values run from a list instead of the Python stack.
        stack = [walk(root)]
        value = None
        while True:
            try:
                inner = stack[-1].send(value)
            except StopIteration as done:
                stack.pop()
                if not stack:
                    return done.value
                value = done.value
                continue
            if type(inner) in _PLAIN_SCALARS:
                value = inner
            elif id(inner) in memo:
                value = memo[id(inner)]
            elif len(stack) > _MAX_SAVE_DEPTH:
                raise _error("limit", f"objects nested deeper than {_MAX_SAVE_DEPTH} levels")
            else:
                stack.append(walk(inner))
                value = None

    return converted(obj), keep


# Values trove.save passes on as they are, with nothing inside them to convert.
_PLAIN_SCALARS = frozenset((int, float, bool, complex, type(None), bytes))
# The deepest nesting save takes: what load gives (kMaxPythonDepth in trove_module.cpp, which
# refuses deeper values again as it converts them), so that deeper ones cost no generator each.
_MAX_SAVE_DEPTH = 2000


_COPY_CHUNK = 1 << 20  # bytes per read()/write() when copying to or from a file-like object
# save() has no key selection: the objects given are what it writes.
_SAVE_SPELLINGS = ((re.compile(r"; --keys/--exclude select fewer"), ""),)


def save(obj: Any, path: str | os.PathLike | IO[bytes], format: Optional[str] = None,  # noqa: A002
         progress: Optional[Callable[[int, int], Any]] = None, note: Optional[Callable[[str], Any]] = None,
         compression: Optional[str] = None, metadata: Optional[dict[str, str]] = None,
         max_shard_size: Optional[int | str] = None, allow_expand: bool = False) -> None:
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
    filled as the Hugging Face tools do. allow_expand: write what the expansion rule refuses (a
    view far beyond its stored bytes, into a format that has no views; `--allow-expand`).

    `path` may also be a writable file-like object (io.BytesIO, an open file), as torch.save takes:
    the file is written to a temporary file and then copied into it (nothing is written to it if
    the save fails before the copy; a write() that takes nothing or fails is an error saying how
    many bytes it holds by then); its format is `format`, else from its `name`'s extension, else "pt".
    `buf = io.BytesIO(); trove.save(tensors, buf, format="safetensors")` is
    safetensors.torch.save(tensors).
    """
    try:
        _save_to(obj, path, format, progress, note, compression, metadata, max_shard_size,
                 _flag("allow_expand", allow_expand))
    except Error as e:
        raise _in_python_terms(e, _SAVE_SPELLINGS) from None


def _save_to(obj: Any, path: Any, format: Optional[str], progress: Any, note: Any,  # noqa: A002
             compression: Optional[str], metadata: Optional[dict], max_shard_size: Any, allow_expand: bool) -> None:
    tree, keep = _to_specs(obj)
    if not hasattr(path, "write"):
        _trove._save(tree, _path(path), _text("format", format), _TensorSpec, progress, note,
                     _text("compression", compression), _metadata(metadata), _shard_size(max_shard_size),
                     _ValueSpec, allow_expand)
        del keep
        return
    # A file-like object (io.BytesIO, an open file): written to a temporary file first, as every
    # trove writer writes, then copied into it; until the copy, nothing has been written to it.
    if max_shard_size is not None:
        raise _error("usage", "max_shard_size makes a directory of shards: give save() a path, not a file-like object")
    if getattr(path, "closed", False) is True:
        raise _error("usage", f"the file-like object to save to is closed ({type(path).__name__})")
    given = _text("format", format)
    name = getattr(path, "name", None)
    suffix = os.path.splitext(name)[1] if isinstance(name, str) else ""
    kind = given or {".safetensors": "safetensors", ".tdz": "tdz"}.get(suffix, "pt")
    if kind == "tensordict":
        raise _error("usage", "format='tensordict' writes a directory: give save() a path, not a file-like object")
    with tempfile.TemporaryDirectory(prefix="trove-save-") as scratch:
        temporary = os.path.join(scratch, "out" + {"safetensors": ".safetensors", "tdz": ".tdz",
                                                    "pskd": ".psk.d"}.get(kind, ".pt"))
        _trove._save(tree, os.fsencode(temporary), kind, _TensorSpec, progress, note,
                     _text("compression", compression), _metadata(metadata), None, _ValueSpec, allow_expand)
        del keep
        with builtins.open(temporary, "rb") as written:
            _copy_into(written, path, os.fstat(written.fileno()).st_size)


def _copy_into(source: Any, target: Any, total: int) -> None:
    """Copies `source` (`total` bytes) into the file-like `target`, writing again what a write()
    did not take: write() returns the bytes it took, or None for all of them (as torch.save
    assumes). A write() that takes nothing or raises OSError is an IoError, one returning anything
    else a UsageError; either says how many bytes are in `target` by then (they stay there)."""
    done = 0
    while True:
        chunk = source.read(_COPY_CHUNK)
        if not chunk:
            return
        while chunk:
            try:
                took = target.write(chunk)
            except OSError as e:
                raise _error("io", f"the file-like object's write() failed ({type(e).__name__}: {e}) with {done} of "
                                   f"the {total} bytes written to it") from None
            if took is None:
                took = len(chunk)
            elif isinstance(took, bool) or not isinstance(took, int) or not 0 <= took <= len(chunk):
                raise _error("usage", f"the file-like object's write() returned {took!r:.40} for {len(chunk)} bytes "
                                      f"(the bytes it took, or None for all), with {done} of the {total} bytes "
                                      "written to it")
            elif took == 0:
                raise _error("io", f"the file-like object's write() took none of {len(chunk)} bytes, with {done} of "
                                   f"the {total} bytes written to it")
            done += took
            chunk = memoryview(chunk)[took:]  # the rest of immutable bytes: not copied again


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
    return Report(_trove._verify(_path(path)))


def scan(path: str | os.PathLike) -> Report:
    """The security report (`trove scan`): every pickle global (Report.globals), code records,
    container anomalies, as findings."""
    return Report(_trove._scan(_path(path)))


def convert(src: str | os.PathLike, dst: str | os.PathLike, to: Optional[str] = None,
            keys: Optional[Iterable[str] | str] = None, dtype: Optional[str] = None,
            drop_values: bool = False, progress: Optional[Callable[[int, int], Any]] = None,
            note: Optional[Callable[[str], Any]] = None, compression: Optional[str] = None,
            metadata: Optional[dict[str, str]] = None, max_shard_size: Optional[int | str] = None,
            strict: bool = False, permissive: bool = False, keep_unknown: bool = False,
            drop_unknown: bool = False, dequantize: bool = False, exclude: Optional[Iterable[str] | str] = None,
            rename: Optional[dict[str, str]] = None, dedupe_tied: bool = False, allow_expand: bool = False) -> None:
    """`trove convert`: between any formats, streaming, written atomically; keys are key-path globs
    of the tensors to keep, dtype casts floating tensors ("bfloat16", "float16"...), drop_values
    leaves out values a .safetensors file cannot hold instead of refusing. The GIL is released.
    progress, note, compression, metadata: as for save (`--compression`, `--metadata`);
    max_shard_size: bytes or "5GB" (`--max-shard-size`, with to="safetensors" or "pt"): dst is a
    directory of shards and their index. strict, permissive: the read policy (as for open);
    objects of classes trove does not know are written back to a single .pt as read (keep_unknown
    says so explicitly), an error for other targets unless drop_unknown (left out, with what they
    hold; note says which). dequantize: quantized
    tensors become float32 tensors of their values (`--dequantize`; else only .pt takes them).
    exclude: key-path globs of tensors to leave out (`--exclude`); rename: {FROM: TO} rules applied
    in order (`--rename FROM=TO`: a prefix, or one '*' in FROM whose match TO's '*' takes);
    dedupe_tied: tied tensors written once, the others listed by note (`--dedupe-tied`).
    allow_expand: write what the expansion rule refuses (`--allow-expand`: views far beyond their
    stored bytes into formats without views, decompression-bomb ratios)."""
    if rename is not None and not isinstance(rename, dict):
        raise _error("usage", f"rename={rename!r} is not a dict of FROM: TO rules")
    renames = [(_text("rename", k), _text("rename", v)) for k, v in (rename or {}).items()]
    try:
        _trove._convert(_path(src, "src"), _path(dst, "dst"), _text("to", to), _texts("keys", keys),
                        _text("dtype", dtype), _flag("drop_values", drop_values), progress, note,
                        _text("compression", compression), _metadata(metadata), _shard_size(max_shard_size),
                        _policy(strict, permissive), _flag("keep_unknown", keep_unknown),
                        _flag("drop_unknown", drop_unknown), _flag("dequantize", dequantize),
                        _texts("exclude", exclude), renames, _flag("dedupe_tied", dedupe_tied),
                        _flag("allow_expand", allow_expand))
    except Error as e:
        raise _in_python_terms(e) from None


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
    return DiffReport(_trove._diff(_path(a, "a"), _path(b, "b"), _real("rtol", rtol), _real("atol", atol)))


def stats(path: str | os.PathLike, keys: Optional[Iterable[str] | str] = None, threads: int = 0) -> dict:
    """`trove stats`: {key: {count, finite, min, max, mean, std, mean_abs, zeros, nan, pos_inf,
    neg_inf, subnormal}} in float64, over every tensor (or those matching the key globs); tensors
    whose dtype has no figures (quantized, bit containers, meta) are left out. Key globs that
    match no tensor are a UsageError, as `trove stats --keys` says."""
    encoded, globs = _path(path), _texts("keys", keys)
    out, skipped = _trove._stats(encoded, globs, _count("threads", threads))
    if globs and not out and not skipped:
        tensors = len(_trove._open(encoded).keys())
        raise _error("usage", f"keys={keys!r} select none of the {tensors:,} tensors (trove info lists their keys)")
    return out


def set_threads(threads: int) -> None:
    """The threads trove's parallel work uses in this process (casts, GGUF dequantization,
    verify's checksums, diff; `--threads`): 0 restores the default, every CPU the process may use;
    counts above 64 use 64. Output never depends on it."""
    _trove._set_threads(_count("threads", threads))


def get_threads() -> int:
    """The thread count parallel work uses now (at least 1)."""
    return _trove._get_threads()


def set_io(mode: str) -> None:
    """How passes over every byte (verify, convert, diff, stats) read input files in this process
    (`--io`): "pread" (large reads with read-ahead: fast on network file systems and cold files),
    "mmap" (page faults on the mapping) or "auto" (the default: pread, which measured faster hot
    and cold, local disks included). Tensors
    `open` hands out are views of the mapping in every mode."""
    _trove._set_io(_text("io", mode))


def get_io() -> str:
    """The I/O mode set: "auto", "mmap" or "pread"."""
    return _trove._get_io()


# --- the data pipeline (trove.data: needs the names above) --------------------------------------

from . import data  # noqa: E402
