"""The worker threads (trove/threads.h, `--threads`): casts, GGUF dequantization, verify's CRC-32s
and diff split their work across threads, and what they produce never depends on how many. Each
job here is large enough to be cut into pieces (a run of more than 2^19 elements, a stored entry of
more than 16 MiB), and each runs with 1 thread, with 3 (more pieces than this machine's cores) and
with the default; torch, numpy and Python's zipfile say what the right answer is."""
import json
import struct
import zipfile
import zlib

import numpy as np
import pytest
import torch

from test_gguf import DEQUANTIZERS, random_blocks, write_gguf

THREADS = (["--threads", "1"], ["--threads", "3"], [])


def big_checkpoint(path):
    g = torch.Generator().manual_seed(3)
    sd = {f"w{i}": torch.randn(1 << 21, generator=g) * 1e3 for i in range(3)}  # 8 MiB entries each
    sd["w0"][::977] = float("nan")
    sd["w1"][::1013] = 3.4e38  # bfloat16 rounds it to infinity
    sd["w2"][::1021] = 1e-41                      # subnormal in float32, zero in float16
    # Not a whole number of a pipelined cast's windows or pieces (src/core/tensor.cpp).
    sd["odd"] = torch.randn((1 << 20) + 12345, generator=g) * 1e3
    torch.save(sd, path)
    return sd


def test_casts_are_the_same_with_any_thread_count(tmp_path, trove):
    src = tmp_path / "f32.pt"
    sd = big_checkpoint(src)
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        outputs = []
        for threads in THREADS:
            out = tmp_path / f"{name}{len(outputs)}" / "cast.pt"  # the archive's folder is named after the file
            out.parent.mkdir()
            r = trove("convert", src, out, "--dtype", name, "--json", *threads)
            assert r.code == 0, r
            outputs.append(out.read_bytes())
            # Each record's CRC-32 is combined from its pieces' (taken by the threads that cast
            # them): Python's zipfile checks every one against the bytes.
            with zipfile.ZipFile(out) as z:
                assert z.testzip() is None, (name, threads)
            got = torch.load(out, weights_only=True)
            for k, v in sd.items():
                want = v.to(dtype)
                nan = torch.isnan(want)
                assert torch.equal(torch.isnan(got[k]), nan), (name, k)
                assert torch.equal(got[k][~nan].view(torch.int16), want[~nan].view(torch.int16)), (name, k, threads)
            # The losses the cast counted are the same sums whatever the pieces were.
            report = json.loads(r.out)["cast"]
            if len(outputs) == 1:
                first_report = report
            assert report == first_report, (name, threads)
        assert outputs[0] == outputs[1] == outputs[2], name


def test_dequantization_is_the_same_with_any_thread_count(tmp_path, trove):
    rng = np.random.default_rng(8)
    tensors, want = [], {}
    for t, count in ((8, 40_000), (14, 5_000), (12, 5_000)):  # Q8_0, Q6_K, Q4_K: over a million values each
        deq, size, block, _, _ = DEQUANTIZERS[t]
        raw = random_blocks(rng, t, count, extreme=False)
        tensors.append((f"t{t}", t, [block * 50, count // 50], raw))
        want[f"t{t}"] = deq(raw)
    src = tmp_path / "q.gguf"
    src.write_bytes(write_gguf([("general.architecture", 8, "x"), ("general.quantization_version", 4, 2)], tensors))
    outputs = []
    for threads in THREADS:
        out = tmp_path / f"run{len(outputs)}" / "f.safetensors"
        out.parent.mkdir()
        r = trove("convert", src, out, "--dtype", "float32", *threads)
        assert r.code == 0, r
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    header = json.loads(outputs[0][8:8 + int.from_bytes(outputs[0][:8], "little")])
    body = outputs[0][8 + int.from_bytes(outputs[0][:8], "little"):]
    for key, values in want.items():
        begin, end = header[key]["data_offsets"]
        np.testing.assert_array_equal(np.frombuffer(body[begin:end], "<f4"), values, err_msg=key)


def corrupt(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def test_verify_finds_a_bad_byte_in_any_piece_of_a_large_entry(tmp_path, trove):
    src = tmp_path / "big.pt"
    g = torch.Generator().manual_seed(4)
    torch.save({"big": torch.randn(40 << 18, generator=g), "small": torch.arange(10.0)}, src)  # 40 MiB: three pieces
    for threads in THREADS:
        r = trove("verify", src, *threads)
        assert r.code == 0, r
    with zipfile.ZipFile(src) as z:
        info = next(i for i in z.infolist() if i.file_size == 40 << 20)
        with open(src, "rb") as f:
            f.seek(info.header_offset + 26)
            name_len, extra_len = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
        data = info.header_offset + 30 + name_len + extra_len
    for where in (0, (16 << 20) + 5, (40 << 20) - 1):  # first, middle and last piece
        bad = tmp_path / f"bad{where}.pt"
        bad.write_bytes(src.read_bytes())
        corrupt(bad, data + where)
        with zipfile.ZipFile(bad) as z:
            assert z.testzip() == info.filename  # Python's zipfile sees the same
        for threads in THREADS:
            r = trove("verify", bad, "--json", *threads)
            assert r.code == 1, (where, threads, r)
            problems = json.loads(r.out)["files"][0]["findings"]
            assert [p["message"] for p in problems] == ["CRC-32 mismatch: the bytes differ from what was written"], problems
            assert problems[0]["entry"] == info.filename


def diff_with_any_thread_count(trove, a, b, *args, code=1):
    """`trove diff A B --json ARGS` with each thread count: one report, whatever the count."""
    runs = [trove("diff", a, b, "--json", *args, *threads) for threads in THREADS]
    for r in runs:
        assert r.code == code, r
    assert runs[0].out == runs[1].out == runs[2].out
    return json.loads(runs[0].out)


def test_diff_is_the_same_with_any_thread_count(tmp_path, trove):
    g = torch.Generator().manual_seed(5)
    a = {f"t{i}": torch.randn(300_000, generator=g) for i in range(7)}
    b = {k: v.clone() for k, v in a.items()}
    b["t2"][17] += 1
    b["t5"] *= 1.0001
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    rows = {t["key"]: t for t in diff_with_any_thread_count(trove, tmp_path / "a.pt", tmp_path / "b.pt")["tensors"]}
    assert [k for k, t in rows.items() if not t.get("identical")] == ["t2", "t5"]


def test_threads_option_is_checked(trove, tmp_path):
    torch.save({"x": torch.zeros(2)}, tmp_path / "a.pt")
    r = trove("verify", tmp_path / "a.pt", "--threads", "many")
    assert r.code == 2 and "--threads" in r.errtext, r


def test_many_tensors_cast_in_order_whatever_the_thread_count(tmp_path, trove):
    """convert --dtype writes a .pt's records in order while the casts of the ones after run on
    the worker threads (core/cast_pipeline.h): many tensors of uneven sizes, with integer ones
    copied as they are, tiny ones, an empty one and views of one storage between them, come out
    the same with any thread count and as torch casts them."""
    g = torch.Generator().manual_seed(11)
    sd = {}
    for i in range(40):
        n = int(torch.randint(1, 700_000, (1,), generator=g))
        sd[f"f{i}"] = torch.randn(n, generator=g) * 100
        if i % 7 == 0:
            sd[f"i{i}"] = torch.randint(-1000, 1000, (n // 3 + 1,), generator=g)
    sd["empty"] = torch.zeros(0)
    base = torch.randn(600_000, generator=g)
    sd["view_a"], sd["view_b"] = base[:300_000], base[100_000:]
    src = tmp_path / "many.pt"
    torch.save(sd, src)
    outputs = []
    for threads in THREADS:
        out = tmp_path / f"t{len(outputs)}" / "cast.pt"
        out.parent.mkdir()
        r = trove("convert", src, out, "--dtype", "bfloat16", *threads)
        assert r.code == 0, r
        outputs.append(out.read_bytes())
        with zipfile.ZipFile(out) as z:
            assert z.testzip() is None, threads
        got = torch.load(out, weights_only=True)
        assert set(got) == set(sd)
        for k, v in sd.items():
            want = v.to(torch.bfloat16) if v.is_floating_point() else v
            assert got[k].dtype == want.dtype and torch.equal(got[k], want), (k, threads)
    assert outputs[0] == outputs[1] == outputs[2]


def test_many_tensors_cast_into_safetensors_whatever_the_thread_count(tmp_path, trove):
    """The same across-tensor pipeline in the safetensors writer; the file is read here by its
    layout (an 8-byte length, the JSON header, the data), not by trove."""
    g = torch.Generator().manual_seed(12)
    sd = {f"f{i}": torch.randn(int(torch.randint(1, 600_000, (1,), generator=g)), generator=g) * 10 for i in range(30)}
    sd["ints"] = torch.arange(1000)
    src = tmp_path / "many.pt"
    torch.save(sd, src)
    outputs = []
    for threads in THREADS:
        out = tmp_path / f"t{len(outputs)}.safetensors"
        r = trove("convert", src, out, "--dtype", "bfloat16", *threads)
        assert r.code == 0, r
        data = out.read_bytes()
        outputs.append(data)
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        body = data[8 + n:]
        for k, v in sd.items():
            want = v.to(torch.bfloat16) if v.is_floating_point() else v
            begin, end = header[k]["data_offsets"]
            assert body[begin:end] == want.contiguous().view(torch.uint8).numpy().tobytes(), (k, threads)
    assert outputs[0] == outputs[1] == outputs[2]


def test_diff_of_one_large_tensor_in_pieces(tmp_path, trove):
    # More than 2^22 elements: compared in pieces on the worker threads (src/core/diff.cpp),
    # here three of them, the last short. The figures are numpy's over the whole tensor.
    n = (1 << 23) + 12345
    g = torch.Generator().manual_seed(9)
    a = {"emb": torch.randn(n, generator=g), "small": torch.randn(1000, generator=g)}
    b = {k: v.clone() for k, v in a.items()}
    for at in (5, (1 << 22) - 1, 1 << 22, n - 1):
        b["emb"][at] += 0.25
    b["emb"][(1 << 22) + 7] += 2.0   # the largest difference, in the second piece...
    b["emb"][(1 << 23) + 3] += 2.0   # ...and equal to it in the third: the first one is reported
    a["emb"][100] = b["emb"][100] = float("nan")
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    torch.save({"emb": a["emb"].clone()}, tmp_path / "same.pt")
    torch.save({"emb": a["emb"].to(torch.float16)}, tmp_path / "half.pt")
    x, y = a["emb"].double().numpy(), b["emb"].double().numpy()
    ok = ~np.isnan(x)
    report = diff_with_any_thread_count(trove, tmp_path / "a.pt", tmp_path / "b.pt")
    row = {t["key"]: t for t in report["tensors"]}["emb"]
    d = np.abs(x[ok] - y[ok])
    assert row["max_abs"] == d.max()
    assert row["max_abs_at"] == [(1 << 22) + 7]
    assert row["elements_differing"] == 6
    assert row["l2"] == pytest.approx(np.sqrt((d * d).sum()), rel=1e-12)
    assert row["relative_l2"] == pytest.approx(np.sqrt((d * d).sum()) / np.sqrt((x[ok] ** 2).sum()), rel=1e-12)
    # The same bytes in every piece: identical, without a second round.
    r = trove("diff", tmp_path / "a.pt", tmp_path / "same.pt", "--json", "--keys", "emb")
    assert r.code == 0, r
    assert json.loads(r.out)["tensors"][0]["identical"] is True
    # Two dtypes: every piece compared by value.
    row = diff_with_any_thread_count(trove, tmp_path / "a.pt", tmp_path / "half.pt", "--keys", "emb")["tensors"][0]
    h = a["emb"].to(torch.float16).double().numpy()
    d = np.abs(x[ok] - h[ok])
    assert row["max_abs"] == d.max()
    assert row["max_abs_at"] == [int(np.flatnonzero(ok)[d.argmax()])]
    assert row["elements_differing"] == int((d != 0).sum())
