"""Shared measuring tools for `make bench` (bench/run.py).

Each bench/bench_<area>.py defines `run(ctx) -> str` returning a Markdown section. Every figure
is measured next to its anchor in the same run (torch.load, cp/cat, memcpy, wc -w) and reported as
a median over repeated runs with the ratio to the anchor. Nothing here asserts a time.
"""
import os
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time


class Context:
    def __init__(self, bin_dir, work_dir, runs):
        self.bin = os.path.abspath(bin_dir)
        self.work = os.path.abspath(work_dir)
        self.runs = runs
        os.makedirs(self.work, exist_ok=True)

    def tool(self, name):
        return os.path.join(self.bin, name)


def drop_caches_hint():
    """Benchmarks run page-cache hot (the data was just written); we say so in the report."""
    return "page cache hot"


# How long a write run waits after the flush before it starts: the journal commits and the file
# system (mounted with `discard` here) trims what earlier runs removed before the run allocates.
SETTLE_SECONDS = 2.0


def settle_writes():
    """Flush every dirty page to disk, then let the file system finish freeing what was removed.

    Callers remove the run's old output after this, right before the run (time_cmd does): this
    machine is a virtual one whose balloon device reports free memory to the host (virtio
    free page reporting, 2 s after it is freed), and the host takes it back; whatever process
    touches such memory first pays a host fault per page, 5-8x the time of a 2 GB write. Removed
    during the pause, the old output's page cache would be reported and the run after it pay
    (ZeRO-3's convert 2.2 s against cp's 0.36 s, or the other way round by the order of the two);
    removed after it, the run reuses those pages while they are still the guest's."""
    os.sync()
    time.sleep(SETTLE_SECONDS)


def tmpfs_dir(room):
    """A fresh directory in the tmpfs at /dev/shm when it has `room` bytes free, else None; the
    caller removes it. Writes into memory have no disk under them: this machine's disk write
    rate drifts 2-5x within a run, and the ratio of a write into memory is the writer's own."""
    if not os.path.isdir("/dev/shm") or shutil.disk_usage("/dev/shm").free < room:
        return None
    return tempfile.mkdtemp(prefix="trove-bench-", dir="/dev/shm")


def time_cmd(cmd, runs=5, warmup=1, setup=None, env=None, shell=False, settle=False, ok=(0,)):
    """Median wall time in seconds of `cmd` (a list, or a string with shell=True).

    `setup` (a callable) runs before each timed run and is not timed (e.g. removing an output).
    `settle`: flush every dirty page to disk before each run and let the removals finish
    (settle_writes, untimed, before `setup`), so that a write benchmark does not pay for the run
    before it. Output goes to /dev/null. A command exiting with a status not in `ok` (`diff`
    exits 1 for files that differ) raises.
    """
    samples = []
    for i in range(warmup + runs):
        if settle:
            settle_writes()
        if setup:  # after the pause, not before: settle_writes says why
            setup()
        t0 = time.perf_counter()
        r = subprocess.run(cmd, shell=shell, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dt = time.perf_counter() - t0
        if r.returncode not in ok:
            raise subprocess.CalledProcessError(r.returncode, cmd)
        if i >= warmup:
            samples.append(dt)
    return statistics.median(samples)


def time_py(fn, runs=5, warmup=1, setup=None):
    """Median wall time of a Python callable."""
    samples = []
    for i in range(warmup + runs):
        if setup:
            setup()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if i >= warmup:
            samples.append(dt)
    return statistics.median(samples)


def peak_rss_mb(cmd, env=None):
    """Peak resident memory (MB) of a command, from GNU time's maximum resident set size."""
    full = ["/usr/bin/time", "-f", "%M"] + list(cmd)
    p = subprocess.run(full, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(p.stderr.strip().splitlines()[-1]) / 1024.0


def fmt_s(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_rate(nbytes, seconds):
    return f"{nbytes / seconds / 1e9:.2f} GB/s" if seconds > 0 else "∞"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def cmdline(cmd):
    return " ".join(shlex.quote(c) for c in cmd) if isinstance(cmd, list) else cmd


# Python source for the scripts the sections run in a fresh interpreter: where each storage record
# of a torch.save zip starts and how long it is, from Python's zipfile (the local header's fixed 30
# bytes, its name and extra field), so numpy can map the same bytes trove views.
STORAGE_RECORDS = r"""
import struct, zipfile
def storage_records(path):
    out = []
    with zipfile.ZipFile(path) as z, open(path, "rb") as raw:
        for info in z.infolist():
            if "/data/" not in info.filename:
                continue
            raw.seek(info.header_offset)
            name_len, extra_len = struct.unpack("<HH", raw.read(30)[26:30])
            out.append((info.header_offset + 30 + name_len + extra_len, info.file_size))
    return out
"""
