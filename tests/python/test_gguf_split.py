"""GGUF split models (llama.cpp's gguf-split: <name>-NNNNN-of-MMMMM.gguf, split.no from 0,
split.count, split.tensors.count; every metadata key in the first part, only split.* in the
others) read as one model from any part, and the errors of broken sets, each naming the part.
The parts are made by test_gguf.py's own writer."""
import numpy as np
import pytest

from test_gguf import tensor_of, write_gguf
from test_gguf_peer import compare_with_peer

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
