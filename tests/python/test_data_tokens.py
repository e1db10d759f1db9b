"""presk data with token ids from a BPE tokenizer (.npy, nanoGPT's raw .bin), the token stream stored
once and read as windows (trove.data's windows=), --shard-size, and TorchDataset's mid-epoch resume
(state_dict / load_state_dict). References are built here with numpy; the materialised windows
are written with `presk data pack` from numpy's arrays, not by the code under test."""

import glob
import io
import json
import os
import subprocess
import sys

import pytest

from conftest import BIN_DIR

BUILD = os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PYDIR = os.path.join(BUILD, "python")
if not glob.glob(os.path.join(PYDIR, "trove", "_trove*.so")):
    pytest.skip(f"the Python module was not built (no {PYDIR}/trove/_trove*.so)", allow_module_level=True)
sys.path.insert(0, PYDIR)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trove  # noqa: E402
import trove.data  # noqa: E402

PRESK = os.path.join(BIN_DIR, "presk")
VOCAB = 50257  # GPT-2's BPE: ids fit uint16


def presk(*args, cwd=None):
    return subprocess.run([PRESK, "data", *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)


def ok(*args):
    p = presk(*args)
    assert p.returncode == 0, p.stderr
    return p.stdout


def token_ids(n, seed=0, vocab=VOCAB):
    return np.random.default_rng(seed).integers(0, vocab, size=n, dtype=np.int64)


def windows_of(ids, seq, stride):
    """lm-windows's windows, with numpy: window k is (ids[kS:kS+T], ids[kS+1:kS+T+1])."""
    starts = range(0, len(ids) - seq, stride) if len(ids) > seq else range(0)
    x = np.array([ids[s:s + seq] for s in starts]).reshape(-1, seq)
    y = np.array([ids[s + 1:s + seq + 1] for s in starts]).reshape(-1, seq)
    return x, y


def materialised(path, ids, seq, stride, vocab=VOCAB):
    """The windows written by `presk data pack` from numpy's arrays (the reference file)."""
    x, y = windows_of(ids, seq, stride)
    txt = str(path) + ".txt"
    with open(txt, "w") as f:
        for a, b in zip(x, y):
            f.write(" ".join(map(str, a)) + " " + " ".join(map(str, b)) + "\n")
    leaf = f"idx[{vocab}][seq: {seq}]"
    ok("pack", "--type", f"({leaf}, {leaf})", txt, "-o", path)
    return x, y


def test_lm_windows_from_npy_bin_and_text_files_concatenated(tmp_path):
    ids = token_ids(3000)
    parts = np.split(ids, [700, 1500, 2100, 2600])
    inputs = []
    for k, (part, dtype) in enumerate(zip(parts, ["uint16", "uint32", "int32", "int64"])):
        inputs.append(tmp_path / f"part{k}.npy")
        np.save(inputs[-1], part.astype(dtype))
    inputs.append(tmp_path / "part4.txt")
    inputs[-1].write_text(" ".join(map(str, parts[4][:200])) + "\n" + " ".join(map(str, parts[4][200:])) + "\n")
    out = tmp_path / "w.psk.d"
    said = ok("lm-windows", "--vocab-size", VOCAB, "--seq", 16, "--stride", 11, *inputs, "-o", out)
    x, y = windows_of(ids, 16, 11)
    assert f"({len(x)} windows of type (idx[{VOCAB}][seq: 16], idx[{VOCAB}][seq: 16]) from 3000 tokens)" in said
    got_x, got_y = next(trove.data.batches(out, len(x)))
    assert got_x.dtype == np.uint16 and (got_x == x).all() and (got_y == y).all()

    # nanoGPT's train.bin: raw uint16 ids, and uint32 for vocabularies beyond 65536.
    for dtype in ("uint16", "uint32"):
        bin_path = tmp_path / f"train_{dtype}.bin"
        ids.astype(dtype).tofile(bin_path)
        out = tmp_path / f"bin_{dtype}.psk.d"
        ok("lm-windows", "--vocab", VOCAB, "--seq", 16, "--stride", 11, "--token-dtype", dtype, bin_path, "-o", out)
        got_x, got_y = next(trove.data.batches(out, len(x)))
        assert (got_x == x).all() and (got_y == y).all()

    # Without --vocab the bound is the largest id + 1.
    out = tmp_path / "inferred.psk.d"
    ok("lm-windows", "--seq", 16, inputs[0], "-o", out)
    assert trove.data.open(out).type == f"(idx[{int(parts[0].max()) + 1}][seq: 16], idx[{int(parts[0].max()) + 1}][seq: 16])"


def test_token_id_errors_name_the_file_and_leave_nothing(tmp_path):
    out = tmp_path / "out.psk.d"
    bin_path = tmp_path / "train.bin"
    np.arange(10, dtype=np.uint16).tofile(bin_path)
    p = presk("lm-windows", "--seq", 4, bin_path, "-o", out)
    assert p.returncode == 2 and "--token-dtype" in p.stderr and str(bin_path) in p.stderr
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02\x00\x03")
    p = presk("lm-windows", "--seq", 1, "--token-dtype", "uint16", odd, "-o", out)
    assert p.returncode == 2 and str(odd) in p.stderr and "5 bytes is not a whole number of uint16 ids" in p.stderr
    p = presk("lm-windows", "--seq", 2, "--token-dtype", "uint64", bin_path, "-o", out)
    assert p.returncode == 2 and "--token-dtype takes uint16 or uint32" in p.stderr
    big = tmp_path / "big.npy"
    np.save(big, np.array([1, 2, 70000, 3], dtype=np.uint32))
    p = presk("lm-windows", "--vocab-size", VOCAB, "--seq", 2, big, "-o", out)
    assert p.returncode == 2 and "E9004" in p.stderr and str(big) in p.stderr and "id 2 is 70000" in p.stderr
    neg = tmp_path / "neg.npy"
    np.save(neg, np.array([1, -5, 3], dtype=np.int32))
    p = presk("tokens", neg, "-o", out)
    assert p.returncode == 2 and "id 1 is -5" in p.stderr and str(neg) in p.stderr
    for name, array in (("flat.npy", np.zeros((2, 3), dtype=np.uint16)), ("float.npy", np.zeros(4, dtype=np.float32))):
        np.save(tmp_path / name, array)
        p = presk("lm-windows", "--seq", 2, tmp_path / name, "-o", out)
        assert p.returncode == 2 and str(tmp_path / name) in p.stderr, p.stderr
    cut = tmp_path / "cut.npy"
    np.save(cut, np.arange(100, dtype=np.uint16))
    cut.write_bytes(cut.read_bytes()[:-3])
    p = presk("lm-windows", "--seq", 2, cut, "-o", out)
    assert p.returncode == 2 and "truncated" in p.stderr and str(cut) in p.stderr
    assert not out.exists()


@pytest.mark.parametrize("seq,stride", [(8, 8), (8, 3), (5, 9)])
def test_windows_of_one_stored_stream_equal_the_materialised_windows(tmp_path, seq, stride):
    ids = token_ids(1400, seed=seq + stride)
    src = tmp_path / "ids.npy"
    np.save(src, ids.astype(np.uint16))
    stream = tmp_path / "stream.psk.d"
    said = ok("tokens", "--vocab-size", VOCAB, src, "-o", stream)
    assert f"1400 tokens of type idx[{VOCAB}][])" in said
    # Stored once: the tokens' bytes and a header, where the windows store each token about twice.
    assert os.path.getsize(stream) < 1400 * 2 + 64
    # The stream again, in shards that windows straddle.
    ok("tokens", "--vocab-size", VOCAB, src, "-o", tmp_path / "sh.psk.d", "--shard-size", "1000B")
    ref = tmp_path / "ref.psk.d"
    x, y = materialised(ref, ids, seq, stride)
    for source in (stream, tmp_path / "sh.json"):
        view = trove.data.open(source, windows=seq, stride=stride)
        assert len(view) == len(x) == len(trove.data.open(ref)) and view.type == trove.data.open(ref).type
        assert view.windows == (seq, stride)
        for k in (0, 1, len(x) - 1, -1):
            vx, vy = view[k]
            assert (vx == x[k]).all() and (vy == y[k]).all() and vx.dtype == np.uint16
        for options in (dict(), dict(seed=3), dict(seed=3, epoch=2, take=5), dict(seed=9, rank=1, world_size=3),
                        dict(seed=1, rank=0, world_size=2, worker=1, workers=2)):
            flags = [f for key, flag in (("seed", "--shuffle"), ("epoch", "--epoch"), ("take", "--take"),
                                         ("rank", "--rank"), ("world_size", "--world-size"), ("worker", "--worker"),
                                         ("workers", "--workers")) if key in options for f in (flag, options[key])]
            cli = ok("batches", source, "--batch", 4, "--windows", seq, "--stride", stride, *flags)
            assert cli == ok("batches", ref, "--batch", 4, *flags)
            # --read loads the windows' batches: the bytes and checksum the materialised file's give.
            read = ok("batches", source, "--batch", 4, "--windows", seq, "--stride", stride, *flags, "--read")
            assert read == ok("batches", ref, "--batch", 4, *flags, "--read") and read.startswith("read "), read
            assert trove.data.batch_indices(source, 4, windows=seq, stride=stride, **options).tolist() == \
                [[int(i) for i in line.split()] for line in cli.splitlines()]
            want = list(trove.data.batches(ref, 4, with_indices=True, **options))
            got = list(trove.data.batches(source, 4, with_indices=True, windows=seq, stride=stride, **options))
            assert want and len(got) == len(want)
            for (wi, (wx, wy)), (gi, (gx, gy)) in zip(want, got):
                assert (wi == gi).all() and (gx == x[gi]).all() and (gy == y[gi]).all()
                assert (gx == wx).all() and (gy == wy).all() and gx.dtype == wx.dtype and gx.flags.c_contiguous
        pt = list(trove.data.batches(source, 4, seed=3, framework="pt", windows=seq, stride=stride))
        assert pt[0][0].dtype == torch.int64 and pt[0][1].tolist() == next(trove.data.batches(ref, 4, seed=3))[1].tolist()
    with pytest.raises(trove.UsageError, match="token stream"):
        trove.data.open(ref, windows=4)
    p = presk("batches", ref, "--batch", 2, "--windows", 4)
    assert p.returncode == 2 and "token stream" in p.stderr


def test_shard_size_for_every_data_writer(tmp_path):
    ids = token_ids(5000, seed=5)
    src = tmp_path / "ids.npy"
    np.save(src, ids.astype(np.uint16))
    one = tmp_path / "one.psk.d"
    ok("lm-windows", "--vocab", VOCAB, "--seq", 32, src, "-o", one)
    said = ok("lm-windows", "--vocab", VOCAB, "--seq", 32, src, "-o", tmp_path / "w.psk.d", "--shard-size", "2KiB")
    shards = sorted(glob.glob(str(tmp_path / "w-*.psk.d")))
    assert len(shards) > 2 and all(os.path.getsize(s) <= 2048 for s in shards)
    assert all(os.path.getsize(s) > 2048 - 128 for s in shards[:-1])  # about the size: as many whole samples as fit
    assert json.loads((tmp_path / "w.json").read_text()) == {"shards": [os.path.basename(s) for s in shards]}
    assert str(tmp_path / "w.json") in said and "shards" in said
    assert not (tmp_path / "w.psk.d").exists()
    whole = next(trove.data.batches(one, len(trove.data.open(one))))
    sharded = next(trove.data.batches(tmp_path / "w.json", len(trove.data.open(one))))
    assert all((a == b).all() for a, b in zip(whole, sharded))
    # pack too, in bytes with units.
    txt = tmp_path / "rows.txt"
    txt.write_text("".join(f"{i} {i / 2}\n" for i in range(100)))
    ok("pack", "--type", "(idx[100][], ℝ[])", txt, "-o", tmp_path / "p.psk.d", "--shard-size", "500B")
    packed = trove.data.open(tmp_path / "p.json")
    assert len(packed) == 100 and len(packed.paths) == 2 and all(os.path.getsize(s) <= 500 for s in packed.paths)
    # Too small for one record: a clear error, and no file.
    p = presk("lm-windows", "--vocab", VOCAB, "--seq", 32, src, "-o", tmp_path / "tiny.psk.d", "--shard-size", "100")
    assert p.returncode == 2 and "holds no sample" in p.stderr and "at least" in p.stderr
    assert not glob.glob(str(tmp_path / "tiny*"))
    p = presk("tokens", src, "-o", tmp_path / "x.psk.d", "--shard-size", "12parsecs")
    assert p.returncode == 2 and "--shard-size takes a number and a unit" in p.stderr
    # A failure after some shards were finished leaves none of them.
    bad = tmp_path / "bad.npy"
    np.save(bad, np.concatenate([ids, [VOCAB + 1]]).astype(np.uint32))
    p = presk("tokens", "--vocab", VOCAB, bad, "-o", tmp_path / "b.psk.d", "--shard-size", "1KiB")
    assert p.returncode == 2 and "E9004" in p.stderr
    assert not glob.glob(str(tmp_path / "b*.psk.d")) and not (tmp_path / "b.json").exists()
    # ... and an earlier dataset of that name stays as it was: the shards are built in a hidden
    # folder and move in only once all are written.
    ok("tokens", "--vocab", VOCAB, src, "-o", tmp_path / "b.psk.d", "--shard-size", "1KiB")
    earlier = {p: open(p, "rb").read() for p in glob.glob(str(tmp_path / "b*"))}
    assert len(earlier) > 2
    p = presk("tokens", "--vocab", VOCAB, bad, "-o", tmp_path / "b.psk.d", "--shard-size", "1KiB")
    assert p.returncode == 2 and "E9004" in p.stderr
    assert {p: open(p, "rb").read() for p in glob.glob(str(tmp_path / "b*"))} == earlier
    assert not [p for p in os.listdir(tmp_path) if "trove-tmp" in p]
    # Shards written into the working directory, beside what is there.
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("kept")
    p = presk("tokens", "--vocab", VOCAB, os.path.abspath(src), "-o", "c.psk.d", "--shard-size", "1KiB", cwd=work)
    assert p.returncode == 0, p.stderr
    assert "notes.txt" in os.listdir(work) and (work / "c.json").exists() and (work / "c-00000.psk.d").exists()


def test_convert_to_pskd_in_shards(tmp_path):
    # trove convert writes .psk.d shards and their manifest as presk data --shard-size does.
    g = torch.Generator().manual_seed(2)
    src = tmp_path / "samples.pt"
    torch.save({"ids": torch.randint(0, 1000, (300, 8), generator=g), "score": torch.randn(300, generator=g)}, src)
    trove_bin = os.path.join(BIN_DIR, "trove")
    whole = tmp_path / "whole.psk.d"
    p = subprocess.run([trove_bin, "convert", src, whole], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    for flag in ("--max-shard-size", "--shard-size"):
        out = tmp_path / flag.strip("-") / "data.psk.d"
        out.parent.mkdir()
        p = subprocess.run([trove_bin, "convert", src, out, "--to", "pskd", flag, "2KiB"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        shards = sorted(glob.glob(str(out.parent / "data-*.psk.d")))
        assert len(shards) > 2 and all(os.path.getsize(s) <= 2048 for s in shards), shards
        assert json.loads((out.parent / "data.json").read_text()) == {"shards": [os.path.basename(s) for s in shards]}
        assert not out.exists()
        ds, ref = trove.data.open(out.parent / "data.json"), trove.data.open(whole)
        assert len(ds) == len(ref) == 300 and ds.type == ref.type
        got, want = next(ds.batches(300)), next(ref.batches(300))
        assert all((a == b).all() for a, b in zip(got, want))
    # The format chosen by the name, as for a split GGUF model.
    p = subprocess.run([trove_bin, "convert", src, tmp_path / "byname.psk.d", "--max-shard-size", "4KiB"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and (tmp_path / "byname.json").exists(), p.stderr
    # Shards name the dataset NAME.psk.d; too small a size says the smallest that holds a sample.
    p = subprocess.run([trove_bin, "convert", src, tmp_path / "x.bin", "--to", "pskd", "--shard-size", "2KiB"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "NAME.psk.d" in p.stderr, p.stderr
    p = subprocess.run([trove_bin, "convert", src, tmp_path / "tiny.psk.d", "--shard-size", "40"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "holds no sample" in p.stderr, p.stderr
    assert not glob.glob(str(tmp_path / "tiny*"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    src = d / "ids.npy"
    np.save(src, token_ids(4000, seed=11).astype(np.uint16))
    ok("tokens", "--vocab", VOCAB, src, "-o", d / "stream.psk.d")
    return d / "stream.psk.d"


def uninterrupted(corpus, epochs, **options):
    ds = trove.data.TorchDataset(corpus, 8, seed=4, windows=16, with_indices=True, **options)
    out = []
    for epoch in epochs:
        ds.set_epoch(epoch)
        out.append([idx.tolist() for idx, _ in ds])
    return out


def through_torch_save(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (3, True)])
def test_torch_dataset_resumes_mid_epoch_exactly(corpus, workers, persistent):
    world = dict(rank=1, world_size=2)
    want = uninterrupted(corpus, (3, 4), **world)
    assert len(want[0]) == 15 and want[0] != want[1]
    for k in (0, 1, 6, 14, 15):
        ds = trove.data.TorchDataset(corpus, 8, seed=4, windows=16, with_indices=True, **world)
        ds.set_epoch(3)
        loader = ds.loader(num_workers=workers, persistent_workers=persistent)
        it = iter(loader)
        seen = [next(it)[0].tolist() for _ in range(k)]
        state = ds.state_dict()
        assert state == {"version": 1, "epoch": 3, "batches": k, "samples": 249, "batch": 8, "seed": "4",
                         "take": -1, "world_size": 2, "windows": 16, "stride": 16}
        state = through_torch_save(state)
        del it, loader
        resumed = trove.data.TorchDataset(corpus, 8, seed=4, windows=16, with_indices=True, **world)
        resumed.load_state_dict(state)
        loader = resumed.loader(num_workers=workers, persistent_workers=persistent)
        rest = [idx.tolist() for idx, _ in loader]
        assert seen + rest == want[0], (k, workers)
        assert resumed.state_dict()["batches"] == 15
        resumed.set_epoch(4)
        assert [idx.tolist() for idx, _ in loader] == want[1]
        # The resumed epoch, read again, is whole.
        resumed.set_epoch(3)
        assert [idx.tolist() for idx, _ in loader] == want[0]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_torch_dataset_resumes_mid_epoch_with_spawned_workers(corpus):
    # Workers started by spawn (macOS's and Windows's default, and CUDA's requirement) get the dataset
    # pickled: its shared epoch and resume slots must reach them as they reach forked ones.
    world = dict(rank=0, world_size=2)
    want = uninterrupted(corpus, (5, 6), **world)
    for k in (1, 6):
        ds = trove.data.TorchDataset(corpus, 8, seed=4, windows=16, with_indices=True, **world)
        ds.set_epoch(5)
        loader = ds.loader(num_workers=2, multiprocessing_context="spawn")
        it = iter(loader)
        seen = [next(it)[0].tolist() for _ in range(k)]
        state = through_torch_save(ds.state_dict())
        assert state["epoch"] == 5 and state["batches"] == k
        del it, loader
        resumed = trove.data.TorchDataset(corpus, 8, seed=4, windows=16, with_indices=True, **world)
        resumed.load_state_dict(state)
        loader = resumed.loader(num_workers=2, multiprocessing_context="spawn", persistent_workers=True)
        assert seen + [idx.tolist() for idx, _ in loader] == want[0], k
        resumed.set_epoch(6)  # persistent spawned workers see the new epoch through shared memory
        assert [idx.tolist() for idx, _ in loader] == want[1]


def test_torch_dataset_state_refuses_another_pipeline_and_uncounted_workers(corpus):
    ds = trove.data.TorchDataset(corpus, 8, seed=4, windows=16)
    ds.set_epoch(2)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    assert state["epoch"] == 2 and state["batches"] == 1
    for other in (dict(seed=5), dict(batch=4), dict(windows=8)):
        options = dict(batch=8, seed=4, windows=16)
        options.update(other)
        b = options.pop("batch")
        with pytest.raises(trove.UsageError, match=next(iter(other))):
            trove.data.TorchDataset(corpus, b, **options).load_state_dict(state)
    with pytest.raises(trove.UsageError, match="batches"):
        trove.data.TorchDataset(corpus, 8, seed=4, windows=16).load_state_dict(dict(state, batches=10**6))
    plain = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
    list(plain)
    with pytest.raises(trove.UsageError, match="loader"):
        ds.state_dict()


def test_pskd_converts_to_pt_and_keeps_its_type_and_bits(tmp_path):
    trove_bin = os.path.join(BIN_DIR, "trove")

    def convert(*args):
        return subprocess.run([trove_bin, "convert", *map(str, args)], capture_output=True, text=True)

    # A pack with bounds, axis names, a bool leaf and a nested tuple: what the tensors alone do not say.
    txt = tmp_path / "s.txt"
    txt.write_text("1 2 3 0.5 0.25 true\n4 5 6 1.5 2 false\n")
    typ = "((idx[200][seq: 3], ℝ[feat: 2]), bool[])"  # u8 indices: this torch (1.13) has no uint16
    ok("pack", "--type", typ, txt, "-o", tmp_path / "s.psk.d")
    # .psk.d -> .pt: torch reads it (weights_only), one tensor per leaf.
    r = convert(tmp_path / "s.psk.d", tmp_path / "s.pt")
    assert r.returncode == 0, r.stderr
    loaded = torch.load(tmp_path / "s.pt", weights_only=True)
    assert loaded["0"]["0"].tolist() == [[1, 2, 3], [4, 5, 6]] and loaded["0"]["0"].dtype == torch.uint8
    assert loaded["0"]["1"].tolist() == [[0.5, 0.25], [1.5, 2.0]] and loaded["1"].tolist() == [1, 0]
    # .psk.d -> .psk.d: the same type, the same samples (presk's own diff compares them).
    r = convert(tmp_path / "s.psk.d", tmp_path / "t.psk.d")
    assert r.returncode == 0, r.stderr
    assert trove.data.open(tmp_path / "t.psk.d").type == trove.data.open(tmp_path / "s.psk.d").type
    assert subprocess.run([PRESK, "data", "diff", tmp_path / "s.psk.d", tmp_path / "t.psk.d"]).returncode == 0
    # Values other than tensors are refused by name, or left out when asked (a note says so).
    torch.save({"x": torch.ones(4, 2), "epoch": 3, "name": "run"}, tmp_path / "v.pt")
    r = convert(tmp_path / "v.pt", tmp_path / "v.psk.d")
    assert r.returncode == 2 and "'epoch', 'name'" in r.stderr and "--drop-values" in r.stderr, r.stderr
    assert not (tmp_path / "v.psk.d").exists()
    r = convert(tmp_path / "v.pt", tmp_path / "v.psk.d", "--drop-values")
    assert r.returncode == 0 and "dropped 2 value(s)" in r.stderr, r.stderr
    # A real leaf's bits are copied: signaling NaNs stay signaling (through a double they turn quiet).
    bits = np.array([[0x7F800001, 0xFF800001], [0x7FA00000, 0x3F800000]], dtype=np.uint32)
    torch.save({"x": torch.from_numpy(bits.view(np.float32).copy())}, tmp_path / "nan.pt")
    assert convert(tmp_path / "nan.pt", tmp_path / "nan.psk.d").returncode == 0
    assert convert(tmp_path / "nan.psk.d", tmp_path / "nan2.pt").returncode == 0
    back = torch.load(tmp_path / "nan2.pt", weights_only=True)["0"].numpy().view(np.uint32)
    assert (back == bits).all(), [hex(v) for v in back.ravel()]
