"""Issue 30's cast benchmark: `trove convert --dtype bfloat16` of the 1 GB checkpoint against a
plain `trove convert` of it (the rate a cast should keep) and against torch doing the same job
(`torch.load`, `.to(torch.bfloat16)` of every tensor, `torch.save`), each a whole process."""
import os

import benchlib as B
from bench_pt import make

PY = "/usr/bin/python3"
TORCH_CAST = r"""
import sys, torch
sd = torch.load(sys.argv[1])
torch.save({k: v.to(torch.bfloat16) for k, v in sd.items()}, sys.argv[2])
"""


def run(ctx):
    big = make(ctx, "ckpt_1gb.pt", 1_250_000)
    size = os.path.getsize(big)
    trove = ctx.tool("trove")
    out = os.path.join(ctx.work, "cast_out.pt")

    def rm():
        os.path.exists(out) and os.remove(out)

    t_plain = B.time_cmd([trove, "convert", big, out], runs=ctx.runs, setup=rm, settle=True)
    t_cast = B.time_cmd([trove, "convert", big, out, "--dtype", "bfloat16"], runs=ctx.runs, setup=rm, settle=True)
    t_torch = B.time_cmd([PY, "-c", TORCH_CAST, big, out], runs=ctx.runs, setup=rm, settle=True)
    rss = B.peak_rss_mb([trove, "convert", big, out + ".rss.pt", "--dtype", "bfloat16"])
    for p in (out, out + ".rss.pt"):
        os.path.exists(p) and os.remove(p)
    rows = [
        ["`trove convert` → .pt (anchor)", B.fmt_s(t_plain), B.fmt_rate(size, t_plain), "1.00", ""],
        ["`trove convert --dtype bfloat16` → .pt", B.fmt_s(t_cast), B.fmt_rate(size, t_cast),
         f"{t_plain / t_cast:.2f}", f"{t_torch / t_cast:.1f}x faster"],
        ["`torch.load` + `.to(torch.bfloat16)` + `torch.save` (a Python process)", B.fmt_s(t_torch),
         B.fmt_rate(size, t_torch), f"{t_plain / t_torch:.2f}", "1.0x"],
    ]
    return "\n".join([
        "## Casting (issue 30)\n",
        f"The 1 GB checkpoint of the .pt section ({size:,} bytes of float32) cast to bfloat16 on the way. Rates "
        "are of input bytes; `vs plain` is plain convert's time over this one. Each write run starts with the "
        f"page cache clean of dirty pages (`sync` and a 2 s pause, then the last output removed, as `bench/benchlib.py` explains, untimed). Peak memory of the cast: {rss:.0f} MB.\n",
        B.table(["what", "time", "rate", "vs plain", "vs torch"], rows),
        "",
        "Targets (issue 30): the cast at least 0.8 of plain convert's rate and at least 3x faster than torch's "
        "load + cast + save.\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only cast`.\n",
    ])
