#!/usr/bin/env python3
"""Paste real output under every command of a Markdown file's ```console blocks.

    python tools/refresh_readme.py README.md

Each `$ command` line (except `make ...`) is run in order, with bash, in one scratch
directory that holds a copy of samples/, and with this interpreter's bin directory first
on PATH (so `uopgrad` and `python` are the venv's); what it prints (stdout and stderr, as a
terminal shows them) replaces the lines between it and the next command. The commands
must not depend on the time of day: the file is rewritten only where the output changed.

Changed means more than rounding. Float arithmetic rounds differently from one CPU to the
next (OpenBLAS and numpy pick their kernels by what the CPU has), so an output whose words
are the same and whose numbers agree to 1e-3 (relative) keeps the file's text; in the
table of a passing `uopgrad check` the error columns and which sampled element is the
worst are rounding noise, so only the target, the sample count and the verdict count.
tests/test_samples.py runs it on a copy of the README: every command must exit 0 and leave
the file unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```console\n(.*?)^```", flags=re.S | re.M)


def run(command: str, cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "100"}
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if result.returncode != 0:
        print(f"warning: exit status {result.returncode}: {command}", file=sys.stderr)
    return result.stdout


RELATIVE = 1e-3  # numbers this close are the same output printed on another CPU
ABSOLUTE = 1e-7  # ... and so are two numbers this close to zero (cancellation)
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?|[-+]?(inf|nan)")
PASSING_CHECK_ROW = re.compile(r"(\S+)\s+(\d+)\s+\S+\s+\S+\s+\[[\d,]*\] analytic \S+ numeric \S+\s+ok")


def same_up_to_rounding(old: list[str], new: list[str]) -> bool:
    """Whether two outputs of one command differ only as rounding on another CPU does."""
    return len(old) == len(new) and all(_same_line(a, b) for a, b in zip(old, new))


def _same_line(old: str, new: str) -> bool:
    if old == new:
        return True
    old_row, new_row = PASSING_CHECK_ROW.fullmatch(old), PASSING_CHECK_ROW.fullmatch(new)
    if old_row and new_row:
        return old_row.groups() == new_row.groups()
    old_words, new_words = old.split(), new.split()
    return len(old_words) == len(new_words) and all(map(_same_word, old_words, new_words))


def _same_word(old: str, new: str) -> bool:
    if old == new:
        return True
    if not (NUMBER.fullmatch(old) and NUMBER.fullmatch(new)):
        return False
    a, b = float(old), float(new)
    return abs(a - b) <= max(RELATIVE * max(abs(a), abs(b)), ABSOLUTE)


def refresh_block(block: str, cwd: Path) -> str:
    lines, out = block.splitlines(), []
    for i, line in enumerate(lines):
        if not line.startswith("$ "):
            if not out:
                out.append(line)  # text before the first command
            continue
        out.append(line)
        shown = _shown_output(lines, i + 1)
        if line.startswith("$ make "):  # keep what the file says under a make command
            out.extend(shown)
            continue
        printed = run(line[2:], cwd).rstrip("\n").splitlines()
        out.extend(shown if same_up_to_rounding(shown, printed) else printed)
    return "\n".join(out) + "\n"


def _shown_output(lines: list[str], start: int) -> list[str]:
    """The lines the file shows under a command: up to the next command."""
    end = start
    while end < len(lines) and not lines[end].startswith("$ "):
        end += 1
    return lines[start:end]


def refresh(markdown: Path, cwd: Path) -> bool:
    text = markdown.read_text()
    new = BLOCK.sub(lambda m: "```console\n" + refresh_block(m.group(1), cwd) + "```", text)
    if new != text:
        markdown.write_text(new)
    return new != text


def main(paths: list[str]) -> int:
    for path in paths or ["README.md"]:
        with tempfile.TemporaryDirectory() as scratch:
            shutil.copytree(ROOT / "samples", Path(scratch) / "samples",
                            ignore=shutil.ignore_patterns("*.py", "__pycache__"))
            changed = refresh(Path(path), Path(scratch))
        print(f"{path}: {'updated' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
