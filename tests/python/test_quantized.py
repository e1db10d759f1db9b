"""Quantized tensors (qint8, quint8, qint32; per-tensor, per-channel, float-qparams), made by
Debian's torch: trove lists them with their quantizer, prints their integers and (--dequantize)
their values exactly as torch's dequantize() computes them, gives their figures, writes them back
to .pt as torch does (torch.load reads the same quantized tensors), refuses to put them where a
quantizer cannot go unless asked to dequantize, and refuses malformed quantizers by name."""
import glob
import json
import os
import pickletools
import struct
import sys

import numpy as np
import pytest
import torch

import ptfiles

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")


def quantized_tensors():
    torch.manual_seed(0)
    x = torch.randn(4, 3)
    q = torch.quantize_per_tensor(x, 0.05, 3, torch.qint8)
    return {
        "q": q,
        "qt": q.t(),  # a view of q's storage
        "qu": torch.quantize_per_tensor(x, 0.02, 128, torch.quint8),
        "q32": torch.quantize_per_tensor(x, 0.001, -5, torch.qint32),
        "qc": torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.05, 0.3], dtype=torch.double),
                                         torch.tensor([0, 1, 7, 2]), 0, torch.quint8),
        "qc1": torch.quantize_per_channel(torch.randn(2, 3, 5), torch.tensor([0.1, 0.02, 0.3], dtype=torch.double),
                                          torch.tensor([-1, 0, 3]), 1, torch.qint8),
        "qf": torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.05]), torch.tensor([0.0, 1.5, 2.0]), 1,
                                         torch.quint8),
        "w": x,
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("quantized")
    obj = quantized_tensors()
    zip_path = ptfiles.save(obj, str(d / "q.pt"))
    legacy = ptfiles.save(obj, str(d / "q-legacy.pt"), _use_new_zipfile_serialization=False)
    return {"zip": zip_path, "legacy": legacy, "obj": obj, "dir": d}


def info(trove, path):
    r = trove("info", path, "--json")
    assert r.code == 0, r
    return {t["key"]: t for t in json.loads(r.out)["tensors"]}


def cat_json(trove, path, key, *flags):
    r = trove("cat", path, key, "--json", *flags)
    assert r.code == 0, r
    return json.loads(r.out)


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_listed_with_their_quantizer(trove, files, layout):
    tensors = info(trove, files[layout])
    assert tensors["q"]["dtype"] == "qint8" and tensors["q"]["quantizer"] == {
        "scheme": "per_tensor_affine", "scale": 0.05, "zero_point": 3}
    assert tensors["q32"]["quantizer"]["zero_point"] == -5
    assert tensors["qc"]["quantizer"] == {"scheme": "per_channel_affine", "axis": 0, "channels": 4}
    assert tensors["qf"]["quantizer"] == {"scheme": "per_channel_affine_float_qparams", "axis": 1, "channels": 3}
    assert "quantizer" not in tensors["w"]
    text = trove("info", files[layout]).text
    assert "quantized (per_tensor_affine, scale 0.05, zero point 3)" in text, text


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_cat_gives_the_integers_and_the_values_as_torch_does(trove, files, layout):
    path = files[layout]
    for key, t in files["obj"].items():
        if not t.is_quantized:
            continue
        ints = cat_json(trove, path, key)
        assert ints["dtype"] == str(t.dtype).replace("torch.", "") and ints["data"] == t.int_repr().tolist(), key
        values = cat_json(trove, path, key, "--dequantize")
        assert values["dtype"] == "float32" and values["dequantized_from"] == ints["dtype"]
        # float32 values, compared bit for bit with torch's own dequantize().
        got = np.array(values["data"], dtype=np.float32)
        assert np.array_equal(got.view(np.uint32), t.dequantize().numpy().view(np.uint32)), key
        raw = trove("cat", path, key, "--raw")
        assert raw.code == 0 and raw.out == ptfiles.tensor_bytes(t.int_repr()), key
    qc = cat_json(trove, path, "qc", "--dequantize")["quantizer"]
    assert qc["scales"] == [0.1, 0.2, 0.05, 0.3] and qc["zero_points"] == [0, 1, 7, 2]
    head = trove("cat", path, "q").text.splitlines()[0]
    assert head == "q: qint8 [4, 3], per_tensor_affine, scale 0.05, zero point 3: the stored integers " \
                   "(--dequantize for the values)", head
    # A per-tensor quantizer holds for any slice; a per-channel one follows the whole axis.
    assert trove("cat", path, "q[1:3, 0]", "--dequantize").code == 0
    r = trove("cat", path, "qc[0]")
    assert r.code == 2 and "per-channel" in r.errtext, r
    r = trove("cat", path, "w", "--dequantize")
    assert r.code == 2 and "not quantized" in r.errtext, r
    # A glob's other tensors print as they are.
    r = trove("cat", path, "*", "--dequantize", "--json")
    assert r.code == 0 and len(r.text.splitlines()) == len(files["obj"]), r


def test_stats_are_the_figures_of_the_values(trove, files):
    r = trove("stats", files["zip"], "--json")
    assert r.code == 0, r
    figures = {t["key"]: t for t in json.loads(r.out)["tensors"]}
    for key, t in files["obj"].items():
        values = (t.dequantize() if t.is_quantized else t).double()
        f = figures[key]
        assert f["min"] == values.min().item() and f["max"] == values.max().item(), key
        assert f["mean"] == pytest.approx(values.mean().item(), rel=1e-12, abs=1e-15), key


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_convert_to_pt_writes_them_as_torch_does(trove, files, layout):
    out = str(files["dir"] / f"back-{layout}.pt")
    r = trove("convert", files[layout], out)
    assert r.code == 0, r
    back = torch.load(out)  # our own output; torch 1.13's weights_only refuses _rebuild_qtensor, even torch's files
    for key, t in files["obj"].items():
        b = back[key]
        assert b.dtype == t.dtype, key
        if t.is_quantized:
            assert b.qscheme() == t.qscheme(), key
            assert torch.equal(b.int_repr(), t.int_repr()) and torch.equal(b.dequantize(), t.dequantize()), key
            if t.qscheme() == torch.per_tensor_affine:
                assert (b.q_scale(), b.q_zero_point()) == (t.q_scale(), t.q_zero_point())
            else:
                assert torch.equal(b.q_per_channel_scales(), t.q_per_channel_scales())
                assert torch.equal(b.q_per_channel_zero_points(), t.q_per_channel_zero_points())
                assert b.q_per_channel_axis() == t.q_per_channel_axis()
        else:
            assert torch.equal(b, t)
    # The transpose stays a view of q's storage.
    assert back["qt"].untyped_storage().data_ptr() == back["q"].untyped_storage().data_ptr() if hasattr(
        back["q"], "untyped_storage") else True
    assert trove("verify", out).code == 0
    # Compared by their values: the same tensors; a changed scale is a difference.
    r = trove("diff", files[layout], out)
    assert r.code == 0, r
    r = trove("diff", files[layout], str(files["dir"] / f"back-{layout}.pt"), "--keys", "q")
    assert r.code == 0, r


def test_diff_compares_values(trove, files, tmp_path):
    obj = dict(files["obj"])
    obj["q"] = torch.quantize_per_tensor(obj["w"], 0.06, 3, torch.qint8)
    other = ptfiles.save(obj, str(tmp_path / "other.pt"))
    r = trove("diff", files["zip"], other, "--json")
    assert r.code == 1, r
    changed = {t["key"]: t for t in json.loads(r.out)["tensors"] if not t["identical"]}
    assert list(changed) == ["q"] and changed["q"]["max_abs"] > 0, changed


def test_other_formats_refuse_them_by_name_or_take_their_values(trove, files):
    d = files["dir"]
    for dst in ("q.safetensors", "q.tdz", "qdir"):
        r = trove("convert", files["zip"], str(d / dst))
        assert r.code == 2 and "'q' is a quantized tensor" in r.errtext and "--dequantize" in r.errtext, r
        assert not os.path.exists(str(d / dst))
    out = str(d / "values.pt")
    r = trove("convert", files["zip"], out, "--dequantize")
    assert r.code == 0, r
    back = torch.load(out, weights_only=True)
    for key, t in files["obj"].items():
        want = t.dequantize() if t.is_quantized else t
        assert back[key].dtype == torch.float32 and torch.equal(back[key], want), key
    r = trove("convert", files["zip"], str(d / "values.tdz"), "--dequantize", "--dtype", "bf16")
    assert r.code == 0, r
    assert trove("cat", str(d / "values.tdz"), "qc").code == 0


# ---- malformed quantizers: a clear error naming the tensor ---------------------------------------

def patched(files, name, edit):
    """q.pt with its pickle changed by edit(pkl) -> pkl."""
    def transform(entry, data):
        return entry, edit(data) if entry.endswith("data.pkl") else data
    return ptfiles.rewrite_zip(files["zip"], str(files["dir"] / name), transform=transform)


def set_axis(pkl, value):
    """Sets the axis of the first per-channel quantizer (the last int of its params tuple)."""
    ops = list(pickletools.genops(pkl))
    start = next(i for i, (op, arg, _) in enumerate(ops) if op.name == "GLOBAL" and arg == "torch per_channel_affine")
    depth = 0
    for i in range(start, len(ops)):
        op = ops[i][0]
        if op.name == "MARK":
            depth += 1
        elif op.name == "TUPLE":
            if depth == 0:
                _, arg, pos = ops[i - 1]
                assert ops[i - 1][0].name == "BININT1"
                return pkl[:pos] + bytes([0x4B, value]) + pkl[pos + 2:]
            depth -= 1
    raise AssertionError("no per-channel quantizer")


@pytest.mark.parametrize("name,edit,reason", [
    ("symmetric.pt", lambda p: p.replace(b"torch\nper_tensor_affine\n", b"torch\nper_tensor_symmetric\n", 1),
     "quantization scheme 'torch.per_tensor_symmetric' is not one trove reads"),
    ("axis.pt", lambda p: set_axis(p, 1), "scales have shape [4], not [3] (the size of axis 1)"),
    ("axis-outside.pt", lambda p: set_axis(p, 9), "axis 9 is outside the tensor's 2 dimensions"),
    ("zero-point.pt", lambda p: p.replace(b"K\x03\x87", b"K\xc8\x87", 1), "zero point 200 is outside the range of qint8"),
])
def test_malformed_quantizers_are_refused_by_name(trove, files, name, edit, reason):
    path = patched(files, name, edit)
    r = trove("info", path, limit=True)
    assert r.code == 2 and "tensor '" in r.errtext and "quantizer" in r.errtext and reason in r.errtext, r


def test_per_channel_zero_point_outside_the_type_is_refused_by_name(trove, tmp_path):
    # As the per-tensor one: torch refuses both when it quantizes.
    q = torch.quantize_per_channel(torch.randn(3, 4), torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64),
                                   torch.tensor([0, 1, 2]), 0, torch.qint8)
    torch.save({"qc": q}, tmp_path / "ok.pt")
    stored = struct.pack("<3q", 0, 1, 2)

    def transform(entry, data):
        return entry, struct.pack("<3q", 0, 1, 200) if data == stored else data
    path = ptfiles.rewrite_zip(str(tmp_path / "ok.pt"), str(tmp_path / "bad.pt"), transform=transform)
    assert trove("info", str(tmp_path / "ok.pt"), limit=True).code == 0
    r = trove("info", path, limit=True)
    assert r.code == 2 and "tensor 'qc'" in r.errtext, r
    assert "zero point 200 (channel 2) is outside the range of qint8" in r.errtext, r


# ---- Python ----------------------------------------------------------------------------------------

def test_python_load_gives_torch_quantized_tensors(files):
    if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
        pytest.skip("the Python module was not built")
    sys.path.insert(0, PYDIR)
    import trove as module
    for layout in ("zip", "legacy"):
        got = module.load(files[layout])
        for key, t in files["obj"].items():
            assert got[key].dtype == t.dtype, key
            if t.is_quantized:
                assert got[key].qscheme() == t.qscheme() and torch.equal(got[key].int_repr(), t.int_repr()), key
                assert torch.equal(got[key].dequantize(), t.dequantize()), key
    f = module.open(files["zip"], raw=True)
    assert np.array_equal(f["q"], files["obj"]["q"].int_repr().numpy())
    with pytest.raises(module.UnsupportedError, match="raw=True its stored integers"):
        module.open(files["zip"])["q"]
    assert module.stats(files["zip"])["q"]["max"] == files["obj"]["q"].dequantize().max().item()
    out = str(files["dir"] / "py-values.pt")
    module.convert(files["zip"], out, dequantize=True)
    assert torch.equal(torch.load(out, weights_only=True)["qc"], files["obj"]["qc"].dequantize())
