"""How long an .onnx command takes before it starts, beside onnx's own import and load.

    .venv/bin/python bench/bench_onnx_startup.py [--repeats 7] [--write]

Each command runs in a fresh process, in turns, --repeats times; reported: the median CPU
time (user + system of the child) and wall time. The peer is what any ONNX tool pays:
`python -c "import onnx; onnx.load(F)"`. Bytecode is cached (a pycache folder under the
temporary directory), as on an installed system: a PYTHONDONTWRITEBYTECODE environment
compiles every module of uopcli at each start, about a second more.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable
UOPGRAD = os.path.join(os.path.dirname(PY), "uopgrad")
SECTION = "## Start-up of an .onnx command"


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    assert os.waitstatus_to_exitcode(status) == 0, (cmd, process.stderr.read())
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), f"uopgrad-bench-pycache-{os.getuid()}")
    rows = []
    for model in ("samples/onnx/mlp-legacy14.onnx", "samples/onnx/bert-legacy17.onnx"):
        commands = {
            "python -c pass": [PY, "-c", "pass"],
            "peer: python -c 'import onnx; onnx.load(F)'": [PY, "-c", f"import onnx; onnx.load({model!r})"],
            "uopgrad info F": [UOPGRAD, "info", model],
            "uopgrad eval F --random": [UOPGRAD, "eval", model, "--random"],
        }
        for cmd in commands.values():  # warm: bytecode written, files in the page cache
            timed(cmd, env)
        samples = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, cmd in commands.items():
                samples[name].append(timed(cmd, env))
        peer = statistics.median(c for c, _ in samples["peer: python -c 'import onnx; onnx.load(F)'"])
        for name, values in samples.items():
            cpu, wall = statistics.median(c for c, _ in values), statistics.median(w for _, w in values)
            rows.append((os.path.basename(model), name, cpu, wall, cpu - peer))
            print(rows[-1], file=sys.stderr)
    lines = [SECTION, "", f"<!-- bench/bench_onnx_startup.py, {time.strftime('%Y-%m-%d')}, median of {args.repeats}; "
             f"a shared 2-core machine, load {os.getloadavg()[0]:.0f}: compare CPU times -->", "",
             "`bench/bench_onnx_startup.py`: fresh processes in turns, median CPU (user + system) and wall time; "
             "*beyond the peer* is the CPU time past `import onnx; onnx.load(F)`, which every ONNX tool pays.", "",
             "| model | command | CPU | wall | beyond the peer |", "|---|---|---|---|---|"]
    lines += [f"| {m} | `{n}` | {c:.2f} s | {w:.2f} s | {d:+.2f} s |" for m, n, c, w, d in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        path = os.path.join(HERE, "ONNX-RESULTS.md")
        old = open(path).read()
        head, _, rest = old.partition(SECTION)
        tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
        with open(path, "w") as f:
            f.write(head.rstrip("\n") + "\n\n" + text + tail)


if __name__ == "__main__":
    main()
