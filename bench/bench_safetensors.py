"""Issue 16's benchmark: `trove info` of a 1 GB .safetensors against the same 1 GB .pt, reading
every stored byte (`trove cat --raw` of every tensor) against `cat`, and converting the .pt to
.safetensors against `cp`."""
import json
import os
import subprocess

import benchlib as B
from bench_pt import make


def run(ctx):
    small = make(ctx, "ckpt_10mb.pt", 12_500)
    big = make(ctx, "ckpt_1gb.pt", 1_250_000)
    trove = ctx.tool("trove")
    st = os.path.join(ctx.work, "ckpt_1gb.safetensors")
    if not os.path.exists(st):
        subprocess.run([trove, "convert", big, st], check=True)
    st_small = os.path.join(ctx.work, "ckpt_10mb.safetensors")
    if not os.path.exists(st_small):
        subprocess.run([trove, "convert", small, st_small], check=True)
    shards = os.path.join(ctx.work, "ckpt_1gb_shards")
    if not os.path.exists(shards):
        subprocess.run([trove, "convert", big, shards, "--to", "safetensors", "--max-shard-size", "300MB"], check=True)
    size = os.path.getsize(st)
    keys = [t["key"] for t in json.loads(subprocess.run([trove, "info", "--json", st], check=True,
                                                       capture_output=True).stdout)["tensors"]]
    out_st = os.path.join(ctx.work, "conv_out.safetensors")
    out_cp = os.path.join(ctx.work, "cp_out.safetensors")

    def rm(p):
        return lambda: os.path.exists(p) and os.remove(p)

    t_info_st = B.time_cmd([trove, "info", st, "--json"], runs=ctx.runs)
    t_info_small = B.time_cmd([trove, "info", st_small, "--json"], runs=ctx.runs)
    t_info_shards = B.time_cmd([trove, "info", shards, "--json"], runs=ctx.runs)
    t_info_pt = B.time_cmd([trove, "info", big, "--json"], runs=ctx.runs)
    # Both through a pipe: a write(2) to /dev/null would not read a mapped page at all.
    t_cat = B.time_cmd(f'cat "{st}" | wc -c', runs=ctx.runs, shell=True)
    t_read = B.time_cmd(f'"{trove}" cat "{st}" {" ".join(keys)} --raw | wc -c', runs=ctx.runs, shell=True)
    t_cp = B.time_cmd(["cp", big, out_cp], runs=ctx.runs, setup=rm(out_cp), settle=True)
    t_conv = B.time_cmd([trove, "convert", big, out_st], runs=ctx.runs, setup=rm(out_st), settle=True)
    rss = B.peak_rss_mb([trove, "convert", big, out_st + ".rss.safetensors"])
    for p in (out_st + ".rss.safetensors", out_st, out_cp):
        os.path.exists(p) and os.remove(p)
    rows = [
        ["`trove info` of the 1 GB .safetensors", B.fmt_s(t_info_st), "", ""],
        ["`trove info` of the same 200 tensors as a 10 MB .safetensors", B.fmt_s(t_info_small), "", ""],
        ["`trove info` of the 1 GB as 4 .safetensors shards and their index (no shard is mapped)",
         B.fmt_s(t_info_shards), "", ""],
        ["`trove info` of the same tensors as a 1 GB .pt", B.fmt_s(t_info_pt), "", ""],
        ["`cat FILE \\| wc -c` (anchor)", B.fmt_s(t_cat), B.fmt_rate(size, t_cat), "1.00"],
        [f"`trove cat FILE KEY... --raw \\| wc -c`, every tensor ({len(keys)})", B.fmt_s(t_read), B.fmt_rate(size, t_read), f"{t_cat / t_read:.2f}"],
        ["`cp` of the .pt (anchor)", B.fmt_s(t_cp), B.fmt_rate(os.path.getsize(big), t_cp), "1.00"],
        ["`trove convert` .pt → .safetensors", B.fmt_s(t_conv), B.fmt_rate(size, t_conv), f"{t_cp / t_conv:.2f}"],
    ]
    return "\n".join([
        "## safetensors (issue 16)\n",
        f"The 1 GB checkpoint of the .pt section ({len(keys)} tensors) and the same tensors as .safetensors "
        f"({size:,} bytes). `vs anchor` is the anchor's time over ours. Write runs start with the page cache "
        f"clean (`sync` and a 2 s pause, then the last output removed, as `bench/benchlib.py` explains, untimed). Peak memory of the conversion: {rss:.0f} MB.\n",
        B.table(["what", "time", "rate", "vs anchor"], rows),
        "",
        "Targets (issue 16): `info` under 10 ms at any size (the 10 MB and 1 GB rows alike: metadata only); "
        "convert at least 0.6 of cp's rate.\n",
    ])
