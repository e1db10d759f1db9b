#!/usr/bin/env python3
"""`make bench`: runs every bench/bench_*.py section and writes docs/benchmarks.md."""
import argparse
import datetime
import importlib.util
import os
import platform
import subprocess
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated section names (bench_<name>.py)")
    args = ap.parse_args()
    ctx = benchlib.Context(args.bin, args.work, args.runs)
    here = os.path.dirname(os.path.abspath(__file__))
    names = sorted(f[6:-3] for f in os.listdir(here) if f.startswith("bench_") and f.endswith(".py"))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    cpu = ""
    try:
        cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    except Exception:
        pass
    sections = [
        "# Benchmarks\n",
        f"Written by `make bench` on {datetime.date.today()} ({platform.machine()}, {os.cpu_count()} cores, {cpu}). "
        f"Each figure is the median of {args.runs} runs after one warm-up, page cache hot, measured in the same run "
        "as its anchor; ratios compare the two. Reproduce with `make bench` "
        "(one section: `python3 bench/run.py --bin build/bin --out docs/benchmarks.md --only NAME`).\n",
    ]
    failed = False
    for name in names:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(here, f"bench_{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        print(f"== bench_{name}", flush=True)
        try:
            spec.loader.exec_module(mod)
            sections.append(mod.run(ctx))
        except Exception:
            failed = True
            traceback.print_exc()
            sections.append(f"## {name}\n\nThis section failed to run:\n\n```\n{traceback.format_exc()}\n```\n")
    with open(args.out, "w") as f:
        f.write("\n".join(sections))
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
