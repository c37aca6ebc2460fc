#!/usr/bin/env python3
"""Paste real output under every command of a Markdown file's ```console blocks.

    python tools/refresh_readme.py README.md

Each `$ command` line (except `make ...`) is run in order, with bash, in one scratch
directory that holds a copy of samples/, and with this interpreter's bin directory first
on PATH (so `uopgrad` and `python` are the venv's); what it prints (stdout and stderr, as a
terminal shows them) replaces the lines between it and the next command. The commands
must not depend on the time of day: the file is rewritten only where the output changed.
tests/test_samples.py runs the same commands and checks that each exits with status 0.
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


def refresh_block(block: str, cwd: Path) -> str:
    lines, out = block.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("$ "):
            out.append(line)
            command = line[2:]
            if not command.startswith("make "):
                out.extend(run(command, cwd).rstrip("\n").splitlines())
            else:  # keep what the file says under a make command
                j = i + 1
                while j < len(lines) and not lines[j].startswith("$ "):
                    out.append(lines[j])
                    j += 1
        elif not out:
            out.append(line)  # text before the first command
    return "\n".join(out) + "\n"


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
