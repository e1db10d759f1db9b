"""`trove stats` against numpy in float64, on checkpoints torch 1.13 makes.

Reference figures: the finite values as float64 (bfloat16 through torch's .float(), complex as
numpy's float64 magnitudes, bool as 0/1), numpy's min, max, mean, std, mean of |x|; counts of
zeros, NaN, +Inf, -Inf and subnormals (nonzero finite values below the dtype's smallest normal).
"""
import json
import math
import os

import numpy as np
import pytest
import torch

from ptfiles import make_big_endian

TINY = {torch.float32: np.finfo(np.float32).tiny, torch.float64: np.finfo(np.float64).tiny,
        torch.float16: 2.0 ** -14, torch.bfloat16: np.finfo(np.float32).tiny,
        torch.complex64: np.finfo(np.float32).tiny, torch.complex128: np.finfo(np.float64).tiny}


def as_float64(t):
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    if t.dtype.is_complex:
        return np.abs(t.contiguous().numpy().astype(np.complex128)).reshape(-1)
    return t.contiguous().numpy().astype(np.float64).reshape(-1)


def reference(t):
    x = as_float64(t)
    fin = x[np.isfinite(x)]
    ref = {"count": x.size, "finite": fin.size, "zeros": int((x == 0).sum()), "nan": int(np.isnan(x).sum()),
           "pos_inf": int((x == np.inf).sum()), "neg_inf": int((x == -np.inf).sum())}
    tiny = TINY.get(t.dtype)
    ref["subnormal"] = None if tiny is None else int(((fin != 0) & (np.abs(fin) < tiny)).sum())
    if fin.size:
        ref.update(min=fin.min(), max=fin.max(), mean=fin.mean(), std=fin.std(), mean_abs=np.abs(fin).mean())
    else:
        ref.update(min=None, max=None, mean=None, std=None, mean_abs=None)
    return ref, fin


def check(got, t, key=""):
    ref, fin = reference(t)
    for k in ("count", "finite", "zeros", "nan", "pos_inf", "neg_inf", "subnormal"):
        assert got[k] == ref[k], (key, k, got[k], ref[k])
    for k in ("min", "max"):
        if t.dtype.is_complex and ref[k] is not None:
            # numpy's vectorised magnitude and the C library's hypot may differ in the last bit.
            assert math.isclose(got[k], ref[k], rel_tol=5e-16), (key, k, got[k], ref[k])
        else:
            assert got[k] == ref[k], (key, k, got[k], ref[k])
    if ref["mean"] is None:
        assert got["mean"] is None and got["std"] is None and got["mean_abs"] is None, (key, got)
        return
    scale = max(ref["mean_abs"], ref["std"], 1e-300)
    for k in ("mean", "std", "mean_abs"):
        assert abs(got[k] - ref[k]) <= 1e-12 * scale, (key, k, got[k], ref[k], scale)


def stats(trove, path, *args):
    r = trove("stats", path, "--json", *args)
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["schema_version"] == 1
    return doc, {t["key"]: t for t in doc["tensors"]}


def sprinkle(t, g):
    """Puts NaN, +Inf, -Inf, zeros and a subnormal into a floating tensor (flat, in place)."""
    flat = t.view(-1)
    n = flat.numel()
    idx = torch.randperm(n, generator=g)[:10]
    specials = [float("nan"), float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.0]
    for i, v in zip(idx.tolist(), specials):
        flat[i] = v
    if t.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        flat[idx[8]] = {torch.float32: 1e-40, torch.float64: 1e-310, torch.float16: 3e-6, torch.bfloat16: 1e-40}[t.dtype]
    return t


def make_checkpoint(path):
    g = torch.Generator().manual_seed(5)
    obj = {}
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        obj[f"{dt}"[6:]] = sprinkle((torch.randn(37, 111, generator=g, dtype=torch.float64) * 3 + 1).to(dt), g)
        obj[f"{dt}"[6:] + "_clean"] = (torch.randn(3000, generator=g, dtype=torch.float64) * 0.01 - 5).to(dt)
    for dt in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        info = torch.iinfo(dt)
        obj[f"{dt}"[6:]] = torch.randint(info.min, info.max, (50, 41), generator=g, dtype=torch.int64).to(dt)
    obj["int64_huge"] = torch.tensor([2 ** 62 + 12345, -(2 ** 63), 2 ** 63 - 1, 0, 7], dtype=torch.int64)
    obj["bool"] = torch.rand(999, generator=g) > 0.3
    c = torch.complex(torch.randn(400, generator=g, dtype=torch.float64), torch.randn(400, generator=g, dtype=torch.float64))
    c[3] = complex(float("nan"), 1.0)
    c[4] = complex(1.0, float("inf"))
    c[5] = 0
    obj["complex128"] = c
    obj["complex64"] = c.to(torch.complex64)
    base = torch.randn(64, 48, generator=g)
    obj["base"] = base
    obj["transposed"] = base.t()
    obj["stepped"] = base[1::3, ::5]
    obj["column"] = base[:, 7]
    obj["expanded"] = torch.randn(5, 1, generator=g).expand(5, 1000)
    obj["bf16_view"] = (base.to(torch.bfloat16))[::2].t()
    obj["scalar"] = torch.tensor(-2.5)
    obj["empty"] = torch.empty(0, 4)
    obj["all_nan"] = torch.full((10,), float("nan"))
    obj["zeros"] = torch.zeros(3, 3)
    torch.save(obj, path)
    return obj


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("stats")
    path = str(d / "all.pt")
    return path, make_checkpoint(path)


def test_every_dtype_and_view_matches_numpy(trove, checkpoint):
    path, obj = checkpoint
    doc, got = stats(trove, path)
    assert list(got) == list(obj)
    for key, t in obj.items():
        assert got[key]["dtype"] == str(t.dtype)[6:]
        assert got[key]["shape"] == list(t.shape)
        check(got[key], t, key)
    s = doc["summary"]
    assert sorted(s["non_finite"]) == sorted(["float32", "float64", "float16", "bfloat16", "complex128", "complex64", "all_nan"])
    assert s["all_zero"] == ["zeros"]
    distinct = {}
    for key, t in obj.items():  # views of one storage with one geometry count once
        distinct[(t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr(),
                  t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)] = t
    # Parameters are the floating and complex tensors (integers and bools are counted apart: the
    # rule of core/tensor_role.h, which info follows too).
    assert s["parameters"] == sum(t.numel() for t in distinct.values() if t.is_floating_point() or t.is_complex())


def table_rows(text, n):
    """The aligned table's header and rows (split at runs of two spaces or more)."""
    import re
    lines = text.splitlines()
    split = lambda l: re.split(r"  +", l.strip())
    return split(lines[1]), {split(l)[0]: split(l) for l in lines[2:2 + n]}


def test_human_table_lists_every_tensor(trove, checkpoint):
    path, obj = checkpoint
    r = trove("stats", path)  # a pipe gets the table people see, aligned, 4 significant digits
    assert r.code == 0, r
    assert "\t" not in r.text
    header, rows = table_rows(r.text, len(obj))
    assert header == ["key", "dtype", "shape", "min", "max", "mean", "std", "zeros", "nan", "inf"]
    lines = r.text.splitlines()[1:2 + len(obj)]
    at = lines[0].index("min")
    assert all(l[at - 2:at] == "  " for l in lines)  # every row's min starts in one column
    assert rows["float32"][8] == "2" and rows["float32"][9] == "2"
    assert float(rows["scalar"][3]) == -2.5
    ref, _ = reference(obj["float64_clean"])
    assert rows["float64_clean"][5] == "%.4g" % ref["mean"]
    assert "non-finite   7" in r.text and "all zero     1: zeros" in r.text


def test_tsv_is_exact_and_precision_is_asked(trove, checkpoint):
    path, obj = checkpoint
    _, got = stats(trove, path)
    r = trove("stats", path, "--tsv")
    assert r.code == 0, r
    lines = r.text.splitlines()
    assert lines[1].split("\t")[:4] == ["key", "dtype", "shape", "min"]
    rows = {l.split("\t")[0]: l.split("\t") for l in lines[2:2 + len(obj)]}
    for key in ("float64_clean", "float32", "bfloat16"):
        assert [float(x) for x in rows[key][3:7]] == [got[key][k] for k in ("min", "max", "mean", "std")], key
    for n, fmt in ((1, "%.1g"), (6, "%.6g")):
        r = trove("stats", path, "--precision", str(n), "float64_clean")
        assert r.code == 0, r
        _, rows = table_rows(r.text, 1)
        assert rows["float64_clean"][5] == fmt % got["float64_clean"]["mean"]
    r = trove("stats", path, "--precision", "17", "float64_clean")
    _, rows = table_rows(r.text, 1)
    assert float(rows["float64_clean"][5]) == got["float64_clean"]["mean"]
    for bad in ("0", "18"):
        assert trove("stats", path, "--precision", bad).code == 2
    assert trove("stats", path, "--precision", "5", "--tsv").code == 2


def test_table_at_80_and_120_columns_on_a_terminal(trove, checkpoint):
    import re
    from test_diff_cli import on_terminal

    path, obj = checkpoint
    piped = trove("stats", path).text
    want_header, want_rows = table_rows(piped, len(obj))
    for columns in (80, 120):
        out = re.sub("\x1b\\[[0-9;]*m", "", on_terminal(["stats", path], columns))
        lines = out.splitlines()
        header, table = lines[1], lines[2:2 + len(obj)]
        # Ten columns do not fit 80 with two spaces between them: the gaps narrow to one and the
        # key column is cut in the middle (cli/table.h); the cells are the pipe's, in the columns
        # the header's words start.
        # At 120 every row fits; at 80 this file's ten columns of wide cells (complex128, int16's
        # -3.275e+04, nan and inf) still take 91 at the floor, the long-key file below fits.
        assert columns == 80 or all(len(l) <= columns for l in [header] + table), columns
        assert columns == 120 or len(header) < len(piped.splitlines()[1]), header
        starts = [m.start() for m in re.finditer(r"\S+", header)]
        assert header.split() == want_header, columns
        cells = lambda l: [l[a:b].strip() for a, b in zip(starts, starts[1:] + [len(l) + 1])]
        got = [cells(l) for l in table]
        assert [row[1:] for row in got] == [want_rows[k][1:] for k in want_rows], columns
        for row, key in zip(got, want_rows):
            shown = row[0]
            if "\u2026" in shown:  # cut in the middle: both ends kept
                head, tail = shown.split("\u2026")
                assert key.startswith(head) and key.endswith(tail) and len(shown) >= 12, (shown, key)
            else:
                assert shown == key, columns
        assert "\t" not in out
        summary = out[out.index("summary"):].splitlines()
        assert all(len(l) <= columns for l in summary), summary  # long lists wrap or end in "..."
    long_keys = str(checkpoint[0]) + ".long.pt"
    g = torch.Generator().manual_seed(30)  # fixed values: the columns' widths depend on them
    torch.save({"model.layers.%d.self_attention.query_key_value.weight" % i: torch.randn(4, 3, generator=g)
                for i in range(3)}, long_keys)
    out = on_terminal(["stats", long_keys], 80)
    table = out.splitlines()[1:5]
    # Long keys cut in the middle (down to 20 columns, cli/table.h), each row one line within 80
    # columns: a healthy file's table has no nan and inf columns (the summary counts them).
    assert all(len(l) <= 80 and l.startswith("  ") for l in table), table
    assert table[0].split() == ["key", "dtype", "shape", "min", "max", "mean", "std", "zeros"], table
    assert all(re.match("  model[.]lay\\S*\u2026\\S*lue[.]weight  float32  \\[4, 3\\]", l) for l in table[1:]), table
    assert "non-finite   0" in out
    tsv = trove("stats", long_keys, "--tsv").text.splitlines()
    assert tsv[1].split("\t")[-3:] == ["zeros", "nan", "inf"]  # scripts get every column
    wide = on_terminal(["stats", long_keys], 120).splitlines()[1:5]
    assert all(len(l) <= 120 for l in wide), wide


def test_large_tensor_precision_and_thread_count(trove, tmp_path):
    """Many chunks of work, a large mean against a small spread: float64 to 1e-12, and the same
    bits from 1, 2 and 3 threads."""
    g = torch.Generator().manual_seed(9)
    t = torch.randn(3_000_001, generator=g, dtype=torch.float64) * 1e-3 + 1e4
    t[17] = float("nan")
    obj = {"big": t, "big32": t.float(), "strided": t[:3_000_000].view(1000, 3000)[:, ::3].t()}
    path = str(tmp_path / "big.pt")
    torch.save(obj, path)
    outs = [stats(trove, path, "--threads", str(n))[1] for n in (1, 2, 3)]
    assert outs[0] == outs[1] == outs[2]
    for key, t in obj.items():
        check(outs[0][key], t, key)


def test_keys_and_globs(trove, checkpoint, tmp_path):
    path, _ = checkpoint
    _, got = stats(trove, path, "float32", "int8")
    assert list(got) == ["float32", "int8"]
    _, got = stats(trove, path, "--keys", "float*")
    assert sorted(got) == sorted(["float32", "float32_clean", "float64", "float64_clean", "float16", "float16_clean"])
    r = trove("stats", path, "nope")
    assert r.code == 2 and "no tensor 'nope'" in r.errtext
    r = trove("stats", path, "float23")
    assert r.code == 2 and "did you mean" in r.errtext and "'float32'" in r.errtext, r
    # Positional keys are globs as in cat, an exact key first.
    _, got = stats(trove, path, "*_clean", "int8", "float32_clean")
    assert list(got) == ["float32_clean", "float64_clean", "float16_clean", "bfloat16_clean", "int8"]
    r = trove("stats", path, "nothing*")
    assert r.code == 2 and "no tensor matching 'nothing*'" in r.errtext, r
    starred = str(tmp_path / "starred.pt")
    torch.save({"a*": torch.ones(2), "ab": torch.zeros(2)}, starred)
    # A key holding '*' named as the file spells it is that key (an exact key before a glob).
    assert len(stats(trove, starred, "a*")[1]) == 1
    assert len(stats(trove, starred, "a?")[1]) == 1  # a glob: 'ab' only (the other key is 'a%2A')


def test_check_finite_exit_codes(trove, checkpoint, tmp_path):
    path, _ = checkpoint
    r = trove("stats", path, "--check-finite")
    assert r.code == 1, r
    assert "float32: 2 NaN, 1 +Inf, 1 -Inf" in r.text
    assert "7 of " in r.text
    r = trove("stats", path, "--check-finite", "--keys", "*_clean", "int8")
    assert r.code == 0, r
    assert "finite" in r.text
    clean = str(tmp_path / "clean.pt")
    torch.save({"w": torch.randn(10), "n": torch.tensor([1, 2])}, clean)
    assert trove("stats", clean, "--check-finite").code == 0
    bad = str(tmp_path / "bad.pt")
    torch.save({"w": torch.tensor([1.0, float("inf")], dtype=torch.float16)}, bad)
    r = trove("stats", bad, "--check-finite", "--json")
    assert r.code == 1 and json.loads(r.out)["summary"]["non_finite"] == ["w"]


@pytest.mark.parametrize("bins", [1, 7, 50])
def test_histograms_equal_numpy(trove, checkpoint, bins):
    path, obj = checkpoint
    _, got = stats(trove, path, "--hist", str(bins))
    for key, t in obj.items():
        _, fin = reference(t)
        h, lh = got[key]["histogram"], got[key]["log10_abs_histogram"]
        if fin.size == 0:
            assert h is None and lh is None
            continue
        edges = np.array(h["edges"])
        assert len(edges) == bins + 1 and len(h["counts"]) == bins
        lo, hi = fin.min(), fin.max()
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        if t.dtype.is_complex:  # magnitudes may differ from numpy's in the last bit (see check)
            assert np.allclose(edges, np.linspace(lo, hi, bins + 1), rtol=1e-15, atol=0), key
            fin = np.clip(fin, edges[0], edges[-1])
        else:
            assert np.array_equal(edges, np.linspace(lo, hi, bins + 1)), key
        assert h["counts"] == np.histogram(fin, bins=edges)[0].tolist(), key
        nz = fin[fin != 0]
        if nz.size == 0:
            assert lh is None
            continue
        logs = np.log10(np.abs(nz))
        ledges = np.array(lh["edges"])
        # numpy's vectorised log10 may differ from the C library's in the last bit at the ends.
        assert math.isclose(ledges[0], logs.min(), rel_tol=0, abs_tol=1e-12) or ledges[0] == logs.min() - 0.5
        logs = np.clip(logs, ledges[0], ledges[-1])
        assert lh["counts"] == np.histogram(logs, bins=ledges)[0].tolist(), key


def test_histogram_text(trove, checkpoint):
    path, _ = checkpoint
    r = trove("stats", path, "--hist", "8", "--keys", "float64_clean")
    assert r.code == 0, r
    assert "histograms" in r.text
    row = [l for l in r.text.splitlines() if l.startswith("  float64_clean ")][-1].split()
    assert len(row[1]) == 8 and "█" in row[1]
    r = trove("stats", path, "--hist", "8", "--keys", "float64_clean", "--tsv")
    row = [l for l in r.text.splitlines() if l.startswith("float64_clean\t")][-1].split("\t")
    assert len(row[1]) == 8 and "█" in row[1]


def test_big_endian(trove, tmp_path):
    path, obj = make_big_endian(str(tmp_path))
    _, got = stats(trove, path)
    for key, t in obj.items():
        check(got[key], t, key)


def test_tensordict_dir_tdz_and_pskd(trove, tmp_path):
    g = torch.Generator().manual_seed(4)
    obj = {"obs": torch.randn(100, 3, 4, generator=g), "act": torch.randint(0, 17, (100, 2), generator=g),
           "rew": torch.randn(100, generator=g, dtype=torch.float64)}
    obj["obs"][5, 1, 2] = float("nan")
    src = str(tmp_path / "src.pt")
    torch.save(obj, src)
    for out in ("td", "td.tdz"):
        dst = str(tmp_path / out)
        assert trove("convert", src, dst).code == 0
        _, got = stats(trove, dst)
        for key, t in obj.items():
            check(got[key], t, key)
    # .psk.d: one sample per row, one leaf per tensor; per-leaf figures over all samples.
    dst = str(tmp_path / "samples.psk.d")
    assert trove("convert", src, dst, "--keys", "act", "--keys", "rew").code == 0
    doc, got = stats(trove, dst)
    assert doc["format"] == "pskd"
    leaves = list(got.values())
    assert [l["shape"] for l in leaves] == [[100, 2], [100]]
    check(leaves[0], obj["act"].to(torch.uint8))
    check(leaves[1], obj["rew"])


def test_skipped_meta_tensor(trove, tmp_path):
    path = str(tmp_path / "meta.pt")
    torch.save({"m": torch.empty(3, 4, device="meta"), "w": torch.ones(2)}, path)
    r = trove("stats", path, "--json")
    if r.code != 0:
        pytest.skip("meta tensors unreadable here: " + r.errtext)
    doc = json.loads(r.out)
    m = [t for t in doc["tensors"] if t["key"] == "m"][0]
    assert "skipped" in m and "meta" in m["skipped"]
    assert [t for t in doc["tensors"] if t["key"] == "w"][0]["mean"] == 1.0


def test_pskd_written_by_hand_per_leaf_over_all_samples(trove, tmp_path):
    """A version 2 .psk.d laid out by this test from the format's table (f32 leaf, idx leaf,
    bf16 leaf: an 18-byte sample, so the f32 leaf is misaligned and the others strided)."""
    import struct
    g = torch.Generator().manual_seed(8)
    count = 5000
    reals = torch.randn(count, 3, generator=g)
    reals[10, 1] = float("nan")
    reals[11, 2] = float("inf")
    idx = torch.randint(0, 300, (count, 2), generator=g).to(torch.int32)
    scal = (torch.randn(count, generator=g) * 100).to(torch.bfloat16)
    type_text = "(ℝ[3], idx[300][2], ℝ[])".encode()
    header = b"PSKD" + struct.pack("<HI", 2, len(type_text)) + type_text + struct.pack("<QI", count, 3) + bytes([1, 0, 2])
    r32 = reals.numpy().astype("<f4")
    i16 = idx.numpy().astype("<u2")
    b16 = scal.view(torch.int16).numpy().astype("<i2")
    body = b"".join(r32[i].tobytes() + i16[i].tobytes() + b16[i].tobytes() for i in range(count))
    path = tmp_path / "hand.psk.d"
    path.write_bytes(header + body)
    doc, got = stats(trove, str(path))
    assert doc["format"] == "pskd"
    leaves = list(got.values())
    assert [l["dtype"] for l in leaves] == ["float32", "uint16", "bfloat16"]
    check(leaves[0], reals)
    check(leaves[1], idx)
    check(leaves[2], scal)
    assert doc["summary"]["non_finite"] == [leaves[0]["key"]]


def test_file_truncated_while_threads_read_it(trove, tmp_path):
    """Another program truncates the file mid-run: each worker thread's guard turns the SIGBUS
    into `FILE: changed while being read` (exit 2), never a signal."""
    import shutil
    import signal
    import subprocess
    import time
    from conftest import BIN_DIR
    src = tmp_path / "src.pt"
    torch.save({f"w{i}": torch.randn(1 << 22) for i in range(8)}, src)  # 128 MiB
    codes = []
    for k, delay in enumerate((0.0, 0.02, 0.05, 0.1, 0.2, 0.4)):
        path = tmp_path / f"v{k}.pt"
        shutil.copyfile(src, path)
        p = subprocess.Popen([os.path.join(BIN_DIR, "trove"), "stats", str(path), "--threads", "2", "--hist", "8"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        subprocess.run(["truncate", "-s", "65536", str(path)], check=True)
        err = p.stderr.read().decode()
        code = p.wait(timeout=300)
        assert code != -signal.SIGBUS and code >= 0, f"killed by signal {-code}: {err}"
        assert code in (0, 2), err
        if code == 2:  # caught mid-read, or the file was already cut when opened
            assert err.startswith("trove: error: ") and f"v{k}.pt" in err, err
        codes.append(err)
    assert any("changed while being read" in e for e in codes), codes  # some run was caught mid-read


@pytest.mark.parametrize("bins", [3, 64, 4096])
def test_histograms_exact_where_bin_guesses_are_far_off(trove, tmp_path, bins):
    """Bins guessed arithmetically for a block at a time are corrected against the edges: bins
    narrower than the values' spacing (edges that round to the same double), subnormals beside
    normal values (whose rough log10 is far off), NaN and Inf between counted values, tails of a
    block shorter than a vector. The counts still equal numpy's with the same edges."""
    g = torch.Generator().manual_seed(3)
    mixed = torch.tensor([1e-310, 5e-324, 1e-300, 1.0, -2.0, float("nan"), 0.0, 3e-320, 1e300, float("-inf"), -7e-315],
                         dtype=torch.float64)
    obj = {"narrow": torch.tensor([1e16 + 2 * k for k in range(7)], dtype=torch.float64),
           "mixed": mixed,
           "mixed_long": mixed.repeat(1001),
           "subnormal32": torch.randn(4099, generator=g) * 1e-39,
           "wide": torch.cat([torch.randn(5003, generator=g) * 10.0 ** e for e in (-30, 0, 30)])}
    path = tmp_path / "edges.pt"
    torch.save(obj, path)
    _, got = stats(trove, path, "--hist", str(bins))
    for key, t in obj.items():
        x = as_float64(t)
        fin = x[np.isfinite(x)]
        h, lh = got[key]["histogram"], got[key]["log10_abs_histogram"]
        assert h["counts"] == np.histogram(fin, bins=np.array(h["edges"]))[0].tolist(), key
        logs = np.log10(np.abs(fin[fin != 0]))
        ledges = np.array(lh["edges"])
        counts = np.histogram(np.clip(logs, ledges[0], ledges[-1]), bins=ledges)[0]
        # numpy's vectorised log10 may put a value lying on an edge in the next bin: the totals agree,
        # and every bin within one value of numpy's.
        assert sum(lh["counts"]) == counts.sum() == logs.size, key
        assert max(abs(a - b) for a, b in zip(lh["counts"], counts.tolist())) <= 1, key
