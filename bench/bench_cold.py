"""Issue 30's cold-read benchmark: reading every tensor's bytes of a file none of whose pages are
in the page cache, with `--io mmap` and `--io pread` (trove/io_mode.h), next to `cat` and `dd
iflag=direct` reading the same file cold. Before each timed run the file's pages are evicted
(fsync, then posix_fadvise DONTNEED on the whole file; `fincore` checks that none stay)."""
import os
import shutil
import subprocess

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


def run(ctx):
    big = make(ctx, "ckpt_1gb.pt", 1_250_000)
    trove = ctx.tool("trove")
    st = os.path.join(ctx.work, "ckpt_1gb.safetensors")
    if not os.path.exists(st):
        subprocess.run([trove, "convert", big, st], check=True)
    rows = []
    notes = []
    for label, path in (("1 GB .pt", big), ("1 GB .safetensors", st)):
        size = os.path.getsize(path)
        evict(path)
        left = resident_bytes(path)
        if left is not None:
            notes.append(f"{label}: {left:,} bytes resident after eviction")
        q = B.cmdline([path])

        def cold():
            evict(path)

        def timed(cmd):
            # No warm-up run: every run starts cold.
            return B.time_cmd(cmd, runs=ctx.runs, warmup=0, setup=cold, shell=True)

        t_cat = timed(f"cat {q} > /dev/null")
        t_dd = timed(f"dd if={q} of=/dev/null bs=8M iflag=direct status=none")
        t_cat_pipe = timed(f"cat {q} | cat > /dev/null")
        rows.append([label, "`cat FILE > /dev/null` (anchor)", B.fmt_s(t_cat), B.fmt_rate(size, t_cat), "1.00", ""])
        rows.append([label, "`dd bs=8M iflag=direct`", B.fmt_s(t_dd), B.fmt_rate(size, t_dd), f"{t_cat / t_dd:.2f}",
                     ""])
        rows.append([label, "`cat FILE | cat > /dev/null` (pipe anchor)", B.fmt_s(t_cat_pipe),
                     B.fmt_rate(size, t_cat_pipe), f"{t_cat / t_cat_pipe:.2f}", "1.00"])
        for mode in ("mmap", "pread"):
            t = timed(f"{B.cmdline([trove])} cat {q} '*' --raw --io {mode} | cat > /dev/null")
            rows.append([label, f"`trove cat FILE '*' --raw --io {mode} \\| cat > /dev/null`", B.fmt_s(t),
                         B.fmt_rate(size, t), f"{t_cat / t:.2f}", f"{t_cat_pipe / t:.2f}"])
        for mode in ("mmap", "pread"):
            t = timed(f"{B.cmdline([trove])} cat {q} '*' --raw --io {mode} > /dev/null")
            rows.append([label, f"`trove cat FILE '*' --raw --io {mode} > /dev/null`", B.fmt_s(t),
                         B.fmt_rate(size, t), f"{t_cat / t:.2f}", ""])
    return "\n".join([
        "## Cold reads (issue 30)\n",
        f"The 1 GB checkpoint of the .pt section and the same tensors as .safetensors, read from a cold page cache: "
        "before each run the file is fsynced and its pages evicted with `posix_fadvise(DONTNEED)` (untimed; no "
        f"warm-up run). Medians of {ctx.runs} runs. `vs cat` is cat's time over the row's; `vs pipe` the piped cat's "
        "over the row's. `trove cat FILE '*' --raw` writes every tensor's bytes and nothing else. Written to "
        "/dev/null, a mapping's pages need never be read (write(2) to /dev/null does not touch its buffer), so "
        "the `mmap` row of that form measures no reading; the piped rows make both modes and the anchor hand every "
        "byte to another process.\n",
        B.table(["file", "command", "time", "rate", "vs cat", "vs pipe"], rows),
        "",
        ("Page cache after eviction (fincore): " + "; ".join(notes) + ".\n") if notes else "",
        "Target (issue 30): `trove cat` of every tensor at least 0.9 of cat's cold rate in both I/O modes. "
        "On a network file system (`--io auto` picks pread there) the gap between the modes is far wider than "
        "on this machine's local disk: docs/performance.md.\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only cold`.\n",
    ])
