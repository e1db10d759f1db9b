"""Long commands are never silent, long output pages (issue 29).

On a terminal, verify, diff, stats, report and cat (--raw, or text into a file) show a progress line once their work lasts a
second (erased at the end) and report, which prints nothing else, says what it wrote; in a pipe
and with --json nothing extra appears on either stream. Output taller than the terminal goes
through $TROVE_PAGER, else $PAGER (else less), as git's does: a small pager script records what it
got. TROVE_PROGRESS_DELAY=0 shows the progress line however short the work, so no test depends on
how long the work takes; the files are sparse (no disk is used for their zeros)."""
import json
import os
import re
import stat
import struct

import pytest

from test_diff_cli import on_terminal

PROGRESS = re.compile(r"\r[0-9.]+/[0-9.]+ MB  [0-9]+ MB/s  [0-9]+ s left")


def sparse_safetensors(path, dtype, count, key="w"):
    """A .safetensors file of `count` zeros of `dtype`, written as a hole."""
    size = {"F32": 4, "BF16": 2}[dtype] * count
    header = json.dumps({key: {"dtype": dtype, "shape": [count], "data_offsets": [0, size]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + size)
    return path


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """64 MiB of float32 zeros and the same values as 32 MiB of bfloat16 (the dtypes differ, so
    comparing them decodes every element)."""
    d = tmp_path_factory.mktemp("large")
    n = 16 << 20
    return sparse_safetensors(d / "a.safetensors", "F32", n), sparse_safetensors(d / "b.safetensors", "BF16", n)


@pytest.fixture
def pager(tmp_path):
    """A pager that records its standard input and its LESS variable."""
    script = tmp_path / "pager.sh"
    got = tmp_path / "paged.txt"
    script.write_text(f'#!/bin/sh\necho "LESS=$LESS" > "{got}.env"\ncat > "{got}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, got


def many_tensors(tmp_path, n=120, key=lambda i: f"layer.{i}.weight", name="many.safetensors"):
    """A .safetensors file of `n` small tensors: info's table is taller than a 50-row terminal."""
    entries, data = {}, b""
    for i in range(n):
        entries[key(i)] = {"dtype": "F32", "shape": [2], "data_offsets": [len(data), len(data) + 8]}
        data += struct.pack("<2f", i, -i)
    header = json.dumps(entries).encode()
    path = tmp_path / name
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


# ---- progress and the closing line


NOW = {"TROVE_PROGRESS_DELAY": "0"}


def test_short_work_shows_no_progress_by_default(tmp_path):
    """Work shorter than the default second shows no line: a small file's diff on a terminal."""
    small = sparse_safetensors(tmp_path / "s.safetensors", "F32", 4)
    out = on_terminal(["diff", small, small], 120)
    assert "MB/s" not in out and "\r" not in out.replace("\r\n", ""), out[-600:]
    out = on_terminal(["diff", small, small], 120, {"TROVE_PROGRESS_DELAY": "not a number"})
    assert "MB/s" not in out, out[-600:]
    out = on_terminal(["diff", small, small], 120, NOW)
    assert PROGRESS.search(out), out[-600:]


def test_diff_and_stats_show_progress_on_a_terminal_and_erase_it(large):
    a, b = large
    out = on_terminal(["diff", a, b, "--threads", "1"], 120, NOW)
    assert PROGRESS.search(out), out[-600:]
    assert "\r\x1b[K" in out  # erased before the table
    assert out.splitlines()[-1].startswith("different: 1 common tensors"), out[-600:]
    out = on_terminal(["stats", a, "--threads", "1", "--hist", "4"], 120, NOW)
    assert PROGRESS.search(out) and "\r\x1b[K" in out, out[-600:]
    assert "summary" in out


def test_nothing_extra_in_a_pipe_or_with_json(large, trove, monkeypatch):
    monkeypatch.setenv("TROVE_PROGRESS_DELAY", "0")
    a, b = large
    r = trove("diff", a, b, "--threads", "1")
    assert r.err == b"" and b"MB/s" not in r.out and b"\r" not in r.out, r
    r = trove("stats", a, "--json")
    assert r.err == b"" and json.loads(r.out)["command"] == "stats", r
    r = trove("verify", a)
    assert r.err == b"" and r.text.count("\n") == 1, r


def test_json_on_a_terminal_has_no_progress(large):
    a, b = large
    out = on_terminal(["diff", a, b, "--threads", "1", "--json"], 120, NOW)
    assert "MB/s" not in out and "\r" not in out and json.loads(out)["command"] == "diff", out[-600:]


def stderr_on_terminal(args):
    """Runs trove with stdout into a pipe read at most 1 MiB a millisecond and stderr on a
    pseudo-terminal; returns (bytes read from stdout, stderr)."""
    import pty
    import subprocess
    import threading
    import time

    import conftest

    master, slave = pty.openpty()
    p = subprocess.Popen([os.path.join(conftest.BIN_DIR, "trove")] + [str(x) for x in args], stdout=subprocess.PIPE,
                         stderr=slave)
    try:
        import fcntl
        fcntl.fcntl(p.stdout.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ: fewer, larger reads
    except OSError:
        pass
    read = [0]

    def drain():
        unpaused = 0
        while True:
            chunk = p.stdout.read1(1 << 20)
            if not chunk:
                return
            read[0] += len(chunk)
            unpaused += len(chunk)
            if unpaused >= 1 << 20:
                unpaused -= 1 << 20
                time.sleep(0.001)

    reader = threading.Thread(target=drain)
    reader.start()
    got = conftest.read_terminal(master, slave, p)
    reader.join()
    assert p.returncode == 0, got
    return read[0], got.decode("utf-8")


def test_cat_raw_into_a_pipe_shows_progress_on_the_terminal(large, tmp_path, trove, monkeypatch):
    monkeypatch.setenv("TROVE_PROGRESS_DELAY", "0")
    a, b = large
    size, err = stderr_on_terminal(["cat", a, "w", "--raw"])
    assert size == 64 << 20 and PROGRESS.search(err) and err.endswith("\r\x1b[K"), err[-400:]
    r = trove("cat", sparse_safetensors(tmp_path / "s.safetensors", "F32", 4), "w", "--raw")
    assert r.err == b"" and r.out == bytes(16), r


def test_cat_text_into_a_file_shows_progress_on_the_terminal(large, tmp_path, trove, monkeypatch):
    """`cat FILE '*' --full > all.txt` prints nothing on the terminal but its progress line; on
    the terminal itself the text shows, and --json is left as it is."""
    monkeypatch.setenv("TROVE_PROGRESS_DELAY", "0")
    a, _ = large
    small = sparse_safetensors(tmp_path / "t.safetensors", "F32", 1000)
    size, err = stderr_on_terminal(["cat", small, "w", "--full"])
    assert size > 1000 and PROGRESS.search(err) and err.endswith("\r\x1b[K"), err[-400:]
    # The whole text went to stdout, untouched by the line.
    r = trove("cat", small, "w", "--full")
    assert r.code == 0 and r.err == b"" and r.out.count(b"0.") == 1000 and b"\r" not in r.out, r.out[:200]
    size, err = stderr_on_terminal(["cat", small, "w", "--json"])
    assert err == "", err
    out = on_terminal(["cat", a, "w"], 80, {"TROVE_PROGRESS_DELAY": "0"})
    assert not PROGRESS.search(out) and out.startswith("w: float32 [16777216]"), out[:300]


def test_report_says_what_it_wrote_on_a_terminal_only(tmp_path, trove):
    src = sparse_safetensors(tmp_path / "m.safetensors", "F32", 1024)
    out = on_terminal(["report", src, "-o", tmp_path / "r.html"], 80)
    line = out.strip().splitlines()[-1]
    assert re.fullmatch(r"wrote .*r\.html: 1 tensor, 4\.00 KiB in [0-9.]+ s", line), out
    r = trove("report", src, "-o", tmp_path / "r2.html")
    assert r.code == 0 and r.out == b"" and r.err == b"", r
    out = on_terminal(["report", src, src, "-o", tmp_path / "r3.html"], 80)
    assert "compared with" in out.strip().splitlines()[-1], out


# ---- the pager


def test_output_taller_than_the_terminal_goes_through_the_pager(tmp_path, pager):
    script, got = pager
    path = many_tensors(tmp_path)
    out = on_terminal(["info", path], 120, {"PAGER": str(script)})
    paged = got.read_text()
    assert "layer.119.weight" in paged and "layer.119.weight" not in out, (out, paged)
    assert paged.startswith(str(path)) and paged.count("\n") > 120
    # As git: LESS=FRX when LESS is unset, LESS kept when set.
    assert (tmp_path / "paged.txt.env").read_text().strip() == "LESS=FRX"
    on_terminal(["info", path], 120, {"PAGER": str(script), "LESS": "-S"})
    assert (tmp_path / "paged.txt.env").read_text().strip() == "LESS=-S"
    # The table is still sized for the terminal, not for a pipe (sizes for people).
    assert re.search(r"^  tensors +120$", paged, re.M) and "8 B" in paged, paged[:2000]


def test_trove_pager_comes_first_and_empty_or_cat_turns_it_off(tmp_path, pager):
    script, got = pager
    path = many_tensors(tmp_path)
    on_terminal(["stats", path], 120, {"TROVE_PAGER": str(script), "PAGER": "false"})
    assert "layer.119.weight" in got.read_text()
    got.unlink()
    for env in ({"TROVE_PAGER": "", "PAGER": str(script)}, {"PAGER": "cat"}, {"TROVE_PAGER": "cat", "PAGER": str(script)}):
        out = on_terminal(["info", path], 120, env)
        assert "layer.119.weight" in out and not got.exists(), env


def test_no_pager_json_short_output_and_pipes_print_directly(tmp_path, pager, trove):
    script, got = pager
    path = many_tensors(tmp_path)
    env = {"PAGER": str(script)}
    assert "layer.119.weight" in on_terminal(["info", path, "--no-pager"], 120, env)
    assert json.loads(on_terminal(["info", path, "--json"], 120, env))["command"] == "info"
    short = many_tensors(tmp_path, n=3, name="short.safetensors")
    assert "layer.2.weight" in on_terminal(["info", short], 120, env)
    assert not got.exists()
    r = trove("info", path)
    assert r.code == 0 and "layer.119.weight" in r.text


def test_a_pager_not_found_prints_directly(tmp_path):
    path = many_tensors(tmp_path)
    out = on_terminal(["info", path], 120, {"PAGER": str(tmp_path / "no-such-pager")})
    assert "layer.119.weight" in out and "not found" not in out, out[-400:]
    out = on_terminal(["info", path], 120, {"PAGER": "no-such-pager-anywhere --flag"})
    assert "layer.119.weight" in out, out[-400:]


def all_changed(path):
    """A copy of many_tensors' file with every tensor changed: diff's table has a row per tensor."""
    other = path.parent / "other.safetensors"
    header_len = struct.unpack("<Q", path.read_bytes()[:8])[0]
    data = bytearray(path.read_bytes())
    for i in range(120):
        struct.pack_into("<f", data, 8 + header_len + 8 * i, 1000.0 + i)
    other.write_bytes(bytes(data))
    return other


def test_diff_stats_and_cat_page_too(tmp_path, pager):
    script, got = pager
    path = many_tensors(tmp_path)
    other = all_changed(path)
    for args in (["diff", path, other, "--sort", "key"], ["stats", path], ["cat", path, "layer.*.weight"]):
        if got.exists():
            got.unlink()
        out = on_terminal(args, 120, {"PAGER": str(script)})
        assert got.exists() and "layer.119.weight" in got.read_text(), (args, out[-400:])
    # diff's colours reach the pager (a table of 120 red rows), as less -R shows them.
    on_terminal(["diff", path, other], 120, {"PAGER": str(script)})
    assert got.read_text().count("\x1b[31m") == 120


def test_file_text_reaches_the_pager_escaped(tmp_path, pager):
    script, got = pager
    path = many_tensors(tmp_path, key=lambda i: f"layer.{i}.\x1b[31mred" if i == 7 else f"layer.{i}.weight")
    on_terminal(["info", path], 120, {"PAGER": str(script)})
    paged = got.read_bytes()
    assert b"\x1b" not in paged and b"layer.7." in paged, paged[:400]
