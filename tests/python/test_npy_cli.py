"""numpy's .npy and .npz through every command and `import trove`, against numpy and torch
(docs/npy.md): the format plugged in by its driver alone (docs/architecture.md, "Adding a format")."""
import json
import os
import sys
import zipfile

import numpy as np
import pytest
import torch

from conftest import BIN_DIR  # noqa: F401  (the trove fixture runs it)

sys.path.insert(0, os.path.join(os.environ.get("TROVE_BUILD_DIR", "build"), "python"))
import trove as trove_module  # noqa: E402

CORPUS = os.environ.get("TROVE_CORPUS")


@pytest.fixture
def arrays():
    rng = np.random.default_rng(7)
    return {"w": rng.standard_normal((4, 3)).astype(np.float32), "ids": np.arange(10, dtype=np.int64),
            "obs/state": rng.integers(0, 255, (2, 5), dtype=np.uint8)}


def test_info_cat_verify_scan_of_npy_and_npz(trove, tmp_path, arrays):
    npy = tmp_path / "w.npy"
    np.save(npy, arrays["w"])
    r = trove("info", npy, "--json")
    assert r.code == 0, r
    j = json.loads(r.out)
    assert j["format"] == "npy" and [t["key"] for t in j["tensors"]] == ["array"]
    assert trove("cat", npy, "array", "--raw").out == arrays["w"].tobytes()
    for compressed in (False, True):
        npz = tmp_path / ("c.npz" if compressed else "s.npz")
        (np.savez_compressed if compressed else np.savez)(npz, **arrays)
        j = json.loads(trove("info", npz, "--json").out)
        assert j["format"] == "npz"
        assert sorted(t["key"] for t in j["tensors"]) == ["ids", "obs/state", "w"]
        assert trove("cat", npz, "obs/state", "--raw").out == arrays["obs/state"].tobytes()
        assert trove("verify", npz).code == 0
        # An .npz is a zip of arrays, not a polyglot: nothing to report.
        r = trove("scan", npz, "--json")
        assert r.code == 0 and json.loads(r.out)["files"][0]["findings"] == [], r.out
    assert trove("scan", npy).code == 0


def test_convert_both_ways_read_back_by_numpy_and_torch(trove, tmp_path, arrays):
    src = tmp_path / "a.npz"
    np.savez(src, **arrays)
    assert trove("convert", src, tmp_path / "a.safetensors").code == 0
    assert trove("convert", tmp_path / "a.safetensors", tmp_path / "b.npz").code == 0
    with np.load(tmp_path / "b.npz", allow_pickle=False) as back:
        assert sorted(back.files) == sorted(arrays)
        for k, a in arrays.items():
            assert back[k].dtype == a.dtype and np.array_equal(back[k], a), k
    with zipfile.ZipFile(tmp_path / "b.npz") as z:
        assert z.testzip() is None
    assert trove("convert", src, tmp_path / "a.pt").code == 0
    loaded = torch.load(tmp_path / "a.pt", weights_only=True)
    assert torch.equal(loaded["obs"]["state"], torch.from_numpy(arrays["obs/state"]))
    # One tensor to .npy; more is an error naming what the document holds, nothing written.
    torch.save({"only": torch.arange(6.0).reshape(2, 3)}, tmp_path / "one.pt")
    assert trove("convert", tmp_path / "one.pt", tmp_path / "one.npy").code == 0
    assert np.array_equal(np.load(tmp_path / "one.npy"), np.arange(6.0, dtype=np.float32).reshape(2, 3))
    r = trove("convert", src, tmp_path / "many.npy")
    assert r.code == 2 and not (tmp_path / "many.npy").exists(), r


def test_object_array_is_what_scan_flags(trove, tmp_path):
    path = tmp_path / "obj.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    r = trove("info", path)
    assert r.code == 2 and "object array" in r.errtext, r
    r = trove("scan", path)
    assert r.code == 1 and "allow_pickle=True" in r.text, r


def test_python_open_npz_zero_copy(tmp_path, arrays):
    src = tmp_path / "a.npz"
    np.savez(src, **arrays)
    with trove_module.open(src, framework="np") as f:
        assert sorted(f.keys()) == ["ids", "obs/state", "w"]
        w = f.get_tensor("w")
        assert np.array_equal(w, arrays["w"])


@pytest.mark.skipif(not CORPUS, reason="set TROVE_CORPUS to the corpus of real files to run this test")
def test_corpus_npy_files_through_the_command_line(trove, tmp_path):
    base = os.path.join(CORPUS, "npy")
    table = []
    for folder, _, names in sorted(os.walk(base)):
        for name in sorted(names):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, CORPUS)
            r = trove("info", path, "--json")
            if r.code == 2:
                assert "object array" in r.errtext, (rel, r)
                assert trove("scan", path).code == 1, rel
                table.append((rel, "refused: object array (numpy runs its pickle only with allow_pickle)"))
                continue
            assert r.code == 0, (rel, r)
            assert trove("verify", path).code == 0, rel
            out = tmp_path / (name + ".pt")
            r = trove("convert", path, out)
            assert r.code == 0, (rel, r)
            assert trove("diff", path, out).code == 0, rel
            if "torch before 2.3" in r.errtext:
                # uint16 (OLMo's token ids): a dtype this torch (1.13) does not have; the note
                # says so, and the tensors are checked equal by diff above.
                table.append((rel, "read, verified, converted to .pt (a dtype torch >= 2.3 loads)"))
                continue
            torch.load(out, weights_only=True)
            table.append((rel, "read, verified, converted to .pt, loaded by torch"))
    print("\n".join(f"{a}\t{b}" for a, b in table))
    assert len(table) == 14


def test_an_npz_with_other_members_is_told_by_member(trove, tmp_path):
    # numpy.load reads such archives (a member that is no .npy as its raw bytes); trove reads only
    # arrays, and says which member is not one instead of calling the file no checkpoint.
    import io
    buf = io.BytesIO()
    np.save(buf, np.arange(6, dtype="<f4"))
    odd = tmp_path / "odd.npz"
    with zipfile.ZipFile(odd, "w") as z:
        z.writestr("a.npy", buf.getvalue())
        z.writestr("readme.txt", "hi")
    assert sorted(np.load(odd).keys()) == ["a", "readme.txt"]
    for name in (odd, tmp_path / "odd.zip"):
        if name != odd:
            name.write_bytes(odd.read_bytes())
        r = trove("info", name)
        assert r.code == 2 and f"{name}: member 'readme.txt' is not an .npy array" in r.errtext, r
    empty = tmp_path / "empty.npz"
    zipfile.ZipFile(empty, "w").close()
    r = trove("info", empty)
    assert r.code == 2 and "an empty zip archive" in r.errtext, r
    # A zip with no .npy member and not named .npz is still told as a zip that is no checkpoint.
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("readme.txt", "hi")
    r = trove("info", other)
    assert r.code == 2 and "not a checkpoint" in r.errtext, r


def test_damage_found_while_converting_names_the_source(trove, tmp_path):
    # A compressed member is inflated only when the writer streams it: the error is the source's.
    src = tmp_path / "c.npz"
    np.savez_compressed(src, a=np.arange(100000, dtype=np.int32))
    data = bytearray(src.read_bytes())
    data[200:260] = b"\xff" * 60
    src.write_bytes(bytes(data))
    out = tmp_path / "out.safetensors"
    r = trove("convert", src, out)
    assert r.code == 2 and f"error: {src}: entry 'a.npy'" in r.errtext and "invalid deflate data" in r.errtext, r
    assert not out.exists()
    with pytest.raises(trove_module.CorruptError) as e:
        trove_module.load(str(src))
    assert e.value.file == str(src) and "a.npy" in str(e.value), e.value
