"""Crash safety of every writer: a write killed at any moment, a full disk and a read-only
destination leave either nothing or the complete result, an existing destination unchanged or
completely replaced, and no temporary files (docs/security.md, "Writes").

Each writer runs in a child process on an input large enough to take a while (a ~256 MB
checkpoint made by Debian's torch once per session) and is SIGKILLed at delays spread over its
measured run time."""
import hashlib
import os
import signal
import subprocess
import time

import pytest
import torch

from conftest import BIN_DIR

KILLS_PER_WRITER = 10
TEMP_MARK = ".trove-tmp-"


def tool(name):
    return os.path.join(BIN_DIR, name)


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("crash-inputs")
    g = torch.Generator().manual_seed(7)
    big = {f"layer{i}.weight": torch.randn(2048, 4096, generator=g) for i in range(8)}  # 8 x 32 MiB
    big["step"] = torch.tensor(12)
    torch.save(big, d / "big.pt")
    small = {"w": torch.arange(6, dtype=torch.float32)}
    torch.save(small, d / "small.pt")
    subprocess.run([tool("trove"), "convert", d / "big.pt", d / "big.dir", "--to", "tensordict"], check=True)
    # lm-windows input: ~40 MB of token ids.
    with open(d / "tokens.txt", "w") as f:
        line = " ".join(str((i * 7919) % 50000) for i in range(4096)) + "\n"
        for _ in range(2000):
            f.write(line)
    return d


def writers(inputs):
    """name -> (argv builder taking the destination, destination suffix, kind)."""
    big = inputs / "big.pt"
    return {
        "convert-pt": (lambda dst: [tool("trove"), "convert", big, dst, "--dtype", "float16"], "out.pt", "pt"),
        "convert-dir": (lambda dst: [tool("trove"), "convert", big, dst, "--to", "tensordict"], "out", "dir"),
        "convert-tdz": (lambda dst: [tool("trove"), "convert", big, dst], "out.tdz", "tdz"),
        "convert-pskd": (lambda dst: [tool("trove"), "convert", big, dst, "--keys", "layer*"], "out.psk.d", "pskd"),
        "pack": (lambda dst: [tool("trove"), "pack", inputs / "big.dir", dst], "packed.tdz", "tdz"),
        "lm-windows": (lambda dst: [tool("presk"), "data", "lm-windows", "--vocab", "50000", "--seq", "64",
                                    inputs / "tokens.txt", "-o", dst], "win.psk.d", "pskd"),
    }


def small_version(inputs, kind, dst):
    """A valid, different file of the same kind to stand as the destination that existed before."""
    if kind == "pskd":
        tokens = inputs / "few-tokens.txt"
        tokens.write_text("1 2 3 4 5 6 7 8\n")
        cmd = [tool("presk"), "data", "lm-windows", "--vocab", "50000", "--seq", "4", tokens, "-o", dst]
    else:
        cmd = [tool("trove"), "convert", inputs / "small.pt", dst, "--to", {"dir": "tensordict"}.get(kind, kind)]
    subprocess.run(cmd, check=True, capture_output=True)


def fingerprint(path):
    if not os.path.lexists(path):
        return None
    h = hashlib.sha256()
    if os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for f in sorted(files):
                p = os.path.join(root, f)
                h.update(os.path.relpath(p, path).encode())
                with open(p, "rb") as fh:
                    h.update(fh.read())
    else:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def info_json(path):
    import json
    if str(path).endswith(".psk.d"):
        p = subprocess.run([tool("presk"), "data", "info", path], capture_output=True, timeout=120)
        assert p.returncode == 0, p
        return {"tensors": []}
    p = subprocess.run([tool("trove"), "info", path, "--json"], capture_output=True, timeout=120)
    assert p.returncode == 0, p
    return json.loads(p.stdout)


def check_complete(path, kind, expected_keys):
    j = info_json(path)
    if kind in ("pt", "dir", "tdz") and expected_keys is not None:
        assert sorted(t["key"] for t in j["tensors"]) == expected_keys
    v = subprocess.run([tool("trove"), "verify", path], capture_output=True, timeout=300)
    assert v.returncode == 0, v


def leftovers(workdir, allowed):
    return sorted(n for n in os.listdir(workdir) if n not in allowed)


@pytest.mark.parametrize("name", ["convert-pt", "convert-dir", "convert-tdz", "convert-pskd", "pack", "lm-windows"])
def test_sigkill_at_many_points(inputs, tmp_path, name):
    argv, dest_name, kind = writers(inputs)[name]
    work = tmp_path / "w"
    work.mkdir()
    dst = work / dest_name
    # One full run: its duration spreads the kills; its result is what "complete" means.
    t0 = time.monotonic()
    subprocess.run(argv(dst), check=True, capture_output=True, timeout=600)
    full = time.monotonic() - t0
    expected = sorted(t["key"] for t in info_json(dst)["tensors"]) if kind != "pskd" else None
    complete = tmp_path / ("complete-" + dest_name)
    os.rename(dst, complete)
    outcomes = {"absent": 0, "old": 0, "new": 0}
    for k in range(KILLS_PER_WRITER):
        if os.path.isdir(dst):
            subprocess.run(["rm", "-rf", dst], check=True)
        elif os.path.lexists(dst):
            os.unlink(dst)
        existed = k % 2 == 1
        if existed:
            small_version(inputs, kind, dst)
        before = fingerprint(dst)
        p = subprocess.Popen(argv(dst), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Spread over a bit more than one run, so that the last kills also find it committed.
        time.sleep(full * 1.3 * (k + 0.5) / KILLS_PER_WRITER)
        p.send_signal(signal.SIGKILL)
        p.wait()
        now = fingerprint(dst)
        if now is None:
            assert not existed, f"kill {k}: the existing destination vanished"
            outcomes["absent"] += 1
        elif now == before:
            outcomes["old"] += 1
        else:
            # Replaced: must be the whole new result (a converter is deterministic).
            check_complete(dst, kind, expected)
            same = ([tool("presk"), "data", "diff", complete, dst] if kind == "pskd"
                    else [tool("trove"), "diff", complete, dst])
            d = subprocess.run(same, capture_output=True, timeout=300)
            assert d.returncode == 0, f"kill {k}: destination differs from a complete run: {d}"
            outcomes["new"] += 1
        # No temporary file of a file writer survives a kill (O_TMPFILE; a new destination is
        # linked in one step), except the hidden name a replacing commit holds for an instant
        # before its rename; a killed directory writer may leave its hidden tree. The next write
        # removes both (checked below).
        allowed = {dest_name} | ({n for n in os.listdir(work) if n.startswith("." + dest_name + TEMP_MARK)}
                                 if kind == "dir" or existed else set())
        assert leftovers(work, allowed) == [], f"kill {k}: {leftovers(work, allowed)}"
    # Orphans of killed directory writes are removed by the next write of that destination.
    subprocess.run(argv(dst), check=True, capture_output=True, timeout=600)
    assert leftovers(work, {dest_name}) == []
    check_complete(dst, kind, expected)
    if kind == "pt":
        loaded = torch.load(dst)
        assert sorted(loaded) == expected
    print(name, f"{full:.2f}s", outcomes)


def test_orphan_of_a_live_writer_is_kept(inputs, tmp_path):
    # The cleanup only takes trees whose writer is dead: a running writer's tree is locked.
    work = tmp_path / "w"
    work.mkdir()
    dst = work / "out"
    p = subprocess.Popen([tool("trove"), "convert", inputs / "big.pt", dst, "--to", "tensordict"])
    try:
        deadline = time.monotonic() + 60
        while not [n for n in os.listdir(work) if TEMP_MARK in n] and time.monotonic() < deadline:
            time.sleep(0.005)
        live = [n for n in os.listdir(work) if TEMP_MARK in n]
        if not live:
            pytest.skip("the writer finished before its temporary tree was seen")
        # A second writer of the same destination starts meanwhile: both must succeed.
        q = subprocess.run([tool("trove"), "convert", inputs / "small.pt", dst, "--to", "tensordict"],
                           capture_output=True, timeout=120)
        assert q.returncode == 0, q
    finally:
        assert p.wait(timeout=300) == 0
    assert leftovers(work, {"out"}) == []
    info_json(dst)


# ---- full disk and read-only destinations -----------------------------------------------------

@pytest.fixture
def small_mount(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr!r}")
    yield mnt
    subprocess.run(["umount", "-l", mnt])


@pytest.fixture
def readonly_mount(tmp_path):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=2m", "tmpfs", mnt], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr!r}")
    yield mnt
    subprocess.run(["umount", "-l", mnt])


@pytest.fixture(scope="session")
def medium_inputs(tmp_path_factory, inputs):
    d = tmp_path_factory.mktemp("medium")
    torch.save({"w": torch.randn(1024, 1024), "b": torch.randn(1024)}, d / "medium.pt")  # 4 MiB
    subprocess.run([tool("trove"), "convert", d / "medium.pt", d / "medium.dir", "--to", "tensordict"], check=True)
    with open(d / "tokens.txt", "w") as f:
        for _ in range(8):  # ~4 MB of windows: twice the mount
            f.write(" ".join(str(i % 50000) for i in range(250000)) + "\n")
    return d


def failing_writes(medium, mnt):
    return {
        "convert-pt": [tool("trove"), "convert", medium / "medium.pt", mnt / "out.pt"],
        "convert-dir": [tool("trove"), "convert", medium / "medium.pt", mnt / "out", "--to", "tensordict"],
        "convert-tdz": [tool("trove"), "convert", medium / "medium.pt", mnt / "out.tdz"],
        "convert-pskd": [tool("trove"), "convert", medium / "medium.pt", mnt / "out.psk.d"],
        "pack": [tool("trove"), "pack", medium / "medium.dir", mnt / "packed.tdz"],
        "lm-windows": [tool("presk"), "data", "lm-windows", "--vocab", "50000", "--seq", "64",
                       medium / "tokens.txt", "-o", mnt / "win.psk.d"],
    }


@pytest.mark.parametrize("name", ["convert-pt", "convert-dir", "convert-tdz", "convert-pskd", "pack", "lm-windows"])
def test_full_disk(medium_inputs, small_mount, name):
    argv = failing_writes(medium_inputs, small_mount)[name]
    r = subprocess.run(argv, capture_output=True, timeout=120)
    assert r.returncode == 2, r
    err = r.stderr.decode()
    assert err.startswith("trove: error: " if name != "lm-windows" else "presk data: error"), err
    assert "No space left on device" in err, err
    assert os.listdir(small_mount) == [], os.listdir(small_mount)
    st = os.statvfs(small_mount)
    assert st.f_bfree == st.f_blocks, "blocks still used: a hidden file was left"


@pytest.mark.parametrize("name", ["convert-pt", "convert-dir", "convert-tdz", "convert-pskd", "pack", "lm-windows"])
def test_read_only_destination(medium_inputs, readonly_mount, name):
    argv = failing_writes(medium_inputs, readonly_mount)[name]
    r = subprocess.run(argv, capture_output=True, timeout=120)
    assert r.returncode == 2, r
    err = r.stderr.decode()
    assert err.startswith("trove: error: " if name != "lm-windows" else "presk data: error"), err
    assert "Read-only file system" in err, err
    assert os.listdir(readonly_mount) == []


def test_full_disk_keeps_existing_destination(medium_inputs, small_mount, inputs):
    dst = small_mount / "out.pt"
    subprocess.run([tool("trove"), "convert", inputs / "small.pt", dst], check=True)
    before = fingerprint(dst)
    r = subprocess.run([tool("trove"), "convert", medium_inputs / "medium.pt", dst], capture_output=True)
    assert r.returncode == 2 and r.stderr.decode().startswith("trove: error: "), r
    assert fingerprint(dst) == before
    assert os.listdir(small_mount) == ["out.pt"]
