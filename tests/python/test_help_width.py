"""Every --help of trove and presk fits an 80-column terminal (issue 29, cli/help_text.h).

The test walks the commands the way a user finds them: `trove --help` lists the commands, each
command's help its own subcommands (`trove gguf --help`), `presk data --help` the data commands.
Each help must fit in 80 columns and keep its words: wrapping moves words to new lines, never
drops them.
"""
import re

import pytest

from conftest import run_tool

COLUMNS = 80


def width(line):
    return len(line)  # code points: the help's ℝ and … are one column each


def assert_fits(text, what):
    wide = [line for line in text.splitlines() if width(line) > COLUMNS]
    assert not wide, f"{what}: {len(wide)} line(s) wider than {COLUMNS} columns: {wide}"


def subcommands(help_text):
    """The command names a CLI11 help lists under "Subcommands:"."""
    if "\nSubcommands:\n" not in help_text:
        return []
    section = help_text.split("\nSubcommands:\n", 1)[1]
    names = []
    for line in section.splitlines():
        if not line.strip():
            break
        m = re.match(r"^  (\S+)", line)
        if m:
            names.append(m.group(1))
    return names


def trove_help(words):
    r = run_tool("trove", *words, "--help")
    assert r.code == 0, (words, r)
    return r.text


def walk_trove():
    seen = {}
    pending = [[]]
    while pending:
        words = pending.pop()
        text = trove_help(words)
        seen[" ".join(words)] = text
        for name in subcommands(text):
            if name in ("help", "data"):  # help is a word, data hands over to presk data
                continue
            pending.append(words + [name])
    return seen


def test_every_trove_help_fits():
    helps = walk_trove()
    # The walk reached the commands and the nested ones.
    for command in ("info", "cat", "convert", "diff", "stats", "report", "gguf set", "gguf del", "pack"):
        assert command in helps, sorted(helps)
    for command, text in helps.items():
        assert_fits(text, "trove " + command + " --help")
    for words in (["help"], ["help", "stats"], ["help", "data"]):
        r = run_tool("trove", *words)
        assert r.code == 0, (words, r)
        assert_fits(r.text, "trove " + " ".join(words))


def test_wrapped_help_keeps_its_words():
    text = trove_help(["stats"])
    # A description longer than the room left of the column is continued under itself.
    assert "--io" in text
    joined = " ".join(text.split())
    assert "Threads to use (default 0: every core)" in joined
    assert ("auto (default: pread on network and FUSE file systems, mmap elsewhere)") in joined
    lines = text.splitlines()
    at = next(i for i, l in enumerate(lines) if l.lstrip().startswith("--io"))
    desc_column = len(lines[at + 1]) - len(lines[at + 1].lstrip())
    assert desc_column > 4 and lines[at + 1].strip(), lines[at:at + 3]


def test_every_presk_help_fits():
    r = run_tool("presk", "data", "--help")
    assert r.code == 0, r
    assert_fits(r.text, "presk data --help")
    names = [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*) ", r.text, re.M)]
    assert {"pack", "lm-windows", "tokens", "batches", "info"} <= set(names), names
    for name in names:
        for words in (["presk", "data", name, "--help"], ["trove", "data", name, "--help"]):
            h = run_tool(words[0], *words[1:])
            assert h.code == 0, (words, h)
            assert_fits(h.text, " ".join(words))
    for words in (["--help"], ["data", "help", "batches"]):
        h = run_tool("presk", *words)
        assert h.code == 0, h
        assert_fits(h.text, "presk " + " ".join(words))
    # The batches usage line is cut between its optional parts, never inside one.
    text = run_tool("presk", "data", "batches", "--help").text
    usage = text.split("\n  --batch")[0]
    assert "[--rank R --world-size W]" in usage and "[--worker K --workers N]" in usage, usage
