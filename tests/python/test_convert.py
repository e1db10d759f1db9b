"""Writing .pt and converting between formats, checked by the real peer: torch loads what we
write and finds the same objects; Python's zipfile and `unzip -t` accept the archives."""
import collections
import json
import math
import os
import subprocess
import zipfile

import pytest
import torch

import conftest
import ptfiles

CASES = [c for c in ptfiles.MAKERS]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("src"))
    return {name: maker(d) for name, maker in ptfiles.MAKERS.items()}


def same(a, b, path="root"):
    """Structural equality the way a user means it: types, dtypes, shapes, values (NaN == NaN)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert type(a) is type(b), (path, type(a), type(b))
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert a.requires_grad == b.requires_grad, path
        assert ptfiles.tensor_bytes(a) == ptfiles.tensor_bytes(b), path
    elif isinstance(a, dict):
        assert type(a) is type(b), (path, type(a), type(b))
        assert list(a.keys()) == list(b.keys()), path
        for k in a:
            same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}/{i}")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b and type(a) is type(b), (path, a, b)


def load(path):
    try:
        return torch.load(path, weights_only=True)
    except pickle_error():
        # torch 1.13's weights_only unpickler has no BINFLOAT: files with floats in their values
        # cannot load that way, whoever wrote them (checked below against torch's own file).
        return torch.load(path)


def pickle_error():
    import pickle
    return pickle.UnpicklingError


@pytest.mark.parametrize("case", CASES)
def test_pt_to_pt_loads_in_torch_with_equal_objects(trove, files, tmp_path, case):
    src, obj = files[case]
    out = tmp_path / "out.pt"
    r = trove("convert", src, out)
    assert r.code == 0, r
    # torch 1.13 predates the byteorder record: the big-endian source is only right in `obj`.
    same(obj if case == "big_endian" else torch.load(src), load(out))
    with zipfile.ZipFile(out) as z:
        assert z.testzip() is None
        names = z.namelist()
    assert names[0] == "out/data.pkl" and names[-2:] == ["out/version", "out/.data/serialization_id"]
    assert names[1:4] == ["out/.format_version", "out/.storage_alignment", "out/byteorder"]
    assert subprocess.run(["unzip", "-tqq", str(out)]).returncode == 0
    # weights_only=True loads ours exactly when it loads torch's own file.
    try:
        torch.load(src, weights_only=True)
        torch_ok = True
    except pickle_error():
        torch_ok = False
    if torch_ok:
        same(obj if case == "big_endian" else torch.load(src), torch.load(out, weights_only=True))


def test_data_pkl_is_byte_identical_to_torch(trove, files, tmp_path):
    for case in ("module", "views", "params", "bare", "dtypes", "keys"):
        src, _ = files[case]
        out = tmp_path / f"{case}.pt"
        assert trove("convert", src, out).code == 0
        with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
            prefix = a.namelist()[0].split("/")[0]
            assert b.read(f"{case}/data.pkl") == a.read(f"{prefix}/data.pkl"), case
            for name in a.namelist():
                if "/data/" in name:
                    assert b.read(name.replace(prefix + "/", case + "/")) == a.read(name), name


def test_views_stay_views(trove, files, tmp_path):
    out = tmp_path / "views.pt"
    assert trove("convert", files["views"][0], out).code == 0
    v = torch.load(out, weights_only=True)
    base_ptr = v["base"].storage().data_ptr()
    for k in ("t", "row", "step", "part", "col"):
        assert v[k].storage().data_ptr() == base_ptr, k
    with zipfile.ZipFile(out) as z:
        assert len([n for n in z.namelist() if "/data/" in n]) == 2  # base's storage and expand's


def test_every_record_is_64_byte_aligned(trove, files, tmp_path):
    out = tmp_path / "aligned.pt"
    assert trove("convert", files["dtypes"][0], out).code == 0
    data = out.read_bytes()
    with zipfile.ZipFile(out) as z:
        for info in z.infolist():
            n = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little")
            m = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
            assert (info.header_offset + 30 + n + m) % 64 == 0, info.filename


def _payload_offsets(path):
    """{CRC-32: (offset of the payload, local extra length)} of each tensor entry of a zip."""
    import struct
    data = path.read_bytes()
    found = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            n, m = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
            if "/data/" in info.filename or info.filename.endswith(".memmap"):
                found[info.CRC] = (info.header_offset + 30 + n + m, m)
    return found


def test_large_payloads_keep_their_page_offset(trove, tmp_path):
    # A payload of 1 MiB or more copied from a mapped source starts at the same offset within a
    # page as in the source (so the kernel copies whole pages), and one packed from a directory
    # (whose leaf files start a page) at a page; smaller ones get the minimal 64-byte padding.
    # torch, Python's zipfile and unzip read the results; trove diff finds them equal.
    import zlib
    src = tmp_path / "src.pt"
    g = torch.Generator().manual_seed(1)
    sd = collections.OrderedDict((f"w{i}", torch.rand(300_000 + 17 * i, generator=g)) for i in range(6))
    sd["small"] = torch.arange(10)
    torch.save(sd, src)
    small_crc = zlib.crc32(sd["small"].numpy().tobytes())
    source = _payload_offsets(src)
    # Output names differ in length from the source's, so their headers do too.
    pt, tdz, tree, packed = (tmp_path / "a_longer_name.pt", tmp_path / "another.tdz", tmp_path / "tree",
                             tmp_path / "packed_tree.tdz")
    assert trove("convert", src, pt).code == 0
    assert trove("convert", src, tdz).code == 0
    assert trove("convert", src, tree, "--to", "tensordict").code == 0
    assert trove("pack", tree, packed).code == 0
    got = torch.load(pt, weights_only=True)
    assert list(got) == list(sd) and all(torch.equal(got[k], sd[k]) for k in sd)
    for out, minimal_extra in ((pt, 4 + 63), (tdz, 4 + 63 + 20), (packed, 4 + 63 + 20)):
        for crc, (off, extra) in _payload_offsets(out).items():
            assert off % 64 == 0, out
            if crc == small_crc:
                assert extra <= minimal_extra, (out, extra)
            elif out == packed:
                assert off % 4096 == 0, (out, off)
            else:
                assert off % 4096 == source[crc][0] % 4096, (out, off, source[crc][0])
        with zipfile.ZipFile(out) as z:
            assert z.testzip() is None, out
        assert subprocess.run(["unzip", "-tq", str(out)], capture_output=True).returncode == 0, out
        assert trove("diff", src, out).code == 0, out


@pytest.mark.parametrize("fmt", ["tdz", "tensordict"])
@pytest.mark.parametrize("case", ["module", "dtypes", "views", "params", "bare", "list", "keys", "big_endian", "legacy", "optim"])
def test_round_trip_through_tensordict(trove, files, tmp_path, fmt, case):
    src, obj = files[case]
    mid = tmp_path / ("mid.tdz" if fmt == "tdz" else "mid")
    r = trove("convert", src, mid, "--to", fmt)
    if case == "bare":  # a tensordict is a mapping: a lone tensor has no key to live under
        assert r.code == 2 and "mapping" in r.errtext, r
        assert not mid.exists()
        return
    if case == "optim":  # a key named 'shape' would be lost in meta.json's own field: an error, not a loss
        assert r.code == 2 and "key 'shape'" in r.errtext, r
        assert not mid.exists()
        return
    assert r.code == 0, r
    back = tmp_path / "back.pt"
    r = trove("convert", mid, back)
    assert r.code == 0, r
    want = list(ptfiles.flatten(obj if case == "big_endian" else torch.load(src)))
    got = list(ptfiles.flatten(load(back)))
    assert [k for k, _ in got] == [k for k, _ in want]
    for (k, a), (_, b) in zip(want, got):
        assert a.dtype == b.dtype and a.shape == b.shape, k
        assert ptfiles.tensor_bytes(a) == ptfiles.tensor_bytes(b), k
    r = trove("diff", src, mid)
    assert r.code == 0, r


@pytest.mark.parametrize("fmt", ["tdz", "tensordict"])
def test_integers_beyond_64_bits_through_tensordict(trove, tmp_path, fmt):
    """JSON numbers have no size limit and Python's json reads them exactly: ints of any size are
    written as their digits, read back exactly (by Python's json and by trove), and torch.load of
    the converted-back file gives the same ints."""
    values = {"big": 2 ** 70, "neg": -(10 ** 40) - 1, "cfg": {"h": 3 ** 60, "edge": 2 ** 64, "small": -(2 ** 63)}}
    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(2), **values}, src)
    mid = tmp_path / ("mid.tdz" if fmt == "tdz" else "mid")
    r = trove("convert", src, mid, "--to", fmt)
    assert r.code == 0, r
    if fmt == "tensordict":
        assert json.loads((mid / "big" / "meta.json").read_text())["data"] == 2 ** 70
        assert json.loads((mid / "cfg" / "h" / "meta.json").read_text())["data"] == 3 ** 60
    else:
        with zipfile.ZipFile(mid) as z:
            assert json.loads(z.read("cfg/edge/meta.json"))["data"] == 2 ** 64
    back = tmp_path / "back.pt"
    assert trove("convert", mid, back).code == 0
    got = torch.load(back)
    assert {k: got[k] for k in values} == values
    assert trove("cat", mid, "neg").text.strip().endswith(str(-(10 ** 40) - 1))


def test_keys_and_dtype_options(trove, files, tmp_path):
    src, obj = files["module"]
    out = tmp_path / "sel.pt"
    assert trove("convert", src, out, "--keys", "conv.*", "--keys", "head.bias", "--dtype", "bfloat16").code == 0
    sd = torch.load(out, weights_only=True)
    assert list(sd.keys()) == ["conv.weight", "conv.bias", "head.bias"]
    for k, t in sd.items():
        assert t.dtype == torch.bfloat16
        assert torch.equal(t, obj[k].to(torch.bfloat16)), k


def test_diff(trove, files, tmp_path):
    src, obj = files["module"]
    r = trove("diff", src, src)
    assert r.code == 0 and "equal" in r.text
    changed = collections.OrderedDict((k, v.clone()) for k, v in obj.items())
    changed["head.weight"][0, 0] += 0.5
    del changed["norm.bias"]
    changed["extra"] = torch.ones(2)
    b = tmp_path / "b.pt"
    torch.save(changed, b)
    r = trove("diff", src, b, "--json")
    assert r.code == 1, r
    j = json.loads(r.out)
    assert j["only_in_a"] == ["norm.bias"] and j["only_in_b"] == ["extra"]
    t = {x["key"]: x for x in j["tensors"]}
    assert t["head.weight"]["identical"] is False
    assert t["head.weight"]["max_abs"] == pytest.approx(0.5)
    assert t["head.weight"]["elements_differing"] == 1
    assert t["conv.weight"]["identical"] is True
    r = trove("diff", src, b, "--atol", "0.6")
    assert r.code == 1  # keys still differ
    half = tmp_path / "half.pt"
    assert trove("convert", src, half, "--dtype", "float16").code == 0
    r = trove("diff", src, half, "--json")
    assert r.code == 1
    j = json.loads(r.out)
    # float32 against float16: compared by value across the dtypes (the cast's error), a difference.
    halves = [x for x in j["tensors"] if x["b"]["dtype"] == "float16"]
    assert halves and all(x["a"]["dtype"] == "float32" and x["comparable"] and x["dtype_changed"] for x in halves)


def test_failed_convert_leaves_nothing(trove, files, tmp_path):
    out = tmp_path / "out.pt"
    out.write_bytes(b"old contents")
    # A dangerous name read inert (--permissive) is never written back, even to .pt: the error
    # names it and the old file survives.
    evil = tmp_path / "evil.pt"
    from pickles import call, glob, pickle_of, s, torch_zip
    torch_zip(evil, pickle_of(call(glob("os", "system"), s("x"))))
    r = trove("convert", evil, out, "--permissive")
    assert r.code == 2 and "os.system" in r.errtext, r
    assert out.read_bytes() == b"old contents"
    assert sorted(os.listdir(tmp_path)) == ["evil.pt", "out.pt"]


def test_damaged_source_stays_detectable(trove, tmp_path):
    # convert copies a stored payload with the CRC-32 its source recorded, without reading it:
    # a source damaged after it was written gives outputs that `trove verify` still flags,
    # instead of outputs sealed under a fresh checksum. Undamaged entries verify.
    import struct
    src = tmp_path / "src.pt"
    torch.save({"w": torch.arange(1000, dtype=torch.float32), "b": torch.ones(3)}, src)
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    data = bytearray(src.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + 100] ^= 0xFF
    src.write_bytes(bytes(data))
    assert trove("verify", src).code == 1
    for out, entry in ((tmp_path / "out.pt", "out/data/0"), (tmp_path / "out.tdz", "w.memmap")):
        assert trove("convert", src, out).code == 0
        r = trove("verify", out)
        assert r.code == 1 and f"{entry} @" in r.text + r.errtext and "CRC-32 mismatch" in r.text + r.errtext, r
        assert "1 problem" in r.text + r.errtext, r
        with zipfile.ZipFile(out) as z:
            assert z.testzip() == entry


def _syncs_of(tmp_path, *args):
    """The fsync/syncfs calls `trove ARGS` makes, seen by strace (also in its helper thread)."""
    log = tmp_path / "strace.log"
    cmd = ["strace", "-f", "-qq", "-o", str(log), "-e", "trace=fsync,fdatasync,syncfs",
           os.path.join(conftest.BIN_DIR, "trove")] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True)
    assert p.returncode == 0, p
    calls = [line.split(None, 1)[1].split("(")[0] for line in log.read_text().splitlines() if "(" in line]
    log.unlink()
    return calls


def test_durability_new_replaced_and_sync(trove, files, tmp_path):
    # The default writes a new output as cp does (no fsync); replacing an existing output makes the
    # new contents durable first, so a power loss cannot cost the old ones; --sync always does.
    probe = subprocess.run(["strace", "-qq", "-o", os.devnull, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("strace cannot trace here: " + probe.stderr.decode(errors="replace"))
    src, obj = files["module"]
    for out, extra in ((tmp_path / "a.pt", []), (tmp_path / "a.tdz", []), (tmp_path / "a", ["--to", "tensordict"])):
        assert _syncs_of(tmp_path, "convert", src, out, *extra) == [], out
        replaced = _syncs_of(tmp_path, "convert", src, out, *extra)
        assert "fsync" in replaced or "syncfs" in replaced, (out, replaced)
        fresh = tmp_path / ("fresh" + out.suffix)
        synced = _syncs_of(tmp_path, "convert", "--sync", src, fresh, *extra)
        assert "fsync" in synced or "syncfs" in synced, (out, synced)
        if out.suffix == ".pt":
            same(obj, load(fresh))
        else:
            assert trove("diff", src, fresh).code == 0
    assert _syncs_of(tmp_path, "pack", tmp_path / "a", tmp_path / "p.tdz") == []
    assert "fsync" in _syncs_of(tmp_path, "pack", "--sync", tmp_path / "a", tmp_path / "q.tdz")
    assert _syncs_of(tmp_path, "unpack", tmp_path / "p.tdz", tmp_path / "u") == []
    assert "syncfs" in _syncs_of(tmp_path, "unpack", "--sync", tmp_path / "q.tdz", tmp_path / "v")
    assert "syncfs" in _syncs_of(tmp_path, "unpack", tmp_path / "q.tdz", tmp_path / "v")
    assert trove("diff", tmp_path / "u", tmp_path / "v").code == 0
