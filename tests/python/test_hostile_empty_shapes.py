"""Shapes that hold no elements but ask for strides beyond 64 bits ([0, 2^40, 2^40]): a zero
dimension makes the element count 0, so no size check stops the other dimensions, and the
contiguous strides (each dimension of size 0 counting as 1, as torch and numpy count it) multiply
past 2^63. numpy refuses such an array ("array is too big"); trove refuses it in every format
that reads a shape from the file, naming the file and the tensor, under the suite's bounds."""
import json
import struct
import zipfile

import numpy as np
import pytest
import torch

from hostile import run_hostile
from test_gguf import write_gguf

HUGE = 1 << 40


def safetensors_file():
    header = json.dumps({"w": {"dtype": "F32", "shape": [0, HUGE, HUGE], "data_offsets": [0, 0]}}).encode()
    return struct.pack("<Q", len(header)) + header


def npy_file(fortran):
    # A zero at each end: the header's product stops at the first, the strides pass the other
    # (C order starts from the last dimension, Fortran's from the first).
    shape = (0, HUGE, HUGE, 0)
    text = "{'descr': '<f4', 'fortran_order': %s, 'shape': %s, }" % (fortran, shape)
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def gguf_file():
    # ne lists the fastest dimension first; a zero at each end, as for npy.
    return write_gguf([], [("w", 0, [0, HUGE, HUGE, 0], b"")])


STRIDES = "strides do not fit in 64 bits"
CASES = {
    "w.safetensors": (safetensors_file(), ["tensor 'w'", STRIDES]),
    "c.npy": (npy_file(False), [STRIDES]),
    "f.npy": (npy_file(True), [STRIDES]),
    # The GGUF parser checks it with the other products of a tensor's dimensions (so verify
    # refuses it too), naming the offset of its dimensions.
    "w.gguf": (gguf_file(), ["tensor 'w'", "the product of its dimensions overflows int64 (a 0 counted as 1)"]),
}


def tensordict_dir(root):
    # The red team's own *_zero_dim_* cases give [0, 2^62, 2^62] in tensordict, .pt and .psk.d; a
    # directory's meta.json is a reader of its own, whose message must name the file and the leaf.
    root.mkdir()
    (root / "meta.json").write_text(json.dumps({
        "x": {"device": "cpu", "shape": [0, HUGE, HUGE], "dtype": "torch.float32", "is_nested": False},
        "shape": [], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"}))
    (root / "x.memmap").write_bytes(b"")
    return root


@pytest.mark.parametrize("command", ["info", "verify"])
def test_refused_in_a_tensordict_by_file_and_leaf(tmp_path, command):
    d = tensordict_dir(tmp_path / "td")
    r = run_hostile("trove", command, d, watch=tmp_path, expect={1, 2})
    assert str(d / "meta.json") + ": leaf 'x'" in r.errtext + r.text and STRIDES in r.errtext + r.text, r
    # The same directory as a .tdz archive (made by Python's zipfile): the archive and its entry.
    tdz = tmp_path / "td.tdz"
    with zipfile.ZipFile(tdz, "w") as z:
        for f in sorted(d.iterdir()):
            z.write(f, f.name)
    r = run_hostile("trove", command, tdz, watch=tmp_path, expect={1, 2})
    assert str(tdz) in r.errtext + r.text and "meta.json: leaf 'x'" in r.errtext + r.text, r
    assert STRIDES in r.errtext + r.text, r


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("command", ["info", "verify"])
def test_refused_by_name(tmp_path, name, command):
    data, fragments = CASES[name]
    path = tmp_path / name
    path.write_bytes(data)
    r = run_hostile("trove", command, path, watch=tmp_path, expect={1, 2})
    said = r.errtext + r.text
    assert str(path) + ": " in said or str(path) + " @ " in said, r
    for f in fragments:
        assert f in said, (f, r)


def test_numpy_refuses_the_same_arrays():
    for shape in ((0, HUGE, HUGE), (0, HUGE, HUGE, 0)):
        with pytest.raises(ValueError, match="too big"):
            np.empty(shape, dtype="<f4")


def test_converting_such_a_torch_tensor_is_clean(tmp_path):
    # torch makes one (as_strided over an empty storage) and loads it back; writing it as a
    # contiguous record asks for those strides: trove either writes what torch loads or says why.
    src = tmp_path / "src.pt"
    torch.save({"w": torch.empty(0).as_strided((0, HUGE, HUGE), (1, 1, 1)), "b": torch.ones(2)}, src)
    out = tmp_path / "out.pt"
    r = run_hostile("trove", "convert", src, out, watch=tmp_path, allowed=[out], expect={0, 2})
    if r.code == 0:
        got = torch.load(out, weights_only=True)
        assert got["w"].shape == (0, HUGE, HUGE) and torch.equal(got["b"], torch.ones(2))
    else:
        assert "tensor 'w'" in r.errtext and "strides do not fit" in r.errtext, r
        assert not out.exists()
