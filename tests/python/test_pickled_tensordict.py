"""A TensorDict pickled by torch.save (lerobot's stats.pth, issue 26) is read as a tensordict, not
an unknown object: its entries are its levels' tensors, its batch size and device its attributes;
written back to .pt it is a TensorDict again, as tensordict pickles one (compared with the source
through a stubbing unpickler that runs nothing: tensordict is not installed here, and torch.load
of either would import it)."""
import os
import struct

import pytest
import torch

from pickles import (BUILD, EMPTY_TUPLE, MARK, NONE, SETITEMS, call, dict_of, glob, pickle_of, s, storage, tensor_v2,
                     torch_zip, tup)
from stub_unpickler import reference_load

CORPUS = os.environ.get("TROVE_CORPUS")


NEWOBJ = b"\x81"


def newobj(module, name):
    return glob(module, name) + EMPTY_TUPLE + NEWOBJ


def td(entries):
    """A TensorDict as tensordict pickles one: NEWOBJ of the class, BUILD of its __dict__, whose
    _tensordict is a _StringOnlyDict (NEWOBJ, then SETITEMS of the entries)."""
    inner = newobj("tensordict.utils", "_StringOnlyDict") + MARK + b"".join(k + v for k, v in entries) + SETITEMS
    state = dict_of([(s("_device"), NONE), (s("_tensordict"), inner),
                     (s("_batch_size"), call(glob("torch", "Size"), tup())), (s("_td_dim_names"), NONE)])
    return newobj("tensordict._td", "TensorDict") + state + BUILD


def pickled_tensordict(path):
    """TensorDict({"obs": TensorDict({"x": arange(3.)}), "a": ones(2, int64)}, []) as torch.save
    writes it, assembled from the same opcodes (tensordict is not a Debian package)."""
    x = tensor_v2(storage("FloatStorage", "0", 3), 0, [3], [1])
    a = tensor_v2(storage("LongStorage", "1", 2), 0, [2], [1])
    body = td([(s("obs"), td([(s("x"), x)])), (s("a"), a)])
    records = {"0": struct.pack("<3f", 0, 1, 2), "1": struct.pack("<2q", 1, 1)}
    return torch_zip(path, pickle_of(body), records)


def flatten(x, prefix=""):
    """Tensors of a stub tree, by path through entries and states."""
    if isinstance(x, torch.Tensor):
        yield prefix, x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from flatten(v, f"{prefix}/{k}" if prefix else str(k))
    elif hasattr(x, "stub_state"):
        yield from flatten(x.stub_state or {}, prefix)
        for k, v in x.stub_entries:
            yield from flatten(v, f"{prefix}/{k}" if prefix else str(k))


def check(trove, src, tmp_path):
    r = trove("info", src)
    assert r.code == 0 and "does not know" not in r.errtext and "tensordict:TensorDict" in r.text, r
    out = tmp_path / "back.pt"
    assert trove("convert", src, out).code == 0
    a, b = reference_load(str(src)), reference_load(str(out))
    assert type(b).__name__ == type(a).__name__ and getattr(type(b), "stub_name", None) == getattr(type(a), "stub_name", None)
    ta, tb = dict(flatten(a)), dict(flatten(b))
    assert sorted(ta) == sorted(tb) and ta
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k
    # And as a tensordict directory, the levels as levels.
    assert trove("convert", src, tmp_path / "td", "--to", "tensordict").code == 0
    assert (tmp_path / "td" / "meta.json").exists()
    return sorted(ta)


def test_a_pickled_tensordict_is_a_tensordict(trove, tmp_path):
    keys = check(trove, pickled_tensordict(tmp_path / "td.pt"), tmp_path)
    assert any(k.endswith("x") for k in keys) and any(k.endswith("a") for k in keys)


@pytest.mark.skipif(not CORPUS, reason="set TROVE_CORPUS to the corpus of real files to run this test")
def test_lerobot_stats(trove, tmp_path):
    src = os.path.join(CORPUS, "pt", "huggingface__lerobot", "tests__data__aloha_sim_insertion_human__stats.pth")
    assert len(check(trove, src, tmp_path)) == 20
