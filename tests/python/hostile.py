"""The hostile-and-careless suite's one rule, shared by every tests/python/test_hostile_*.py file.

A case runs one trove (or presk) command on a hostile or careless input and must end the way the
project promises whatever the input: an exit status below 128 (no signal), within
HOSTILE_SECONDS, inside HOSTILE_MEMORY_BYTES of address space, no file outside the outputs the
case allows created, changed or removed, and no temporary (`.trove-tmp`) left anywhere in the
watched trees.
"""
import os
import subprocess
import sys
import tempfile

from conftest import BIN_DIR, HOSTILE_MEMORY_BYTES, HOSTILE_SECONDS, Result, _limit_memory

TEMPORARY_MARK = ".trove-tmp"


def tree_state(root):
    """Every path below root (root included) with what identifies its contents."""
    state = {}
    if not os.path.lexists(root):
        return state
    stack = [root]
    while stack:
        path = stack.pop()
        try:  # a writer still running may rename or remove what was just listed
            st = os.lstat(path)
            names = os.listdir(path) if os.path.isdir(path) and not os.path.islink(path) else None
        except (FileNotFoundError, NotADirectoryError):
            continue
        if names is not None:
            state[path] = ("dir", st.st_ino, st.st_mode)
            for name in names:
                stack.append(os.path.join(path, name))
        elif os.path.islink(path):
            try:
                state[path] = ("link", os.readlink(path))
            except FileNotFoundError:
                continue
        else:
            state[path] = ("file", st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
    return state


def _allowed(path, allowed):
    for a in allowed:
        a = os.path.abspath(a)
        if path == a or path.startswith(a + os.sep):
            return True
    return False


def run_hostile(tool, *args, watch, allowed=(), cwd=None, input=None, expect=None):
    """Runs `tool args` under the suite's bounds and checks what it left in `watch` (a folder).

    `allowed` lists the outputs the command may create or replace. `expect`, when given, is the
    set of exit statuses the case accepts (default: any below 128). Returns the Result.
    """
    watch = os.path.abspath(str(watch))
    before = tree_state(watch)
    cmd = [os.path.join(BIN_DIR, tool)] + [str(a) for a in args]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=HOSTILE_SECONDS,
                           preexec_fn=_limit_memory, cwd=cwd, input=input)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{' '.join(cmd)}: still running after {HOSTILE_SECONDS} s")
    r = Result(p)
    assert 0 <= r.code < 128, f"{' '.join(cmd)}: ended by a signal or crash: {r!r}"
    if expect is not None:
        assert r.code in expect, f"{' '.join(cmd)}: exit {r.code}, wanted {sorted(expect)}: {r!r}"
    after = tree_state(watch)
    left = [p for p in after if TEMPORARY_MARK in os.path.basename(p)]
    assert not left, f"{' '.join(cmd)}: temporaries left behind: {left}"
    for path in set(before) | set(after):
        if _allowed(path, allowed):
            continue
        assert before.get(path) == after.get(path), (
            f"{' '.join(cmd)}: touched {path} outside its outputs: "
            f"{before.get(path)} -> {after.get(path)}")
    return r


# Runs in a fresh, small interpreter: sets the bounds for trove, runs it, and reports its exit
# status and peak RSS. A child forked straight from the test process would count the test
# process's own pages (torch's included) in its peak, since the peak survives exec.
_MEASURE = r"""
import os, resource, signal, subprocess, sys, threading
memory, file_size, seconds, report = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def limits():
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if file_size >= 0:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
p = subprocess.Popen(sys.argv[5:], preexec_fn=limits)
killer = threading.Timer(seconds, p.kill)
killer.start()
_, status, usage = os.wait4(p.pid, 0)
killer.cancel()
with open(report, "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss * 1024}")
"""


def peak_rss(*args, file_size_limit=None):
    """Runs trove under the hostile bounds; returns (exit status, stdout, stderr, peak RSS bytes).

    With `file_size_limit`, a file the command writes may not grow beyond it (RLIMIT_FSIZE, with
    SIGXFSZ ignored so that the write fails with EFBIG instead of killing the command).
    """
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "report")
        cmd = [sys.executable, "-c", _MEASURE, str(HOSTILE_MEMORY_BYTES),
               str(-1 if file_size_limit is None else file_size_limit), str(HOSTILE_SECONDS), report,
               os.path.join(BIN_DIR, "trove")] + [str(a) for a in args]
        p = subprocess.run(cmd, capture_output=True, timeout=HOSTILE_SECONDS + 60)
        assert p.returncode == 0, p.stderr
        with open(report) as f:
            code, rss = (int(x) for x in f.read().split())
    assert 0 <= code < 128, f"trove {args}: ended by a signal (or still running after {HOSTILE_SECONDS} s)"
    return code, p.stdout, p.stderr, rss
