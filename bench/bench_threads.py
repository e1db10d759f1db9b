"""Issue 30's scaling benchmark: the commands that split their work across the worker threads
(trove/threads.h), each with `--threads 1` and with `--threads 2` on the 1 GB checkpoint of the .pt
section, next to `cat FILE > /dev/null` (reading the same bytes, the floor of a pass over them)."""
import os
import shutil
import statistics

import subprocess

import benchlib as B
from bench_pt import PY, make

# Two checkpoints of one tensor of 2^28 float32 (1 GiB) that differ in one element of every
# thousand: diff compares every element of it (the equal files above only compare bytes), cut into
# pieces (a tensor this large would otherwise be one thread's work).
ONE_TENSOR = """
import sys, torch
g = torch.Generator().manual_seed(7)
a = torch.randn(1 << 28, generator=g)
torch.save({"emb": a}, sys.argv[1])
a[::1000] += 1
torch.save({"emb": a}, sys.argv[2])
"""


def run(ctx):
    big = make(ctx, "ckpt_1gb.pt", 1_250_000)
    size = os.path.getsize(big)
    trove = ctx.tool("trove")
    # The casts write into a tmpfs when there is one with room: the disk's write rate here drifts
    # 2-5x within a run (the root file system is mounted with `discard`), more than the scaling
    # measured; into memory the write is the same every run, and what is left is the cast's.
    shm = B.tmpfs_dir(2 * size)
    out = os.path.join(shm or ctx.work, "threads_out.pt")
    copy = os.path.join(ctx.work, "threads_copy.pt")
    if not os.path.exists(copy):
        shutil.copyfile(big, copy)

    one_a = os.path.join(ctx.work, "one_tensor_a.pt")
    one_b = os.path.join(ctx.work, "one_tensor_b.pt")
    if not (os.path.exists(one_a) and os.path.exists(one_b)):
        subprocess.run([PY, "-c", ONE_TENSOR, one_a, one_b], check=True)

    def rm():
        os.path.exists(out) and os.remove(out)

    jobs = [
        ("`trove verify` (CRC-32 of every entry)", [trove, "verify", big], {}),
        ("`trove stats`", [trove, "stats", big, "--json"], {}),
        ("`trove convert --dtype bfloat16` → .pt", [trove, "convert", big, out, "--dtype", "bfloat16"], {"setup": rm, "settle": True}),
        ("`trove convert --dtype float16` → .pt", [trove, "convert", big, out, "--dtype", "float16"], {"setup": rm, "settle": True}),
        ("`trove diff` of two equal files", [trove, "diff", big, copy], {}),
        ("`trove diff` of one 1 GiB tensor, 0.1% of its elements changed", [trove, "diff", one_a, one_b], {"ok": (1,)}),
    ]
    # Ratios of two times that each vary by a tenth or more run to run here (the host's other
    # guests share the path to memory): at least 15 pairs.
    runs = max(ctx.runs, 15)
    try:
        load_start = os.getloadavg()[0]
        t_cat = B.time_cmd(f"cat {big} > /dev/null", runs=ctx.runs, shell=True)
        rows = [["`cat FILE > /dev/null` (anchor)", B.fmt_s(t_cat), B.fmt_rate(size, t_cat), "", "", "", ""]]
        for label, cmd, kw in jobs:
            # One run of each thread count in turn (not all runs of one, then the other): other
            # processes' load drifts, and taking turns spreads the drift over both alike.
            t1s, t2s = [], []
            for _ in range(runs):
                t1s.append(B.time_cmd(cmd + ["--threads", "1"], runs=1, **kw))
                t2s.append(B.time_cmd(cmd + ["--threads", "2"], runs=1, **kw))
            t1, t2 = statistics.median(t1s), statistics.median(t2s)
            # The scaling of each pair (two runs side by side, so under the same load), and the
            # median of those: a drift in the machine's speed over the section moves both runs of
            # a pair alike, where it moves the two medians apart.
            ratios = sorted(a / b for a, b in zip(t1s, t2s))
            q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
            n = os.path.getsize(cmd[2])  # the bytes of the (first) input
            rows.append([label, f"{B.fmt_s(t1)} ({B.fmt_rate(n, t1)})", f"{B.fmt_s(t2)} ({B.fmt_rate(n, t2)})",
                         f"{statistics.median(ratios):.2f}", f"{q1:.2f}-{q3:.2f}", f"{t1 / t2:.2f}",
                         f"{(n / t2) / (size / t_cat):.2f}"])
    finally:
        rm()
        if shm:
            shutil.rmtree(shm, ignore_errors=True)
    where = "into a tmpfs (`/dev/shm`), so that the disk's drift stays out of the ratio" if shm else "to the disk"
    return "\n".join([
        "## Threads (issue 30)\n",
        f"The 1 GB checkpoint of the .pt section ({size:,} bytes of float32, page cache warm), each command with "
        f"`--threads 1` and `--threads 2` on this {os.cpu_count()}-CPU machine, the two taking turns run by run. "
        "`scaling` is the median over the pairs of the one-thread time over the two-thread time, `middle half` the "
        "pairs' scaling from the first to the third quartile, `of medians` the one-thread median over the two-thread "
        "median; `vs cat` is the two-thread rate over cat's (rates are of the first input's bytes). The casts "
        f"write {where}. Write runs start with the page cache clean of dirty pages (`sync` and a 2 s pause, then the last output removed, as `bench/benchlib.py` explains, untimed). {runs} pairs of runs. Load average (1 minute) {load_start:.1f} at "
        f"the start of the section and {os.getloadavg()[0]:.1f} at its end, on {os.cpu_count()} CPUs.\n",
        B.table(["command", "1 thread", "2 threads", "scaling", "middle half", "of medians", "vs cat"], rows),
        "",
        "Target (issue 30): stats, verify and casts at least 1.7x their one-thread rate with 2 threads. "
        "docs/performance.md says what scaling to expect on more cores and why.\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only threads`.\n",
    ])
