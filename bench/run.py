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


def split_sections(text):
    """The report's "## " sections, in order, each with its heading line first."""
    parts, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("## ") and current:
            parts.append("".join(current))
            current = []
        current.append(line)
    if current:
        parts.append("".join(current))
    return parts


def merged(old, new_sections, date):
    """`--only`: the sections just measured replace those of the same heading in the existing
    report (a new one is added in name order at the end); the others, and the preamble, stay, with
    a line saying which were measured again when."""
    parts = split_sections(old)
    preamble, rest = (parts[0], parts[1:]) if parts and not parts[0].startswith("## ") else ("", parts)
    heading = lambda s: s.splitlines()[0].strip() if s else ""
    for section in new_sections:
        for i, old_section in enumerate(rest):
            if heading(old_section) == heading(section):
                rest[i] = section.rstrip("\n") + "\n\n"
                break
        else:
            rest.append(section.rstrip("\n") + "\n\n")
    names = ", ".join(heading(s)[3:] for s in new_sections)
    preamble = "".join(l for l in preamble.splitlines(keepends=True) if not l.startswith("Measured again on"))
    preamble = preamble.rstrip("\n") + f"\n\nMeasured again on {date} with `--only`: {names}.\n\n"
    return [preamble.rstrip("\n") + "\n"] + [s.rstrip("\n") + "\n" for s in rest]


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
    if args.only and os.path.exists(args.out):
        sections = merged(open(args.out).read(), sections[2:], f"{datetime.date.today()}")
    with open(args.out, "w") as f:
        f.write("\n".join(sections))
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
