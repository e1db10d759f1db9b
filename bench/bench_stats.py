"""Issue 15's benchmark: `trove stats` on the 1 GB checkpoint against numpy over a memory map of
the same bytes, against torch.load plus torch's reductions, and against `cat` as the floor."""
import os

import benchlib as B
from bench_pt import make

PY = "/usr/bin/python3"
# numpy over the stored bytes: each storage record of the zip mapped where it lies, the same
# figures in float64 (min, max, mean, std, NaN and Inf counts).
NUMPY = r"""
import struct, sys, zipfile
import numpy as np
path = sys.argv[1]
with zipfile.ZipFile(path) as z, open(path, "rb") as f:
    for info in z.infolist():
        if "/data/" not in info.filename:
            continue
        f.seek(info.header_offset)
        head = f.read(30)
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        offset = info.header_offset + 30 + name_len + extra_len
        x = np.memmap(path, dtype=np.float32, mode="r", offset=offset, shape=(info.file_size // 4,))
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


def run(ctx):
    big = make(ctx, "ckpt_1gb.pt", 1_250_000)
    size = os.path.getsize(big)
    trove = ctx.tool("trove")
    # numpy's BLAS tuning variables, when the environment sets them, only for numpy's command.
    numpy_env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    t_stats = B.time_cmd([trove, "stats", big, "--json"], runs=ctx.runs)
    t_stats_1 = B.time_cmd([trove, "stats", big, "--json", "--threads", "1"], runs=ctx.runs)
    t_hist = B.time_cmd([trove, "stats", big, "--json", "--hist", "20"], runs=ctx.runs)
    t_cat = B.time_cmd(f'cat "{big}" > /dev/null', runs=ctx.runs, shell=True)
    t_numpy = B.time_cmd([PY, "-c", NUMPY, big], runs=ctx.runs, env=numpy_env)
    t_torch = B.time_cmd([PY, "-c", TORCH, big], runs=ctx.runs)
    rss = B.peak_rss_mb([trove, "stats", big, "--json"])

    def row(label, t):
        return [label, B.fmt_s(t), B.fmt_rate(size, t), f"{t / t_stats:.2f}", f"{t / t_cat:.2f}"]

    rows = [
        row("`cat FILE > /dev/null` (floor)", t_cat),
        row(f"`trove stats FILE --json` ({os.cpu_count()} threads)", t_stats),
        row("`trove stats FILE --json --threads 1`", t_stats_1),
        row("`trove stats FILE --json --hist 20` (two passes)", t_hist),
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
        "`vs cat`: over cat's.\n",
        B.table(["command", "time", "rate", "vs trove", "vs cat"], rows),
        "",
        f"Peak RSS of `trove stats` on the 1 GB file: {rss:.1f} MB (pages are released as each chunk is read).\n",
        "Targets (issue 15): at least 3x faster than numpy and torch; within 2x of cat.\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only stats`.\n",
    ]
    return "\n".join(out)
