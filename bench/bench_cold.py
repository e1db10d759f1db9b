"""Issue 30's cold-read benchmark: reading every tensor's bytes of a file none of whose pages are
in the page cache, with `--io mmap` and `--io pread` (trove/io_mode.h), next to `cat` and `dd
iflag=direct` reading the same file cold. Before each timed run the file's pages are evicted
(fsync, then posix_fadvise DONTNEED on the whole file; `fincore` checks that none stay)."""
import os
import shutil
import statistics
import subprocess
import time

import benchlib as B
from bench_pt import make


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_bytes(path):
    """Bytes of the file in the page cache (util-linux fincore), or None without it."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path], capture_output=True,
                         text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else None


def time_cold_interleaved(cmds, path, runs):
    """Median wall time of each shell command, every run starting cold. The commands take turns
    run by run (not all runs of one, then the next): on a machine whose disk is shared, its rate
    drifts, and taking turns spreads the drift over every command alike."""
    samples = {c: [] for c in cmds}
    for _ in range(runs):
        for c in cmds:
            evict(path)
            t0 = time.perf_counter()
            subprocess.run(c, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            samples[c].append(time.perf_counter() - t0)
    return {c: statistics.median(v) for c, v in samples.items()}


def run(ctx):
    big = make(ctx, "ckpt_1gb.pt", 1_250_000)
    trove = ctx.tool("trove")
    st = os.path.join(ctx.work, "ckpt_1gb.safetensors")
    if not os.path.exists(st):
        subprocess.run([trove, "convert", big, st], check=True)
    rows = []
    hot_rows = []
    notes = []
    load_start = os.getloadavg()[0]
    for label, path in (("1 GB .pt", big), ("1 GB .safetensors", st)):
        size = os.path.getsize(path)
        q = B.cmdline([path])
        cat = f"cat {q} > /dev/null"
        dd = f"dd if={q} of=/dev/null bs=8M iflag=direct status=none"
        modes = {m: f"{B.cmdline([trove])} cat {q} '*' --raw --io {m} > /dev/null" for m in ("mmap", "pread", "auto")}
        # The eviction works, and the mmap mode does read every page (its windows are populated
        # before they are written out, even to /dev/null, which would not touch them).
        evict(path)
        left = resident_bytes(path)
        subprocess.run(modes["mmap"], shell=True, check=True)
        read = resident_bytes(path)
        if left is not None and read is not None:
            notes.append(f"{label}: {left:,} bytes resident after eviction, {read:,} after `--io mmap`")
        t = time_cold_interleaved([cat, dd, *modes.values()], path, ctx.runs)
        rows.append([label, "`cat FILE > /dev/null` (anchor)", B.fmt_s(t[cat]), B.fmt_rate(size, t[cat]), "1.00"])
        rows.append([label, "`dd if=FILE of=/dev/null bs=8M iflag=direct`", B.fmt_s(t[dd]), B.fmt_rate(size, t[dd]),
                     f"{t[cat] / t[dd]:.2f}"])
        for m, c in modes.items():
            rows.append([label, f"`trove cat FILE '*' --raw --io {m} > /dev/null`", B.fmt_s(t[c]),
                         B.fmt_rate(size, t[c]), f"{t[cat] / t[c]:.2f}"])
        # The same commands with the file in the page cache (as after any earlier read): auto reads
        # it with pread there, the mapping when cold.
        hot = {c: [] for c in [cat, *modes.values()]}
        subprocess.run(cat, shell=True, check=True)
        for _ in range(ctx.runs):
            for c in hot:
                t0 = time.perf_counter()
                subprocess.run(c, shell=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                hot[c].append(time.perf_counter() - t0)
        th = {c: statistics.median(v) for c, v in hot.items()}
        hot_rows.append([label, "`cat FILE > /dev/null` (anchor)", B.fmt_s(th[cat]), B.fmt_rate(size, th[cat]), "1.00"])
        for m, c in modes.items():
            hot_rows.append([label, f"`trove cat FILE '*' --raw --io {m} > /dev/null`", B.fmt_s(th[c]),
                             B.fmt_rate(size, th[c]), f"{th[cat] / th[c]:.2f}"])
    return "\n".join([
        "## Cold reads (issue 30)\n",
        "The 1 GB checkpoint of the .pt section (200 float32 tensors of 5 MB) and the same tensors as .safetensors, "
        "read from a cold page cache: before each run the file is fsynced and its pages evicted with "
        f"`posix_fadvise(DONTNEED)` (untimed). Medians of {ctx.runs} runs, the four commands taking turns run by run "
        "(this machine's disk is shared, and its rate drifts by 2-3x within a minute). `vs cat` is cat's time over "
        "the row's. `trove cat FILE '*' --raw` writes every tensor's bytes and nothing else; `--io mmap` maps each "
        "8 MiB window's pages in one `madvise(MADV_POPULATE_READ)` before writing it out, so it reads every page "
        "even though writing to /dev/null would not touch them (fincore, below).\n",
        B.table(["file", "command", "time", "rate", "vs cat"], rows),
        "",
        "The same commands with the file in the page cache (hot), medians of the same number of runs taking turns:\n",
        B.table(["file", "command", "time", "rate", "vs cat"], hot_rows),
        "",
        f"Load average (1 minute) {load_start:.1f} at the start of the section and {os.getloadavg()[0]:.1f} at its end, "
        f"on {os.cpu_count()} CPUs.\n",
        ("Page cache (util-linux fincore): " + "; ".join(notes) + ".\n") if notes else "",
        "Target (issue 30): `trove cat` of every tensor at least 0.9 of cat's cold rate in both I/O modes. "
        "Both modes ask the kernel to read 32 MiB ahead (`posix_fadvise(WILLNEED)`); on a network file system "
        "the difference between faulting a mapping and large reads is far wider than on this local disk: "
        "docs/performance.md. `--io auto` (the default) reads with pread on every file system (docs/performance.md "
        "says why).\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only cold`.\n",
    ])
