"""Issue 28's benchmark: `trove convert DIR out.safetensors` of a 2 GB DCP checkpoint and of a 2 GB
ZeRO-3 directory, against `cp` of the bytes it converts and against the load-everything merge in
torch (DCP: torch.load of every chunk then torch.save, as dcp_to_torch_save does; ZeRO:
zero_to_fp32's way, torch.load of every rank file then concatenation, then torch.save). Time and
peak RSS of each. The checkpoints are made as the tests make them (tests/python/dcp_writer.py's
torch 1.13 save_state_dict, test_deepspeed.py's write_zero3) and removed at the end."""
import os
import shutil
import statistics
import subprocess
import time

import benchlib as B

PY = "/usr/bin/python3"
TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "python")
MIB = 1 << 20

# One 384 MiB tensor and thirteen of 128 MiB: 2 GiB of float32 in one process, one chunk each.
MAKE_DCP = r"""
import sys
sys.path.insert(0, sys.argv[1])
import dcp_writer, torch
g = torch.Generator().manual_seed(0)
state = {"embed.weight": torch.randn(24576, 4096, generator=g)}
for i in range(13):
    state[f"layers.{i}.weight"] = torch.randn(8192, 4096, generator=g)
dcp_writer.dcp.save_state_dict(state, dcp_writer.dcp.FileSystemWriter(sys.argv[2]), no_dist=True)
"""
# dcp_to_torch_save's way: every chunk's archive torch.load-ed, the global tensors assembled, torch.save.
MERGE_DCP = r"""
import io, os, pickle, sys
sys.path.insert(0, sys.argv[1])
import dcp_writer, torch
d = sys.argv[2]
meta = pickle.load(open(os.path.join(d, ".metadata"), "rb"))
out = {}
for fqn, item in meta.state_dict_metadata.items():
    t = torch.empty(item.size, dtype=item.properties.dtype)
    for key, info in meta.storage_data.items():
        if key.fqn != fqn:
            continue
        with open(os.path.join(d, info.relative_path), "rb") as f:
            f.seek(info.offset)
            chunk = torch.load(io.BytesIO(f.read(info.length)))
        t[tuple(slice(o, o + s) for o, s in zip(key.offset, chunk.shape))] = chunk
    out[fqn] = t
torch.save(out, sys.argv[3])
"""
# 2.2 GB of fp32 masters (a 256 MiB embedding and twenty-nine 64 MiB layers) over 2 ranks: issue 28
# asks for checkpoints of at least 2 GB with a tensor of at least 256 MB, ZeRO-3's as DCP's.
ZERO_LAYERS = 29
MAKE_ZERO = r"""
import collections, pathlib, sys
sys.path.insert(0, sys.argv[1])
import test_deepspeed as T, torch
g = torch.Generator().manual_seed(0)
g0 = collections.OrderedDict([("embed.weight", torch.randn(16384, 4096, generator=g))])
g1 = collections.OrderedDict((f"layers.{i}.weight", torch.randn(4096, 4096, generator=g)) for i in range(int(sys.argv[3])))
T.write_zero3(pathlib.Path(sys.argv[2]), [g0, g1], 2)
"""
# zero_to_fp32's way for stage 3: torch.load of every rank's model-states and optimizer file, each
# parameter the concatenation of its rank pieces cut to its size.
MERGE_ZERO = r"""
import glob, math, os, sys
sys.path.insert(0, sys.argv[1])
import test_deepspeed as T, torch
tag = os.path.join(sys.argv[2], open(os.path.join(sys.argv[2], "latest")).read().strip())
states = [torch.load(f) for f in sorted(glob.glob(os.path.join(tag, "*_model_states.pt")))]
optims = [torch.load(f) for f in sorted(glob.glob(os.path.join(tag, "*_optim_states.pt")))]
world = len(optims)
flat = [o["optimizer_state_dict"]["fp32_flat_groups"] for o in optims]
out = {}
for gi, shapes in enumerate(states[0]["param_shapes"]):
    offset = 0
    for name, shape in shapes.items():
        n = shape.numel()
        share = math.ceil(n / world)
        out[name] = torch.cat([flat[r][gi].narrow(0, offset, share) for r in range(world)]).narrow(0, 0, n).view(shape).clone()
        offset += share
torch.save(out, sys.argv[3])
"""


def measure(cmd, runs, setup, shell=False, warmup=True):
    """Median wall time and the largest peak RSS (MB) over `runs` runs after one warm-up (none
    without `warmup`); every dirty page is flushed (untimed) before each run, so no run pays for
    the writeback of another (B.settle_writes), and then `setup` removes the old output."""
    times, rss = [], []
    first = 0 if warmup else 1
    for i in range(first, runs + 1):
        B.settle_writes()
        setup()  # after the pause: B.settle_writes says why
        full = ["/usr/bin/time", "-f", "%M"] + (["sh", "-c", cmd] if shell else list(cmd))
        t0 = time.perf_counter()
        p = subprocess.run(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
        dt = time.perf_counter() - t0
        if i:
            times.append(dt)
            rss.append(int(p.stderr.strip().splitlines()[-1]) / 1024.0)
    if not times:  # a warm-up alone
        return None, None
    return statistics.median(times), max(rss)


def removing(*paths):
    def go():
        for p in paths:
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.remove(p)
    return go


# Runs of each convert and its cp: a write's time on this machine varies run to run by a quarter
# (writeback, other tenants), more than the gap measured; the two take turns run by run, and the
# medians of this many pairs are quoted.
CONVERT_RUNS = 7


def section(ctx, label, d, data_files, largest, merge_script, merge_label, out_dir=None):
    """The rows of one checkpoint: cp, trove's convert and (written to disk only) torch's merge.
    `out_dir`: where the outputs go (the work directory on disk when None)."""
    runs = max(ctx.runs, CONVERT_RUNS)
    trove = ctx.tool("trove")
    into = out_dir or ctx.work
    out = os.path.join(into, "ckpt_out.safetensors")
    out_pt = os.path.join(into, "ckpt_merged.pt")
    out_cp = os.path.join(into, "ckpt_copy")
    nbytes = sum(os.path.getsize(f) for f in data_files)
    cp = "mkdir -p " + out_cp + " && cp " + " ".join(f'"{f}"' for f in data_files) + f' "{out_cp}/"'
    # cp and trove take turns run by run (a warm-up of each first), so that a drift of the
    # machine's speed falls on both alike.
    measure(cp, 0, removing(out_cp), shell=True)
    measure([trove, "convert", d, out], 0, removing(out))
    cps, trs = [], []
    for _ in range(runs):
        cps.append(measure(cp, 1, removing(out_cp), shell=True, warmup=False))
        trs.append(measure([trove, "convert", d, out], 1, removing(out), warmup=False))
    t_cp, rss_cp = statistics.median(t for t, _ in cps), max(r for _, r in cps)
    t_tr, rss_tr = statistics.median(t for t, _ in trs), max(r for _, r in trs)
    out_size = os.path.getsize(out)
    target = 1.5 * largest / MIB + 64
    where = " into tmpfs" if out_dir else ""
    rows = [
        [f"{label}: `cp` of the {nbytes / 1e9:.2f} GB it converts{where} (anchor)", B.fmt_s(t_cp),
         B.fmt_rate(nbytes, t_cp), "1.00", f"{rss_cp:.0f}"],
        [f"{label}: `trove convert DIR out.safetensors`{where} ({out_size / 1e9:.2f} GB out)", B.fmt_s(t_tr),
         B.fmt_rate(out_size, t_tr), f"{t_cp / t_tr:.2f}", f"{rss_tr:.0f} (target {target:.0f})"],
    ]
    if out_dir is None:
        # The load-everything merge takes minutes: run once, without a warm-up (the inputs are hot
        # from the runs above).
        t_torch, rss_torch = measure([PY, "-c", merge_script, TESTS, d, out_pt], 1, removing(out_pt), warmup=False)
        rows.append([f"{label}: {merge_label}", B.fmt_s(t_torch), B.fmt_rate(out_size, t_torch),
                     f"{t_cp / t_torch:.2f}", f"{rss_torch:.0f}"])
    removing(out, out_pt, out_cp)()
    return rows


# Both checkpoints again with every output in a tmpfs: the disk's write rate here drifts 2-5x
# within a run (the root file system is mounted with `discard`), which the disk rows' ratio
# carries; into memory cp holds still and the ratio is the convert's own.
def sections(ctx, label, d, data_files, largest, merge_script, merge_label):
    rows = section(ctx, label, d, data_files, largest, merge_script, merge_label)
    shm = B.tmpfs_dir(3 * sum(os.path.getsize(f) for f in data_files))
    if shm is None:
        return rows
    try:
        return rows + section(ctx, label, d, data_files, largest, merge_script, merge_label, out_dir=shm)
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def run(ctx):
    load_before = os.getloadavg()[0]
    dcp = os.path.join(ctx.work, "ckpt_dcp")
    zero = os.path.join(ctx.work, "ckpt_zero3")
    removing(dcp, zero)()
    try:
        subprocess.run([PY, "-c", MAKE_DCP, TESTS, dcp], check=True, env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"))
        dcp_files = sorted(os.path.join(dcp, f) for f in os.listdir(dcp) if f.endswith(".distcp"))
        dcp_size = sum(os.path.getsize(f) for f in dcp_files)
        rows = sections(ctx, "DCP", dcp, dcp_files, 384 * MIB, MERGE_DCP,
                       "torch.load of every chunk, torch.save (dcp_to_torch_save's way)")
        removing(dcp)()
        subprocess.run([PY, "-c", MAKE_ZERO, TESTS, zero, str(ZERO_LAYERS)], check=True)
        tag = os.path.join(zero, "global_step5")
        zero_all = sorted(os.path.join(tag, f) for f in os.listdir(tag))
        zero_size = sum(os.path.getsize(f) for f in zero_all)
        zero_optim = [f for f in zero_all if f.endswith("_optim_states.pt")]
        rows += sections(ctx, "ZeRO-3", zero, zero_optim, 256 * MIB, MERGE_ZERO,
                        "torch.load of every rank file, concatenation, torch.save (zero_to_fp32's way)")
    finally:
        removing(dcp, zero)()
    out = [
        "## DCP and ZeRO checkpoints (issue 28)\n",
        f"A DCP checkpoint of {dcp_size / 1e9:.2f} GB (torch 1.13's `save_state_dict` in one process: one 384 MiB "
        "float32 tensor and thirteen of 128 MiB, one chunk each) and a ZeRO-3 directory of "
        f"{zero_size / 1e9:.2f} GB over 2 ranks (its fp32 masters: a 256 MiB embedding and {ZERO_LAYERS} layers of 64 MiB, "
        "in each rank's optimizer file; the model-states files hold the shapes), both made as the tests make them. "
        "`trove convert DIR out.safetensors` against `cp` of the bytes it converts (DCP: every `.distcp`; ZeRO: the "
        "optimizer files holding the fp32 masters) and against the load-everything merge in torch (one run). "
        "`vs cp` is cp's time over the row's; peak RSS from GNU time's `%M`, the largest over the runs. Every run "
        f"starts after `sync` and a 2 s pause, then the last output removed, as `bench/benchlib.py` explains, page cache hot; cp and trove take turns run by run, medians of {max(ctx.runs, CONVERT_RUNS)} pairs.\n",
        B.table(["command", "time", "rate (output)", "vs cp", "peak RSS MB"], rows),
        "",
        "The rows `into tmpfs` write cp's and trove's outputs into `/dev/shm` instead of the disk: this root file "
        "system is mounted with `discard` and its write rate drifts 2-5x within a run, which the disk rows' ratios "
        "carry; into memory the anchor holds still and the ratio is the convert's own.\n",
        "Targets (issue 28): at least 0.8 of cp's rate; peak RSS at most 1.5 x the largest tensor + 64 MB.\n",
        "Both go out by `copy_file_range`, as cp's bytes do, page cache to page cache: a single-chunk DCP tensor is a "
        "view of its file, written at the same offset within a page as in its file (the safetensors header is padded "
        "for that), so the kernel copies page onto page as it does for cp; a ZeRO-3 parameter is its rank pieces "
        "(contiguous runs of the ranks' flat partitions), each piece's file range handed on in turn, so no parameter "
        "is assembled in memory (docs/performance.md; before, 41.8 s and 395 MB here). A rank piece starts at byte "
        "832 of its file (after the zip's local header) and lands wherever the safetensors layout puts it, which "
        "safetensors leaves no room to choose: pieces of 1 MiB or more whose offsets within a page differ are copied "
        "through a page-aligned 256 KiB buffer instead, which beats the kernel's copy across pages.\n",
        f"Load average (1 min) on the 2 cores: {load_before:.1f} when the section started, {os.getloadavg()[0]:.1f} when "
        "it ended (other builds running when it is high: the times, the torch merges' above all, are then noisy).\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only checkpoints`.\n",
    ]
    return "\n".join(out)
