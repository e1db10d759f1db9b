"""Issue 15's benchmark: `trove stats` on the 1 GB checkpoint against numpy over a memory map of
the same bytes, against torch.load plus torch's reductions, and against `cat` as the floor; and
`trove report` of the same file against `trove stats`."""
import os
import resource
import statistics
import subprocess
import time

import benchlib as B
from bench_pt import make

PY = "/usr/bin/python3"
# numpy over the stored bytes: each storage record of the zip mapped where it lies, the same
# figures in float64 (min, max, mean, std, NaN and Inf counts).
NUMPY = B.STORAGE_RECORDS + r"""
import sys
import numpy as np
path = sys.argv[1]
for offset, nbytes in storage_records(path):
    x = np.memmap(path, dtype=np.float32, mode="r", offset=offset, shape=(nbytes // 4,))
    x.min(), x.max(), x.mean(dtype=np.float64), x.std(dtype=np.float64)
    int(np.isnan(x).sum()), int(np.isinf(x).sum())
"""
TORCH = r"""
import sys, torch
sd = torch.load(sys.argv[1])
for t in sd.values():
    d = t.double()
    d.min(), d.max(), d.mean(), d.std(unbiased=False)
    int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
"""


def timed(cmd, runs, env=None, shell=False):
    """Median wall time and median CPU time (user + system, all threads) of a command: on a busy
    machine the CPU time says what the work costs, the wall time what waiting for it costs."""
    walls, cpus = [], []
    for i in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, shell=shell, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if i > 0:  # the first run warms up
            walls.append(wall)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def run(ctx):
    big = make(ctx, "ckpt_1gb.pt", 1_250_000)
    size = os.path.getsize(big)
    trove = ctx.tool("trove")
    # numpy's BLAS tuning variables, when the environment sets them, only for numpy's command.
    numpy_env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    t_stats = timed([trove, "stats", big, "--json"], ctx.runs)
    t_stats_1 = timed([trove, "stats", big, "--json", "--threads", "1"], ctx.runs)
    t_hist = timed([trove, "stats", big, "--json", "--hist", "20"], ctx.runs)
    t_report = timed([trove, "report", big, "-o", os.path.join(ctx.work, "ckpt_1gb_report.html")], ctx.runs)
    t_cat = timed(f'cat "{big}" > /dev/null', ctx.runs, shell=True)
    t_numpy = timed([PY, "-c", NUMPY, big], ctx.runs, env=numpy_env)
    t_torch = timed([PY, "-c", TORCH, big], ctx.runs)
    rss = B.peak_rss_mb([trove, "stats", big, "--json"])
    load = os.getloadavg()[0]

    def row(label, t):
        wall, cpu = t
        return [label, B.fmt_s(wall), B.fmt_rate(size, wall), f"{wall / t_stats[0]:.2f}", f"{wall / t_cat[0]:.2f}",
                B.fmt_s(cpu), f"{cpu / t_stats[1]:.2f}", f"{cpu / t_cat[1]:.2f}"]

    rows = [
        row("`cat FILE > /dev/null` (floor)", t_cat),
        row(f"`trove stats FILE --json` ({os.cpu_count()} threads)", t_stats),
        row("`trove stats FILE --json --threads 1`", t_stats_1),
        row("`trove stats FILE --json --hist 20` (exact counts: a second pass)", t_hist),
        row("`trove report FILE -o FILE.html` (figures and 32-bin histograms in one pass, the page)", t_report),
        row("numpy over `np.memmap` of each storage record", t_numpy),
        row("`torch.load` + torch reductions", t_torch),
    ]
    out = [
        "## Tensor statistics (issue 15)\n",
        "The 1 GB checkpoint of the .pt section (200 float32 tensors of 1,250,000 elements). Every tool computes the "
        "same figures of every tensor in float64: min, max, mean, standard deviation, NaN and Inf counts "
        "(trove also zeros, subnormals and mean |x|). numpy maps each storage record where the zip holds it "
        "(`np.memmap` at the entry's data offset; `mean(dtype=float64)`, `std(dtype=float64)`); torch loads the "
        "file and reduces `t.double()`. `vs trove`: the row's time over `trove stats`' (above 1: slower than trove); "
        "`vs cat`: over cat's. CPU: user + system time of all the command's threads (median), which a busy "
        f"machine does not inflate as it does wall time (load average {load:.1f} on {os.cpu_count()} cores when this "
        "section finished).\n",
        B.table(["command", "wall", "rate", "vs trove", "vs cat", "CPU", "CPU vs trove", "CPU vs cat"], rows),
        "",
        f"Peak RSS of `trove stats` on the 1 GB file: {rss:.1f} MB (pages are released as each chunk is read).\n",
        "`stats --hist` places every value in a second pass, so its counts are numpy's bin for bin. The report "
        "takes its histograms from the statistics' own pass: each value is also counted in one of 2^16 buckets "
        "(its float32 sign, exponent and top 7 mantissa bits), and a bucket that a bin edge cuts is spread over "
        "its bins by width (docs/stats.md). It reads the file once, so it costs `stats` plus the page.\n",
        "Targets (issue 15): at least 3x faster than numpy and torch; within 2x of cat; `trove report` within 2x "
        "of `trove stats`.\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only stats`.\n",
    ]
    return "\n".join(out)
