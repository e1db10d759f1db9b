"""torch.distributed.checkpoint (DCP) directories read as one checkpoint (docs/dcp.md), against
the real writer: torch 1.13's save_state_dict makes every checkpoint (dcp_writer.py, in a process
of its own), in one process and over 2 gloo ranks with ShardedTensors split along dim 0 and 1;
torch >= 2.0's naming is the same file with its module names rewritten. Every global tensor trove
gives (convert to .safetensors and .pt, cat, diff, Python) must equal what was saved; hostile and
broken directories get clear errors."""
import glob
import os
import pickletools
import shutil
import struct
import subprocess
import sys

import pytest
import torch

import safetensors_spec
from conftest import run_tool
from hostile import peak_rss

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")

ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64", torch.float16: "F16",
             torch.bool: "BOOL", torch.float64: "F64", torch.uint8: "U8", torch.int32: "I32", torch.int16: "I16"}


def make(kind, out):
    subprocess.run([sys.executable, os.path.join(HERE, "dcp_writer.py"), kind, str(out)], check=True, timeout=300,
                   env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"))
    return torch.load(str(out) + ".expected.pt")


def edit(action, out):
    subprocess.run([sys.executable, os.path.join(HERE, "dcp_writer.py"), "edit", action, str(out)], check=True,
                   timeout=300)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    d = tmp_path_factory.mktemp("dcp") / "plain"
    return d, make("plain", d)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    d = tmp_path_factory.mktemp("dcp") / "sharded"
    return d, make("sharded", d)


@pytest.mark.parametrize("kind", ["plain-per-rank", "sharded-per-rank"])
def test_one_file_per_rank_holds_its_items_back_to_back(trove, tmp_path, kind):
    d = tmp_path / kind
    expected = make(kind, d)
    files = sorted(p.name for p in d.glob("*.distcp"))
    assert files == (["__0_0.distcp"] if kind.startswith("plain") else ["__0_0.distcp", "__1_0.distcp"])
    convert_and_compare(trove, d, expected, tmp_path)
    r = trove("verify", d)
    assert r.code == 0, r


def rewrite_strings(data, mapping):
    """The pickle with its str operands replaced per `mapping` (FRAMEs dropped: they are optional)."""
    ops = list(pickletools.genops(data))
    out = bytearray()
    for i, (op, arg, pos) in enumerate(ops):
        end = ops[i + 1][2] if i + 1 < len(ops) else len(data)
        if op.name == "FRAME":
            continue
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE") and arg in mapping:
            new = mapping[arg].encode()
            out += (b"\x8c" + bytes([len(new)]) if len(new) < 256 else b"X" + struct.pack("<I", len(new))) + new
            continue
        out += data[pos:end]
    return bytes(out)


def copy_with_metadata(src, dst, mapping):
    shutil.copytree(src, dst)
    meta = os.path.join(dst, ".metadata")
    with open(meta, "rb") as f:
        data = f.read()
    with open(meta, "wb") as f:
        f.write(rewrite_strings(data, mapping))
    return dst


TORCH2_NAMES = {
    "torch.distributed._shard.checkpoint.metadata": "torch.distributed.checkpoint.metadata",
    "torch.distributed._shard.checkpoint.filesystem": "torch.distributed.checkpoint.filesystem",
    "torch.distributed._shard.sharded_tensor.metadata": "torch.distributed.checkpoint.metadata",
    "MEM_FORMAT_ENCODING": "_MEM_FORMAT_ENCODING",
}


def raw_bytes(t):
    t = t.contiguous()
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()


def read_pt(path):
    return torch.load(str(path))


def assert_same(got, expected):
    assert set(got) == set(expected)
    for k, v in expected.items():
        assert got[k].dtype == v.dtype, k
        assert tuple(got[k].shape) == tuple(v.shape), k
        assert torch.equal(got[k], v), k


def convert_and_compare(trove, d, expected, tmp_path):
    out = tmp_path / "out.pt"
    r = trove("convert", d, out)
    assert r.code == 0, r
    got = read_pt(out)
    assert_same({k: v for k, v in got.items() if isinstance(v, torch.Tensor)}, expected)
    st = tmp_path / "out.safetensors"
    r = trove("convert", d, st, "--drop-values")
    assert r.code == 0, r
    tensors, _ = safetensors_spec.read(st.read_bytes())
    assert set(tensors) == set(expected)
    for k, v in expected.items():
        dtype, shape, raw = tensors[k]
        assert dtype == ST_DTYPES[v.dtype] and list(shape) == list(v.shape), k
        assert raw == raw_bytes(v), k


def test_plain_checkpoint_converts_to_the_saved_tensors(trove, plain, tmp_path):
    d, expected = plain
    convert_and_compare(trove, d, expected, tmp_path)
    got = read_pt(tmp_path / "out.pt")
    assert got["step"] == 7
    assert got["config"] == {"lr": 0.1, "betas": (0.9, 0.999), "name": "adam"}


def test_sharded_checkpoint_assembles_the_global_tensors(trove, sharded, tmp_path):
    d, expected = sharded
    assert len(glob.glob(os.path.join(d, "__1_*.distcp"))) > 0  # both ranks wrote
    convert_and_compare(trove, d, expected, tmp_path)
    r = trove("info", d)
    assert r.code == 0, r
    assert "dcp" in r.text and "rows" in r.text


def test_torch2_module_names_read_alike(trove, plain, sharded, tmp_path):
    for i, (d, expected) in enumerate((plain, sharded)):
        renamed = copy_with_metadata(d, tmp_path / f"renamed{i}", TORCH2_NAMES)
        data = (renamed / ".metadata").read_bytes()
        assert b"_shard" not in data and b"torch.distributed.checkpoint.metadata" in data
        (tmp_path / f"c{i}").mkdir()
        convert_and_compare(trove, renamed, expected, tmp_path / f"c{i}")


def test_metadata_file_itself_and_cat_and_diff(trove, sharded, tmp_path):
    d, expected = sharded
    r = trove("info", d / ".metadata")
    assert r.code == 0, r
    # A safetensors file made from the same tensors diffs equal.
    st = tmp_path / "same.safetensors"
    st.write_bytes(safetensors_spec.write({k: (ST_DTYPES[v.dtype], list(v.shape), raw_bytes(v))
                                           for k, v in expected.items()}))
    r = trove("diff", d, st)
    assert r.code == 0, r
    r = trove("cat", d, "cols")
    assert r.code == 0, r
    assert repr(8 / 7) in r.text  # cols[0][8], from rank 1's shard
    r = trove("verify", d)
    assert r.code == 0, r


def test_python_open_reads_the_global_tensors(plain, sharded):
    if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
        pytest.skip("the Python module was not built")
    sys.path.insert(0, PYDIR)
    import trove as trove_module
    for d, expected in (plain, sharded):
        with trove_module.open(str(d), framework="pt") as f:
            for k, v in expected.items():
                assert torch.equal(f[k], v), k


def test_convert_holds_one_assembled_tensor_at_a_time(tmp_path):
    """Four 16 MiB tensors, each of two chunks: converting them holds about one (the assembled
    buffer, a chunk, a window: about 33 MiB), not the 64 MiB of the checkpoint, whichever the writer."""
    d = tmp_path / "big"
    expected = make("big", d)
    code, _, _, baseline = peak_rss("info", d)  # a fresh small process, as the converts
    assert code == 0
    largest = 16 << 20
    for out in ("out.safetensors", "out.pt"):
        code, _, _, peak = peak_rss("convert", d, tmp_path / out)
        assert code == 0
        assert peak - baseline < 3 * largest, (out, peak, baseline)  # 64 MiB and more when pages stay
    got = torch.load(str(tmp_path / "out.pt"))
    assert_same(got, expected)


# Hostile and broken directories.

def refused(trove, d, *words):
    r = run_tool("trove", "info", d, limit=True)
    assert r.code != 0, r
    text = r.errtext
    for w in words:
        assert w in text, (w, text)
    return text


def test_code_in_metadata_is_refused_by_name(trove, plain, tmp_path):
    class Boom:
        def __reduce__(self):
            return (os.system, ("true",))
    d = tmp_path / "evil"
    shutil.copytree(plain[0], d)
    import pickle
    (d / ".metadata").write_bytes(pickle.dumps(Boom(), protocol=4))
    refused(trove, d, "refused global", "system")
    r = trove("scan", d)
    assert "system" in r.text


def test_code_in_an_object_item_is_found_by_scan_and_refused_by_reads(trove, tmp_path):
    d = tmp_path / "evil_object"
    make("evil_object", d)
    r = trove("scan", d)
    assert r.code == 1 and "system" in r.text and ".distcp@0/" in r.text, r
    refused(trove, d, "evil", "system")


def test_getattr_other_than_an_enum_member_is_refused(trove, plain, tmp_path):
    d = copy_with_metadata(plain[0], tmp_path / "ga", {"TORCH_CONTIGUOUS_FORMAT": "__class__"})
    refused(trove, d, "builtins.getattr")


def test_chunk_path_outside_the_directory_is_refused(trove, plain, tmp_path):
    d = copy_with_metadata(plain[0], tmp_path / "out", {"__0_0.distcp": "../__0_0.distcp"})
    refused(trove, d, "..")


def test_chunk_path_through_a_symlink_is_refused(trove, plain, tmp_path):
    d = tmp_path / "link"
    shutil.copytree(plain[0], d)
    os.rename(d / "__0_0.distcp", tmp_path / "elsewhere.distcp")
    os.symlink(tmp_path / "elsewhere.distcp", d / "__0_0.distcp")
    refused(trove, d, "__0_0.distcp")


def test_byte_range_past_the_end(trove, sharded, tmp_path):
    d = tmp_path / "short"
    shutil.copytree(sharded[0], d)
    with open(d / "__1_0.distcp", "r+b") as f:
        f.truncate(100)
    refused(trove, d, "past the end", "__1_0.distcp")


@pytest.mark.parametrize("action,words", [("hole", ["hole"]), ("overlap", ["overlaps"]),
                                          ("many", ["kMaxDcpChunks"]), ("huge", ["cannot hold"])])
def test_broken_tiling_and_too_many_chunks(trove, sharded, tmp_path, action, words):
    d = tmp_path / action
    shutil.copytree(sharded[0], d)
    edit(action, d)
    refused(trove, d, *words)


def test_disagreeing_inner_archive_fails_verify(trove, sharded, tmp_path):
    d = tmp_path / "swap"
    shutil.copytree(sharded[0], d)
    # rows' and cols' chunks are float32 and float64 archives: swap two files of the same rank.
    names = sorted(p.name for p in d.glob("__0_*.distcp"))
    a, b = d / names[0], d / names[1]
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    r = trove("verify", d)
    assert r.code != 0, r


def test_metadata_seeds_for_the_fuzzer(plain, sharded, tmp_path):
    """The fuzz target's seeds (fuzz/dcp_metadata_fuzz.cpp) are these real files: with
    TROVE_DCP_FUZZ_SEEDS=<dir> they are written there, both namings."""
    seeds = os.environ.get("TROVE_DCP_FUZZ_SEEDS")
    files = {}
    for name, (d, _) in (("plain", plain), ("sharded", sharded)):
        data = (d / ".metadata").read_bytes()
        files[name + ".metadata"] = data
        files[name + "_torch2.metadata"] = rewrite_strings(data, TORCH2_NAMES)
    assert all(f.startswith(b"\x80") for f in files.values())
    if seeds:
        os.makedirs(seeds, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(seeds, name), "wb") as f:
                f.write(data)


def test_info_reads_no_chunk_of_an_assembled_tensor(trove, sharded, tmp_path):
    """A sharded tensor's archives are read when its bytes are: info of a damaged one succeeds,
    cat of it and verify name the chunk."""
    d = tmp_path / "damaged"
    shutil.copytree(sharded[0], d)
    for p in d.glob("__1_*.distcp"):
        p.write_bytes(b"\0" * p.stat().st_size)  # every rank-1 chunk: its length kept, its archive gone
    r = trove("info", d)
    assert r.code == 0, r
    assert "rows" in r.text
    r = trove("cat", d, "rows")
    assert r.code == 2 and "chunk at (4, 0)" in r.errtext, r
    r = trove("verify", d)
    assert r.code == 1 and "__1_" in r.text, r


def test_a_slice_reads_only_the_chunks_its_rows_lie_in(trove, sharded, tmp_path):
    """`cat DIR 'KEY[rows]'` of a tensor chunked along dim 0 reads only the chunks those rows lie
    in: with rank 1's archives gone, rank 0's rows (any slice of them, strided too) still print,
    equal to torch's slicing; rows reaching rank 1's chunk, and the whole tensor, name it."""
    import json
    d = tmp_path / "damaged"
    shutil.copytree(sharded[0], d)
    for p in d.glob("__1_*.distcp"):
        p.write_bytes(b"\0" * p.stat().st_size)
    rows = sharded[1]["rows"]
    for item, expected in (("0:2", rows[0:2]), ("1:4:2, 1:4", rows[1:4:2, 1:4]), ("3", rows[3]), (":4, -1", rows[:4, -1])):
        r = trove("cat", d, f"rows[{item}]", "--json")
        assert r.code == 0, (item, r)
        assert json.loads(r.out)["data"] == expected.tolist(), item
    for key in ("rows[3:5]", "rows"):
        r = trove("cat", d, key)
        assert r.code == 2 and "chunk at (4, 0)" in r.errtext, (key, r)


def test_chunks_along_dim_0_convert_as_their_archives_bytes(trove, sharded, tmp_path):
    """A tensor whose chunks are cut along dim 0 is written as its chunks' stored bytes, one after
    another: every output format holds exactly torch's tensor (cut along dim 1: assembled, the same)."""
    d, expected = sharded
    for name in ("out.safetensors", "out.npy"):
        out = tmp_path / name
        r = trove("convert", d, out, "--keys", "rows")
        assert r.code == 0, r
        if name.endswith(".npy"):
            import numpy
            assert numpy.array_equal(numpy.load(out), expected["rows"].numpy())
        else:
            tensors, _ = safetensors_spec.read(out.read_bytes())
            assert tensors["rows"][2] == raw_bytes(expected["rows"])
    td = tmp_path / "out.td"
    r = trove("convert", d, td, "--to", "tensordict", "--keys", "rows")
    assert r.code == 0, r
    r = trove("diff", d, td, "--keys", "rows")
    assert r.code == 0, r


def test_python_get_slice_reads_only_the_chunks_its_rows_lie_in(sharded, tmp_path):
    """get_slice(key)[rows] reads only the chunks its rows lie in: rank 1's files truncated after
    the open, rank 0's rows equal torch's slicing; rows reaching rank 1's chunk name its file."""
    if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
        pytest.skip("the Python module was not built")
    sys.path.insert(0, PYDIR)
    import trove as trove_module
    d = tmp_path / "ckpt"
    shutil.copytree(sharded[0], d)
    rows = sharded[1]["rows"]
    with trove_module.open(str(d), framework="pt") as f:
        for p in d.glob("__1_*.distcp"):
            os.truncate(p, 0)
        s = f.get_slice("rows")
        for index in (slice(0, 2), (slice(1, 4), slice(None, None, 2)), 3, (slice(None, 4), -1)):
            assert torch.equal(s[index], rows[index]), index
        with pytest.raises(trove_module.Error) as e:
            s[3:6]
        assert "__1_" in str(e.value), e.value
