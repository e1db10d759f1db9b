"""FSDP / verl per-rank checkpoint files read as one checkpoint (docs/fsdp.md), against the real
writer where there is one: torch 1.13's ShardedTensors saved by 2 gloo ranks with plain torch.save
(fsdp_writer.py, in a process of its own), split along dim 0, 1 and 2 with odd sizes; DTensor
files (torch >= 2 only) are their pickles as torch writes them, made by fsdp_writer.py under
DTensor's module paths. Every global tensor trove gives (convert to .safetensors and .pt, cat,
diff, Python) must equal what was saved; hostile and broken directories get clear errors."""
import glob
import os
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib

import pytest
import torch

import safetensors_spec
from conftest import run_tool

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")

ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64", torch.float16: "F16",
             torch.bool: "BOOL", torch.float64: "F64", torch.uint8: "U8", torch.int32: "I32", torch.int16: "I16"}


def make(kind, out, *extra):
    subprocess.run([sys.executable, os.path.join(HERE, "fsdp_writer.py"), kind, str(out), *extra], check=True,
                   timeout=300, env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"))
    return torch.load(str(out).rstrip("/") + ".expected.pt")


def raw_bytes(t):
    t = t.contiguous()
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()


def safetensors_of(expected):
    return safetensors_spec.write({k: (ST_DTYPES[v.dtype], list(v.shape), raw_bytes(v)) for k, v in expected.items()})


def convert_and_compare(trove, d, expected, tmp_path, values=None):
    st = tmp_path / "out.safetensors"
    r = trove("convert", d, st, "--drop-values")
    assert r.code == 0, r
    tensors, _ = safetensors_spec.read(st.read_bytes())
    assert set(tensors) == set(expected)
    for k, v in expected.items():
        dtype, shape, raw = tensors[k]
        assert dtype == ST_DTYPES[v.dtype] and list(shape) == list(v.shape), k
        assert raw == raw_bytes(v), k
    out = tmp_path / "out.pt"
    r = trove("convert", d, out)
    assert r.code == 0, r
    got = torch.load(str(out))
    for k, v in expected.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
    for k, v in (values or {}).items():
        assert got[k] == v, k
    # A safetensors of the saved tensors diffs equal, both ways (values such as `step` aside:
    # safetensors holds none), and verify and scan pass.
    same = tmp_path / "same.safetensors"
    same.write_bytes(safetensors_of(expected))
    n = len(expected)
    for a, b in ((d, same), (same, d)):
        r = trove("diff", a, b)
        assert f"{n} common tensors ({n} identical)" in r.text, r
        assert r.code == (1 if values else 0) and "only in" not in r.text, r
    r = trove("verify", d)
    assert r.code == 0, r
    r = trove("scan", d)
    assert r.code == 0, r


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    d = tmp_path_factory.mktemp("fsdp") / "sharded"
    return d, make("sharded", d)


@pytest.fixture(scope="module")
def dtensor(tmp_path_factory):
    d = tmp_path_factory.mktemp("fsdp") / "dtensor"
    return d, make("dtensor", d)


def test_sharded_tensor_ranks_consolidate_to_the_saved_tensors(trove, sharded, tmp_path):
    d, expected = sharded
    assert sorted(p.name for p in d.iterdir()) == ["model_rank0.pt", "model_rank1.pt"]
    convert_and_compare(trove, d, expected, tmp_path, {"step": 7})
    r = trove("info", d)
    assert r.code == 0, r
    assert "fsdp" in r.text and "rows" in r.text and "world_size" in r.text, r


@pytest.mark.parametrize("pattern", ["rank_{r}.pt", "model_world_size_2_rank_{r}.pt"])
def test_other_namings_read_alike(trove, tmp_path, pattern):
    d = tmp_path / "named"
    expected = make("sharded", d, pattern)
    assert sorted(p.name for p in d.iterdir()) == sorted(pattern.format(r=r) for r in range(2))
    tensors = tmp_path / "c"
    tensors.mkdir()
    convert_and_compare(trove, d, expected, tensors, {"step": 7})


def test_cat_assembles_from_both_ranks(trove, sharded):
    d, expected = sharded
    r = trove("cat", d, "cols")
    assert r.code == 0, r
    assert repr(8 / 7) in r.text  # cols[0][8], from rank 1's shard
    r = trove("cat", d, "rows[5]")
    assert r.code == 0, r
    assert "25.0" in r.text and "29.0" in r.text  # rows[5], rank 1's


def test_python_open_reads_the_global_tensors(sharded, dtensor):
    if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
        pytest.skip("the Python module was not built")
    sys.path.insert(0, PYDIR)
    import trove as trove_module
    for d, expected in (sharded, dtensor):
        with trove_module.open(str(d), framework="pt") as f:
            for k, v in expected.items():
                assert torch.equal(f[k], v), k


def test_dtensor_ranks_consolidate(trove, dtensor, tmp_path):
    d, expected = dtensor
    convert_and_compare(trove, d, expected, tmp_path, {"step": 12})


@pytest.mark.parametrize("variant", ["dtensor-slots", "dtensor-old"])
def test_dtensor_state_with_slots_and_older_module_paths(trove, tmp_path, variant):
    d = tmp_path / variant
    expected = make(variant, d)
    data = b"".join(zipfile.ZipFile(p).read(n) for p in d.iterdir() for n in zipfile.ZipFile(p).namelist()
                    if n.endswith("data.pkl"))
    assert (b"torch.distributed._tensor.api" in data) == (variant == "dtensor-old")
    convert_and_compare(trove, d, expected, tmp_path, {"step": 12})


# Hostile and broken directories.

def refused(d, *words, command="info"):
    r = run_tool("trove", command, d, limit=True)
    assert r.code != 0, r
    text = r.errtext + r.text
    for w in words:
        assert w in text, (w, text)
    return text


def patch_pickle(path, old, new, count=-1):
    """Rewrites bytes of a rank file's data.pkl in place (same length) and its CRCs."""
    assert len(old) == len(new)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
    assert info.compress_type == zipfile.ZIP_STORED
    at = info.header_offset
    name_len, extra_len = struct.unpack("<HH", data[at + 26:at + 30])
    start = at + 30 + name_len + extra_len
    pkl = bytes(data[start:start + info.compress_size])
    assert old in pkl
    pkl = pkl.replace(old, new, count)
    data[start:start + len(pkl)] = pkl
    crc = struct.pack("<I", zlib.crc32(pkl))
    if data[at + 14:at + 18] != b"\0\0\0\0":  # torch's writer leaves it 0 and writes a data descriptor
        data[at + 14:at + 18] = crc
    cd = data.find(b"PK\x01\x02")
    while cd >= 0:
        n = struct.unpack("<H", data[cd + 28:cd + 30])[0]
        if data[cd + 46:cd + 46 + n] == info.filename.encode():
            data[cd + 16:cd + 20] = crc
        cd = data.find(b"PK\x01\x02", cd + 4)
    if info.flag_bits & 8 and data[start + len(pkl):start + len(pkl) + 4] == b"PK\x07\x08":
        data[start + len(pkl) + 4:start + len(pkl) + 8] = crc
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None


def copy(src, tmp_path, name):
    d = tmp_path / name
    shutil.copytree(src, d)
    return d


def test_code_in_a_rank_file_is_refused_by_name(trove, tmp_path):
    d = tmp_path / "evil"
    make("evil", d)
    refused(d, "refused", "system", "model_rank1.pt")
    r = trove("scan", d)
    assert r.code == 1 and "system" in r.text and "model_rank1.pt" in r.text, r


def test_overlapping_shards(trove, sharded, tmp_path):
    d = copy(sharded[0], tmp_path, "overlap")
    # rank 1's rows shard starts at row 3 instead of 4: into rank 0's rows (and row 6 left out).
    patch_pickle(d / "model_rank1.pt", b"K\x04K\x00e", b"K\x03K\x00e", 1)
    refused(d, "'rows'", "overlaps")


def test_shards_leaving_a_hole(trove, sharded, tmp_path):
    d = copy(sharded[0], tmp_path, "hole")
    for r in range(2):  # both ranks say rows is (8, 5): nobody holds row 7
        patch_pickle(d / f"model_rank{r}.pt", b"K\x07K\x05\x86", b"K\x08K\x05\x86")
    refused(d, "'rows'", "hole", "(7, 0)")


def test_ranks_disagreeing_on_a_global_shape(trove, sharded, tmp_path):
    d = copy(sharded[0], tmp_path, "disagree")
    patch_pickle(d / "model_rank1.pt", b"K\x07K\x05\x86", b"K\x08K\x05\x86")
    refused(d, "'rows'", "rank 0 says float32 (7, 5), rank 1 float32 (8, 5)")


def test_ranks_disagreeing_on_a_dtype(trove, tmp_path):
    d = tmp_path / "dtype"
    make("dtensor-dtype", d)
    refused(d, "'model.cols'", "rank 0 says float64", "rank 1 float32")


@pytest.mark.parametrize("variant,key,ranks", [("dtensor-differ", "model.buffer", "rank 1's copy of the tensor differs from rank 0's"),
                                               ("dtensor-differ-replicate", "model.rep", "rank 2's copy")])
def test_replicated_copies_that_differ(trove, tmp_path, variant, key, ranks):
    d = tmp_path / variant
    make(variant, d)
    r = trove("info", d)
    assert r.code == 0, r  # shapes and dtypes agree; the bytes are compared when read
    for command in (("cat", d, key), ("convert", d, tmp_path / "out.safetensors", "--drop-values")):
        r = run_tool("trove", *command, limit=True)
        assert r.code != 0 and f"'{key}'" in r.errtext and ranks in r.errtext, r
    assert not (tmp_path / "out.safetensors").exists()
    r = trove("verify", d)
    assert r.code == 1 and ranks in r.text, r


def test_rank_file_linked_out_of_the_directory(trove, sharded, tmp_path):
    d = copy(sharded[0], tmp_path, "link")
    os.rename(d / "model_rank1.pt", tmp_path / "elsewhere.pt")
    os.symlink(tmp_path / "elsewhere.pt", d / "model_rank1.pt")
    refused(d, "model_rank1.pt", "link")


def test_declared_global_size_of_2_to_the_40(trove, tmp_path):
    d = tmp_path / "huge"
    make("dtensor-huge", d)
    refused(d, "'model.rows'", "global tensor (1099511627776, 5)", "local tensor has shape (3, 5)")


def test_missing_rank(trove, sharded, dtensor, tmp_path):
    d = copy(sharded[0], tmp_path, "missing")
    os.rename(d / "model_rank1.pt", d / "model_rank2.pt")
    refused(d, "rank 1's file 'model_rank1.pt' is missing")
    d = copy(dtensor[0], tmp_path, "missing_verl")
    os.remove(d / "model_world_size_3_rank_2.pt")
    refused(d, "rank 2's file 'model_world_size_3_rank_2.pt' is missing")


def test_placements_not_read_are_named(trove, tmp_path):
    d = tmp_path / "strided"
    make("dtensor-strided", d)
    refused(d, "'model.rows'", "_StridedShard")


@pytest.mark.parametrize("world", [1, 2])
def test_a_verl_directory_is_its_model(trove, tmp_path, world):
    """A verl checkpoint as verl's FSDP checkpoint manager writes it: per rank the model's state,
    the optimizer's (optim_...) and the trainer's own (extra_state_...: the scheduler and the RNG
    states, which differ from rank to rank), and the model's config in huggingface/. The model is
    the checkpoint (convert writes it alone, safetensors included); the optimizer and trainer
    state are listed and reached with --keys; each rank's RNG states are its own; info shows the
    config."""
    import json
    import random

    import numpy as np

    d = tmp_path / "global_step_10" / "actor"
    d.mkdir(parents=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    rng = []
    for r in range(world):
        torch.manual_seed(r)
        np.random.seed(r)
        random.seed(r)
        rng.append(torch.get_rng_state())
        torch.save(model.state_dict(), d / f"model_world_size_{world}_rank_{r}.pt")
        torch.save(opt.state_dict(), d / f"optim_world_size_{world}_rank_{r}.pt")
        torch.save({"lr_scheduler": {"last_epoch": 3}, "rng": {"cpu": rng[-1], "numpy": np.random.get_state(),
                                                               "random": random.getstate()}},
                   d / f"extra_state_world_size_{world}_rank_{r}.pt")
    (d / "huggingface").mkdir()
    (d / "huggingface" / "config.json").write_text(json.dumps({"architectures": ["TinyForCausalLM"], "model_type": "tiny"}))
    r = trove("info", d)
    assert r.code == 0, r
    moments = sum(len(s) for s in opt.state_dict()["state"].values())
    assert "architecture       TinyForCausalLM" in r.text and f"optimizer state    {moments} tensors" in r.text, r.text
    assert trove("verify", d).code == 0
    st = tmp_path / "model.safetensors"
    r = trove("convert", d, st)
    assert r.code == 0, r
    tensors, _ = safetensors_spec.read(st.read_bytes())
    # The model's own names, as its state_dict has them: what convert writes loads into the model.
    saved = model.state_dict()
    assert set(tensors) == set(saved)
    for k, v in saved.items():
        assert tensors[k][2] == raw_bytes(v), k
    pt = tmp_path / "model.pt"
    assert trove("convert", d, pt).code == 0
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    fresh.load_state_dict(torch.load(pt))  # strict: every key and no other
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, saved[k]), k
    out = tmp_path / "with_optimizer.pt"
    assert trove("convert", d, out, "--keys", "*", "--keys", "optim/**").code == 0
    got = torch.load(out)
    assert torch.equal(got["optim"]["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert got["optim"]["param_groups"][0]["lr"] == 1e-3 and "extra_state" not in got
    assert set(got) == set(saved) | {"optim"}, set(got)
    if world == 2:
        for rank in range(2):
            r = trove("cat", d, f"extra_state/rank_{rank}/rng/cpu", "--raw")
            assert r.code == 0 and r.out == rng[rank].numpy().tobytes(), rank


def test_a_model_key_named_like_another_kind_is_refused(trove, tmp_path):
    # The model's tensors are at the top beside the other kinds' entries: a model key spelled
    # like one of them would make two entries of one name.
    d = tmp_path / "clash"
    d.mkdir()
    torch.save({"optim": torch.ones(2), "w": torch.zeros(2)}, d / "model_world_size_1_rank_0.pt")
    torch.save({"state": {}, "param_groups": []}, d / "optim_world_size_1_rank_0.pt")
    refused(d, "two entries are both named 'optim'")


def test_kinds_without_a_model_are_all_written(trove, tmp_path):
    # Several kinds and none of them `model`: no kind stands for the checkpoint, each is an entry
    # under its name and convert writes them all.
    d = tmp_path / "kinds"
    d.mkdir()
    torch.save({"w": torch.ones(2)}, d / "actor_rank_0.pt")
    torch.save({"w": torch.zeros(3)}, d / "critic_rank_0.pt")
    out = tmp_path / "all.safetensors"
    r = trove("convert", d, out)
    assert r.code == 0, r
    tensors, _ = safetensors_spec.read(out.read_bytes())
    assert set(tensors) == {"actor/w", "critic/w"}, set(tensors)
