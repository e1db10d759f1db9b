"""trove's .npy/.npz readers and writers against numpy itself (issue 26).

numpy (Debian's, /usr/bin/python3) writes the files; tests/formats/npy/npy_probe (built with the
tests) prints what trove's ReadNpy/ReadNpz see, and writes with WriteNpy/WriteNpz what numpy then
loads. Values are compared bit for bit as C-ordered little-endian bytes. The real-file corpus
(TROVE_CORPUS, its npy/ directory) is read the same way and compared with
numpy.load(allow_pickle=False); without TROVE_CORPUS that test is skipped.
"""
import csv
import json
import os
import subprocess
import zipfile

import numpy as np
import pytest

from conftest import BIN_DIR

PROBE = os.path.join(BIN_DIR, "npy_probe")
CORPUS = os.environ.get("TROVE_CORPUS")
NO_CORPUS = "TROVE_CORPUS is not set (the directory of the real-file corpus: MANIFEST.tsv, npy/, ...)"

if not os.path.exists(PROBE):
    pytest.skip(f"{PROBE} was not built", allow_module_level=True)

TROVE_DTYPES = {
    "b1": "bool", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
    "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64",
    "f2": "float16", "f4": "float32", "f8": "float64", "c8": "complex64", "c16": "complex128",
}


def probe(*args):
    p = subprocess.run([PROBE, *map(str, args)], capture_output=True, timeout=300)
    assert p.returncode in (0, 1), p
    return json.loads(p.stdout)


def expected_bytes(a):
    """numpy's values as C-ordered little-endian bytes (what trove streams)."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def assert_same(tensor, a):
    assert tensor["dtype"] == TROVE_DTYPES[f"{a.dtype.kind}{a.dtype.itemsize}"], tensor
    assert tuple(tensor["shape"]) == a.shape
    assert bytes.fromhex(tensor["hex"]) == expected_bytes(a), tensor["key"]


def sample(dtype, shape=(3, 4)):
    rng = np.random.default_rng(7)
    n = int(np.prod(shape))
    if dtype.kind == "b":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        native = dtype.newbyteorder("=")
        return rng.integers(info.min, info.max, n, dtype=native, endpoint=True).astype(dtype).reshape(shape)
    if dtype.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype).reshape(shape)
    return rng.standard_normal(n).astype(dtype).reshape(shape)


DESCRS = ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16",
          ">i2", ">i4", ">i8", ">u2", ">u4", ">u8", ">f2", ">f4", ">f8", ">c8", ">c16"]


@pytest.mark.parametrize("descr", DESCRS)
@pytest.mark.parametrize("order", ["C", "F"])
def test_every_dtype_and_order_reads_as_numpy_wrote_it(tmp_path, descr, order):
    a = np.asarray(sample(np.dtype(descr)), order=order)
    path = tmp_path / "a.npy"
    np.save(path, a)
    doc = probe("read", path)
    [t] = doc["tensors"]
    assert t["key"] == "array"
    assert t["big_endian"] == (descr[0] == ">" and a.dtype.itemsize > 1)
    assert t["strides"] == ([4, 1] if order == "C" else [1, 3])
    assert_same(t, a)
    # Written back: C order, little-endian, loaded by numpy equal bit for bit.
    out = tmp_path / "out.npy"
    assert probe("write-npy", path, out) == {"written": str(out)}
    back = np.load(out)
    assert back.dtype == a.dtype.newbyteorder("<") and back.tobytes() == expected_bytes(a)


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (5,), (2, 1, 3)])
def test_zero_dimensional_and_empty(tmp_path, shape):
    a = sample(np.dtype("<f4"), shape) if 0 not in shape else np.zeros(shape, dtype="<f4")
    np.save(tmp_path / "a.npy", a)
    [t] = probe("read", tmp_path / "a.npy")["tensors"]
    assert_same(t, a)
    probe("write-npy", tmp_path / "a.npy", tmp_path / "b.npy")
    back = np.load(tmp_path / "b.npy")
    assert back.shape == a.shape and back.tobytes() == a.tobytes()


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_format_versions(tmp_path, version):
    a = sample(np.dtype("<i4"))
    with open(tmp_path / "a.npy", "wb") as f:
        np.lib.format.write_array(f, a, version=version)
    [t] = probe("read", tmp_path / "a.npy")["tensors"]
    assert_same(t, a)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_members_and_slash_names(tmp_path, compressed):
    arrays = {"weight": sample(np.dtype("<f4")), "enc/layer/bias": sample(np.dtype(">f8"), (5,)),
              "enc/step": np.array(3, dtype="<i8"), "mask": sample(np.dtype("|b1"), (2, 2))}
    path = tmp_path / "a.npz"
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    doc = probe("read", path)
    assert doc["format"] == "npz"
    got = {t["key"]: t for t in doc["tensors"]}
    assert sorted(got) == sorted(arrays)  # 'enc/layer/bias' is a path: reachable by its own name
    for name, a in arrays.items():
        assert_same(got[name], a)
        assert got[name]["deferred"] == compressed  # deflated members are not inflated to read them
    out = tmp_path / "out.npz"
    probe("write-npz", path, out)
    with np.load(out) as back:
        assert sorted(back.files) == sorted(arrays)
        for name, a in arrays.items():
            assert back[name].tobytes() == expected_bytes(a) and back[name].shape == a.shape
    with zipfile.ZipFile(out) as z:
        assert z.testzip() is None
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    unzip = subprocess.run(["unzip", "-t", str(out)], capture_output=True)
    assert unzip.returncode == 0, unzip


def test_object_arrays_are_refused_then_read_inert_and_scanned(tmp_path):
    np.save(tmp_path / "o.npy", np.array([1, "a", None], dtype=object), allow_pickle=True)
    err = probe("read", tmp_path / "o.npy")["error"]
    assert err["code"] == "refused" and "allow_pickle=True" in err["message"]
    doc = probe("read", tmp_path / "o.npy", "--permissive")
    assert doc["tensors"] == [] and doc["values"]  # the pickle's values, read inert
    scan = probe("scan", tmp_path / "o.npy")
    assert any("object array" in f["message"] and f["severity"] == "high" for f in scan["findings"])
    assert any(g["name"].endswith("_reconstruct") for g in scan["globals"])
    np.savez(tmp_path / "o.npz", o=np.array([{"k": 1}], dtype=object), x=np.ones(2))
    scan = probe("scan", tmp_path / "o.npz")
    assert [f["entry"] for f in scan["findings"] if "object array" in f["message"]] == ["o.npy"]
    np.save(tmp_path / "plain.npy", np.ones(3))
    assert probe("scan", tmp_path / "plain.npy")["findings"] == []


def test_string_arrays_are_values(tmp_path):
    np.savez(tmp_path / "t.npz", word=np.array("héllo"), words=np.array(["a", "bc"]), raw=np.array([b"x\x00y", b"z"]),
             big=np.array(["ok"], dtype=">U2"), x=np.ones(2))
    doc = probe("read", tmp_path / "t.npz")
    assert doc["strings"] == {"word": "héllo", "words/0": "a", "words/1": "bc", "big/0": "ok"}
    assert "raw/0" in doc["values"] and [t["key"] for t in doc["tensors"]] == ["x"]


def test_structured_dtypes_are_refused_naming_their_fields(tmp_path):
    np.save(tmp_path / "s.npy", np.zeros(3, dtype=[("x", "<f4"), ("y", "<i8")]))
    err = probe("read", tmp_path / "s.npy")["error"]
    assert err["code"] == "unsupported" and "'x', 'y'" in err["message"]


@pytest.mark.skipif(not CORPUS, reason=NO_CORPUS)
def test_corpus():
    """Every .npy/.npz of the corpus read equal to numpy.load(allow_pickle=False), or refused as an
    object array (the one reason numpy refuses too)."""
    base = os.path.join(CORPUS, "npy")
    with open(os.path.join(CORPUS, "MANIFEST.tsv"), newline="") as f:
        rows = [r for r in csv.reader(f, delimiter="\t") if r and r[0].startswith("npy/")]
    assert len(rows) == 14
    table = []
    for row in rows:
        path = os.path.join(CORPUS, row[0])
        doc = probe("read", path)
        try:
            loaded = np.load(path, allow_pickle=False)
            if isinstance(loaded, np.lib.npyio.NpzFile):
                with loaded:
                    arrays = {name: loaded[name] for name in loaded.files}
            else:
                arrays = {"array": loaded}
        except ValueError as e:
            assert "allow_pickle" in str(e)
            assert doc["error"]["code"] == "refused" and "object array" in doc["error"]["message"], doc
            assert any("object array" in f["message"] for f in probe("scan", path)["findings"])
            table.append((row[0], "refused: object array (pickle)"))
            continue
        assert "error" not in doc, doc
        got = {t["key"]: t for t in doc["tensors"]}
        texts = {k: a for k, a in arrays.items() if a.dtype.kind == "U"}
        assert sorted(got) == sorted(k for k in arrays if k not in texts), row[0]
        for name, a in arrays.items():
            if name in texts:
                assert a.shape == () and doc["strings"][name] == str(a), name  # read as a str value
            else:
                assert_same(got[name], a)
        table.append((row[0], f"equal ({len(arrays)} arrays)"))
    print("\n".join(f"{name}\t{result}" for name, result in table))
