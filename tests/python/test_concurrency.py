"""Readers against a file that changes under them.

1. Many readers of one file while another process keeps replacing it through trove's writer:
   each reader sees the old or the new content, never a mixture, never a crash (the writer
   renames a complete file over the old one; a reader's mapping keeps the inode it opened).
2. A file truncated in place by another program while trove streams it: the reader ends with
   `trove: error: FILE: changed while being read` (exit 2) or a complete, correct
   output — never a SIGBUS death (docs/security.md, "Truncation under a mapping")."""
import hashlib
import json
import os
import signal
import subprocess
import time

import pytest
import torch

from conftest import BIN_DIR

TRUNCATED = "changed while being read"


def trove_cmd(*args):
    return [os.path.join(BIN_DIR, "trove")] + [str(a) for a in args]


# ---- readers racing a replacing writer ---------------------------------------------------------

@pytest.fixture(scope="module")
def two_versions(tmp_path_factory):
    d = tmp_path_factory.mktemp("versions")
    for name, value in (("one", 1.0), ("two", 2.0)):
        torch.save({"w": torch.full((512, 1024), value), "tag": torch.tensor([value] * 4)}, d / f"{name}.pt")
    expected = {}
    for name, value in (("one", 1.0), ("two", 2.0)):
        raw = torch.full((512, 1024), value).numpy().tobytes()
        expected[hashlib.sha256(raw).hexdigest()] = name
    return d, expected


READER = r"""
import hashlib, json, subprocess, sys, time
cmd, deadline = sys.argv[1:-1], time.monotonic() + float(sys.argv[-1])
seen = {}
while time.monotonic() < deadline:
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode < 0 or p.returncode >= 128:
        print("SIGNAL", p.returncode, p.stderr[-300:]); sys.exit(3)
    key = hashlib.sha256(p.stdout).hexdigest() if p.returncode == 0 else "error:" + p.stderr.decode()[:200]
    seen[key] = seen.get(key, 0) + 1
print(json.dumps(seen))
"""


def race(dst, writer_cmds, reader_cmd, expected, seconds=8, readers=6, strict=True):
    stop = time.monotonic() + seconds
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", READER] + reader_cmd + [str(seconds)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(readers)]
    writes = 0
    while time.monotonic() < stop:
        w = subprocess.run(writer_cmds[writes % 2], capture_output=True)
        assert w.returncode == 0, w
        writes += 1
    outcomes = {}
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
        for key, n in json.loads(out).items():
            outcomes[key] = outcomes.get(key, 0) + n
    assert writes >= 4
    for key in outcomes:
        if key.startswith("error:"):
            assert not strict, f"a reader failed while the file was replaced: {key}"
            assert key.startswith("error:trove: error: "), key
        else:
            assert key in expected, f"a reader saw content that is neither version: {key}"
    seen = {expected[k] for k in outcomes if k in expected}
    return seen, outcomes


def test_readers_see_old_or_new_pt(two_versions, tmp_path):
    d, expected = two_versions
    dst = tmp_path / "live.pt"
    subprocess.run(trove_cmd("convert", d / "one.pt", dst), check=True)
    seen, outcomes = race(dst, [trove_cmd("convert", d / n, dst) for n in ("two.pt", "one.pt")],
                          trove_cmd("cat", dst, "w", "--raw"), expected)
    assert seen, outcomes


def test_readers_see_old_or_new_tdz(two_versions, tmp_path):
    d, expected = two_versions
    dst = tmp_path / "live.tdz"
    subprocess.run(trove_cmd("convert", d / "one.pt", dst), check=True)
    seen, outcomes = race(dst, [trove_cmd("convert", d / n, dst) for n in ("two.pt", "one.pt")],
                          trove_cmd("cat", dst, "w", "--raw"), expected)
    assert seen, outcomes


def test_readers_of_a_replaced_directory(two_versions, tmp_path):
    # A directory is many files: a reader that started on the old tree may find it removed under
    # it and fail cleanly, but it never combines files of both trees and never crashes.
    d, expected = two_versions
    dst = tmp_path / "live"
    subprocess.run(trove_cmd("convert", d / "one.pt", dst, "--to", "tensordict"), check=True)
    seen, outcomes = race(dst, [trove_cmd("convert", d / n, dst, "--to", "tensordict") for n in ("two.pt", "one.pt")],
                          trove_cmd("cat", dst, "w", "--raw"), expected, strict=False)
    assert seen, outcomes


# ---- truncation under a mapping ----------------------------------------------------------------

@pytest.fixture(scope="module")
def big_tensor(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    t = torch.arange(64 * 1024 * 1024, dtype=torch.float32)  # 256 MiB
    torch.save({"w": t}, d / "big.pt")
    return d / "big.pt", hashlib.sha256(t.numpy().tobytes()).hexdigest()


def fresh_copy(src, dst):
    subprocess.run(["cp", src, dst], check=True)
    return dst


@pytest.mark.parametrize("fmt", ["pt", "tdz", "tensordict"])
def test_cat_of_a_file_truncated_mid_stream(big_tensor, tmp_path, fmt):
    src, digest = big_tensor
    if fmt == "pt":
        path = fresh_copy(src, tmp_path / "big.pt")
        victim = path
    else:
        path = tmp_path / ("big.tdz" if fmt == "tdz" else "bigdir")
        subprocess.run(trove_cmd("convert", src, path, "--to", fmt), check=True)
        victim = path if fmt == "tdz" else path / "w.memmap"
    p = subprocess.Popen(trove_cmd("cat", path, "w", "--raw"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    h = hashlib.sha256()
    first = p.stdout.read(4 << 20)  # the reader is now blocked on the pipe, mid-stream
    h.update(first)
    subprocess.run(["truncate", "-s", "65536", victim], check=True)  # another program
    for chunk in iter(lambda: p.stdout.read(1 << 20), b""):
        h.update(chunk)
    err = p.stderr.read().decode()
    code = p.wait(timeout=120)
    assert code != -signal.SIGBUS and code >= 0, f"killed by signal {-code}: {err}"
    if code == 0:
        assert h.hexdigest() == digest
    else:
        assert code == 2, err
        assert err.startswith("trove: error: ") and TRUNCATED in err, err
        assert str(victim) in err, err


@pytest.mark.parametrize("cmd", ["convert", "verify", "diff", "cat-json"])
def test_other_readers_survive_truncation(big_tensor, tmp_path, cmd):
    src, _ = big_tensor
    codes = []
    for k, delay in enumerate((0.0, 0.05, 0.15, 0.3, 0.6)):
        path = fresh_copy(src, tmp_path / f"v{k}.pt")
        out = tmp_path / f"out{k}.tdz"
        argv = {"convert": trove_cmd("convert", path, out),
                "verify": trove_cmd("verify", path),
                "diff": trove_cmd("diff", path, src),
                "cat-json": trove_cmd("cat", path, "w", "--json")}[cmd]
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        subprocess.run(["truncate", "-s", "65536", path], check=True)
        err = p.stderr.read().decode()
        code = p.wait(timeout=300)
        assert code >= 0, f"killed by signal {-code}: {err}"
        assert code in (0, 1, 2), err
        if code == 2:
            assert err.startswith("trove: error: "), err
        if cmd == "convert" and code != 0:
            assert not out.exists()
        codes.append(code)
        os.unlink(path)
    print(cmd, codes)
