"""`--io auto|mmap|pread` (trove/io_mode.h, docs/performance.md "Reading input files"): the
commands that read every tensor's bytes (cat, convert, verify, stats, diff) print and write the
same bytes whichever way the input comes in, on .pt, safetensors, GGUF and tensordict inputs, and
auto does so on hot, cold and partly cached files (it reads what the page cache holds with pread
and the rest through the mapping); a file truncated under a pread or auto pass is the same clear
error as under a mapping; a bad mode or thread count is a usage error naming the option."""
import os

import numpy as np
import pytest
import torch

from test_gguf import random_blocks, tensor_of, write_gguf
from test_hostile_mapped import CHANGED, save_big_pt, truncated_mid_run

MODES = ("mmap", "pread", "auto")


def state_dict():
    g = torch.Generator().manual_seed(30)
    sd = {
        "big": torch.randn(3 << 20, generator=g),  # 12 MiB: several 8 MiB windows, a ragged end
        "half": torch.randn(1000, 37, generator=g).half(),
        "ints": torch.arange(-5000, 5000, dtype=torch.int64),
        "flags": torch.rand(999, generator=g) > 0.5,
        "bf": torch.randn(4096, generator=g).bfloat16(),
    }
    sd["big"][::4099] = float("nan")
    return sd


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One file of each format, the same tensors where the format holds them."""
    from conftest import run_tool
    d = tmp_path_factory.mktemp("io")
    torch.save(state_dict(), d / "m.pt")
    # A non-contiguous view: its storage is walked by strides, not streamed.
    torch.save({"t": torch.randn(300, 200).t(), "w": torch.randn(1 << 20)}, d / "strided.pt")
    for target, extra in (("m.safetensors", []), ("m.tdz", []), ("mdir", ["--to", "tensordict"])):
        r = run_tool("trove", "convert", d / "m.pt", d / target, *extra)
        assert r.code == 0, r
    rng = np.random.default_rng(30)
    tensors = [tensor_of("f32", rng.standard_normal((512, 1024)).astype("<f4")),
               tensor_of("f16", rng.standard_normal((64, 96)).astype("<f2")),
               ("q8", 8, [256, 64], random_blocks(rng, 8, 64 * 256 // 32, extreme=False)),
               ("q4k", 12, [256, 16], random_blocks(rng, 12, 16, extreme=False))]
    (d / "m.gguf").write_bytes(write_gguf([("general.architecture", 8, "x"), ("general.quantization_version", 4, 2)], tensors))
    return d


FILES = ["m.pt", "m.safetensors", "m.gguf", "mdir", "m.tdz", "strided.pt"]


def same_in_every_mode(trove, *args, out=None):
    """Runs the command once per mode; returns the results (with `out`'s bytes, when given)."""
    results = []
    for mode in MODES:
        if out is not None and out.exists():
            out.unlink()
        r = trove(*args, "--io", mode)
        assert r.code in (0, 1), (mode, r)
        results.append((r.code, r.out, out.read_bytes() if out is not None else None))
    assert all(r == results[0] for r in results), args
    return results[0]


@pytest.mark.parametrize("name", FILES)
def test_cat_every_tensor_is_the_same(trove, inputs, name):
    code, out, _ = same_in_every_mode(trove, "cat", inputs / name, "*", "--raw")
    assert code == 0 and len(out) > 100_000
    code, out, _ = same_in_every_mode(trove, "cat", inputs / name, "*", "--json")
    assert code == 0


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("target", ["out.pt", "out.safetensors"])
def test_convert_is_the_same(trove, inputs, tmp_path, name, target):
    for extra in ([], ["--dtype", "bfloat16"]):
        if name == "m.gguf":
            extra = ["--dequantize"] + extra
        code, _, written = same_in_every_mode(trove, "convert", inputs / name, tmp_path / target, *extra,
                                              out=tmp_path / target)
        assert code == 0 and len(written) > 10_000


@pytest.mark.parametrize("name", FILES)
def test_verify_and_stats_are_the_same(trove, inputs, name):
    code, out, _ = same_in_every_mode(trove, "verify", inputs / name, "--json")
    assert code == 0 and b'"ok":true' in out.replace(b" ", b"")
    for threads in (["--threads", "1"], ["--threads", "2"]):
        code, out, _ = same_in_every_mode(trove, "stats", inputs / name, "--json", *threads)
        assert code == 0


def test_diff_is_the_same(trove, inputs):
    code, out, _ = same_in_every_mode(trove, "diff", inputs / "m.pt", inputs / "m.safetensors", "--json")
    assert code == 0
    code, out, _ = same_in_every_mode(trove, "diff", inputs / "m.pt", inputs / "strided.pt", "--json")
    assert code == 1


def evict(path, keep_every_other=False):
    """Drops the file's pages from the page cache (it is written back first); with
    keep_every_other, reads every other MiB back in, so that auto meets windows the cache holds
    in part."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        size = os.fstat(fd).st_size
        for at in range(0, size if keep_every_other else 0, 2 << 20):
            os.pread(fd, 1 << 20, at)
    finally:
        os.close(fd)


@pytest.mark.parametrize("keep_every_other", [False, True], ids=["cold", "partly-cached"])
def test_auto_on_cold_and_partly_cached_files_gives_the_same_bytes(trove, inputs, keep_every_other):
    commands = [["cat", inputs / "m.pt", "*", "--raw"], ["stats", inputs / "m.gguf", "--json", "--threads", "1"],
                ["verify", inputs / "m.pt", "--json"], ["stats", inputs / "m.safetensors", "--json", "--threads", "2"],
                ["diff", inputs / "m.pt", inputs / "m.safetensors", "--json"]]
    for command in commands:
        expected = trove(*command, "--io", "mmap")
        assert expected.code == 0 and len(expected.out) > 100, expected
        for path in command[1:]:
            if isinstance(path, os.PathLike):
                evict(path, keep_every_other)
        got = trove(*command, "--io", "auto")
        assert (got.code, got.out) == (expected.code, expected.out), command


def test_damaged_crc_is_found_in_every_mode(trove, tmp_path):
    """verify's CRC-32s read the stored bytes in pread and auto modes too: a flipped byte is a finding."""
    f = tmp_path / "bad.pt"
    torch.save({"w": torch.zeros(1 << 20)}, f)
    raw = bytearray(f.read_bytes())
    at = len(raw) // 2
    raw[at] ^= 0xFF
    f.write_bytes(bytes(raw))
    for mode in MODES:
        r = trove("verify", f, "--io", mode)
        assert r.code == 1 and "CRC" in r.out.decode().upper(), (mode, r)


@pytest.mark.parametrize("mode", ["pread", "auto"])
@pytest.mark.parametrize("command", [["cat", "w", "--raw"], ["verify"], ["convert", "--dtype", "float64"]])
def test_truncated_under_pread_is_a_clear_error(tmp_path, command, mode):
    f = tmp_path / "m.pt"
    args = [command[0], f, *command[1:]]
    if command[0] == "convert":
        args = ["convert", f, tmp_path / "out.pt", *command[1:]]
    if command[0] == "cat":
        args = ["cat", f, "w", "--raw", "--force"]
    r = truncated_mid_run("trove", *args, "--io", mode, victim=f, make=lambda: save_big_pt(f), watch=tmp_path,
                          allowed=[f])
    assert CHANGED in r.errtext
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize("command", ["cat", "convert", "verify", "stats", "diff"])
def test_bad_io_mode_is_a_usage_error(trove, inputs, tmp_path, command):
    args = {"cat": ["cat", inputs / "m.pt", "ints"], "convert": ["convert", inputs / "m.pt", tmp_path / "o.pt"],
            "verify": ["verify", inputs / "m.pt"], "stats": ["stats", inputs / "m.pt"],
            "diff": ["diff", inputs / "m.pt", inputs / "m.pt"]}[command]
    r = trove(*args, "--io", "bogus")
    assert r.code == 2 and "--io" in r.errtext and "auto, mmap or pread" in r.errtext and "'bogus'" in r.errtext, r
    assert not (tmp_path / "o.pt").exists()


@pytest.mark.parametrize("command", ["convert", "verify", "stats", "diff"])
@pytest.mark.parametrize("word", ["-1", "many", "1.5"])
def test_bad_thread_count_names_the_option_and_range(trove, inputs, tmp_path, command, word):
    args = {"convert": ["convert", inputs / "m.pt", tmp_path / "o.pt"], "verify": ["verify", inputs / "m.pt"],
            "stats": ["stats", inputs / "m.pt"], "diff": ["diff", inputs / "m.pt", inputs / "m.pt"]}[command]
    r = trove(*args, f"--threads={word}")
    assert r.code == 2, r
    assert "--threads" in r.errtext and "0 (every CPU" in r.errtext and "1 to 64" in r.errtext, r.errtext
    assert "Could not convert" not in r.errtext


def test_python_threads_and_io(inputs, tmp_path):
    """trove.set_threads/get_threads and trove.set_io/get_io: the settings the commands' --threads
    and --io make, for the process; bad values are UsageErrors."""
    import os
    import subprocess
    import sys
    pydir = os.path.join(os.environ.get("TROVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build")),
                         "python")
    script = f"""
import os, trove
cpus = min(len(os.sched_getaffinity(0)), 64)
assert trove.get_threads() == cpus, trove.get_threads()
trove.set_threads(1); assert trove.get_threads() == 1
trove.set_threads(3); assert trove.get_threads() == 3
trove.set_threads(1000); assert trove.get_threads() == 64
trove.set_threads(0); assert trove.get_threads() == cpus
for bad in (-1, 1.5, "2", True):
    try:
        trove.set_threads(bad)
        raise SystemExit(f"set_threads({{bad!r}}) accepted")
    except trove.UsageError as e:
        assert "threads" in str(e), e
assert trove.get_io() == "auto"
written = []
for mode in ("mmap", "pread"):
    trove.set_io(mode)
    assert trove.get_io() == mode
    out = {str(tmp_path)!r} + "/o_" + mode + ".safetensors"
    trove.convert({str(inputs / "m.pt")!r}, out, dtype="bfloat16")
    written.append(open(out, "rb").read())
    assert trove.verify({str(inputs / "m.tdz")!r}).ok
    assert trove.stats({str(inputs / "m.pt")!r})["big"]["nan"] > 0
assert written[0] == written[1]
for bad in ("bogus", "", 3):
    try:
        trove.set_io(bad)
        raise SystemExit(f"set_io({{bad!r}}) accepted")
    except trove.UsageError as e:
        assert "io" in str(e), e
assert trove.get_io() == "pread"
"""
    env = dict(os.environ, PYTHONPATH=pydir)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr


def test_opening_a_cold_archive_reads_its_headers_not_its_payloads(tmp_path, trove):
    """info of a cold .pt of many tensors reads the central directory and each local header
    (with pread, the file marked for random access: docs/performance.md), not the read-ahead
    around each header: a few MB of a 200 MB file (util-linux fincore counts what was read)."""
    import shutil
    import subprocess
    if shutil.which("fincore") is None:
        pytest.skip("util-linux fincore is not installed")
    path = tmp_path / "many.pt"
    torch.save({f"w{i}": torch.zeros(1 << 19) for i in range(100)}, path)  # 100 x 2 MiB
    evict(path)
    r = trove("info", path)
    assert r.code == 0, r
    resident = int(subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                                  capture_output=True, text=True, check=True).stdout.split()[0])
    assert resident < path.stat().st_size // 10, (resident, path.stat().st_size)
