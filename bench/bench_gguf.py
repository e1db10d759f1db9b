"""Issue 27's benchmark: GGUF. `trove info` of a multi-GB GGUF (a sparse file: the header is what
info reads) against the independent reader (@huggingface/gguf on nodejs, tests/node) and `head -c`
of the header; dequantizing Q4_K, Q6_K and Q8_0 to float32 (`File.dequantize`, in one process)
against a memcpy of the output (numpy.copyto of as many float32 bytes) and against a numpy
vectorised dequantizer written here from ggml's block layouts; GGUF -> safetensors of a float16
GGUF against `cp`; the peak memory of every convert.

Sizes: TROVE_BENCH_GGUF_MB (default 1024) is the float32 output of each dequantized tensor and the
size of the float16 GGUF; the sparse file is 4 times it (at least 4 GB by default)."""
import json
import os
import shutil
import statistics
import struct
import subprocess

import numpy as np

import benchlib as B

PY = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(os.path.dirname(HERE), "tests", "node")

# ggml ids and block layouts (values, bytes) of the types measured.
Q8_0, Q4_K, Q6_K, F16 = 8, 12, 14, 1
BLOCKS = {Q8_0: (32, 34, [0]), Q4_K: (256, 144, [0, 2]), Q6_K: (256, 210, [208])}
NAMES = {Q8_0: "Q8_0", Q4_K: "Q4_K", Q6_K: "Q6_K"}


def gguf_bytes(kvs, tensors, alignment=32):
    """A GGUF v3 header for kvs [(key, string value)] and tensors [(name, type, ne, nbytes)]; returns
    (header bytes, data offsets)."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for k, v in kvs:
        out += struct.pack("<Q", len(k)) + k.encode() + struct.pack("<IQ", 8, len(v)) + v.encode()
    offset, offsets = 0, []
    for name, t, ne, nbytes in tensors:
        out += struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", n) for n in ne) + struct.pack("<IQ", t, offset)
        offsets.append(offset)
        offset += (nbytes + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    return bytes(out), offsets


def write_model(path, tensors_data, kvs=(("general.architecture", "bench"),)):
    """tensors_data: [(name, type, ne, a callable writing its bytes to f)]."""
    head, _ = gguf_bytes(list(kvs), [(n, t, ne, size) for n, t, ne, size, _ in tensors_data])
    with open(path, "wb") as f:
        f.write(head)
        for _, _, _, size, fill in tensors_data:
            fill(f)
            f.write(b"\0" * (-size % 32))


def random_blocks(rng, t, n_blocks):
    _, size, halves = BLOCKS[t]
    b = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for at in halves:
        b[:, at:at + 2] = rng.uniform(-1, 1, n_blocks).astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    return b


# numpy's vectorised dequantizers (the anchor), from ggml-common.h's layouts.
def _half(b, at):
    return b[:, at:at + 2].copy().view("<f2").astype(np.float32)


def deq_q8_0(b):
    return (b[:, 2:].view(np.int8).astype(np.float32) * _half(b, 0)).reshape(-1)


def deq_q4_k(b):
    d, dmin, s, qs = _half(b, 0), _half(b, 2), b[:, 4:16], b[:, 16:]
    sc = [s[:, j] & 63 if j < 4 else (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4) for j in range(8)]
    mn = [s[:, j + 4] & 63 if j < 4 else (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4) for j in range(8)]
    out = []
    for j in range(4):
        q = qs[:, 32 * j:32 * j + 32]
        out += [d * sc[2 * j][:, None] * (q & 0xF) - dmin * mn[2 * j][:, None],
                d * sc[2 * j + 1][:, None] * (q >> 4) - dmin * mn[2 * j + 1][:, None]]
    return np.concatenate(out, axis=1).astype(np.float32).reshape(-1)


def deq_q6_k(b):
    ql, qh, sc, d = b[:, :128], b[:, 128:192], b[:, 192:208].view(np.int8), _half(b, 208)
    out = []
    idx = np.arange(32) // 16
    for n in range(2):
        l_, h_, s_ = ql[:, 64 * n:64 * n + 64], qh[:, 32 * n:32 * n + 32], sc[:, 8 * n:8 * n + 8]
        q = [(l_[:, :32] & 0xF) | ((h_ & 3) << 4), (l_[:, 32:] & 0xF) | (((h_ >> 2) & 3) << 4),
             (l_[:, :32] >> 4) | (((h_ >> 4) & 3) << 4), (l_[:, 32:] >> 4) | (((h_ >> 6) & 3) << 4)]
        for k in range(4):
            out.append((d * s_[:, idx + 2 * k]) * (q[k].astype(np.int16) - 32))
    return np.concatenate(out, axis=1).astype(np.float32).reshape(-1)


NUMPY_DEQ = {Q8_0: deq_q8_0, Q4_K: deq_q4_k, Q6_K: deq_q6_k}

# In one process: trove's dequantize, numpy's, and the memcpy of the output, each a median.
DEQ_SCRIPT = r"""
import json, statistics, sys, time
import numpy as np
sys.path.insert(0, sys.argv[3])
import bench_gguf as G
import trove
path, runs, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[4])
def median(fn):
    fn()
    s = []
    for _ in range(runs):
        t0 = time.perf_counter(); fn(); s.append(time.perf_counter() - t0)
    return statistics.median(s)
f = trove.open(path)
blocks = trove.open(path, raw=True)["w"]
values, size, _ = G.BLOCKS[t]
b = np.ascontiguousarray(blocks).reshape(-1, size)
out = f.dequantize("w")
src = np.empty_like(out)
src[...] = 1
assert np.array_equal(G.NUMPY_DEQ[t](b), out.reshape(-1)), "numpy and trove disagree"
r = {"trove": median(lambda: f.dequantize("w", out=out)), "fresh": median(lambda: f.dequantize("w")),
     "numpy": median(lambda: G.NUMPY_DEQ[t](b)),
     "memcpy": median(lambda: np.copyto(out, src)), "bytes": out.nbytes}
trove.set_io("pread")
r["pread"] = median(lambda: f.dequantize("w", out=out))
trove.set_io("mmap")
r["mmap"] = median(lambda: f.dequantize("w", out=out))
print(json.dumps(r))
"""


def run(ctx):
    load_start = os.getloadavg()[0]
    mb = int(os.environ.get("TROVE_BENCH_GGUF_MB", "1024"))
    trove = ctx.tool("trove")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(os.path.dirname(ctx.bin), "python")
    rng = np.random.default_rng(27)
    rows = []

    # info of a multi-GB file: 64 float16 tensors of 4096 x N, the data a hole.
    sparse = os.path.join(ctx.work, "gguf_sparse.gguf")
    per = 4 * mb * 1_000_000 // 64 // 2 // 4096 * 4096  # values per tensor
    tensors = [(f"blk.{i}.weight", F16, [4096, per // 4096], per * 2) for i in range(64)]
    kvs = [("general.architecture", "llama"), ("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}")]
    head, offsets = gguf_bytes(kvs, tensors)
    with open(sparse, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offsets[-1] + per * 2)
    size = os.path.getsize(sparse)
    t_info = B.time_cmd([trove, "info", sparse, "--json"], runs=ctx.runs)
    t_head = B.time_cmd(f"head -c {len(head)} {sparse} > /dev/null", runs=ctx.runs, shell=True)
    rows.append([f"`trove info --json` of a {size / 1e9:.1f} GB GGUF (64 tensors)", B.fmt_s(t_info),
                 "`head -c` of its header (anchor)", B.fmt_s(t_head), f"{t_info / t_head:.2f}x its time"])
    node = shutil.which("node")
    if node and os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@huggingface", "gguf")):
        t_node = B.time_cmd([node, os.path.join(NODE_DIR, "gguf_dump.mjs"), sparse], runs=ctx.runs)
        rows.append(["(same file)", "", "@huggingface/gguf on nodejs (`tests/node/gguf_dump.mjs`)", B.fmt_s(t_node),
                     f"{t_node / t_info:.1f}x faster"])

    # Dequantizing: one tensor per type, mb MB of float32 values.
    n_values = mb * 1_000_000 // 4 // 4096 * 4096
    deq_rows, rss_rows = [], []
    for t in (Q4_K, Q6_K, Q8_0):
        values, size_b, _ = BLOCKS[t]
        n_blocks = n_values // values
        path = os.path.join(ctx.work, f"gguf_{NAMES[t].lower()}.gguf")
        if not os.path.exists(path) or os.path.getsize(path) < n_blocks * size_b:
            def fill(f, t=t, n_blocks=n_blocks):
                step = 1 << 16
                for i in range(0, n_blocks, step):
                    f.write(random_blocks(rng, t, min(step, n_blocks - i)).tobytes())
            write_model(path, [("w", t, [256 * 16, n_values // (256 * 16)], n_blocks * size_b, fill)])
        p = subprocess.run([PY, "-c", DEQ_SCRIPT, path, str(ctx.runs), HERE, str(t)], env=env, check=True,
                           capture_output=True, text=True)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        deq_rows.append([f"{NAMES[t]} -> float32 (`File.dequantize(out=)`, into an existing array as the anchor; `--io auto`)", B.fmt_s(r["trove"]),
                         B.fmt_rate(r["bytes"], r["trove"]), f"{r['memcpy'] / r['trove']:.2f}", f"{r['numpy'] / r['trove']:.1f}x faster"])
        for mode in ("pread", "mmap"):
            deq_rows.append([f"{NAMES[t]} -> float32 (`File.dequantize(out=)` after `trove.set_io(\"{mode}\")`)", B.fmt_s(r[mode]),
                             B.fmt_rate(r["bytes"], r[mode]), f"{r['memcpy'] / r[mode]:.2f}", f"{r['numpy'] / r[mode]:.1f}x faster"])
        deq_rows.append([f"{NAMES[t]} -> float32 (`File.dequantize`, a fresh array: its page faults)", B.fmt_s(r["fresh"]),
                         B.fmt_rate(r["bytes"], r["fresh"]), f"{r['memcpy'] / r['fresh']:.2f}", f"{r['numpy'] / r['fresh']:.1f}x faster"])
        deq_rows.append([f"memcpy of the {r['bytes'] / 1e6:.0f} MB output (`numpy.copyto`, anchor)", B.fmt_s(r["memcpy"]),
                         B.fmt_rate(r["bytes"], r["memcpy"]), "1.00", ""])
        deq_rows.append([f"numpy's vectorised {NAMES[t]} dequantizer (anchor)", B.fmt_s(r["numpy"]),
                         B.fmt_rate(r["bytes"], r["numpy"]), f"{r['memcpy'] / r['numpy']:.2f}", "1.0x"])
        out = os.path.join(ctx.work, "gguf_deq_out.safetensors")
        rss_rows.append([f"`trove convert` {NAMES[t]} GGUF -> safetensors `--dtype float32`",
                         f"{B.peak_rss_mb([trove, 'convert', path, out, '--dtype', 'float32']):.0f} MB", f"{r['bytes'] / 1e6:.0f} MB written"])
        os.path.exists(out) and os.remove(out)

    # GGUF -> safetensors of float16 tensors, against cp.
    f16 = os.path.join(ctx.work, "gguf_f16.gguf")
    n16 = mb * 1_000_000 // 2 // 8 // 4096 * 4096
    if not os.path.exists(f16):
        def fill16(f, n=n16):
            f.write(rng.standard_normal(n, dtype=np.float32).astype("<f2").tobytes())
        write_model(f16, [(f"t{i}", F16, [4096, n16 // 4096], n16 * 2, fill16) for i in range(8)])
    size16 = os.path.getsize(f16)
    out_st = os.path.join(ctx.work, "gguf_f16_out.safetensors")
    out_cp = os.path.join(ctx.work, "gguf_f16_copy.gguf")

    def rm():
        for p in (out_st, out_cp):
            os.path.exists(p) and os.remove(p)

    # trove and cp take turns run by run, so that a change of the machine's load falls on both.
    convs, cps = [], []
    # A write's time varies run to run by a quarter on this machine, more than the gap measured:
    # at least 7 pairs.
    for i in range(max(ctx.runs, 7)):
        convs.append(B.time_cmd([trove, "convert", f16, out_st], runs=1, warmup=int(i == 0), setup=rm, settle=True))
        cps.append(B.time_cmd(["cp", f16, out_cp], runs=1, warmup=int(i == 0), setup=rm, settle=True))
    t_conv, t_cp = statistics.median(convs), statistics.median(cps)
    rss_rows.append(["`trove convert` float16 GGUF -> safetensors", f"{B.peak_rss_mb([trove, 'convert', f16, out_st.replace('.safetensors', '_rss.safetensors')]):.0f} MB",
                     f"{size16 / 1e6:.0f} MB written"])
    rm()
    os.path.exists(out_st.replace('.safetensors', '_rss.safetensors')) and os.remove(out_st.replace('.safetensors', '_rss.safetensors'))
    conv_rows = [["`trove convert` float16 GGUF -> safetensors", B.fmt_s(t_conv), B.fmt_rate(size16, t_conv), f"{t_cp / t_conv:.2f}"],
                 ["`cp` of the GGUF (anchor)", B.fmt_s(t_cp), B.fmt_rate(size16, t_cp), "1.00"]]
    return "\n".join([
        "## GGUF (issue 27)\n",
        f"Metadata: a sparse GGUF of {size:,} bytes (64 float16 tensors; the header is what info reads). "
        f"Dequantizing: one tensor per type with {n_values:,} values (random blocks, fp16 scales in [-1, 1]), "
        f"medians of {ctx.runs} calls in one process; trove's values are checked equal to numpy's first. "
        f"Converting: a float16 GGUF of {size16:,} bytes; each write run starts with the page cache clean of "
        f"dirty pages (`sync` and a 2 s pause, then the last output removed, as `bench/benchlib.py` explains, untimed); trove and cp take turns run by run, medians of {len(convs)} pairs. Page cache hot. "
        f"Load average (1 minute) {load_start:.1f} at the start of the section and {os.getloadavg()[0]:.1f} at its "
        f"end, on {os.cpu_count()} CPUs: other processes' load lengthens the absolute times (the anchors' too); the "
        "ratios to anchors measured alongside are the figures to read.\n",
        B.table(["trove", "time", "anchor", "time", "ratio"], rows),
        "",
        B.table(["dequantizing", "time", "rate of float32 written", "vs memcpy", "vs numpy"], deq_rows),
        "",
        B.table(["converting", "time", "rate", "vs cp"], conv_rows),
        "",
        B.table(["peak memory", "RSS", "output"], rss_rows),
        "",
        "Targets (issue 27): `info` of a multi-GB GGUF under 10 ms; dequantizing at least half of memcpy's rate of "
        "the output; GGUF -> safetensors at least 0.8 of `cp`'s rate for float types; every convert below 256 MB "
        "of peak memory whatever the file size.\n",
        "Commands: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only gguf` "
        "(`TROVE_BENCH_GGUF_MB` sets the sizes).\n",
    ])
