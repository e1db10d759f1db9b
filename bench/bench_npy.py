"""Issue 26's benchmark: numpy's files. `trove info` of a 1 GB .npy and a 1 GB .npz (stored, as
numpy.savez writes) against `numpy.load(mmap_mode='r')` reading the same header; `trove.load` of
the 1 GB .npy against `numpy.load(mmap_mode='r')` (each in its own Python process, imports not
timed), then both summing the array (where the bytes are read)."""
import os
import subprocess

import benchlib as B
from bench_python import HEAD, measure_script

PY = "/usr/bin/python3"
ELEMENTS = 250_000_000  # float32: 1 GB

MAKE = r"""
import numpy as np, sys
npy, npz, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
a = np.lib.format.open_memmap(npy, mode="w+", dtype=np.float32, shape=(n,))
step = 1 << 24
for i in range(0, n, step):
    a[i:i + step] = np.arange(i, min(n, i + step), dtype=np.float32) * np.float32(1e-6)
a.flush()
del a
np.savez(npz, weights=np.load(npy, mmap_mode="r"))
"""

SCRIPTS = {
    "trove.load": HEAD + "import trove\nprint(median(lambda: trove.load(path, framework='np')))\n",
    "numpy.load mmap": HEAD + "import numpy\nprint(median(lambda: numpy.load(path, mmap_mode='r')))\n",
    "trove.load + sum": HEAD + "import trove\nprint(median(lambda: float(trove.load(path, framework='np')['array'].sum())))\n",
    "numpy.load mmap + sum": HEAD + "import numpy\nprint(median(lambda: float(numpy.load(path, mmap_mode='r').sum())))\n",
}


def run(ctx):
    npy = os.path.join(ctx.work, "array_1gb.npy")
    npz = os.path.join(ctx.work, "array_1gb.npz")
    if not (os.path.exists(npy) and os.path.exists(npz)):
        subprocess.run([PY, "-c", MAKE, npy, npz, str(ELEMENTS)], check=True)
    trove = ctx.tool("trove")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(os.path.dirname(ctx.bin), "python")
    t_info_npy = B.time_cmd([trove, "info", npy, "--json"], runs=ctx.runs)
    t_info_npz = B.time_cmd([trove, "info", npz, "--json"], runs=ctx.runs)
    # The anchor for info: numpy reading the header and mapping the array, process start included
    # as trove's is.
    t_np_header = B.time_cmd([PY, "-c", "import numpy, sys; numpy.load(sys.argv[1], mmap_mode='r')", npy],
                             runs=ctx.runs)
    t = {name: measure_script(ctx, script, npy, env) for name, script in SCRIPTS.items()}
    size = os.path.getsize(npy)
    rows = [
        ["`trove info` of the 1 GB .npy", B.fmt_s(t_info_npy), "`python3 -c numpy.load(mmap_mode='r')`",
         B.fmt_s(t_np_header), f"{t_np_header / t_info_npy:.1f}x faster"],
        ["`trove info` of the 1 GB .npz (stored member)", B.fmt_s(t_info_npz), "(same anchor)",
         B.fmt_s(t_np_header), f"{t_np_header / t_info_npz:.1f}x faster"],
        ["`trove.load(path, framework=\"np\")`", B.fmt_s(t["trove.load"]), "`numpy.load(path, mmap_mode='r')`",
         B.fmt_s(t["numpy.load mmap"]), f"{t['trove.load'] / t['numpy.load mmap']:.2f}x its time"],
        ["the same, then `.sum()` of the array", B.fmt_s(t["trove.load + sum"]), "the same, then `.sum()`",
         B.fmt_s(t["numpy.load mmap + sum"]), f"{t['trove.load + sum'] / t['numpy.load mmap + sum']:.2f}x its time"],
    ]
    return "\n".join([
        "## numpy's .npy and .npz (issue 26)\n",
        f"A float32 array of {ELEMENTS:,} elements ({size:,} bytes) as .npy, and the same array as the one "
        f"stored member of an .npz (numpy.savez). Page cache hot; the Python rows are medians of {ctx.runs} calls "
        "inside one process after a warm-up (imports not timed), the better of two processes.\n",
        B.table(["trove", "time", "anchor", "time", "ratio"], rows),
        "",
        "Targets (issue 26): `info` of a 1 GB .npy and .npz under 10 ms; `trove.load` of the .npy side by side "
        "with `numpy.load(mmap_mode='r')`.\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only npy`.\n",
    ])
