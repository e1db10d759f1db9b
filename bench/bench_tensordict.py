"""tensordict section of `make bench`: writing directories and .tdz archives from a checkpoint.

Makes a ~1 GB checkpoint (200 float32 tensors) and a ~10 MB one with Debian's torch, then times
`trove convert CKPT OUT --to tensordict` and `trove convert CKPT OUT.tdz` against `cp` of the same
checkpoint (the anchor: the rate of copying those bytes on this disk), `trove info` on the
outputs of both sizes (opening is metadata-only, so it should not grow with the data), and the
peak RSS of each conversion (target: under 256 MB whatever the size).
"""
import os
import shutil
import subprocess

import benchlib

SIZES = {"10 MB": 10 * 1024 * 1024, "1 GB": 1024 * 1024 * 1024}
TENSORS = 200


def make_checkpoint(path, total_bytes):
    if os.path.exists(path):
        return
    per = total_bytes // TENSORS // 4
    script = (
        "import torch, sys\n"
        "g = torch.Generator().manual_seed(0)\n"
        f"sd = {{f'layer{{i}}.weight': torch.rand({per}, generator=g) for i in range({TENSORS})}}\n"
        f"torch.save(sd, {path!r})\n"
    )
    subprocess.run(["/usr/bin/python3", "-c", script], check=True)


def remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def run(ctx):
    trove = ctx.tool("trove")
    rows, info_rows, rss_rows, sync_rows = [], [], [], []
    for label, size in SIZES.items():
        tag = label.replace(" ", "")
        ckpt = os.path.join(ctx.work, f"td_ckpt_{tag}.pt")
        make_checkpoint(ckpt, size)
        nbytes = os.path.getsize(ckpt)
        copy = os.path.join(ctx.work, f"td_copy_{tag}.pt")
        out_dir = os.path.join(ctx.work, f"td_out_{tag}")
        out_tdz = os.path.join(ctx.work, f"td_out_{tag}.tdz")
        t_cp = benchlib.time_cmd(["cp", ckpt, copy], runs=ctx.runs, setup=lambda: remove(copy), settle=True)
        dir_cmd = [trove, "convert", ckpt, out_dir, "--to", "tensordict"]
        tdz_cmd = [trove, "convert", ckpt, out_tdz]
        t_dir = benchlib.time_cmd(dir_cmd, runs=ctx.runs, setup=lambda: remove(out_dir), settle=True)
        t_tdz = benchlib.time_cmd(tdz_cmd, runs=ctx.runs, setup=lambda: remove(out_tdz), settle=True)
        if size >= SIZES["1 GB"]:
            t_cp_sync = benchlib.time_cmd(f'cp "{ckpt}" "{copy}" && sync "{copy}"', shell=True, runs=ctx.runs,
                                          setup=lambda: remove(copy), settle=True)
            t_dir_sync = benchlib.time_cmd(dir_cmd + ["--sync"], runs=ctx.runs, setup=lambda: remove(out_dir), settle=True)
            t_tdz_sync = benchlib.time_cmd(tdz_cmd + ["--sync"], runs=ctx.runs, setup=lambda: remove(out_tdz), settle=True)
            sync_rows.append([label, benchlib.fmt_s(t_cp_sync),
                              benchlib.fmt_s(t_dir_sync) + f" ({t_cp_sync / t_dir_sync:.0%} of cp && sync's rate)",
                              benchlib.fmt_s(t_tdz_sync) + f" ({t_cp_sync / t_tdz_sync:.0%} of cp && sync's rate)"])
        rows.append([label, benchlib.fmt_s(t_cp) + f" ({benchlib.fmt_rate(nbytes, t_cp)})",
                     benchlib.fmt_s(t_dir) + f" ({benchlib.fmt_rate(nbytes, t_dir)}, {t_cp / t_dir:.0%} of cp)",
                     benchlib.fmt_s(t_tdz) + f" ({benchlib.fmt_rate(nbytes, t_tdz)}, {t_cp / t_tdz:.0%} of cp)"])
        remove(out_dir)
        rss_dir = benchlib.peak_rss_mb(dir_cmd)
        remove(out_tdz)
        rss_tdz = benchlib.peak_rss_mb(tdz_cmd)
        rss_rows.append([label, f"{rss_dir:.0f} MB", f"{rss_tdz:.0f} MB"])
        t_info_tdz = benchlib.time_cmd([trove, "info", out_tdz], runs=ctx.runs)
        t_info_dir = benchlib.time_cmd([trove, "info", out_dir], runs=ctx.runs)
        info_rows.append([label, benchlib.fmt_s(t_info_tdz), benchlib.fmt_s(t_info_dir)])
        remove(copy)
    return "\n".join([
        "## tensordict\n",
        f"Checkpoints of {TENSORS} float32 tensors written by torch.save; outputs written by "
        f"`trove convert` ({benchlib.drop_caches_hint()}; each write run starts with dirty pages flushed, untimed). "
        "Outputs are new, and like cp's not fsynced; they appear whole by a rename at the end. "
        "Target: writing at >= 60% of cp's rate.\n",
        benchlib.table(["checkpoint", "cp", "convert --to tensordict", "convert to .tdz"], rows),
        "\nDurable writes (`--sync`: fsync/syncfs before the rename) against `cp && sync` of the same checkpoint:\n",
        benchlib.table(["checkpoint", "cp && sync", "convert --sync --to tensordict", "convert --sync to .tdz"], sync_rows),
        "\nOpening and listing the tensors (`trove info`): metadata only, so the 10 MB and 1 GB rows "
        "should match.\n",
        benchlib.table(["output of", "info OUT.tdz", "info OUTDIR"], info_rows),
        "\nPeak resident memory of the conversions (target < 256 MB whatever the size):\n",
        benchlib.table(["checkpoint", "convert --to tensordict", "convert to .tdz"], rss_rows),
        "",
    ])
