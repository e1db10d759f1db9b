"""Issue 17's benchmark: the Python module against its peers, each measurement in a fresh Python
process (imports included in neither figure: each script times only the calls), on the 1 GB
checkpoint of bench_pt (200 float32 tensors of 1,250,000 elements, made by torch.save).

- `trove.load` against `torch.load`: the time to return, then returning plus summing every tensor
  (trove's tensors are views of the mapping: the sum is where the bytes are read).
- `trove.open(...).get_tensor` of every key, summed, against `numpy.memmap` of the same bytes at
  the offsets Python's zipfile gives (the floor: nothing can view a file's bytes for less).
"""
import json
import os
import statistics
import subprocess

import benchlib as B
import bench_pt

PY = "/usr/bin/python3"

# Each script prints the median seconds of its timed calls (one warm-up, then `runs`).
HEAD = r"""
import json, statistics, sys, time
path, runs = sys.argv[1], int(sys.argv[2])
def median(fn):
    fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter(); fn(); samples.append(time.perf_counter() - t0)
    return statistics.median(samples)
"""
SCRIPTS = {
    "trove.load": HEAD + r"""
import trove
print(median(lambda: trove.load(path)))
""",
    "torch.load": HEAD + r"""
import torch
print(median(lambda: torch.load(path)))
""",
    "trove.load + sums": HEAD + r"""
import trove
def go():
    sd = trove.load(path)
    return sum(float(t.sum()) for t in sd.values())
print(median(go))
""",
    "torch.load + sums": HEAD + r"""
import torch
def go():
    sd = torch.load(path)
    return sum(float(t.sum()) for t in sd.values())
print(median(go))
""",
    "get_tensor + sums": HEAD + r"""
import trove
def go():
    with trove.open(path, framework="np") as f:
        return sum(float(f.get_tensor(k).sum()) for k in f.keys())
print(median(go))
""",
    "numpy.memmap + sums": HEAD + B.STORAGE_RECORDS + r"""
import numpy
entries = [(offset, nbytes // 4) for offset, nbytes in storage_records(path)]
def go():
    return sum(float(numpy.memmap(path, dtype=numpy.float32, mode="r", offset=o, shape=(n,)).sum())
               for o, n in entries)
print(median(go))
""",
}


def measure_script(ctx, script, path, env):
    """The median seconds `script` (HEAD + its calls) prints, over runs inside one process; the
    process runs twice and the lower median is kept (the first pays for cold imports' page faults)."""
    outs = []
    for _ in range(2):
        p = subprocess.run([PY, "-c", script, path, str(ctx.runs)], env=env, check=True,
                           capture_output=True, text=True)
        outs.append(float(p.stdout.strip().splitlines()[-1]))
    return min(outs)


def measure(ctx, name, path, env):
    return measure_script(ctx, SCRIPTS[name], path, env)


def run(ctx):
    big = bench_pt.make(ctx, "ckpt_1gb.pt", 1_250_000)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(os.path.dirname(ctx.bin), "python")
    t = {name: measure(ctx, name, big, env) for name in SCRIPTS}
    size = os.path.getsize(big)
    rows = [
        ["return the state dict", B.fmt_s(t["trove.load"]), "`torch.load`", B.fmt_s(t["torch.load"]),
         f"{t['torch.load'] / t['trove.load']:.0f}x faster"],
        ["return it and sum every tensor", B.fmt_s(t["trove.load + sums"]), "`torch.load` + the same sums",
         B.fmt_s(t["torch.load + sums"]), f"{t['torch.load + sums'] / t['trove.load + sums']:.2f}x faster"],
        ["`trove.open(path, framework=\"np\").get_tensor` of every key, summed", B.fmt_s(t["get_tensor + sums"]),
         "`numpy.memmap` of the same bytes, summed (floor)", B.fmt_s(t["numpy.memmap + sums"]),
         f"{t['get_tensor + sums'] / t['numpy.memmap + sums']:.2f}x the floor"],
    ]
    return "\n".join([
        "## Python: `trove.load` and `trove.open` (issue 17)\n",
        f"The 1 GB checkpoint of the .pt section ({size:,} bytes, 200 float32 tensors), page cache hot. Each figure "
        f"is the median of {ctx.runs} calls after a warm-up inside one Python process (imports not timed).\n",
        B.table(["trove", "time", "anchor", "time", "ratio"], rows),
        "",
        "Targets (issue 17): `trove.load` returns at least 50x faster than `torch.load` (its tensors are views of the "
        "mapping, read when used); with every tensor summed, no slower than `torch.load` plus the same sums; "
        "`get_tensor` within 1.5x of `numpy.memmap`.\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only python`.\n",
    ])
