"""Checkpoints made with Debian's torch (1.13) for the interop tests, and crafted variants.

Every maker writes into a directory and returns the path. `tensor_bytes(t)` is what torch says a
tensor's C-contiguous little-endian bytes are; trove's `cat --raw` must give exactly these.
"""
import collections
import io
import os
import pickle
import struct
import zipfile

import torch


def tensor_bytes(t):
    t = t.detach().contiguous()
    if t.dim() == 0:
        t = t.reshape(1)
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def save(obj, path, **kw):
    torch.save(obj, path, **kw)
    return path


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.bn = torch.nn.BatchNorm2d(2)
        self.norm = torch.nn.LayerNorm(4)
        self.head = torch.nn.Linear(4, 10)
        self.register_buffer("mask", torch.tril(torch.ones(3, 3, dtype=torch.bool)))


def make_module_state_dict(d):
    torch.manual_seed(1)
    net = Net()
    return save(net.state_dict(), os.path.join(d, "module.pt")), net.state_dict()


ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128]


def make_all_dtypes(d):
    g = torch.Generator().manual_seed(2)
    obj = collections.OrderedDict()
    for dt in ALL_DTYPES:
        base = torch.randn(2, 3, generator=g, dtype=torch.float64) * 100
        if dt == torch.bool:
            t = base > 0
        elif dt.is_complex:
            t = torch.complex(base, -base).to(dt)
        else:
            t = base.to(dt)
        obj[str(dt).replace("torch.", "")] = t
    obj["scalar"] = torch.tensor(3.5)
    obj["empty"] = torch.empty(0, 5)
    obj["empty_int"] = torch.zeros(3, 0, dtype=torch.int64)
    obj["special"] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-45])
    return save(obj, os.path.join(d, "dtypes.pt")), obj


def make_views(d):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    obj = {
        "base": base,
        "t": base.t(),
        "row": base[1],
        "step": base[::2, 1::3],
        "part": base[2, 1:4],
        "expand": torch.arange(3.0).reshape(3, 1).expand(3, 4),
        "col": base[:, 2],
    }
    return save(obj, os.path.join(d, "views.pt")), obj


def make_params(d):
    p = torch.nn.Parameter(torch.ones(2, 3) * 0.5)
    g = torch.zeros(4, requires_grad=True)
    obj = {"p": p, "g": g, "frozen": torch.nn.Parameter(torch.ones(2), requires_grad=False)}
    return save(obj, os.path.join(d, "params.pt")), obj


def make_optimizer(d):
    torch.manual_seed(3)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    obj = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "epoch": 7,
        "big": 2 ** 70,
        "neg_big": -(2 ** 65) + 3,
        "loss": 0.125,
        "name": "héllo wörld ✓",
        "none": None,
        "flags": [True, False],
        "shape": (1, (2, 3)),
        "blob": b"\x00\x01\xff",
    }
    return save(obj, os.path.join(d, "optim.pt")), obj


def make_bare_tensor(d):
    t = torch.arange(10, dtype=torch.int16)
    return save(t, os.path.join(d, "bare.pt")), t


def make_list(d):
    obj = [torch.ones(2), torch.zeros(3, dtype=torch.int32), "text", 5]
    return save(obj, os.path.join(d, "list.pt")), obj


def make_keys(d):
    obj = {"a/b": torch.ones(1), "": torch.zeros(1), "ünï 😀": torch.full((2,), 2.0), "x": {"y": {"z": torch.ones(2, 2)}},
           3: torch.ones(3), ".": torch.ones(1), "..": torch.ones(1)}
    return save(obj, os.path.join(d, "keys.pt")), obj


def make_legacy(d):
    obj = collections.OrderedDict(w=torch.arange(6.0).reshape(2, 3), b=torch.tensor([1, 2, 3], dtype=torch.int64),
                                  v=torch.arange(6.0).reshape(2, 3).t())
    return save(obj, os.path.join(d, "legacy.pt"), _use_new_zipfile_serialization=False), obj


def rewrite_zip(src, dst, rename=None, compression=zipfile.ZIP_STORED, transform=None):
    """Copies a torch zip, renaming the archive folder and/or changing entries."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=compression) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            name = info.filename
            if rename:
                name = rename + name[name.index("/"):]
            if transform:
                name, data = transform(name, data)
                if name is None:
                    continue
            zout.writestr(name, data)
    return dst


def make_renamed_deflated(d):
    path, obj = make_module_state_dict(d)
    return rewrite_zip(path, os.path.join(d, "renamed.pt"), rename="some other name", compression=zipfile.ZIP_DEFLATED), obj


def make_big_endian(d):
    """A file as a big-endian machine writes it: byteorder 'big' and every element byte-swapped."""
    obj = {"f": torch.arange(6, dtype=torch.float32).reshape(2, 3) + 0.5, "i": torch.tensor([1, -2, 300], dtype=torch.int64),
           "h": torch.tensor([1.5, -2.25], dtype=torch.float16), "c": torch.tensor([1 + 2j], dtype=torch.complex64),
           "u8": torch.tensor([1, 2, 3], dtype=torch.uint8)}
    src = save(obj, os.path.join(d, "little.pt"))
    # Map storage key -> element size from the pickle's storage classes.
    sizes = {}
    with zipfile.ZipFile(src) as z:
        pkl = z.read("little/data.pkl")

    class Stub:
        def __init__(self, name):
            self.name = name

        def __call__(self, *args, **kwargs):
            return None

    swap_unit = {"FloatStorage": 4, "LongStorage": 8, "HalfStorage": 2, "ComplexFloatStorage": 4, "ByteStorage": 1}

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            return Stub(name)

        def persistent_load(self, pid):
            sizes[pid[2]] = swap_unit[pid[1].name]
            return None

    Recorder(io.BytesIO(pkl)).load()

    def transform(name, data):
        key = name.split("/data/")[-1] if "/data/" in name else None
        if key is not None:
            es = sizes[key]
            data = b"".join(data[i:i + es][::-1] for i in range(0, len(data), es))
        return name, data

    dst = os.path.join(d, "big.pt")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            name, data = transform(info.filename, zin.read(info.filename))
            zout.writestr(name.replace("little/", "big/"), data)
        zout.writestr("big/byteorder", b"big")
    return dst, obj


MAKERS = {
    "module": make_module_state_dict,
    "dtypes": make_all_dtypes,
    "views": make_views,
    "params": make_params,
    "optim": make_optimizer,
    "bare": make_bare_tensor,
    "list": make_list,
    "keys": make_keys,
    "legacy": make_legacy,
    "renamed": make_renamed_deflated,
    "big_endian": make_big_endian,
}


def encode_component(k):
    """The key-path encoding trove uses (tensordict's robust file names)."""
    if k == "":
        return "%"
    if k == ".":
        return "%2E"
    if k == "..":
        return "%2E%2E"
    out = []
    for ch in k:
        c = ord(ch)
        if ch in '/\\<>:"|?* %' or c < 32 or c == 127:
            out.append("%%%02X" % c)
        elif 0xD800 <= c <= 0xDFFF:
            # A lone surrogate (a byte that was not UTF-8): its bytes, %XX-escaped (docs/python.md).
            out.append("".join("%%%02X" % b for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out)


def flatten(obj, prefix=()):
    """(key path, tensor) pairs in the order trove lists them."""
    if isinstance(obj, torch.Tensor):
        yield "/".join(prefix), obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten(v, prefix + (encode_component(str(k)),))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from flatten(v, prefix + (str(i),))
