"""The reference trove.load is compared with: torch.load's own reading of a .pt file, with nothing
from the file ever run.

`reference_load(path)` reads a torch zip or legacy file as torch 1.13's loaders do (the same
records, the same persistent ids, torch's own tensor rebuilders), through pickle's own
Unpickler, except that `find_class` gives real objects only for the data names below (torch's
tensor rebuilders, dtypes and Size, numpy's array and scalar constructors, Python's containers,
collections, argparse.Namespace) and an inert `Stub` class for every other name: an instance
records its constructor arguments, its state and what was appended and set on it, and nothing of
the file's classes is imported or called. `assert_same(trove_value, reference_value)` then
checks that trove gave the same thing: the same types, the same values bit for bit, the same
sharing (one object where the reference has one, tensors sharing a storage where its do), with
trove's documented stand-ins for what the reference holds as stubs (docs/python.md).
"""
import _compat_pickle
import argparse
import collections
import io
import math
import pickle
import struct
import zipfile

import numpy as np
import torch

LEGACY_MAGIC = 0x1950a86a20f9469cfc6c

# torch's storage classes (their module is torch, or any: torch's find_class maps every name
# holding 'Storage') and the dtype of their elements.
STORAGE_DTYPES = {
    "FloatStorage": torch.float32, "DoubleStorage": torch.float64, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8, "BoolStorage": torch.bool,
    "ComplexFloatStorage": torch.complex64, "ComplexDoubleStorage": torch.complex128,
    "QInt8Storage": torch.qint8, "QUInt8Storage": torch.quint8, "QInt32Storage": torch.qint32,
    "QUInt4x2Storage": torch.quint4x2, "UntypedStorage": torch.uint8,
}

TORCH_VALUES = {name: getattr(torch, name) for name in (
    "float32", "float", "float64", "double", "float16", "half", "bfloat16", "complex64", "cfloat", "complex128",
    "cdouble", "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "bool", "qint8", "quint8",
    "qint32", "strided", "sparse_coo", "contiguous_format", "channels_last", "preserve_format")}

# Real objects for the names with a data meaning (what trove reads as data).
DATA_NAMES = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "defaultdict"): collections.defaultdict,
    ("collections", "Counter"): collections.Counter,
    ("argparse", "Namespace"): argparse.Namespace,
    ("_codecs", "encode"): __import__("_codecs").encode,
    ("copyreg", "_reconstructor"): None,  # set below: object.__new__ for stubs
    ("torch._utils", "_rebuild_tensor"): torch._utils._rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
    ("torch._utils", "_rebuild_qtensor"): torch._utils._rebuild_qtensor,
    ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,  # Parameter(data, requires_grad): torch 0.x's pickles
    ("torch", "Size"): torch.Size,
    ("torch", "device"): torch.device,
    ("torch.torch_version", "TorchVersion"): str,  # trove gives torch.__version__ as a str
    ("numpy.core.multiarray", "_reconstruct"): np.core.multiarray._reconstruct,
    ("numpy.core.multiarray", "scalar"): np.core.multiarray.scalar,
    ("numpy.core.numeric", "_frombuffer"): np.core.numeric._frombuffer,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}
for _name in ("set", "frozenset", "bytearray", "complex", "list", "dict", "tuple", "str", "int", "float", "bool",
              "bytes", "object"):
    DATA_NAMES[("builtins", _name)] = getattr(__import__("builtins"), _name)


class Stub:
    """An object of a class the reference does not import: what its pickle said about it."""
    stub_name = "?"

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        self.stub_args = args
        self.stub_state = None
        self.stub_items = []
        self.stub_entries = []
        return self

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.stub_state = state

    def append(self, item):
        self.stub_items.append(item)

    def extend(self, items):
        self.stub_items.extend(items)

    def __setitem__(self, key, value):
        self.stub_entries.append((key, value))

    def __repr__(self):
        return f"Stub({self.stub_name}, {self.stub_args!r}, {self.stub_state!r})"


def _reconstructor(cls, base, state):
    """copyreg._reconstructor for what a reference loader may make: stubs and plain objects."""
    if base is object or isinstance(cls, type) and issubclass(cls, Stub):
        return cls.__new__(cls)
    raise pickle.UnpicklingError(f"copyreg._reconstructor({cls}, {base}): not data")


DATA_NAMES[("copyreg", "_reconstructor")] = _reconstructor


class StorageType:
    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype


class ReferenceUnpickler(pickle.Unpickler):
    """Reads one pickle from `stream` (left just past its STOP, as torch's loaders rely on)."""

    def __init__(self, stream, persistent_load=None):
        super().__init__(stream, encoding="utf-8")
        self._persistent = persistent_load
        self._stubs = {}

    def find_class(self, module, name):
        if (module, name) in _compat_pickle.NAME_MAPPING:  # Python 2's names, as pickle maps them
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        module = module.replace("numpy._core", "numpy.core")
        if "Storage" in name and name in STORAGE_DTYPES:
            return StorageType(name, STORAGE_DTYPES[name])
        if (module, name) in DATA_NAMES:
            return DATA_NAMES[(module, name)]
        if module == "torch" and name in TORCH_VALUES:
            return TORCH_VALUES[name]
        full = f"{module}.{name}"
        if full not in self._stubs:
            self._stubs[full] = type(name, (Stub,), {"stub_name": full})
        return self._stubs[full]

    def persistent_load(self, pid):
        if self._persistent is None:
            raise pickle.UnpicklingError(f"a persistent id {pid!r} where none is expected")
        return self._persistent(pid)


def _typed_storage(data, dtype):
    untyped = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return torch.storage.TypedStorage(wrap_storage=untyped.storage().untyped(), dtype=dtype)


def _element_size(dtype):
    return torch._utils._element_size(dtype)


def load_zip(path):
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = next(n for n in names if n.endswith("/data.pkl") and n.count("/") == 1)
        prefix = pkl[: -len("data.pkl")]
        storages = {}

        def persistent(pid):
            kind, storage_type, key, _location, numel = pid
            assert kind == "storage", pid
            if key not in storages:
                storages[key] = _typed_storage(z.read(f"{prefix}data/{key}"), storage_type.dtype)
            return storages[key]
        return ReferenceUnpickler(io.BytesIO(z.read(pkl)), persistent).load()


def load_legacy(path):
    with open(path, "rb") as f:
        stream = io.BytesIO(f.read())
    assert ReferenceUnpickler(stream).load() == LEGACY_MAGIC
    ReferenceUnpickler(stream).load()  # protocol version
    ReferenceUnpickler(stream).load()  # sys info
    objects = {}

    def persistent(pid):
        if pid[0] == "module":
            return pid[1]
        _kind, storage_type, root_key, _location, numel, view = pid
        dtype = storage_type.dtype
        if root_key not in objects:
            objects[root_key] = torch.storage.TypedStorage(
                wrap_storage=torch.UntypedStorage(numel * _element_size(dtype)), dtype=dtype)
        storage = objects[root_key]
        if view is None:
            return storage
        view_key, offset, size = view
        if view_key not in objects:
            es = _element_size(dtype)
            objects[view_key] = torch.storage.TypedStorage(
                wrap_storage=storage._storage[offset * es:(offset + size) * es], dtype=dtype)
        return objects[view_key]
    result = ReferenceUnpickler(stream, persistent).load()
    for key in ReferenceUnpickler(stream).load():
        storage = objects[key]
        (count,) = struct.unpack("<q", stream.read(8))
        nbytes = count * _element_size(storage.dtype)
        raw = stream.read(nbytes)
        if nbytes:
            target = torch.empty(0, dtype=torch.uint8).set_(
                torch.storage.TypedStorage(wrap_storage=storage._storage, dtype=torch.uint8))
            target.copy_(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    return result


def reference_load(path):
    """What torch.load(path) gives, with every non-data class a Stub and nothing of the file run."""
    with open(path, "rb") as f:
        head = f.read(4)
    return load_zip(path) if head.startswith(b"PK") else load_legacy(path)


# --- comparing trove.load's result with the reference -------------------------------------------

def _float_bits(x):
    return struct.pack("<d", x)


def _storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


def _tensor_bytes(t):
    t = t.detach()
    if t.is_quantized:
        t = t.int_repr()
    if t.numel() == 0 or t.device.type == "meta":
        return b""
    flat = torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1))  # strides (1,), whatever t's
    if flat.is_complex():  # torch 1.13's view(uint8) of a complex tensor crashes
        flat = torch.view_as_real(flat).reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def _state_attributes(state):
    """A BUILD state as the attributes pickle sets: a dict, or (dict, slots) as pickle takes it."""
    if state is None:
        return {}
    if isinstance(state, tuple) and len(state) == 2 and all(isinstance(p, (dict, type(None))) for p in state):
        return {**(state[0] or {}), **(state[1] or {})}
    return state


class Comparison:
    """assert_same's walk: `pairs` maps each trove object to the reference object it stands for
    (and back), so that sharing is checked as well as values; storages likewise."""

    def __init__(self, trove_module):
        self.trove = trove_module
        self.pairs = {}
        self.back = {}
        self.storages = {}
        self.storages_back = {}
        self.keep = []  # the objects whose ids are in the maps stay alive during the walk

    def same(self, t, r, where="root"):
        """Whether t stands for r, without recording anything (set members)."""
        probe = Comparison(self.trove)
        probe.pairs, probe.back = dict(self.pairs), dict(self.back)
        probe.storages, probe.storages_back = dict(self.storages), dict(self.storages_back)
        try:
            probe.check(t, r, where)
            return True
        except AssertionError:
            return False

    def _pair(self, t, r, where):
        """True when (t, r) was compared before; asserts one-to-one sharing."""
        seen = self.pairs.get(id(t))
        if seen is not None:
            assert seen == id(r), f"{where}: trove shares an object the reference does not"
            return True
        assert id(r) not in self.back, f"{where}: the reference shares an object trove does not"
        self.pairs[id(t)], self.back[id(r)] = id(r), id(t)
        self.keep.extend((t, r))
        return False

    def check(self, t, r, where="root"):
        trove = self.trove
        if isinstance(r, type) and issubclass(r, Stub):
            assert isinstance(t, trove.Global) and t.name == r.stub_name, f"{where}: {t!r} is not the name {r.stub_name}"
            return
        if isinstance(r, Stub):
            self._check_stub(t, r, where)
            return
        if isinstance(t, trove.Global):
            assert DATA_NAMES.get(tuple(t.name.rsplit(".", 1))) is r, f"{where}: {t!r} vs {r!r}"
            return
        if isinstance(r, (torch.dtype, torch.layout, torch.memory_format, torch.device)) or r is None:
            assert t == r and type(t) is type(r), f"{where}: {t!r} vs {r!r}"
            return
        if isinstance(r, torch.Tensor):
            self._check_tensor(t, r, where)
            return
        if isinstance(r, np.ndarray):
            assert type(t) is np.ndarray, f"{where}: {type(t)} is not a numpy array"
            if self._pair(t, r, where):
                return
            assert t.dtype == r.dtype and t.dtype.str == r.dtype.str, f"{where}: dtype {t.dtype.str} vs {r.dtype.str}"
            assert t.shape == r.shape and t.strides == r.strides, f"{where}: {t.shape}{t.strides} vs {r.shape}{r.strides}"
            assert t.tobytes("A") == r.tobytes("A"), f"{where}: array elements differ"
            return
        if isinstance(r, np.generic):
            assert type(t) is type(r) and t.tobytes() == r.tobytes(), f"{where}: {t!r} ({type(t)}) vs {r!r} ({type(r)})"
            return
        if isinstance(r, float):
            assert type(t) is float and _float_bits(t) == _float_bits(r), f"{where}: {t!r} vs {r!r}"
            return
        if isinstance(r, complex):
            assert type(t) is complex and _float_bits(t.real) == _float_bits(r.real) and \
                _float_bits(t.imag) == _float_bits(r.imag), f"{where}: {t!r} vs {r!r}"
            return
        if isinstance(r, (bool, int, str, bytes, bytearray)) and not isinstance(r, np.generic):
            expected = str if type(r) is not bool and isinstance(r, str) else type(r)
            assert type(t) is expected and t == r, f"{where}: {t!r} ({type(t).__name__}) vs {r!r} ({type(r).__name__})"
            return
        if isinstance(r, argparse.Namespace):
            assert type(t) is argparse.Namespace, f"{where}: {type(t)} is not a Namespace"
            if not self._pair(t, r, where):
                self._check_mapping(vars(t), vars(r), where)
            return
        if isinstance(r, dict):
            self._check_dict(t, r, where)
            return
        if isinstance(r, (list, tuple)):
            assert type(t) is type(r), f"{where}: {type(t).__name__} vs {type(r).__name__}"
            if isinstance(r, list) and self._pair(t, r, where):
                return
            assert len(t) == len(r), f"{where}: {len(t)} items vs {len(r)}"
            for i, (a, b) in enumerate(zip(t, r)):
                self.check(a, b, f"{where}/{i}")
            return
        if isinstance(r, (set, frozenset)):
            assert type(t) is type(r) and len(t) == len(r), f"{where}: {t!r} vs {r!r}"
            if isinstance(r, set) and self._pair(t, r, where):
                return
            rest = list(r)
            for a in t:
                match = next((i for i, b in enumerate(rest) if self.same(a, b, where)), None)
                assert match is not None, f"{where}: set member {a!r} not in the reference"
                self.check(a, rest.pop(match), f"{where}/{{}}")
            return
        raise AssertionError(f"{where}: the reference holds a {type(r)} the comparison does not know")

    def _check_mapping(self, t, r, where):
        assert len(t) == len(r), f"{where}: {list(t)} vs {list(r)}"
        for (ka, va), (kb, vb) in zip(t.items(), r.items()):
            self.check(ka, kb, f"{where}/<key {kb!r}>")
            self.check(va, vb, f"{where}/{kb!r}")

    def _check_dict(self, t, r, where):
        if type(r) is collections.defaultdict:
            factory = r.default_factory
            if isinstance(factory, type) and issubclass(factory, Stub):
                # a factory that is not a Python type would run code on a missing key: trove
                # keeps the call as an inert record, the entries included
                assert isinstance(t, self.trove.Object) and t.type_name == "collections.defaultdict", \
                    f"{where}: {t!r} for a defaultdict of {factory.stub_name}"
                if not self._pair(t, r, where):
                    self.check(t.args, (factory,), f"{where}/%args")
                    self.check(t.entries, list(r.items()), f"{where}/%entries")
                    assert t.state is None and not t.items, f"{where}: {t!r}"
                return
            assert type(t) is collections.defaultdict, f"{where}: {type(t)} is not a defaultdict"
            assert t.default_factory is factory, f"{where}: factory {t.default_factory} vs {factory}"
        elif type(r) in (dict, collections.OrderedDict):
            assert type(t) is type(r), f"{where}: {type(t).__name__} vs {type(r).__name__}"
        else:  # Counter: a dict subclass trove gives as a dict
            assert type(t) is dict, f"{where}: {type(t).__name__} for a {type(r).__name__}"
        if self._pair(t, r, where):
            return
        self._check_mapping(t, r, where)
        if type(r) is collections.OrderedDict:
            self._check_mapping(vars(t), vars(r), f"{where}/%attr")

    def _check_stub(self, t, r, where):
        """An object of a class the reference did not import: trove's record of it (an Object),
        or, for a dict subclass (its pickle set entries on it), a dict, or a trove.Dict with its
        attributes."""
        trove = self.trove
        if isinstance(t, dict):
            if self._pair(t, r, where):
                return
            assert not r.stub_items, f"{where}: items appended to the dict subclass {r.stub_name}"
            assert len(t) == len(r.stub_entries), f"{where}: {len(t)} entries vs {len(r.stub_entries)}"
            for (ka, va), (kb, vb) in zip(t.items(), r.stub_entries):
                self.check(ka, kb, f"{where}/<key {kb!r}>")
                self.check(va, vb, f"{where}/{kb!r}")
            attributes = _state_attributes(r.stub_state)
            if isinstance(t, trove.Dict):
                assert t.type_name == r.stub_name, f"{where}: {t.type_name} vs {r.stub_name}"
                mine = {k: v for k, v in vars(t).items() if k != "type_name"}
                self._check_mapping(mine, attributes, f"{where}/%attr")
            else:
                assert type(t) is dict and not attributes, f"{where}: the attributes {list(attributes)} are lost"
            return
        assert isinstance(t, trove.Object), f"{where}: {t!r} for an object of {r.stub_name}"
        if self._pair(t, r, where):
            return
        assert t.type_name == r.stub_name, f"{where}: {t.type_name} vs {r.stub_name}"
        self.check(t.args, r.stub_args, f"{where}/%args")
        self.check(t.state, r.stub_state, f"{where}/%state")
        self.check(list(t.items), list(r.stub_items), f"{where}/%items")
        self.check(list(t.entries), list(r.stub_entries), f"{where}/%entries")

    def _check_tensor(self, t, r, where):
        assert type(t) is type(r), f"{where}: {type(t).__name__} vs {type(r).__name__}"
        if self._pair(t, r, where):
            return
        assert t.dtype == r.dtype and t.shape == r.shape, f"{where}: {t.dtype}{list(t.shape)} vs {r.dtype}{list(r.shape)}"
        assert t.stride() == r.stride() and t.storage_offset() == r.storage_offset(), \
            f"{where}: strides {t.stride()} @ {t.storage_offset()} vs {r.stride()} @ {r.storage_offset()}"
        assert t.requires_grad == r.requires_grad, f"{where}: requires_grad {t.requires_grad} vs {r.requires_grad}"
        assert t.device == r.device, f"{where}: {t.device} vs {r.device}"
        if r.is_quantized:
            assert t.qscheme() == r.qscheme(), f"{where}: {t.qscheme()} vs {r.qscheme()}"
        assert _tensor_bytes(t) == _tensor_bytes(r), f"{where}: tensor elements differ"
        if r.device.type != "meta" and not r.is_quantized and _storage_ptr(r) != 0:
            a, b = _storage_ptr(t), _storage_ptr(r)
            seen = self.storages.get(a)
            assert seen in (None, b), f"{where}: trove shares a storage the reference does not"
            assert self.storages_back.get(b) in (None, a), f"{where}: the reference shares a storage trove does not"
            self.storages[a], self.storages_back[b] = b, a


def assert_same(trove_module, t, r):
    """trove_module.load's result `t` stands for the reference's `r` (see the module docstring)."""
    Comparison(trove_module).check(t, r)
