"""GGUF split models (llama.cpp's gguf-split: <name>-NNNNN-of-MMMMM.gguf, split.no from 0,
split.count, split.tensors.count; every metadata key in the first part, only split.* in the
others) read as one model from any part, and the errors of broken sets, each naming the part.
The parts are made by test_gguf.py's own writer."""
import numpy as np
import pytest

from test_gguf import tensor_of, write_gguf
from test_gguf_peer import compare_with_peer, peer

import trove as trovelib

KVS = [("general.architecture", 8, "llama"), ("llama.block_count", 4, 3), ("general.name", 8, "tiny")]


def split_keys(no, count, tensors):
    return [("split.no", 2, no), ("split.count", 2, count), ("split.tensors.count", 5, tensors)]


def make_set(tmp_path, name="m", count=3, arch=None, tensors_count=None, extra=None):
    """count parts of one tensor each (w0, w1, ...); returns the paths and the arrays."""
    rng = np.random.default_rng(27)
    arrays = {f"w{i}": rng.standard_normal((2, 3 + i)).astype("f4") for i in range(count)}
    paths = []
    for i in range(count):
        kvs = (KVS if i == 0 else []) + split_keys(i, count, count if tensors_count is None else tensors_count)
        if arch and i == count - 1:
            kvs = [("general.architecture", 8, arch)] + kvs
        tensors = [tensor_of(f"w{i}", arrays[f"w{i}"])] + (extra if extra and i == count - 1 else [])
        path = tmp_path / f"{name}-{i + 1:05d}-of-{count:05d}.gguf"
        path.write_bytes(write_gguf(kvs, tensors))
        paths.append(path)
    return paths, arrays


def test_any_part_reads_the_whole_model(tmp_path, trove):
    paths, arrays = make_set(tmp_path)
    for path in paths:
        with trovelib.open(path) as f:
            assert sorted(f.keys()) == sorted(arrays)
            for k, a in arrays.items():
                np.testing.assert_array_equal(f[k], a)
            props = f.info()["properties"]
            assert props["split"] == "3 parts, m-00001-of-00003.gguf to m-00003-of-00003.gguf"
            assert props["architecture"] == "llama" and props["tensors"] == 3
    for command in ("info", "verify", "scan"):
        r = trove(command, paths[1])
        assert r.code == 0, (command, r)
    assert "w2" in trove("info", paths[0]).text
    # convert: one file, every tensor, the first part's metadata without split.*
    out = tmp_path / "merged.gguf"
    r = trove("convert", paths[2], out)
    assert r.code == 0, r
    with trovelib.open(out) as f:
        meta = f.gguf_metadata()
        assert list(meta) == ["general.architecture", "llama.block_count", "general.name"], meta
        for k, a in arrays.items():
            np.testing.assert_array_equal(f[k], a)
    compare_with_peer(out)
    st = tmp_path / "merged.safetensors"
    assert trove("convert", paths[0], st).code == 0
    with trovelib.open(st) as f:
        assert sorted(f.keys()) == sorted(arrays)


def test_editing_a_part_edits_that_part(tmp_path, trove):
    paths, arrays = make_set(tmp_path)
    other = paths[2].read_bytes()
    r = trove("gguf", "set", paths[0], "general.name", "renamed")
    assert r.code == 0, r
    assert paths[2].read_bytes() == other
    with trovelib.open(paths[0]) as f:
        assert f.gguf_metadata()["split.count"] == ("u16", 3) and f.info()["properties"]["general.name"] == "renamed"
        assert sorted(f.keys()) == sorted(arrays)


def refused(path, code, *says):
    with pytest.raises(trovelib.Error) as e:
        trovelib.open(path)
    assert e.value.code == code, e.value
    for s in says:
        assert s in str(e.value), (s, str(e.value))


def test_broken_sets_are_errors_naming_the_part(tmp_path):
    d = tmp_path / "missing"
    d.mkdir()
    paths, _ = make_set(d)
    paths[1].unlink()
    refused(paths[0], "not-found", "m-00002-of-00003.gguf", "part 2 of 3", "missing")

    d = tmp_path / "count"
    d.mkdir()
    paths, _ = make_set(d)
    paths[2].write_bytes(write_gguf(split_keys(2, 4, 3), [tensor_of("w2", np.ones(2, "f4"))]))
    refused(paths[0], "corrupt", "m-00003-of-00003.gguf", "split.count 4")

    d = tmp_path / "dup"
    d.mkdir()
    paths, _ = make_set(d, extra=[tensor_of("w0", np.ones(2, "f4"))], tensors_count=4)
    refused(paths[1], "corrupt", "m-00003-of-00003.gguf", "tensor 'w0' is also in m-00001-of-00003.gguf")

    d = tmp_path / "models"
    d.mkdir()
    paths, _ = make_set(d, arch="falcon")
    refused(paths[0], "corrupt", "m-00003-of-00003.gguf", "'falcon'", "parts of different models")

    d = tmp_path / "total"
    d.mkdir()
    paths, _ = make_set(d, tensors_count=5)
    refused(paths[0], "corrupt", "3 tensors", "split.tensors.count says 5")

    d = tmp_path / "renamed"
    d.mkdir()
    paths, _ = make_set(d)
    renamed = d / "model.gguf"
    paths[1].rename(renamed)
    refused(renamed, "corrupt", "part 2 of a model split in 3", "00002-of-00003.gguf")


def test_convert_writes_llama_style_parts(tmp_path, trove):
    from test_gguf import read_gguf
    rng = np.random.default_rng(5)
    arrays = {f"t{i}": rng.standard_normal((4, 256)).astype("f4") for i in range(5)}  # 4,096 bytes each
    src = tmp_path / "src.gguf"
    src.write_bytes(write_gguf(KVS, [tensor_of(k, a) for k, a in arrays.items()]))
    # Into the working directory: the parts go in beside what is there, which stays (files written
    # into a directory never replace it, unlike a tree).
    r = trove("convert", "src.gguf", "out.gguf", "--max-shard-size", "10KB", cwd=tmp_path)
    assert r.code == 0, r
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out-00001-of-00003.gguf", "out-00002-of-00003.gguf",
                                                          "out-00003-of-00003.gguf", "src.gguf"]
    for p in tmp_path.glob("out-*.gguf"):
        p.unlink()
    # Relative, beside the name in a directory below it.
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "README").write_text("kept")
    r = trove("convert", "src.gguf", "parts/out.gguf", "--max-shard-size", "10KB", cwd=tmp_path)
    assert r.code == 0, r
    names = sorted(p.name for p in (tmp_path / "parts").iterdir())
    assert names == ["README", "out-00001-of-00003.gguf", "out-00002-of-00003.gguf", "out-00003-of-00003.gguf"], names
    source_kv = read_gguf(src.read_bytes())["kv"]
    held = []
    for i in range(3):
        part = tmp_path / "parts" / f"out-{i + 1:05d}-of-00003.gguf"
        g = read_gguf(part.read_bytes())
        splits = {"split.no": (2, i), "split.count": (2, 3), "split.tensors.count": (5, 5)}
        # The model's metadata in the first part only, then split.* (gguf-split's order and types).
        assert list(g["kv"].items()) == (list(source_kv.items()) if i == 0 else []) + list(splits.items()), (i, g["kv"])
        held.append([t[0] for t in g["tensors"]])
        [view] = peer(part)  # the independent reader reads each part as this test's reader does
        assert [(e["key"], e["type"]) for e in view["metadata"]] == [(k, t) for k, (t, _) in g["kv"].items()], view
        assert [(t["name"], int(t["offset"])) for t in view["tensors"]] == [(t[0], t[3]) for t in g["tensors"]]
    assert held == [["t0", "t1"], ["t2", "t3"], ["t4"]], held
    with trovelib.open(tmp_path / "parts" / "out-00002-of-00003.gguf") as f:
        assert list(f.keys()) == list(arrays)
        for k, a in arrays.items():
            np.testing.assert_array_equal(f[k], a)
    assert trove("verify", tmp_path / "parts" / "out-00003-of-00003.gguf").code == 0

    # A tensor larger than the maximum has a part of its own; safetensors -> split GGUF.
    import torch
    torch.save({"big": torch.ones(4096), "small": torch.ones(4)}, tmp_path / "a.pt")
    r = trove("convert", tmp_path / "a.pt", tmp_path / "sub" / "m.gguf", "--max-shard-size", "1KB",
              "--metadata", "general.architecture=tiny")
    assert r.code == 0, r
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]
    with trovelib.open(tmp_path / "sub" / "m-00001-of-00002.gguf") as f:
        assert sorted(f.keys()) == ["big", "small"]
        assert f.info()["properties"]["architecture"] == "tiny"


def test_python_convert_writes_parts(tmp_path):
    src = tmp_path / "src.gguf"
    src.write_bytes(write_gguf(KVS, [tensor_of(f"t{i}", np.ones(1024, "f4")) for i in range(3)]))
    trovelib.convert(src, tmp_path / "py" / "m.gguf", max_shard_size="5KB")
    assert sorted(p.name for p in (tmp_path / "py").iterdir()) == [f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def test_parts_are_opened_by_the_rule_for_files_a_file_names(tmp_path):
    """The other parts are named by split.count, not by the user: a part that is a link out of
    the directory, or a FIFO, is refused by name and never opened (no read, no wait)."""
    import os

    d = tmp_path / "models"
    d.mkdir()
    paths, _ = make_set(d, count=2)
    outside = tmp_path / "elsewhere.gguf"
    paths[1].rename(outside)
    os.symlink(outside, paths[1])
    refused(paths[0], "refused", "m-00002-of-00002.gguf", "out of its directory")

    paths[1].unlink()
    os.mkfifo(paths[1])
    refused(paths[0], "refused", "m-00002-of-00002.gguf", "FIFO")
