"""`.psk.d` section of `make bench`: the text-to-dataset chain and batch reading on a 100 MB text.

Each command is timed next to `wc -w` on the same input (the floor every text tool should meet);
batch reading is timed next to `cat` of the .psk.d file. Targets (issue 4): encode and
lm-windows at least as fast as `wc -w`, batch reading at least half the speed of `cat`, and
lm-windows memory bounded (it streams). The torch loader rows (trove.data.TorchDataset in a
DataLoader, bench/pskd_loader.py) are timed next to the bare gather floor and `batches --read` of
the same file and order, with the memory of every process that reads samples.
"""
import json
import os
import random
import statistics
import subprocess
import sys

from benchlib import fmt_rate, fmt_s, peak_rss_mb, table, time_cmd

TEXT_BYTES = 100 * 1000 * 1000
SEQ = 256
BATCH = 64

# Words in several scripts, so that characters are code points of 1 to 4 bytes.
SYLLABLES = [
    "la", "ré", "çon", "über", "straße", "niño", "jour", "été", "hôtel", "œuvre",
    "κα", "λη", "μέ", "ρα", "при", "вет", "мир", "да", "日本", "語", "中文", "字", "한국", "어",
    "ا", "ل", "عر", "بي", "ה", "של", "ום", "नम", "स्ते", "ไทย", "🙂", "∑", "ℝ", "→",
]


def make_text(path):
    """A deterministic multilingual text of TEXT_BYTES bytes (a 4 MB block of random words, repeated)."""
    if os.path.exists(path) and os.path.getsize(path) == TEXT_BYTES:
        return
    rng = random.Random(20240417)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
    lines = []
    size = 0
    while size < 4 * 1000 * 1000:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(4, 16))) + "\n"
        lines.append(line)
        size += len(line.encode())
    block = "".join(lines).encode()
    with open(path, "wb") as f:
        written = 0
        while written + len(block) <= TEXT_BYTES:
            f.write(block)
            written += len(block)
        # The tail: whole lines of the block, then ASCII padding to the exact size.
        rest = block[: TEXT_BYTES - written]
        rest = rest[: rest.rfind(b"\n") + 1]
        pad = TEXT_BYTES - written - len(rest)
        f.write(rest + (b"x" * (pad - 1) + b"\n" if pad > 0 else b""))


def run(ctx):
    presk = ctx.tool("presk")
    text = os.path.join(ctx.work, "pskd_text.txt")
    vocab = os.path.join(ctx.work, "pskd_vocab.json")
    tokens = os.path.join(ctx.work, "pskd_tokens.txt")
    windows = os.path.join(ctx.work, "pskd_T256.psk.d")
    make_text(text)
    text_size = os.path.getsize(text)
    runs = ctx.runs

    wc = time_cmd(["wc", "-w", text], runs=runs)
    chars = time_cmd([presk, "data", "chars", text, "-o", vocab], runs=runs)
    with open(vocab, encoding="utf-8") as f:
        vocab_size = len(json.load(f))
    encode = time_cmd([presk, "data", "encode", text, "--vocab", vocab, "-o", tokens], runs=runs)
    lm_cmd = [presk, "data", "lm-windows", "--vocab", str(vocab_size), "--seq", str(SEQ), tokens, "-o", windows]
    lm = time_cmd(lm_cmd, runs=runs)
    lm_rss = peak_rss_mb(lm_cmd)
    windows_size = os.path.getsize(windows)
    cat = time_cmd(f"cat {windows} > /dev/null", runs=runs, shell=True)
    read_cmd = [presk, "data", "batches", windows, "--batch", str(BATCH), "--shuffle", "1", "--read"]
    read = time_cmd(read_cmd, runs=runs)
    read_seq = time_cmd([presk, "data", "batches", windows, "--batch", str(BATCH), "--read"], runs=runs)
    floor_tool = os.path.join(os.path.dirname(presk), "pskd_gather_floor")
    floor = time_cmd([floor_tool, windows, str(BATCH), "1"], runs=runs) if os.path.exists(floor_tool) else None
    read_rss = peak_rss_mb(read_cmd)
    tokens_size = os.path.getsize(tokens)
    loader = loader_section(ctx, windows, floor, read)

    rows = [
        ["`wc -w` (anchor)", f"{text_size / 1e6:.0f} MB text", fmt_s(wc), fmt_rate(text_size, wc), "1.00"],
        ["`presk data chars`", f"{text_size / 1e6:.0f} MB text", fmt_s(chars), fmt_rate(text_size, chars),
         f"{chars / wc:.2f}"],
        ["`presk data encode`", f"{text_size / 1e6:.0f} MB text → {tokens_size / 1e6:.0f} MB tokens", fmt_s(encode),
         fmt_rate(text_size, encode), f"{encode / wc:.2f}"],
        [f"`presk data lm-windows --seq {SEQ}`", f"{tokens_size / 1e6:.0f} MB tokens → {windows_size / 1e6:.0f} MB",
         fmt_s(lm), fmt_rate(tokens_size, lm), f"{lm / wc:.2f}"],
    ]
    read_rows = [
        ["`cat` (anchor)", f"{windows_size / 1e6:.0f} MB", fmt_s(cat), fmt_rate(windows_size, cat), "1.00", ""],
    ]
    if floor is not None:
        read_rows.append([f"shuffled order, one bare `memcpy` per sample (`bench/pskd_gather_floor.cpp`, anchor)",
                          f"{windows_size / 1e6:.0f} MB", fmt_s(floor), fmt_rate(windows_size, floor),
                          f"{cat / floor:.2f}", "1.00"])
    read_rows += [
        [f"batches of {BATCH}, shuffled (`batches --read`)", f"{windows_size / 1e6:.0f} MB", fmt_s(read),
         fmt_rate(windows_size, read), f"{cat / read:.2f}", f"{floor / read:.2f}" if floor else ""],
        [f"batches of {BATCH}, file order", f"{windows_size / 1e6:.0f} MB", fmt_s(read_seq),
         fmt_rate(windows_size, read_seq), f"{cat / read_seq:.2f}", ""],
    ]
    return "\n".join([
        "## .psk.d data files (`presk data`)\n",
        f"A {text_size / 1e6:.0f} MB deterministic multilingual UTF-8 text ({vocab_size} distinct characters), "
        f"turned into a dataset by `chars`, `encode` and `lm-windows --seq {SEQ}`; every command next to "
        "`wc -w` on the same text (ratio = time / `wc -w` time; target ≤ 1 for encode and lm-windows). "
        "Outputs are written through AtomicFile (a temporary file renamed into place when complete).\n",
        table(["command", "data", "median", "rate", "÷ wc -w"], rows),
        "",
        f"Reading every batch of the result through the batch loader, next to `cat` of the file "
        f"(ratio = speed / `cat` speed; target ≥ 0.5). A shuffled epoch gathers {BATCH}-sample batches of "
        "samples at random addresses of the mapping, each on a page of its own: the second anchor is that "
        "access pattern with nothing but one `memcpy` per sample (same file, same order, whole process "
        "timed like the others): what the access pattern itself costs on this machine; "
        "`× floor` is its time over ours.\n",
        table(["reader", "data", "median", "rate", "× cat", "× floor"], read_rows),
        "",
        f"Peak resident memory: `lm-windows` {lm_rss:.1f} MB (streams: input read in 1 MiB chunks, output "
        f"through a 1 MiB buffer); shuffled batch reading {read_rss:.1f} MB (the mapped file's pages count "
        "as resident once touched; they belong to the page cache, not the heap).\n",
        loader,
    ])


def loader_epochs(ctx, sources, workers, ranks=1, zeros=False):
    """Shuffled epochs through bench/pskd_loader.py in `ranks` processes started together, each a
    DataLoader with `workers` workers: (samples an epoch, the median over all but the first epoch of
    the slowest rank's seconds, the memory reports of the last epoch, the anonymous memory of a
    process before its first epoch)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pskd_loader.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(ctx.bin), "python"), OMP_NUM_THREADS="1")
    command = [sys.executable, script, "--batch", str(BATCH), "--epochs", str(ctx.runs + 1), "--workers", str(workers),
               "--world-size", str(ranks)] + (["--zeros"] if zeros else [])
    procs = [subprocess.Popen(command + ["--rank", str(r), *sources], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for r in range(ranks)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("bench/pskd_loader.py did not start")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.stdout.readline()) for p in procs]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("bench/pskd_loader.py failed")
    slowest = [max(r["seconds"][e] for r in results) for e in range(1, ctx.runs + 1)]
    return (sum(r["samples"] for r in results), statistics.median(slowest), [m for r in results for m in r["rss"]],
            max(r["anon_before"] for r in results))


def mb(kib):
    return f"{kib / 1024:.0f} MB"


def loader_section(ctx, windows, floor, read):
    if not os.path.isdir(os.path.join(os.path.dirname(ctx.bin), "python", "trove")):
        return "The torch loader rows need the Python module (not built).\n"
    info = subprocess.run([ctx.tool("presk"), "data", "info", windows, "--samples", "0"], capture_output=True, text=True,
                          check=True).stdout
    count = int(next(line.split()[1] for line in info.splitlines() if line.startswith("count")))
    samples = count // BATCH * BATCH  # what every reader below reads: the epoch's whole batches
    configs = [("in-process (`num_workers=0`)", 0, 1), ("1 worker", 1, 1), ("2 workers", 2, 1), ("4 workers", 4, 1),
               ("2 ranks, in-process each", 0, 2), ("2 ranks × 2 workers", 2, 2)]
    rows = [["bare `memcpy` gather floor (anchor)", f"{samples / floor / 1e6:.2f} M", "1.00", f"{read / floor:.2f}", "", ""],
            ["`batches --read` (anchor)", f"{samples / read / 1e6:.2f} M", f"{floor / read:.2f}", "1.00", "", ""]]
    four = None
    for name, workers, ranks in configs:
        n, seconds, rss, before = loader_epochs(ctx, [windows], workers, ranks)
        _, zeros, _, _ = loader_epochs(ctx, [windows], workers, ranks, zeros=True)
        if (workers, ranks) == (4, 1):
            four = rss
        readers = (f"{len(rss)} × peak {mb(max(m['VmHWM'] for m in rss))}, "
                   f"anonymous {mb(max(m['RssAnon'] for m in rss))} ({mb(before)} before the epoch)")
        rows.append([name, f"{n / seconds / 1e6:.2f} M", f"{floor / seconds:.2f}", f"{read / seconds:.2f}",
                     f"{zeros / seconds:.2f}", readers])
    # The same 4-worker epoch over the file and a copy of it, as one dataset of two shards.
    copy = windows + ".copy.psk.d"
    if not os.path.exists(copy) or os.path.getsize(copy) != os.path.getsize(windows):
        subprocess.run(["cp", windows, copy], check=True)
    two = loader_epochs(ctx, [windows, copy], 4)[2]

    def per_worker(reports):
        return (f"peak {mb(max(m['VmHWM'] for m in reports))}, anonymous {mb(max(m['RssAnon'] for m in reports))}, "
                f"shared memory {mb(max(m['RssShmem'] for m in reports))}, file pages {mb(max(m['RssFile'] for m in reports))}")
    return "\n".join([
        f"Shuffled epochs of the same file in batches of {BATCH} through `trove.data.TorchDataset` and torch's "
        "`DataLoader(batch_size=None)` (`bench/pskd_loader.py`), each timed from the start of the loader to its last "
        "batch (worker start included, imports not), in samples per second (the median epoch after a first one), next "
        "to three anchors: the two above, timed in this run (`× floor`, `× read`: their times over ours), and the "
        "DataLoader itself: the same batches (shapes, dtypes, worker split) made of zeros on the spot instead of "
        "read, through the same loader (`× loader`). Index leaves come as int64 (8 times their bytes on disk). Ranks "
        "are processes reading their share (`rank`, `world_size`) at once; their rate is the epoch over the slowest. "
        "The last column is every process that produced batches (the workers, or the process itself): its peak "
        "resident set, and its anonymous pages at the end of the epoch (a forked worker's include its parent's, "
        "shared until written).\n",
        table(["loader", "samples/s", "× floor", "× read", "× loader", "readers"], rows),
        "",
        f"A worker's own memory does not follow the dataset: with 4 workers, over the {os.path.getsize(windows) / 1e6:.0f} MB "
        f"file: {per_worker(four)}; over it and a copy as one dataset of two shards (twice the samples): "
        f"{per_worker(two)}. What grows is the file pages each worker has touched, which are the page cache's, "
        "shared by every worker and rank (in the machine's memory once).\n",
    ])
