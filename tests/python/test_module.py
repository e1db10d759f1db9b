"""The Python module `import trove` (docs/python.md) against the real peer: files made by Debian's
torch, read back by trove and compared with torch.load; zero-copy, copy-on-write, threads,
truncation under a view, errors. Skipped only when the module was not built (no pybind11)."""

import collections
import glob
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")
if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
    pytest.skip(f"the Python module was not built (no {PYDIR}/trove/_trove*.so)", allow_module_level=True)
sys.path.insert(0, PYDIR)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trove  # noqa: E402


def storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A checkpoint: state_dict (OrderedDict with _metadata) with tied weights, a transposed view,
    int/bool/float16/bfloat16 tensors; a Parameter; plain values."""
    d = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(0)
    sd = collections.OrderedDict()
    emb = torch.randn(32, 16)
    sd["embed.weight"] = emb
    sd["head.weight"] = emb  # tied
    sd["proj.weight"] = torch.randn(16, 24)
    sd["proj_t"] = sd["proj.weight"].t()  # a strided view of the same storage
    sd["row"] = sd["proj.weight"][3]       # a view with an offset
    sd["half"] = torch.randn(4, 4).half()
    sd["bf"] = torch.randn(5, 3).bfloat16()
    sd["ints"] = torch.arange(10, dtype=torch.int32)
    sd["long"] = torch.arange(-5, 5)
    sd["mask"] = torch.rand(3, 3) > 0.5
    sd["scalar"] = torch.tensor(2.5)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    obj = {
        "model": sd,
        "param": torch.nn.Parameter(torch.ones(3)),
        "frozen": torch.nn.Parameter(torch.zeros(2), requires_grad=False),
        "epoch": 5,
        "cfg": {"lr": 1e-3, "name": "tiny", "sizes": (1, 2, 3), "blob": b"\x00\x01", "none": None, "flag": True,
                "big": 2 ** 80, "layers": [1, [2, 3]]},
    }
    path = str(d / "ckpt.pt")
    torch.save(obj, path)
    return path


@pytest.fixture(scope="module")
def plain_sd(tmp_path_factory):
    """A state dict torch 1.13's weights_only loader reads (no float values outside tensors)."""
    d = tmp_path_factory.mktemp("sd")
    torch.manual_seed(1)
    sd = collections.OrderedDict()
    w = torch.randn(8, 4)
    sd["a.weight"] = w
    sd["b.weight"] = w
    sd["a.bias"] = torch.zeros(4, dtype=torch.float16)
    sd["steps"] = torch.tensor(3)
    path = str(d / "sd.pt")
    torch.save(sd, path)
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """~200 MB of float32 in a state dict."""
    d = tmp_path_factory.mktemp("big")
    g = torch.Generator().manual_seed(2)
    sd = collections.OrderedDict((f"layer{i}.weight", torch.randn(1024, 2048, generator=g)) for i in range(24))
    path = str(d / "big.pt")
    torch.save(sd, path)
    return path


def assert_same_tree(a, b, path="root"):
    assert type(a) is type(b), f"{path}: {type(a)} vs {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype, path
        assert a.shape == b.shape, path
        assert a.stride() == b.stride(), path
        assert a.requires_grad == b.requires_grad, path
        assert torch.equal(a.detach(), b.detach()), path
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys()), path
        for k in a:
            assert_same_tree(a[k], b[k], f"{path}/{k}")
        if isinstance(a, collections.OrderedDict):
            assert getattr(a, "_metadata", None) == getattr(b, "_metadata", None), path
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tree(x, y, f"{path}/{i}")
    else:
        assert a == b, path


def mapping_of(f, address):
    return any(lo <= address < hi for lo, hi in f._doc._mappings())


# --- trove.open ----------------------------------------------------------------------------------

def test_keys_metadata_values(ckpt):
    with trove.open(ckpt) as f:
        keys = f.keys()
        assert keys[:3] == ["model/embed.weight", "model/head.weight", "model/proj.weight"]
        assert "param" in keys and "model/bf" in f and "nope" not in f
        meta = f.info()
        assert meta["format"] == "pt"
        assert meta["properties"]["byteorder"].startswith("little")
        assert meta["records"] and [t["key"] for t in meta["tensors"]] == keys
        by_key = {t["key"]: t for t in meta["tensors"]}
        assert by_key["model/embed.weight"]["shared"] and by_key["model/proj_t"]["strides"] == (1, 24)
        v = f.values()
        assert isinstance(v["model"], collections.OrderedDict)
        assert v["model"]["bf"] == trove.TensorRef("model/bf", "bfloat16", (5, 3))
        assert v["epoch"] == 5
        assert v["cfg"] == {"lr": 1e-3, "name": "tiny", "sizes": (1, 2, 3), "blob": b"\x00\x01", "none": None,
                            "flag": True, "big": 2 ** 80, "layers": [1, [2, 3]]}


def test_numpy_zero_copy_views(ckpt):
    ref = torch.load(ckpt)
    with trove.open(ckpt, framework="np") as f:
        a, b = f.get_tensor("model/embed.weight"), f["model/head.weight"]
        pa = a.__array_interface__["data"][0]
        assert pa == b.__array_interface__["data"][0]  # tied weights: one memory
        assert mapping_of(f, pa)                       # inside the file's mapping
        np.testing.assert_array_equal(a, ref["model"]["embed.weight"].numpy())
        t = f["model/proj_t"]
        assert t.strides == (4, 96) and not t.flags.c_contiguous  # strided, not copied
        assert mapping_of(f, t.__array_interface__["data"][0])
        np.testing.assert_array_equal(t, ref["model"]["proj_t"].numpy())
        np.testing.assert_array_equal(f["model/row"], ref["model"]["row"].numpy())
        assert f["model/mask"].dtype == np.bool_ and f["model/ints"].dtype == np.int32
        assert f["model/half"].dtype == np.float16 and f["model/scalar"].shape == ()


def test_get_slice_reads_rows(ckpt):
    ref = torch.load(ckpt)["model"]["proj.weight"]
    with trove.open(ckpt) as f:
        s = f.get_slice("model/proj.weight")
        assert s.get_shape() == [16, 24] and s.get_dtype() == "float32"
        rows = s[0:4]
        assert rows.shape == (4, 24)
        np.testing.assert_array_equal(rows, ref[0:4].numpy())
        assert rows.__array_interface__["data"][0] == f["model/proj.weight"].__array_interface__["data"][0]
        with pytest.raises(trove.NotFoundError):
            f.get_slice("model/nope")


def test_numpy_lacks_bfloat16(ckpt):
    with trove.open(ckpt) as f:
        with pytest.raises(trove.UnsupportedError) as e:
            f["model/bf"]
        assert e.value.code == "unsupported" and "bfloat16" in e.value.message
    ref = torch.load(ckpt)["model"]["bf"]
    with trove.open(ckpt, raw=True) as f:
        bits = f["model/bf"]
        assert bits.dtype == np.uint16
        np.testing.assert_array_equal(bits, ref.view(torch.int16).numpy().view(np.uint16))


def test_torch_framework(ckpt):
    ref = torch.load(ckpt)
    with trove.open(ckpt, framework="pt") as f:
        bf = f["model/bf"]
        assert bf.dtype == torch.bfloat16 and torch.equal(bf, ref["model"]["bf"])
        a, b = f["model/embed.weight"], f["model/head.weight"]
        assert storage_ptr(a) == storage_ptr(b) and a.data_ptr() == b.data_ptr()
        t = f["model/proj_t"]
        assert t.stride() == (1, 24) and storage_ptr(t) == storage_ptr(f["model/proj.weight"])
        assert isinstance(f["param"], torch.nn.Parameter)


# --- trove.load ----------------------------------------------------------------------------------

def test_load_equals_torch_load(ckpt):
    mine, ref = trove.load(ckpt), torch.load(ckpt)  # torch 1.13's weights_only cannot read float values
    assert_same_tree(mine, ref)
    m = mine["model"]
    assert storage_ptr(m["embed.weight"]) == storage_ptr(m["head.weight"])
    assert storage_ptr(m["proj_t"]) == storage_ptr(m["proj.weight"]) == storage_ptr(m["row"])
    assert m["row"].storage_offset() == ref["model"]["row"].storage_offset() == 3 * 24
    assert isinstance(mine["param"], torch.nn.Parameter) and mine["param"].requires_grad
    assert isinstance(mine["frozen"], torch.nn.Parameter) and not mine["frozen"].requires_grad


def test_load_equals_weights_only(plain_sd):
    mine, ref = trove.load(plain_sd), torch.load(plain_sd, weights_only=True)
    assert_same_tree(mine, ref)
    assert storage_ptr(mine["a.weight"]) == storage_ptr(mine["b.weight"])
    with pytest.raises(trove.RefusedError):
        trove.load(plain_sd, weights_only=False)


def test_load_map_location_callable(ckpt):
    """A callable map_location gets each storage once with its saved location, as torch.load calls
    it; what it returns is what the tensors view (shared storages stay shared)."""
    def calls_of(loader):
        seen = []

        def relocate(storage, location):
            seen.append((storage.nbytes(), location))
            return storage.clone()  # a copy: the result must view it, not the file
        return loader(ckpt, map_location=relocate), sorted(seen)
    mine, mine_calls = calls_of(trove.load)
    ref, ref_calls = calls_of(torch.load)
    assert mine_calls == ref_calls
    assert_same_tree(mine, ref)
    m = mine["model"]
    assert storage_ptr(m["embed.weight"]) == storage_ptr(m["head.weight"])
    with trove.open(ckpt, framework="pt") as f:
        assert storage_ptr(f.get_tensor("model/embed.weight")) != storage_ptr(m["embed.weight"])
    assert isinstance(mine["param"], torch.nn.Parameter) and mine["param"].requires_grad
    # None keeps the storage; a device string and {"cpu": "cpu"} are the identity on this machine.
    for where in (lambda s, loc: None, "cpu", torch.device("cpu"), {"cpu": "cpu"}):
        assert_same_tree(trove.load(ckpt, map_location=where), ref)


def test_load_other_formats(ckpt, tmp_path):
    ref = torch.load(ckpt)["model"]
    flat = {k: v for k, v in ref.items() if k not in ("proj_t", "row", "head.weight")}
    for name in ("m.safetensors", "m.tdz", "mdir"):
        out = str(tmp_path / name)
        trove.save(flat, out)
        got = trove.load(out)
        assert sorted(got) == sorted(flat), name
        for k in flat:
            assert got[k].dtype == flat[k].dtype and torch.equal(got[k], flat[k]), (name, k)


# --- writes never reach the file -----------------------------------------------------------------

def test_writes_stay_in_process(ckpt):
    before = sha256(ckpt)
    with trove.open(ckpt) as f:
        a = f["model/embed.weight"]
        assert a.flags.writeable
        a[:] = 7.0
        assert (f["model/head.weight"] == 7.0).all()  # the process's copy changed
    state = trove.load(ckpt)
    state["model"]["proj.weight"].mul_(0).add_(3)
    assert float(state["model"]["proj_t"][0, 0]) == 3.0
    assert sha256(ckpt) == before
    fresh = trove.load(ckpt)
    assert_same_tree(fresh, torch.load(ckpt))


# --- threads, memory -----------------------------------------------------------------------------

def test_threads_read_one_file(big):
    f = trove.open(big, framework="pt")
    keys = f.keys()
    sums, errors = {}, []

    def work(i):
        try:
            for k in keys[i::4]:
                sums[k] = float(f[k].double().sum())
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(sums) == len(keys)
    first = torch.load(big)[keys[0]]
    assert abs(sums[keys[0]] - float(first.double().sum())) < 1e-6


def rss_bytes():
    with open("/proc/self/statm") as s:
        return int(s.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_open_reads_no_tensor_data(big):
    assert os.path.getsize(big) > 190e6
    before = rss_bytes()
    f = trove.open(big)
    keys = f.keys()
    f.info()
    w = f[keys[0]]  # a view: touching nothing yet
    grown = rss_bytes() - before
    assert len(keys) == 24 and w.shape == (1024, 2048)
    assert grown < 20e6, grown


# --- errors --------------------------------------------------------------------------------------

def test_missing_file(tmp_path):
    with pytest.raises(trove.NotFoundError) as e:
        trove.open(str(tmp_path / "absent.pt"))
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, trove.Error)
    assert e.value.code == "not-found" and "absent.pt" in e.value.message
    with pytest.raises(FileNotFoundError):
        trove.load(str(tmp_path / "absent.pt"))
    # the fields: where apart from what
    assert e.value.file == str(tmp_path / "absent.pt")
    assert e.value.reason and "absent.pt" not in e.value.reason and e.value.reason in e.value.message
    assert e.value.entry is None and e.value.offset is None and e.value.spec_code is None
    assert e.value.refused_global is None and e.value.contexts == []


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/trove-python-test-pwned",))


def test_hostile_pickle_refused(tmp_path):
    path = str(tmp_path / "evil.pt")
    torch.save({"x": torch.ones(2), "e": _Evil()}, path)
    with pytest.raises(trove.RefusedError) as e:
        trove.load(path)
    assert e.value.code == "refused" and "system" in e.value.message
    assert not os.path.exists("/tmp/trove-python-test-pwned")
    assert e.value.refused_global in ("posix.system", "os.system")
    assert e.value.file == path and e.value.entry.endswith("/data.pkl")
    assert isinstance(e.value.offset, int) and e.value.offset > 0 and e.value.spec_code is None
    assert e.value.refused_global in e.value.reason and path not in e.value.reason
    report = trove.scan(path)
    assert not report.ok
    critical = [f for f in report.findings if f.severity == "critical"]
    assert critical and "system" in critical[0].message and critical[0].entry.endswith("data.pkl")
    assert any(g["name"].endswith("system") and not g["allowed"] for g in report.globals)
    # permissive: the call becomes an inert record, never run
    with trove.open(path, permissive=True) as f:
        assert isinstance(f.values()["e"], trove.Object)


def test_pskd_error_has_spec_code(tmp_path):
    import struct
    typ = "ℝ[2]".encode()
    path = str(tmp_path / "short.psk.d")
    with open(path, "wb") as f:  # the header claims 3 samples, 2 follow: E9003
        f.write(b"PSKD" + struct.pack("<HI", 1, len(typ)) + typ + struct.pack("<Q", 3) + struct.pack("<2d", 1, 2))
    with pytest.raises(trove.CorruptError) as e:
        trove.open(path)
    assert e.value.spec_code == 9003 and "E9003" in e.value.message and "E9003" not in e.value.reason
    assert e.value.file == path and e.value.refused_global is None


def test_error_fields_of_python_made_errors(ckpt):
    with trove.open(ckpt) as f, pytest.raises(trove.NotFoundError) as e:
        f["no/such/key"]
    assert e.value.reason == e.value.message and e.value.offset is None and e.value.spec_code is None


def test_corrupt_file(tmp_path, ckpt):
    path = str(tmp_path / "cut.pt")
    with open(ckpt, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read()[:300])
    with pytest.raises(trove.Error) as e:
        trove.load(path)
    assert e.value.code in ("corrupt", "unsupported")


def test_truncated_under_a_view_raises(tmp_path):
    victim = str(tmp_path / "victim.pt")
    torch.save({"w": torch.randn(1024, 2048)}, victim)
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {PYDIR!r})
        import trove
        f = trove.open({victim!r}, framework="pt")
        w = f["w"]
        os.truncate({victim!r}, 4096)
        try:
            float(w.sum())
            print("no error")
        except trove.IoError as e:
            print("raised", e.code, e.message)
        try:
            f["w"]
        except trove.IoError as e:
            print("again", e.code)
        print("alive")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "raised io" in r.stdout and "changed while being read" in r.stdout, r.stdout
    assert "again io" in r.stdout and "alive" in r.stdout


# --- save, checks, convert, diff, stats ----------------------------------------------------------

def test_save_round_trip(ckpt, tmp_path):
    obj = torch.load(ckpt)
    out = str(tmp_path / "again.pt")
    trove.save(obj, out)
    back = torch.load(out)
    assert_same_tree(back, obj)
    assert storage_ptr(back["model"]["embed.weight"]) == storage_ptr(back["model"]["head.weight"])
    assert storage_ptr(back["model"]["proj_t"]) == storage_ptr(back["model"]["proj.weight"])
    # numpy arrays and plain values
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "y": [np.int64(3), np.ones(2, np.bool_)],
              "t": (1, "two", None), "n": 1.5}
    out2 = str(tmp_path / "arrays.pt")
    trove.save(arrays, out2)
    back2 = torch.load(out2)
    assert torch.equal(back2["x"], torch.from_numpy(arrays["x"])) and back2["y"][1].dtype == torch.bool
    assert back2["t"] == (1, "two", None) and back2["n"] == 1.5
    with pytest.raises(trove.UsageError):
        trove.save({"f": object()}, str(tmp_path / "bad.pt"))
    assert not os.path.exists(str(tmp_path / "bad.pt"))


# --- write options: progress, note, compression, metadata, shards ------------------------------

def _big_sd():
    torch.manual_seed(1)
    return {"a": torch.randn(3 << 20), "b": torch.randn(1 << 20), "n": torch.arange(7)}


def _check_progress(calls):
    assert calls, "progress was never called"
    total = calls[-1][1]
    assert calls[-1] == (total, total) and total > 0
    assert all(t == total for _, t in calls)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


@pytest.mark.parametrize("name", ["p.pt", "p.safetensors", "p.tdz", "pdir"])
def test_save_progress(tmp_path, name):
    calls = []
    sd = _big_sd()
    trove.save(sd, str(tmp_path / name), progress=lambda done, total: calls.append((done, total)))
    _check_progress(calls)
    assert calls[-1][1] == sum(t.numel() * t.element_size() for t in sd.values())
    assert len(calls) >= 2  # 16 MiB + 4 MiB of payload: at least one call before the last


def test_convert_progress_and_note(tmp_path, ckpt):
    src = str(tmp_path / "src.pt")
    trove.save(_big_sd(), src)
    calls, notes = [], []
    trove.convert(src, str(tmp_path / "out.tdz"), progress=lambda d, t: calls.append((d, t)), note=notes.append)
    _check_progress(calls)
    # a note: values a .safetensors file cannot hold, dropped
    trove.convert(ckpt, str(tmp_path / "out.safetensors"), drop_values=True, note=notes.append)
    assert notes and all(isinstance(n, str) for n in notes)


@pytest.mark.parametrize("name", ["r.pt", "r.safetensors", "r.tdz", "rdir"])
def test_raising_progress_leaves_nothing(tmp_path, name):
    class Stop(Exception):
        pass

    def stop(done, total):
        raise Stop(done)

    with pytest.raises(Stop):
        trove.save(_big_sd(), str(tmp_path / name), progress=stop)
    assert os.listdir(tmp_path) == []
    src = str(tmp_path / "src.pt")
    trove.save(_big_sd(), src)
    with pytest.raises(Stop):
        trove.convert(src, str(tmp_path / name), progress=stop)
    assert os.listdir(tmp_path) == ["src.pt"]
    with pytest.raises(trove.UsageError):
        trove.save(_big_sd(), str(tmp_path / name), progress=3)


def test_raising_note_leaves_nothing(tmp_path, ckpt):
    def stop(text):
        raise RuntimeError(text)

    with pytest.raises(RuntimeError):
        trove.convert(ckpt, str(tmp_path / "n.safetensors"), drop_values=True, note=stop)
    assert os.listdir(tmp_path) == []


def test_compression_and_metadata(tmp_path):
    sd = {"z": torch.zeros(1 << 16), "n": torch.arange(100)}
    trove.save(sd, str(tmp_path / "c.tdz"), compression="deflate")
    with trove.open(str(tmp_path / "c.tdz")) as f:
        methods = {r["name"]: r["method"] for r in f.info()["records"]}
        assert methods["z.memmap"] == "deflate"
        assert torch.equal(trove.load(str(tmp_path / "c.tdz"))["z"], sd["z"])
    trove.save(sd, str(tmp_path / "c.safetensors"), metadata={"format": "pt", "note": "hi"})
    with trove.open(str(tmp_path / "c.safetensors")) as f:
        props = f.info()["properties"]
        assert props["metadata.format"] == "pt" and props["metadata.note"] == "hi"
    trove.convert(str(tmp_path / "c.safetensors"), str(tmp_path / "d.tdz"), compression="lzma")
    with trove.open(str(tmp_path / "d.tdz")) as f:
        assert {r["method"] for r in f.info()["records"] if r["name"].endswith(".memmap")} == {"lzma"}
    trove.convert(str(tmp_path / "c.tdz"), str(tmp_path / "d.safetensors"), metadata={"k": "v"})
    with trove.open(str(tmp_path / "d.safetensors")) as f:
        assert f.info()["properties"]["metadata.k"] == "v"
    with pytest.raises(trove.UsageError):
        trove.save(sd, str(tmp_path / "e.tdz"), compression="zstd")
    with pytest.raises(trove.UsageError):
        trove.save(sd, str(tmp_path / "e.safetensors"), metadata={"k": 1})


def test_convert_max_shard_size(tmp_path):
    src = str(tmp_path / "src.pt")
    sd = _big_sd()
    trove.save(sd, src)
    out = str(tmp_path / "shards")
    trove.convert(src, out, to="safetensors", max_shard_size="10MB")
    names = sorted(os.listdir(out))
    assert "model.safetensors.index.json" in names and len([n for n in names if n.endswith(".safetensors")]) == 2
    got = trove.load(os.path.join(out, "model.safetensors.index.json"))
    assert all(torch.equal(got[k], sd[k]) for k in sd)
    trove.convert(src, str(tmp_path / "pts"), to="pt", max_shard_size=10 << 20)
    assert any(n.endswith(".bin.index.json") for n in os.listdir(str(tmp_path / "pts")))
    with pytest.raises(trove.UsageError):
        trove.convert(src, str(tmp_path / "x"), max_shard_size="10MB")


def test_dict_subclass_attributes_are_kept(tmp_path):
    """A dict subclass whose pickle set attributes comes back as a trove.Dict holding them (its
    tensors as tensors), not as a plain dict that would lose them; one without stays a dict."""
    from realfiles import AttrDict, AttrOrderedDict
    d = AttrDict(a=torch.zeros(2))
    d.extra = torch.ones(3)
    d.note = "hi"
    o = AttrOrderedDict(b=torch.full((2,), 5.0))
    plain = AttrDict(c=torch.arange(3))
    path = str(tmp_path / "attrs.pt")
    torch.save({"d": d, "o": o, "plain": plain}, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", trove.UnknownObjectsWarning)  # dict subclasses are data
        got = trove.load(path)
    assert isinstance(got["d"], trove.Dict) and got["d"].type_name == "realfiles.AttrDict"
    assert torch.equal(got["d"]["a"], d["a"]) and torch.equal(got["d"].extra, d.extra) and got["d"].note == "hi"
    assert type(got["o"]) is dict and torch.equal(got["o"]["b"], o["b"])
    assert type(got["plain"]) is dict and torch.equal(got["plain"]["c"], plain["c"])
    with trove.open(path, framework="pt") as f:
        assert torch.equal(f["d/%attr:extra"], d.extra)


def _mapped_paths():
    with open("/proc/self/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}


def test_safetensors_shards_are_mapped_when_first_read(tmp_path):
    """A sharded checkpoint's .safetensors shards are read header-only at open and mapped when a
    tensor's bytes are first read: only the shard holding the tensor asked for; a shard changed
    since the open is an error when it is mapped, not a view of other bytes."""
    src = str(tmp_path / "src.pt")
    sd = _big_sd()
    trove.save(sd, src)
    out = tmp_path / "shards"
    trove.convert(src, str(out), to="safetensors", max_shard_size="10MB")
    shards = sorted(str(p.resolve()) for p in out.glob("*.safetensors"))
    assert len(shards) == 2
    index = json.loads((out / "model.safetensors.index.json").read_text())
    with trove.open(str(out), framework="pt") as f:
        assert set(f.keys()) == set(sd)
        assert not _mapped_paths() & set(shards)  # opened: nothing mapped
        key = next(k for k, v in index["weight_map"].items() if v == os.path.basename(shards[1]))
        assert torch.equal(f[key], sd[key])
        assert _mapped_paths() & set(shards) == {shards[1]}
    # A shard rewritten under the open document (another header) is refused when first mapped.
    with trove.open(str(out), framework="pt") as f:
        other = next(k for k, v in index["weight_map"].items() if v == os.path.basename(shards[0]))
        with open(shards[0], "r+b") as w:  # same size, the header's first name changed
            head = bytearray(w.read(64))
            i = head.index(b'"', 9)
            head[i + 1] = ord("Z") if head[i + 1] != ord("Z") else ord("Y")
            w.seek(0)
            w.write(head)
        with pytest.raises(trove.IoError, match="changed since"):
            f[other].sum()


def test_save_max_shard_size(tmp_path):
    """save writes shards and their index straight from Python objects; the shards are read with
    the tests' own safetensors reader and torch.load, the index with json."""
    import json
    import safetensors_spec
    sd = _big_sd()
    out = tmp_path / "st"
    trove.save(sd, out, format="safetensors", max_shard_size="10MB")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    got = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors, _ = safetensors_spec.read((out / shard).read_bytes())
        assert os.path.getsize(out / shard) <= 10_000_000 + 1024 or len(tensors) == 1
        got.update({k: (shard, v) for k, v in tensors.items()})
    assert {k: s for k, (s, _) in got.items()} == index["weight_map"]
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in sd.values())
    for k, t in sd.items():
        assert got[k][1][2] == t.numpy().tobytes(), k
    pts = tmp_path / "pts"
    trove.save(sd, pts, format="pt", max_shard_size=10 << 20)
    index = json.loads((pts / "pytorch_model.bin.index.json").read_text())
    loaded = {}
    for shard in sorted(set(index["weight_map"].values())):
        loaded.update(torch.load(pts / shard, weights_only=True))
    assert set(loaded) == set(sd) and all(torch.equal(loaded[k], sd[k]) for k in sd)
    with pytest.raises(trove.UsageError, match="max_shard_size"):
        trove.save(sd, tmp_path / "x.tdz", max_shard_size="10MB")
    assert not (tmp_path / "x.tdz").exists()


def test_verify_convert_diff_stats(ckpt, tmp_path):
    report = trove.verify(ckpt)
    assert report.ok and report.format == "pt" and report.entries_checked > 0
    out = str(tmp_path / "half.safetensors")
    trove.convert(ckpt, out, keys=["model/proj*"], dtype="float16", drop_values=True)
    got = trove.load(out)
    assert sorted(got) == ["model/proj.weight", "model/proj_t"] and got["model/proj_t"].dtype == torch.float16
    d = trove.diff(ckpt, ckpt)
    assert d.equal and not d.only_in_a
    d2 = trove.diff(ckpt, out)
    assert not d2.equal and "model/embed.weight" in d2.only_in_a
    s = trove.stats(ckpt)
    ref = torch.load(ckpt)["model"]["embed.weight"].double()
    assert s["model/embed.weight"]["count"] == 512
    assert abs(s["model/embed.weight"]["mean"] - float(ref.mean())) < 1e-12
    assert abs(s["model/embed.weight"]["max"] - float(ref.max())) < 1e-12
    with pytest.raises(trove.UsageError):
        trove.convert(ckpt, str(tmp_path / "x.unknown-ext"))


def test_install_where_debian_python_imports(tmp_path):
    prefix = str(tmp_path / "prefix")
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    found = glob.glob(os.path.join(prefix, "**", "trove", "_trove*.so"), recursive=True)
    assert len(found) == 1
    site = os.path.dirname(os.path.dirname(found[0]))
    rel = os.path.relpath(site, prefix)
    for name in ("__init__.py", "__init__.pyi", "_trove.pyi", "py.typed"):
        assert os.path.exists(os.path.join(site, "trove", name)), name
    # Debian's interpreter imports from <prefix>/<rel> for the prefixes make install uses
    paths = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"],
                           capture_output=True, text=True, env={}).stdout.split()
    assert os.path.join("/usr/local", rel) in paths or os.path.join("/usr", rel) in paths, (rel, paths)
    out = subprocess.run(["/usr/bin/python3", "-c", "import trove, sys; print(trove.__file__)"],
                         capture_output=True, text=True, env={"PYTHONPATH": site})
    assert out.returncode == 0 and out.stdout.startswith(site), out.stderr


def test_pip_install_offline_in_a_venv(tmp_path):
    """pyproject.toml + setup.py: `pip install --no-build-isolation --no-index .` in a venv made with
    --system-site-packages (numpy, torch from Debian) builds _trove with the project's CMake
    (build-pip/, incremental after the first time) and imports trove from the venv."""
    import shutil
    try:
        import ensurepip  # noqa: F401  (python3-venv)
    except ImportError:
        pytest.skip("python3-venv (ensurepip) is not installed")
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    venv = str(tmp_path / "venv")
    r = subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make a venv: {r.stderr.strip()[-200:]}")
    py = os.path.join(venv, "bin", "python")
    # The extension this test run built is packaged as it is (TROVE_PIP_PREBUILT): the test checks
    # pyproject.toml, setup.py and the venv, not a second, minutes-long Release build.
    env = dict(os.environ, TROVE_PIP_PREBUILT=os.environ.get("TROVE_BUILD_DIR", os.path.join(root, "build")))
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", root],
                       capture_output=True, text=True, timeout=1800, env=env)
    shutil.rmtree(os.path.join(root, "src", "python", "trove.egg-info"), ignore_errors=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = subprocess.run([py, "-c", "import trove, torch; trove.save({'x': torch.ones(3)}, 'a.pt'); "
                          "print(trove.__file__); print(trove.load('a.pt')['x'].sum().item())"],
                         capture_output=True, text=True, cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    where, total = out.stdout.split()
    assert where.startswith(venv) and float(total) == 3.0


def test_load_gives_what_torch_loads_of_a_training_checkpoint(tmp_path):
    """numpy arrays and scalars as numpy arrays and scalars (issue #26: as torch.load gives them,
    a big-endian one in the byte order numpy unpickles it in, a Fortran one in Fortran order), Size as torch.Size, Namespace and defaultdict as
    themselves, other dict subclasses as dicts."""
    import argparse
    import realfiles
    ck = realfiles.training_checkpoint()
    paths = [str(tmp_path / "zip.ckpt"), str(tmp_path / "p2.ckpt"), str(tmp_path / "p5.ckpt")]
    torch.save(ck, paths[0])
    torch.save(ck, paths[1], _use_new_zipfile_serialization=False)
    torch.save(ck, paths[2], _use_new_zipfile_serialization=False, pickle_protocol=5)
    for path in paths:
        got = trove.load(path)
        want = torch.load(path)
        assert isinstance(got["shape"], torch.Size) and got["shape"] == want["shape"]
        assert isinstance(got["hparams"], argparse.Namespace) and vars(got["hparams"]) == vars(want["hparams"])
        assert isinstance(got["counts"], collections.defaultdict) and got["counts"].default_factory is list
        assert torch.equal(got["counts"]["x"], want["counts"]["x"])
        assert type(got["mine"]) is dict and torch.equal(got["mine"]["a"], want["mine"]["a"])
        assert isinstance(got["mine_ordered"], dict) and torch.equal(got["mine_ordered"]["b"], want["mine_ordered"]["b"])
        assert got["hyper_parameters"]["torch_version"] == str(torch.__version__)
        state, want_state = got["optimizer_states"][0]["state"][0], want["optimizer_states"][0]["state"][0]
        for key in ("np_moment", "np_big_endian", "np_fortran", "np_bool"):
            assert type(state[key]) is np.ndarray and state[key].dtype == want_state[key].dtype, key
            assert state[key].strides == want_state[key].strides, key
            assert state[key].tobytes("A") == want_state[key].tobytes("A"), key
        for key in ("np_scalar_int", "np_scalar_float", "np_scalar_half"):
            assert type(state[key]) is type(want_state[key]) and state[key] == want_state[key], key
        arrays = trove.load(path, framework="np")["optimizer_states"][0]["state"][0]
        assert isinstance(arrays["np_fortran"], np.ndarray) and np.array_equal(arrays["np_fortran"], want_state["np_fortran"])
    # An object of a class of the script's own: an inert record, and a warning naming its class.
    torch.save({"w": torch.ones(2), "config": realfiles.Config()}, paths[0])
    with pytest.warns(trove.UnknownObjectsWarning, match="realfiles.Config"):
        got = trove.load(paths[0])
    assert isinstance(got["config"], trove.Object) and got["config"].type_name == "realfiles.Config"
    assert torch.equal(got["config"].state["extra"], torch.arange(4.0))
    with pytest.raises(trove.RefusedError, match="refused global 'realfiles.Config'"):
        trove.load(paths[0], strict=True)


def test_save_keeps_a_size_a_size(tmp_path):
    path = str(tmp_path / "size.pt")
    trove.save({"w": torch.ones(2), "shape": torch.Size([2, 3]), "plain": (2, 3)}, path)
    back = torch.load(path)
    assert type(back["shape"]) is torch.Size and back["shape"] == torch.Size([2, 3])
    assert type(back["plain"]) is tuple
    with pytest.raises(trove.UnsupportedError, match="torch.Size"):
        trove.save({"w": torch.ones(2), "dims": torch.Size([2])}, str(tmp_path / "size.tdz"))
