"""The committed samples: they rebuild to identical bytes, compute what they claim (against
hand-written numpy), pass the gradient check through the installed `uopgrad` for every
float input, and the README's commands run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import uopcli
from uopcli.backends.numpy import evaluate_graph

ROOT = Path(__file__).resolve().parent.parent
SAMPLES_DIR = ROOT / "samples"
BIN_DIR = Path(sys.executable).parent
UOPGRAD = BIN_DIR / "uopgrad"


def _load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load_module("samples_build", SAMPLES_DIR / "build.py")
refresh_readme = _load_module("refresh_readme", ROOT / "tools" / "refresh_readme.py")
NAMES = list(build.SAMPLES)


def _uopgrad(*args: str) -> subprocess.CompletedProcess:
    """Run the installed command; it must succeed."""
    result = subprocess.run([str(UOPGRAD), *args], capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise AssertionError(f"uopgrad {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def _values(graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs of the right shapes: standard normal, scaled down a little."""
    rng = np.random.default_rng(seed)
    return {node.arg: (0.5 * rng.standard_normal(node.shape)).astype(node.dtype.np) for node in graph.inputs}


# ----------------------------------------------------------------------------- bytes

# Bytes are compared in fresh processes (the build script, `uopgrad convert`): nodes are
# shared by structure and keep the metadata of whoever made them first, so a graph built or
# loaded in this test process could pick up tags from graphs other tests made.

def _build(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SAMPLES_DIR / "build.py"), *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_rebuilding_the_samples_gives_identical_bytes(tmp_path):
    result = _build("--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted([f"{name}.uop" for name in NAMES] + ["README.md"])
    for file_name in written:
        committed = SAMPLES_DIR / file_name
        assert committed.is_file(), f"samples/{file_name} is not committed: run make samples"
        assert (tmp_path / file_name).read_bytes() == committed.read_bytes(), \
            f"samples/{file_name} differs from a rebuild: run make samples"


def test_build_check_mode_finds_a_stale_file(tmp_path):
    shutil.copytree(SAMPLES_DIR, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    assert _build("--out", str(tmp_path), "--check").returncode == 0
    (tmp_path / "poly.uop").write_bytes(b"stale")
    result = _build("--out", str(tmp_path), "--check")
    assert result.returncode == 1 and "poly.uop is out of date" in result.stderr


@pytest.mark.parametrize("name", NAMES)
def test_sample_file_is_canonical(name, tmp_path):
    """Reading a sample and writing it again (`uopgrad convert`) gives identical bytes."""
    _uopgrad("convert", str(SAMPLES_DIR / f"{name}.uop"), "-o", str(tmp_path / "again.uop"))
    assert (tmp_path / "again.uop").read_bytes() == (SAMPLES_DIR / f"{name}.uop").read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_sample_has_one_float_scalar_output_and_float_inputs(name):
    graph = uopcli.load(SAMPLES_DIR / f"{name}.uop")
    (output_name, output), = graph.outputs.items()
    assert output_name == ("y" if name == "poly" else "loss")
    assert output.shape == () and output.dtype.is_float
    assert graph.inputs and all(node.dtype.is_float for node in graph.inputs)


# ----------------------------------------------------------------------------- values

def _mse(a, b):
    return np.mean((a - b) ** 2)


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _conv2d_reference(x, kernel, bias):
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # n c h w kh kw
    return np.einsum("nchwij,fcij->nfhw", windows, kernel) + bias[None, :, None, None]


def _reference(name: str, v: dict[str, np.ndarray]) -> float:
    """Each sample's forward value, written independently in float64 numpy."""
    v = {k: a.astype(np.float64) for k, a in v.items()}
    if name == "mlp":
        hidden = np.maximum(v["x"] @ v["w1"] + v["b1"], 0)
        return _mse(hidden @ v["w2"] + v["b2"], v["y"])
    if name == "logreg":
        p = 1 / (1 + np.exp(-(v["x"] @ v["w"] + v["b"])))
        return -np.mean(v["y"] * np.log(p) + (1 - v["y"]) * np.log(1 - p))
    if name == "softmax_xent":
        return -np.mean((v["y"] * _log_softmax(v["x"] @ v["w"] + v["b"])).sum(-1))
    if name == "conv2d":
        features = np.maximum(_conv2d_reference(v["x"], v["kernel"], v["kernel_bias"]), 0)
        pooled = features.reshape(4, 4, 4, 2, 4, 2).mean((3, 5)).reshape(4, 64)
        return -np.mean((v["y"] * _log_softmax(pooled @ v["w"] + v["b"])).sum(-1))
    if name == "layernorm":
        x = v["x"]
        normalised = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        return _mse(normalised * v["gamma"] + v["beta"], v["y"])
    if name == "attention":
        x = v["x"]
        scores = (x @ v["wq"]) @ (x @ v["wk"]).T / np.sqrt(16)
        scores = np.where(np.tril(np.ones((6, 6), bool)), scores, -1e9)
        weights = np.exp(_log_softmax(scores))
        return _mse(weights @ (x @ v["wv"]) @ v["wo"], v["y"])
    if name == "gpt":
        tokens = np.array(build.GPT_TOKENS)
        seq, dim, heads = len(tokens), 16, 2

        def layernorm(z):
            centred = z - z.mean(-1, keepdims=True)
            return centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)
        x = v["emb"][tokens] + v["pos"]
        q, k, val = ((t.reshape(seq, heads, dim // heads).transpose(1, 0, 2)) for t in
                     np.split((layernorm(x) * v["ln_g"] + v["ln_b"]) @ v["wqkv"], 3, -1))
        scores = np.where(np.tril(np.ones((seq, seq), bool)), q @ k.transpose(0, 2, 1) / np.sqrt(dim // heads), -np.inf)
        x = x + (np.exp(_log_softmax(scores)) @ val).transpose(1, 0, 2).reshape(seq, dim) @ v["wo"]
        hidden = layernorm(x) @ v["w1"]
        x = x + 0.5 * hidden * (1 + np.tanh(np.sqrt(2 / np.pi) * (hidden + 0.044715 * hidden ** 3))) @ v["w2"]
        logits = layernorm(x) @ v["emb"].T
        return -np.mean(_log_softmax(logits[:-1])[np.arange(seq - 1), tokens[1:]])
    if name == "rnn":
        h, total = v["h0"], 0.0
        for t in range(5):
            h = np.tanh(v["x"][t] @ v["wx"] + h @ v["wh"] + v["b"])
            total += _mse(h @ v["w_out"], v["y"][t])
        return total / 5
    if name == "ste":
        w_q = np.trunc(np.clip(v["w"], -1, 1) * 8) / 8
        return _mse(v["x"] @ w_q, v["y"])
    if name == "poly":
        x = v["x"]
        return 3 * x**4 - 2 * x**3 + x**2 - 5 * x + 7
    raise AssertionError(f"no reference for sample {name}")


@pytest.mark.parametrize("name", NAMES)
def test_sample_computes_what_it_claims(name):
    graph = uopcli.load(SAMPLES_DIR / f"{name}.uop")
    for seed in (0, 1):
        values = _values(graph, seed)
        got = evaluate_graph(graph, values)[graph.output_names[0]]
        np.testing.assert_allclose(got, _reference(name, values), rtol=2e-5, atol=1e-6)


# ----------------------------------------------------------------------------- gradients

def _float_inputs(name: str) -> list[str]:
    return [node.arg for node in uopcli.load(SAMPLES_DIR / f"{name}.uop").inputs if node.dtype.is_float]


# The straight-through estimator's gradient is, by design, not the derivative of its
# forward (that is zero almost everywhere): the weights it quantises are not
# finite-difference checked; test_ste_gradient_is_the_straight_through_one checks them
# against the estimator's own formula instead.
NOT_FINITE_DIFFERENCE_CHECKED = {"ste": {"w"}}


@pytest.mark.parametrize("name", NAMES)
def test_sample_passes_uopgrad_check_for_every_float_input(name):
    wrt = [n for n in _float_inputs(name) if n not in NOT_FINITE_DIFFERENCE_CHECKED.get(name, ())]
    result = _uopgrad("check", str(SAMPLES_DIR / f"{name}.uop"), "--wrt", ",".join(wrt), "--seed", "0", "--json")
    report = json.loads(result.stdout)
    assert report["passed"] and report["dtype"] == "float64"
    assert [t["target"] for t in report["targets"]] == wrt
    for target in report["targets"]:
        assert target["passed"] and target["samples"] >= 1, target


def test_ste_gradient_is_the_straight_through_one(tmp_path):
    """d loss/d w of ste.uop is the gradient with respect to the quantised weights, passed
    through where |w| < 1 and zero elsewhere (the CALL's backward body, not its forward)."""
    sample = SAMPLES_DIR / "ste.uop"
    graph = uopcli.load(sample)
    values = _values(graph, seed=3)
    values["w"] = np.array([[0.3, -1.5, 0.9], [1.2, -0.2, 0.05], [-0.7, 0.45, 2.0], [0.6, -0.95, -0.1]], np.float32)
    for name, array in values.items():
        np.save(tmp_path / f"{name}.npy", array)
    _uopgrad("diff", str(sample), "--wrt", "x,w", "-o", str(tmp_path / "grad.uop"))
    _uopgrad("eval", str(tmp_path / "grad.uop"), *(f"-i{n}={tmp_path / n}.npy" for n in values),
             "-o", str(tmp_path / "grad.npz"))
    got = np.load(tmp_path / "grad.npz")

    x, w, y = (values[n].astype(np.float64) for n in ("x", "w", "y"))
    w_q = np.trunc(np.clip(w, -1, 1) * 8) / 8
    d_pred = 2 * (x @ w_q - y) / y.size               # d mean((x w_q - y)^2) / d (x w_q)
    expected_w = (x.T @ d_pred) * (np.abs(w) < 1)     # straight through, clipped
    np.testing.assert_allclose(got["grad_w"], expected_w, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["grad_x"], d_pred @ w_q.T, rtol=1e-5, atol=1e-7)
    assert np.all(got["grad_w"][np.abs(w) >= 1] == 0) and np.any(got["grad_w"] != 0)
    # ... and so it is not the finite-difference derivative of the forward, which check reports
    check = subprocess.run([str(UOPGRAD), "check", str(sample), "--wrt", "w"], capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    assert check.returncode == 1 and "FAILED" in check.stdout


def test_poly_second_and_third_derivatives(tmp_path):
    """diff applied to its own output gives the polynomial's higher derivatives."""
    sample = SAMPLES_DIR / "poly.uop"
    _uopgrad("diff", str(sample), "--wrt", "x", "-o", str(tmp_path / "d1.uop"))
    _uopgrad("diff", str(tmp_path / "d1.uop"), "--of", "grad_x", "--wrt", "x", "-o", str(tmp_path / "d2.uop"))
    _uopgrad("diff", str(tmp_path / "d2.uop"), "--of", "grad_x", "--wrt", "x", "-o", str(tmp_path / "d3.uop"))
    graphs = [uopcli.load(tmp_path / f"d{order}.uop") for order in (1, 2, 3)]
    for x in (-1.5, 0.0, 0.5, 2.0):
        derivatives = [float(evaluate_graph(g, {"x": np.float32(x)})["grad_x"]) for g in graphs]
        expected = [12 * x**3 - 6 * x**2 + 2 * x - 5, 36 * x**2 - 12 * x + 2, 72 * x - 12]
        np.testing.assert_allclose(derivatives, expected, rtol=1e-5, atol=1e-4)


# ----------------------------------------------------------------------------- README

def _console_commands(markdown: Path) -> list[str]:
    """Every `$ command` line inside the file's ```console blocks, in order."""
    text = markdown.read_text()
    commands = []
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.S | re.M):
        commands.extend(line[2:] for line in block.splitlines() if line.startswith("$ "))
    return commands


def _run_in_scratch_copy(commands: list[str], scratch: Path) -> None:
    """Run shell commands in order in `scratch`, which holds a copy of samples/: each must exit 0."""
    shutil.copytree(SAMPLES_DIR, scratch / "samples", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    env = {**os.environ, "PATH": f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in commands:
        result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=scratch, env=env,
                                capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, (f"command failed ({result.returncode}): {command}\n"
                                        f"{result.stdout.decode(errors='replace')}\n"
                                        f"{result.stderr.decode(errors='replace')}")


def test_samples_readme_commands_run(tmp_path):
    commands = _console_commands(SAMPLES_DIR / "README.md")
    assert len(commands) == len(NAMES)
    _run_in_scratch_copy(commands, tmp_path)
    _assert_make_clean_knows(tmp_path)


def _assert_make_clean_knows(scratch: Path) -> None:
    """What a tour wrote beside samples/ is in the Makefile's TOUR_FILES (make clean
    removes those by name) and in .gitignore."""
    makefile = (ROOT / "Makefile").read_text()
    listed = set(re.search(r"^TOUR_FILES := (.*?[^\\])$", makefile, flags=re.M | re.S).group(1).split())
    listed.discard("\\")
    written = {p.name for p in scratch.iterdir() if p.name not in ("samples", "out")}  # out/: make clean's $(OUT)
    assert written and written <= listed, f"add to TOUR_FILES in the Makefile: {sorted(written - listed)}"
    ignored = {line[1:] for line in (ROOT / ".gitignore").read_text().splitlines() if line.startswith("/")}
    assert written <= ignored, f"add to .gitignore: {sorted('/' + n for n in written - ignored)}"


def test_readme_shows_the_two_quick_start_commands():
    commands = _console_commands(ROOT / "README.md")
    assert "make demo" in commands and "make test" in commands


def test_readme_make_targets_table_lists_every_target_make_help_names():
    makefile = (ROOT / "Makefile").read_text()
    helped = re.findall(r'^\t@echo "make ([\w-]+)', makefile, flags=re.M)
    table = (ROOT / "README.md").read_text().split("## Make targets", 1)[1].split("\n#", 1)[0]
    listed = set(re.findall(r"^\| `make ([\w-]+)", table, flags=re.M))
    assert len(helped) >= 10 and len(listed) >= 10
    assert [t for t in helped if t not in listed] == [], "add these to the README's Make targets table"


def test_readme_says_which_python_the_tinygrad_extra_needs():
    """The tinygrad section and the quick start name the Python tinygrad's pinned release
    requires (its Requires-Python; pip on an older Python fails at the extra's line)."""
    from importlib.metadata import PackageNotFoundError, metadata
    try:
        requires = metadata("tinygrad")["Requires-Python"]
    except PackageNotFoundError:
        pytest.skip("tinygrad is not installed for this Python: its Requires-Python is unknown here")
    version = re.fullmatch(r">=\s*(3\.\d+)", requires.strip()).group(1)
    readme = " ".join((ROOT / "README.md").read_text().split())
    section = readme.split("## From tinygrad, and back", 1)[1].split(" ## ", 1)[0]
    quick_start = readme.split("`make test` adds", 1)[1].split(". ", 1)[0]
    for text in (section, quick_start):
        assert f"tinygrad 0.14 needs Python {version} or newer" in text or \
            f"tinygrad 0.14, which needs Python {version} or newer" in text


def _onnx_missing() -> str | None:
    """Why the README's ONNX commands cannot run here (onnx or onnxruntime has no wheel for
    this Python; `make test` installs both where they do), or None."""
    missing = [name for name in ("onnx", "onnxruntime") if importlib.util.find_spec(name) is None]
    return f"{' and '.join(missing)} not installed for this Python" if missing else None


def test_readme_commands_run_and_print_what_the_readme_shows(tmp_path, capsys):
    """The README's tour, run once, in order, in a scratch directory holding a copy of
    samples/ (tools/refresh_readme.py): each command exits 0 (commands meant to fail are
    written `... || echo ...`), the output pasted under each is what it prints now (a
    change of the CLI's output shows up here, not in front of a newcomer), and what the
    tour writes, make clean removes. Where onnx or onnxruntime is missing, the commands
    without ONNX run and their outputs are not compared. (One run for both: the tour was
    run twice, a minute of make test.)"""
    commands = [c for c in _console_commands(ROOT / "README.md") if not c.startswith(("make ", "git ", "cd "))]
    assert len(commands) >= 8, "the README tour lost its commands"
    assert {c.split()[1] for c in commands if c.startswith("uopgrad ")} >= {
        "diff", "eval", "check", "info", "print", "convert", "validate", "render"}
    if _onnx_missing():
        print(f"the README's ONNX commands and all outputs are not checked: {_onnx_missing()}")
        _run_in_scratch_copy([c for c in commands if "onnx" not in c], tmp_path)
        _assert_make_clean_knows(tmp_path)
        return
    scratch = tmp_path / "tour"
    shutil.copytree(SAMPLES_DIR, scratch / "samples", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    copy = tmp_path / "README.md"
    copy.write_text((ROOT / "README.md").read_text())
    changed = refresh_readme.refresh(copy, scratch)
    failed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: exit status")]
    assert not failed, "README commands failed:\n" + "\n".join(failed)
    assert not changed, (
        "the README's outputs are out of date: run python tools/refresh_readme.py README.md and read the diff")
    _assert_make_clean_knows(scratch)


EVAL_TABLE = ["name    shape   dtype    min       mean      max         values",
              "grad_y  [16,4]  float32  -3.23242  -1.31015  0.00763702  -1.35078 -1.65761 ..."]
CHECK_TABLE = ["target       samples  max abs err  max rel err  worst at",
               "x                 16    3.963e-09    6.873e-09  [4,4] analytic -0.576626 numeric -0.576626  ok"]


def test_readme_outputs_may_round_as_another_cpu_does():
    """The same README output printed on a CPU whose BLAS kernels round otherwise (seen:
    an AMD EPYC against the machine that wrote the README) is no change ..."""
    same = refresh_readme.same_up_to_rounding
    assert same(EVAL_TABLE, ["name    shape   dtype    min       mean      max        values",
                             "grad_y  [16,4]  float32  -3.23242  -1.31015  0.0076369  -1.35078 -1.65761 ..."])
    assert same(CHECK_TABLE, [CHECK_TABLE[0],
                              "x                 16    2.953e-09    7.410e-09  [2,5] analytic -0.39857 numeric -0.39857  ok"])
    assert same(["mean 1e-09"], ["mean -3e-08"])  # both zero but for cancellation


@pytest.mark.parametrize("shown, printed", [
    (EVAL_TABLE, [EVAL_TABLE[0], EVAL_TABLE[1].replace("-1.31015", "-1.32015")]),  # a number, beyond rounding
    (EVAL_TABLE, [EVAL_TABLE[0], EVAL_TABLE[1].replace("float32", "float64")]),  # a word
    (EVAL_TABLE, [EVAL_TABLE[0], EVAL_TABLE[1].replace(" ...", "")]),  # a value fewer
    (EVAL_TABLE, EVAL_TABLE + ["grad_x  [16,8]  float32  0  0  0  0 ..."]),  # a line more
    (CHECK_TABLE, [CHECK_TABLE[0], CHECK_TABLE[1].replace(" 16 ", " 15 ")]),  # the sample count
    (CHECK_TABLE, [CHECK_TABLE[0], CHECK_TABLE[1].replace("ok", "FAILED")]),  # the verdict
])
def test_readme_outputs_that_change_more_than_rounding_are_changes(shown, printed):
    """... but a different word, count, verdict or a number off by more than 1e-3 is."""
    assert not refresh_readme.same_up_to_rounding(shown, printed)


def test_readme_python_example_runs(tmp_path):
    """The README's Python API example, run as a script in a scratch directory (the other
    Python block, torch.func.hessian's error, is run by tests/test_forward_torch_onnx.py)."""
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M)
    blocks = [block for block in blocks if not block.startswith(("import torch", "# sharpness"))]
    assert len(blocks) == 1
    (tmp_path / "example.py").write_text(blocks[0])
    result = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == ["['loss', 'grad_w']", "(16, 8)"]
    assert result.stdout.splitlines()[-1] == "True"
    assert (tmp_path / "model.uop").is_file() and (tmp_path / "grad.svg").read_bytes().startswith(b"<?xml")


def test_readme_sharpness_example_finds_the_hessians_largest_eigenvalue(tmp_path):
    """The README's power iteration on H v, run from the repository's root as a reader runs
    it, prints the largest eigenvalue of the Hessian that `hessian` writes in full."""
    import numpy as np
    from uopcli import evaluate_graph
    from uopcli.formats.uop import load
    from uopcli.tools.forward import hessian
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M)
                if b.startswith("# sharpness")]
    (tmp_path / "sharpness.py").write_text(block)
    result = subprocess.run([sys.executable, str(tmp_path / "sharpness.py")], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    model = load(ROOT / "samples" / "mlp.uop")
    rng = np.random.default_rng(0)  # the block's point
    point = {n.arg: rng.standard_normal(n.shape).astype(np.float32) for n in model.inputs[:6]}
    blocks = evaluate_graph(hessian(model, ["w1", "w2"]), point)
    size = {"w1": 256, "w2": 128}
    full = np.block([[blocks[f"hessian_{a}_{b}"].reshape(size[a], size[b]) for b in size] for a in size])
    largest = np.linalg.eigvalsh(full.astype(np.float64))[-1]
    assert result.stdout == f"largest eigenvalue {largest:.4f}\n" == "largest eigenvalue 51.0672\n"
