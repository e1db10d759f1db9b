"""The README's examples are real output of the current binary.

Each fenced block of the README holds `$ trove ...` commands followed by what they print; a line
`...` stands for lines left out. Every other line must appear in the command's output (stdout,
then stderr), in order.
"""
import os
import shlex
import subprocess

from conftest import BIN_DIR, SOURCE


def examples():
    with open(os.path.join(SOURCE, "README.md"), encoding="utf-8") as f:
        text = f.read()
    blocks, block = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if block is None:
                block, fence_lang = [], line[3:]
            else:
                if fence_lang == "":
                    blocks.append(block)
                block = None
            continue
        if block is not None:
            block.append(line)
    for block in blocks:
        command, shown = None, []
        for line in block + ["$ "]:
            if line.startswith("$ "):
                if command and command[0] == "trove" and "-o" not in command:
                    yield command, shown
                command, shown = shlex.split(line[2:]), []
            elif command is not None and line.strip():
                shown.append(line)


def test_the_readme_has_examples():
    assert len(list(examples())) >= 4


def test_each_example_is_what_the_binary_prints():
    for command, shown in examples():
        p = subprocess.run([os.path.join(BIN_DIR, "trove")] + command[1:], cwd=SOURCE, capture_output=True,
                           text=True, timeout=60)
        lines = (p.stdout + p.stderr).splitlines()
        at = 0
        for want in shown:
            if want.strip() == "...":
                continue
            while at < len(lines) and lines[at] != want:
                at += 1
            assert at < len(lines), f"`{' '.join(command)}` does not print {want!r} (in order); it printed:\n" + \
                "\n".join(lines[:60])
            at += 1
