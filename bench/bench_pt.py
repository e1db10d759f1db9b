"""Issue 2's benchmark: `trove info` and reading every tensor, against torch.load, libtorch's
torch::pickle_load and `cat`, on a 1 GB checkpoint of 200 float32 tensors and a 10 MB one."""
import os
import subprocess
import sys

import benchlib as B

PY = "/usr/bin/python3"
MAKE = r"""
import sys, torch
n, elems, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
g = torch.Generator().manual_seed(0)
torch.save({f"layer{i}.weight": torch.randn(elems, generator=g) for i in range(n)}, path)
"""
LOAD = r"""
import sys, torch
sd = torch.load(sys.argv[1])
"""
LOAD_WEIGHTS_ONLY = r"""
import sys, torch
sd = torch.load(sys.argv[1], weights_only=True)
"""
LOAD_ALL = r"""
import sys, torch
sd = torch.load(sys.argv[1])
s = 0.0
for t in sd.values():
    s += float(t[0])
"""


def make(ctx, name, elems):
    path = os.path.join(ctx.work, name)
    if not os.path.exists(path):
        subprocess.run([PY, "-c", MAKE, "200", str(elems), path], check=True)
    return path


def run(ctx):
    small = make(ctx, "ckpt_10mb.pt", 12_500)
    big = make(ctx, "ckpt_1gb.pt", 1_250_000)
    trove = ctx.tool("trove")
    libtorch = ctx.tool("pt_load_libtorch")
    rows = []
    info = {}
    lib_note = ""
    if os.path.exists(libtorch):
        probe = subprocess.run([libtorch, small], capture_output=True, text=True)
        if probe.returncode != 0:
            what = [l for l in probe.stderr.splitlines() if "what()" in l]
            lib_note = (what[0].split("what():", 1)[1].strip() if what else f"exit {probe.returncode}")
            libtorch = None
    for label, path in (("10 MB", small), ("1 GB", big)):
        size = os.path.getsize(path)
        t_info = B.time_cmd([trove, "info", path, "--json"], runs=ctx.runs)
        t_torch = B.time_cmd([PY, "-c", LOAD, path], runs=ctx.runs)
        t_lib = B.time_cmd([libtorch, path], runs=ctx.runs) if libtorch and os.path.exists(libtorch) else None
        info[label] = t_info
        rows.append([label, f"{size:,}", B.fmt_s(t_info), B.fmt_s(t_torch), f"{t_torch / t_info:.0f}x",
                     B.fmt_s(t_lib) if t_lib else "fails", f"{t_lib / t_info:.0f}x" if t_lib else "-"])
    keys = [f"layer{i}.weight" for i in range(200)]
    size = os.path.getsize(big)
    # Through a pipe: writing a mapping to /dev/null never touches its pages, a pipe does.
    t_cat_all = B.time_cmd(f'"{trove}" cat "{big}" {" ".join(keys)} --raw | wc -c >/dev/null', runs=ctx.runs, shell=True)
    t_verify = B.time_cmd([trove, "verify", big], runs=ctx.runs)
    t_cat = B.time_cmd(f'cat "{big}" | wc -c >/dev/null', runs=ctx.runs, shell=True)
    t_torch_all = B.time_cmd([PY, "-c", LOAD_ALL, big], runs=ctx.runs)
    rss = B.peak_rss_mb([trove, "info", big])
    # Many small tensors (an optimizer state, a model of many layers): the pickle is the whole cost.
    many = os.path.join(ctx.work, "ckpt_100k_tensors.pt")
    if not os.path.exists(many):
        subprocess.run([PY, "-c", MAKE, "100000", "4", many], check=True)
    t_many = B.time_cmd([trove, "info", many, "--json"], runs=ctx.runs)
    t_many_torch = B.time_cmd([PY, "-c", LOAD, many], runs=ctx.runs)
    t_many_wo = B.time_cmd([PY, "-c", LOAD_WEIGHTS_ONLY, many], runs=ctx.runs)
    rss_many = B.peak_rss_mb([trove, "info", many, "--json"])
    rss_many_torch = B.peak_rss_mb([PY, "-c", LOAD, many])
    rss_import = B.peak_rss_mb([PY, "-c", "import torch"])
    out = [
        "## .pt: metadata and reading (issue 2)\n",
        "Checkpoints: 200 float32 tensors made by `torch.save` (10 MB: 12,500 elements each; 1 GB: 1,250,000 each).",
        "`trove info --json` against `torch.load` (Python, full load) and `torch::pickle_load` (Debian's libtorch, the C++ "
        "way today; `bench/pt_load_libtorch.cpp`). Ratios: how many times faster trove is.\n",
        B.table(["file", "bytes", "trove info", "torch.load", "ratio", "torch::pickle_load", "ratio"], rows),
        "",
        (f"torch::pickle_load (libtorch 1.13) cannot read these torch.save files at all: `{lib_note}`. "
         "trove is the only C++ reader of the three.\n" if lib_note else ""),
        f"`trove info` on 1 GB vs 10 MB: {B.fmt_s(info['1 GB'])} vs {B.fmt_s(info['10 MB'])} "
        f"(ratio {info['1 GB'] / info['10 MB']:.2f}; metadata only). Peak RSS of `trove info` on the 1 GB file: {rss:.1f} MB.\n",
        B.table(["reading all tensor bytes of the 1 GB file", "time", "rate", "vs cat"],
                [["`cat FILE \| wc -c` (anchor)", B.fmt_s(t_cat), B.fmt_rate(size, t_cat), "1.00"],
                 ["`trove cat FILE KEY1 ... KEY200 --raw \| wc -c`", B.fmt_s(t_cat_all), B.fmt_rate(size, t_cat_all),
                  f"{t_cat / t_cat_all:.2f}"],
                 ["`trove verify FILE` (parse + CRC-32 of every byte)", B.fmt_s(t_verify), B.fmt_rate(size, t_verify),
                  f"{t_cat / t_verify:.2f}"],
                 ["`torch.load` + touch every tensor (Python)", B.fmt_s(t_torch_all), B.fmt_rate(size, t_torch_all),
                  f"{t_cat / t_torch_all:.2f}"]]),
        "",
        f"A checkpoint of 100,000 tensors of 4 float32 ({os.path.getsize(many):,} bytes, `torch.save`): "
        f"`trove info --json` {B.fmt_s(t_many)} (peak RSS {rss_many:.0f} MB), `torch.load` {B.fmt_s(t_many_torch)} "
        f"({rss_many_torch:.0f} MB, of which {rss_import:.0f} MB are the interpreter and `import torch`; {t_many_torch / t_many:.1f}x trove's time), "
        f"`torch.load(weights_only=True)` {B.fmt_s(t_many_wo)} ({t_many_wo / t_many:.1f}x). "
        "Here the pickle is the whole cost: about 15 values per tensor (docs/performance.md).\n",
        "Targets (issue 2): info takes the same time on both files; info at most 1/50 of torch.load's time on 1 GB; "
        "reading all tensor bytes at least half of cat's rate (the `vs cat` column is cat's time over ours).\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only pt`.\n",
    ]
    return "\n".join(out)
