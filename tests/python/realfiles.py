"""Checkpoints as training code writes them, for the tests of issue #13's reading policy: made by
torch and numpy, or (layouts this torch no longer writes) from pickle's own bytes as torch's
loaders read them. The classes here are the training script's own: unknown to trove."""
import argparse
import collections
import io
import json
import os
import pickle
import struct
import zipfile

import numpy as np
import torch

import ptfiles

MARKER = "/tmp/trove-real-checkpoints-pwned"
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c


class MyDict(dict):
    pass


class MyOrderedDict(collections.OrderedDict):
    pass


class AttrDict(dict):
    """A dict subclass with attributes of its own (its __dict__ is pickled as BUILD state)."""


class AttrOrderedDict(collections.OrderedDict):
    pass


class Outer:
    class Inner:
        """A nested class: protocol 4 names it by STACK_GLOBAL of 'realfiles' and 'Outer.Inner'."""

        def __init__(self):
            self.w = torch.arange(3.0)


class Box:
    """What `Parts` unpickles into: keeps its arguments, state, appended and set items apart."""

    def __init__(self, *args):
        self.args, self.listed, self.keyed = args, [], {}

    def append(self, x):
        self.listed.append(x)

    def __setitem__(self, k, v):
        self.keyed[k] = v

    def __setstate__(self, state):
        self.state = state


class Parts:
    """Pickles as Box(t1) with a state, list items and dict items whose names coincide: a state
    key "0" and the first argument, a state key "k" and a set item "k", the first list item."""

    def __reduce__(self):
        return (Box, (torch.tensor([1.0]),), {"0": torch.tensor([2.0]), "k": torch.tensor([3.0])},
                iter([torch.tensor([4.0])]), iter([("k", torch.tensor([5.0]))]))


def zero_tensor():
    """A defaultdict factory of the training script's own (unknown to trove)."""
    return torch.zeros(1)


class Config:
    """A class of the training script's own: unknown to trove, read as an inert object."""

    def __init__(self):
        self.lr = 0.1
        self.extra = torch.arange(4.0)


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + MARKER,))


def training_checkpoint():
    """What Lightning and hand-written loops save: weights, Adam's state with numpy arrays and
    scalars in it, hyperparameters holding torch.__version__ (a TorchVersion) and an optimizer
    class, an argparse.Namespace, a defaultdict, dict subclasses, a torch.Size."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    osd = opt.state_dict()
    state = osd["state"][0]
    state["np_moment"] = np.arange(6, dtype=np.float32).reshape(2, 3)
    state["np_big_endian"] = np.arange(4, dtype=">f8")
    state["np_fortran"] = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    state["np_bool"] = np.array([True, False, True])
    state["np_scalar_int"] = np.int64(7)
    state["np_scalar_float"] = np.float64(0.25)
    state["np_scalar_half"] = np.float16(1.5)
    return {
        "epoch": 3,
        "global_step": 120,
        "pytorch-lightning_version": "1.9.0",
        "state_dict": model.state_dict(),
        "optimizer_states": [osd],
        "hyper_parameters": {"torch_version": torch.__version__, "optimizer": torch.optim.Adam, "lr": 1e-3},
        "hparams": argparse.Namespace(lr=0.1, layers=3),
        "counts": collections.defaultdict(list, {"x": torch.ones(2)}),
        "mine": MyDict(a=torch.zeros(3)),
        "mine_ordered": MyOrderedDict(b=torch.full((2,), 5.0)),
        "shape": torch.Size([2, 3]),
    }


def flatten(obj, prefix=""):
    """(key path, tensor) pairs in trove's order, numpy arrays as tensors."""
    def join(k):
        return f"{prefix}/{k}" if prefix else str(k)
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        yield prefix, obj
    elif isinstance(obj, argparse.Namespace):
        yield from flatten(vars(obj), prefix)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten(v, join(k))
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            yield from flatten(v, join(i))
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        yield from flatten(vars(obj), prefix)


def array_bytes(a):
    if isinstance(a, torch.Tensor):
        return ptfiles.tensor_bytes(a)
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


class Pid:
    def __init__(self, pid):
        self.pid = pid


class Call:
    """Pickles as fn(*args), then BUILD with state when there is one."""

    def __init__(self, fn, args, state=None):
        self.fn, self.args, self.state = fn, args, state

    def __reduce__(self):
        return (self.fn, self.args) if self.state is None else (self.fn, self.args, self.state)


class PidPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, Pid) else None


def legacy_file(path, obj, storages):
    """torch's legacy format: the magic number, 1001, sys_info, the object (its storages by
    persistent id), the sorted storage keys, then per key an int64 element count and the bytes."""
    f = io.BytesIO()
    for x in (LEGACY_MAGIC, 1001, {"protocol_version": 1001, "little_endian": True,
                                   "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(x, f, protocol=2)
    PidPickler(f, protocol=2).dump(obj)
    keys = sorted(storages)
    pickle.dump(keys, f, protocol=2)
    for k in keys:
        f.write(struct.pack("<q", len(storages[k]) // 4) + storages[k])
    with open(path, "wb") as out:
        out.write(f.getvalue())


def torchscript_2019(path):
    """TorchScript of torch 1.0-1.2 (read by torch.jit's LEGACY_deserialize): model.json (the
    ModelDef as JSON), attributes.pkl (the attribute table), tensors/<n> (raw storages), code/."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model/version", "1\n")
        z.writestr("model/model.json", json.dumps({"protoVersion": "2", "mainModule": {"name": "model"},
                                                   "tensors": [{"dims": ["2"], "dataType": "FLOAT",
                                                                "data": {"key": "tensors/0"}}]}))
        z.writestr("model/tensors/0", struct.pack("<2f", 1, 2))
        z.writestr("model/attributes.pkl", pickle.dumps((), protocol=2))
        z.writestr("model/code/model.py", "def forward(self, x):\n    return x\n")
