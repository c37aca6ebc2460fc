"""The package's front door: what `import uopcli` gives, and what it costs."""

import subprocess
import sys

import numpy as np

import uopcli


def test_importing_the_package_does_not_import_numpy_click_or_graphviz():
    code = "import sys, uopcli; print(sorted(m for m in ('numpy', 'click', 'graphviz') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_resolves():
    for name in uopcli.__all__:
        assert getattr(uopcli, name) is not None, name


def test_functions_named_like_their_module_stay_functions_once_the_module_is_imported():
    """`from uopcli import evaluate` is the function even after uopcli.evaluate (the module)
    was imported, directly or through another public name: Python would otherwise set the
    module as the package's attribute of that name."""
    code = """
import types, uopcli.tools.differentiate, uopcli.views.graphviz
from uopcli.tools.differentiate import is_zero
from uopcli import evaluate_graph, evaluate, DiffReport, differentiate, to_dot, render
import uopcli
print([isinstance(f, types.FunctionType) and f.__name__ == n
       for n, f in (("evaluate", evaluate), ("differentiate", differentiate), ("render", render),
                    ("render", uopcli.render))])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[True, True, True, True]"


def test_the_readme_python_example_computes_the_gradient():
    x = uopcli.UOp.param("x", (3,))
    w = uopcli.UOp.param("w", (3,))
    loss = (x * w).sum().square()
    grads = uopcli.compute_gradient(loss, uopcli.UOp.const(1.0), [w])
    graph = uopcli.Graph({"grad_w": grads[w]}, inputs=[x, w])
    xs, ws = np.array([1, 2, 3], np.float32), np.array([0.5, -1, 2], np.float32)
    out = uopcli.evaluate_graph(graph, {"x": xs, "w": ws})
    np.testing.assert_allclose(out["grad_w"], 2 * (xs @ ws) * xs, rtol=1e-6)
    again = uopcli.load(uopcli.save(graph))
    assert again.output_names == ["grad_w"] and again.input_names == ["x", "w"]


def test_the_command_package_registers_every_command_and_leaves_numpy_to_their_bodies():
    """uopcli.cli is a package (app, io, output, commands/): importing it registers every command
    on the group, and numpy, graphviz and the optional packages wait for the commands that use
    them (`uopgrad info` starts in well under 100 ms)."""
    code = ("import sys, uopcli.cli; print(' '.join(sorted(uopcli.cli.main.commands))); "
            "print(sorted(m for m in ('numpy', 'graphviz', 'onnx', 'tinygrad') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["check convert diff eval hessian hvp info jacobian jvp print render simplify validate view", "[]"]
