"""`-i data.npz` without NAME=: every input gets its member of that name (eval, check);
NAME=VALUE overrides a member; a member that names no input, or one input in two archives,
is an error, never dropped or guessed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from uopcli import Graph, UOp, save
from uopcli.errors import EvaluationError
from uopcli.tools.values import gather_inputs, split_spec

UOPGRAD = shutil.which("uopgrad", path=os.path.dirname(sys.executable)) or shutil.which("uopgrad")


@pytest.fixture
def model(tmp_path):
    x, w = UOp.param("x", (3,)), UOp.param("w", (3,))
    graph = Graph({"y": (x * x * w).sum()}, inputs=[x, w])
    save(graph, tmp_path / "m.uop")
    np.savez(tmp_path / "both.npz", x=np.array([1, 2, 3], np.float32), w=np.array([1, 10, 100], np.float32))
    np.savez(tmp_path / "only_w.npz", w=np.array([1, 1, 1], np.float32))
    np.savez(tmp_path / "typo.npz", x=np.zeros(3, np.float32), ww=np.zeros(3, np.float32))
    return graph, tmp_path


def test_a_bare_archive_is_a_spec_of_its_own():
    assert split_spec("model.npz") == (None, "model.npz")
    assert split_spec("x=model.npz") == ("x", "model.npz")
    with pytest.raises(EvaluationError, match="NAME=VALUE"):
        split_spec("model.npy")


def test_every_member_named_like_an_input_is_taken(model):
    graph, folder = model
    values = gather_inputs(graph.inputs, [str(folder / "both.npz")])
    np.testing.assert_array_equal(values["w"], [1, 10, 100])
    assert list(values) == ["x", "w"]


def test_name_value_overrides_the_archive_in_any_order(model):
    graph, folder = model
    for specs in ([str(folder / "both.npz"), "x=0.5"], ["x=0.5", str(folder / "both.npz")]):
        values = gather_inputs(graph.inputs, specs)
        np.testing.assert_array_equal(values["x"], [0.5, 0.5, 0.5])
        np.testing.assert_array_equal(values["w"], [1, 10, 100])


def test_unknown_members_and_doubles_are_errors(model):
    graph, folder = model
    with pytest.raises(EvaluationError, match=r"typo.npz: member ww names no input; inputs: x, w"):
        gather_inputs(graph.inputs, [str(folder / "typo.npz")])
    with pytest.raises(EvaluationError, match=r"input 'w' is in both .*both.npz and .*only_w.npz"):
        gather_inputs(graph.inputs, [str(folder / "both.npz"), str(folder / "only_w.npz")])
    with pytest.raises(EvaluationError, match="missing input value: x float32"):
        gather_inputs(graph.inputs, [str(folder / "only_w.npz")])


@pytest.mark.skipif(UOPGRAD is None, reason="the uopgrad console script is not installed")
def test_eval_and_check_take_a_whole_archive(model):
    _, folder = model
    run = lambda *args: subprocess.run([UOPGRAD, *args], cwd=folder, capture_output=True, text=True)  # noqa: E731
    done = run("eval", "m.uop", "-i", "both.npz", "--json")
    assert done.returncode == 0 and '"values": 941.0' in done.stdout, done.stderr  # 1*1 + 4*10 + 9*100
    done = run("check", "m.uop", "--wrt", "x,w", "-i", "both.npz")
    assert done.returncode == 0, done.stdout + done.stderr
    done = run("eval", "m.uop", "-i", "typo.npz", "-o", "out.npz")
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0 and "member ww names no input" in done.stderr
    assert not (folder / "out.npz").exists()
