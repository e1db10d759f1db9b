"""Shared fixtures for the interop tests: the trove binary, a runner, temp dirs.

These tests use the real peer: Debian's torch and numpy make and load the files.
They need TROVE_BIN_DIR (set by ctest) or a build in ../../build/bin.
"""
import os
import resource
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
BIN_DIR = os.environ.get("TROVE_BIN_DIR", os.path.join(SOURCE, "build", "bin"))

# What a hostile file may cost us: the bounds.
HOSTILE_SECONDS = 20
HOSTILE_MEMORY_BYTES = 1 << 30


class Result:
    def __init__(self, p):
        self.code = p.returncode
        self.out = p.stdout
        self.err = p.stderr

    @property
    def text(self):
        return self.out.decode("utf-8", "replace")

    @property
    def errtext(self):
        return self.err.decode("utf-8", "replace")

    def __repr__(self):
        return f"Result(code={self.code}, out={self.out[:400]!r}, err={self.err[:400]!r})"


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (HOSTILE_MEMORY_BYTES, HOSTILE_MEMORY_BYTES))


def run_tool(tool, *args, limit=False, timeout=600, cwd=None):
    cmd = [os.path.join(BIN_DIR, tool)] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, timeout=HOSTILE_SECONDS if limit else timeout,
                       preexec_fn=_limit_memory if limit else None, cwd=cwd)
    return Result(p)


@pytest.fixture
def trove():
    def run(*args, **kw):
        return run_tool("trove", *args, **kw)
    return run


def read_terminal(master, slave, process, timeout=120):
    """Everything `process` (and any pager it started) wrote to the pseudo-terminal `master`.

    The caller keeps `slave` open until this returns: when the last descriptor of the slave
    closes, Linux may answer the master's read with EIO while output is still on its way through
    the terminal's buffers, and the end of the output would be lost. So the master is read while
    the process runs, then until it stays quiet for a moment after the process has ended."""
    import select
    import time

    out = bytearray()
    deadline = time.monotonic() + timeout
    ended_at = None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            continue
        if process.poll() is None:
            continue
        if ended_at is None:
            ended_at = time.monotonic()
        elif time.monotonic() - ended_at > 0.3:
            break
    process.wait(timeout=max(1.0, deadline - time.monotonic()))
    os.close(slave)
    os.close(master)
    return bytes(out)
