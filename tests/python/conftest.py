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
