"""`uopgrad check MODEL --against FILE`: a written gradient (diff), jvp, hvp, jacobian or
hessian FILE against finite differences of MODEL, in float64 (`check --wrt` and `check --hvp`
rebuild the gradient or HVP from the model and never read a file; `check FILE` checks the
file's own derivatives, which a wrong file has consistently).

    report = check_file(model, written, inputs={"w": w}, seed=0, file="hvp.uop")

FILE's meta says what it is (tools/forward.py and tools/differentiate.py write it):
`gradient_of`/`gradient_wrt`, `jvp_of`/`jvp_wrt`, `hvp_of`/`hvp_wrt`, `jacobian_of`/
`jacobian_wrt`, `hessian_of`/`hessian_wrt`. Its inputs must be MODEL's, in order, then what
that command adds (tangents; a non-scalar output's cotangent, when it was made with
--cotangent input), named as it names them; its outputs named as it names them (after
MODEL's own, kept with --keep-forward). Anything else is refused in one line naming FILE.
A gradient of a gradient (diff of a diff file) is checked against its own model, the first
diff file: its meta says it is of that file's output (grad_w), which MODEL has not.

At the point (inputs given, else seeded random, as `check` draws them) and a seeded random
direction v (the file's tangent inputs; for a matrix, a direction drawn as they are):
- gradient: sum over x of <grad_<x>, v_x>  against (L(x + h v) - L(x - h v)) / 2h, L the sum
            over the outputs differentiated of <u, y> (u: 1 for a scalar, FILE's
            cotangent input, else ones, as diff seeds it), then COLUMNS elements of each
            input (all of a smaller one) along their basis directions, and the forward
            outputs FILE kept against MODEL's values (a jvp's too);
- jvp:      FILE's jvp_<y>                  against (y(x + h v) - y(x - h v)) / 2h of MODEL;
- jacobian: FILE's jacobian_<y>_<x> . v     against the same (every column at once), then
            COLUMNS columns of each input (all of a smaller one) along their basis directions;
- hvp:      FILE's hvp_<x>                  against differences of MODEL's gradient along v;
- hessian:  sum over b of hessian_<a>_<b> . v_b, against the same, then columns likewise;
with `check --hvp`'s comparison (tools/forward_differences: kinks named, noise told apart,
never ok with nothing compared) and its exit status.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from ..core.graph import Graph
from ..core.uop import UOp
from ..errors import EvaluationError
from .check import ATOL, RTOL, forward_not_finite, not_finite_lines
from .check_float64 import freeze_detached, to_float64
from .check_numeric import step_base
from .forward_check import hvp_against, mover, point, target_lines, verdict, verdict_lines
from .forward_differences import Along, KinkSites, Target, against_differences, standing_still
from .names import cotangent_names, fresh, tangent_names

KINDS = ("jvp", "hvp", "jacobian", "hessian", "gradient")  # meta <kind>_of and <kind>_wrt say which
COLUMNS = 4  # a matrix's columns compared one at a time, per input (all of a smaller one)


@dataclass
class FileReport:
    file: str
    kind: str
    of: list[str]
    wrt: list[str]
    rows: list[tuple[str, Target]] = field(default_factory=list)  # (what of FILE, its comparison)
    kept: list[tuple[str, Target]] = field(default_factory=list)  # a gradient file's forward outputs
    notes: list[str] = field(default_factory=list)  # why a failure may be by design (a given backward body)
    not_finite: tuple[str, list[str]] | None = None

    @staticmethod
    def _weighed(rows: list, kept: list) -> list[Target]:
        """What the verdict weighs: the derivatives, and a kept forward output only when it
        is wrong (its being right is no comparison of a derivative: never ok on it alone)."""
        return [t for _, t in rows] + [t for _, t in kept if not t.passed]

    @property
    def passed(self) -> bool:
        return self.not_finite is None and verdict(self._weighed(self.rows, self.kept)) == "ok"

    def to_dict(self) -> dict:
        found = {"check": "against", "file": self.file, "kind": self.kind, "of": self.of, "wrt": self.wrt,
                 "passed": self.passed, "rtol": RTOL, "atol": ATOL, "dtype": "float64",
                 "targets": [{**t.to_dict(), "target": label} for label, t in self.rows]
                 + [{**t.to_dict(), "target": label, "kept_forward": True} for label, t in self.kept]}
        if self.not_finite is not None:
            found.update(forward_finite=False, not_finite=self.not_finite[1])
        if self.notes:
            found["notes"] = self.notes
        return found

    def lines(self) -> list[str]:
        if self.not_finite is not None:
            return not_finite_lines(self.not_finite[0], self.not_finite[1], f"value of {self.file}")
        rows = [(label, replace(t, name=label)) for label, t in self.rows]
        kept = [(label, replace(t, name=label)) for label, t in self.kept]
        differences = ("its gradient" if self.kind in ("hvp", "hessian") else
                       ", ".join(self.of) if self.kind == "gradient" else "its outputs")
        out = target_lines(f"{self.file}", rows + kept)
        out += verdict_lines(self._weighed(rows, kept), "", f"ok: {self.file} ({self.kind} of {', '.join(self.of)} along "
                             f"{', '.join(self.wrt)}) matches finite differences of {differences} (float64)",
                             "the derivative jumps")
        return out + [f"note: {note}" for note in self.notes]


def written_as(written: Graph, file: str, model: Graph | None = None) -> tuple[str, list[str], list[str]]:
    """(kind, of, wrt) from FILE's meta; refused when it says none. A kind the model's meta
    says too, alike, is the model's own (a jvp of an hvp file keeps hvp_of): not FILE's,
    unless FILE says no other: diff writes its gradient_of over its model's, so a gradient
    alike (diff of the same output of a diff file again) is still FILE's."""
    meta, inherited = written.meta or {}, (model.meta or {}) if model is not None else {}
    kinds = [kind for kind in KINDS if f"{kind}_of" in meta and f"{kind}_wrt" in meta
             and any(meta[key] != inherited.get(key) for key in (f"{kind}_of", f"{kind}_wrt"))]
    if len(kinds) > 1:
        raise EvaluationError(f"{file}: its meta says it is {' and '.join(kinds)} at once "
                              f"({', '.join(kind + '_of' for kind in kinds)}): not a file one uopgrad command wrote")
    if not kinds and "gradient_of" in meta and "gradient_wrt" in meta:
        kinds = ["gradient"]
    if not kinds:
        raise EvaluationError(f"{file}: its meta names none of {', '.join(kind + '_of' for kind in KINDS)} (with "
                              f"their _wrt): not a file uopgrad diff, jvp, hvp, jacobian or hessian wrote")
    kind = kinds[0]
    return kind, _split(meta[f"{kind}_of"]), _split(meta[f"{kind}_wrt"])


def check_file(model: Graph, written: Graph, inputs: Mapping | None = None, seed: int = 0,
               file: str = "FILE", simplify: str | None = "tinygrad") -> FileReport:
    """FILE (`written`) against finite differences of `model` at `inputs` (the rest seeded
    random), as the module says. FILE is evaluated as `eval` runs it (`simplify`, as
    evaluate_graph's: tinygrad's rewrites by default, "exact" for `--literal`): the values
    its users get are the ones checked (as written, a sigmoid's gradient at -1000 is
    0 * inf = nan in float64, and `eval` gives 0)."""
    import numpy as np
    from ..backends.inputs import checked_inputs
    from ..backends.numpy import evaluate_graph
    kind, of, wrt = written_as(written, file, model)
    expected_outputs, extra = _expected(model, written, kind, of, wrt, file)
    _match(model, written, extra, expected_outputs, file)
    if kind == "gradient":
        _match_gradients(model, written, expected_outputs, wrt, file)
    given = checked_inputs(written, inputs or {}, float_points=True)
    values = point(model, written, given, seed)
    tangent = tangent_names(model, wrt)
    for name in wrt:  # a matrix file has no tangent inputs: its direction is drawn as they are
        if tangent[name] not in values:
            values[tangent[name]] = _direction(model.input(name), tangent[name], seed)
    report = FileReport(file, kind, of, wrt)
    loss = of if kind in ("jvp", "jacobian", "gradient") else of[:1]
    report.not_finite = forward_not_finite(model, loss, values)
    if report.not_finite is not None:
        return report
    found = evaluate_graph(to_float64(written), {n.arg: values[n.arg] for n in written.inputs}, simplify=simplify)
    if kind == "gradient":
        weights = _weights(model, of, values, {n.arg for n in extra})
        report.rows = _gradient_rows(model, found, expected_outputs, of, wrt, values, weights, seed)
        report.kept = _kept_rows(model, found, values) if list(written.outputs) != expected_outputs else []
        report.notes = _given_backward_notes(model, of, wrt, expected_outputs, report.rows)
        return report
    if kind == "hvp":
        analytic = {name: found[out] for name, out in zip(wrt, expected_outputs)}
    elif kind == "hessian":
        analytic = _hessian_times(found, expected_outputs, wrt, values, tangent)
    else:
        analytic = _products(found, expected_outputs, of, wrt, values, tangent, kind)
    if kind in ("hvp", "hessian"):
        cotangent = cotangent_names(model, of)[of[0]]
        if model.outputs[of[0]].shape != () and cotangent not in values:  # written with --cotangent ones
            values[cotangent] = np.ones(model.outputs[of[0]].shape)
    compare = _comparison(model, kind, of, wrt, values, tangent, seed)
    labels = (expected_outputs if kind in ("hvp", "jvp") else
              [f"{kind}_{name}_* . v" for name in (wrt if kind == "hessian" else of)])
    report.rows = list(zip(labels, compare(analytic, values)))
    if kind == "jvp" and list(written.outputs) != expected_outputs:  # jvp --keep-forward
        report.kept = _kept_rows(model, found, values)
    if kind in ("jacobian", "hessian"):
        keys = of if kind == "jacobian" else wrt  # what each row of blocks is of
        report.rows += _columns(found, expected_outputs, keys, wrt, values, tangent, seed, compare)
    return report


def _comparison(model: Graph, kind: str, of: list[str], wrt: list[str], values: dict, tangent: dict, seed: int):
    """(analytic, values) -> targets: against differences of the gradient (hvp, hessian) or
    of the outputs (jvp, jacobian) along values' tangents."""
    if kind in ("hvp", "hessian"):
        return lambda analytic, at: hvp_against(model, wrt, of[0], analytic, at, seed).targets
    return lambda analytic, at: _jvp_against(model, of, wrt, analytic, at, tangent)


def _columns(found: dict, blocks: list[str], keys: list[str], wrt: list[str], values: dict, tangent: dict, seed: int,
             compare) -> list[tuple[str, Target]]:
    """A matrix's columns one at a time, each against differences along its basis direction:
    all of an input with at most COLUMNS elements, else COLUMNS of them (seeded), which
    names the column at fault, as a random v (every column at once) cannot."""
    import numpy as np
    rows = [blocks[k * len(wrt):(k + 1) * len(wrt)] for k in range(len(keys))]  # row-major, as written
    rng = np.random.default_rng([seed, 3])
    found_rows = []
    for i, name in enumerate(wrt):
        for index in _picks(values[name].shape, rng):
            at = _basis_direction(values, wrt, tangent, name, index)
            columns = {key: np.asarray(found[row[i]])[(Ellipsis, *index)] for key, row in zip(keys, rows)}
            at_index = f"[..., {','.join(map(str, index))}]" if index else ""  # a scalar input's one column: all of it
            shown = [row[i] + at_index for row in rows]
            found_rows += list(zip(shown, compare(columns, at)))
    return found_rows


def _picks(shape: tuple, rng) -> list[tuple]:
    """The indices of an input compared one at a time: all of one with at most COLUMNS
    elements, else COLUMNS of them drawn from `rng`, in order."""
    import numpy as np
    size = int(np.prod(shape, dtype=np.int64))
    flat = range(size) if size <= COLUMNS else sorted(rng.choice(size, COLUMNS, replace=False).tolist())
    return [tuple(int(i) for i in np.unravel_index(k, shape)) for k in flat]


def _basis_direction(values: dict, wrt: list[str], tangent: dict, name: str, index: tuple) -> dict:
    """`values` with every tangent 0 but input `name`'s, 1 at `index`."""
    import numpy as np
    at = {**values, **{tangent[x]: np.zeros_like(values[tangent[x]]) for x in wrt}}
    basis = np.zeros(values[name].shape)
    basis[index] = 1.0
    at[tangent[name]] = basis
    return at


# ----------------------------------------------------------------------------- gradient (diff) files

def _gradient_rows(model: Graph, found: dict, grads: list[str], of: list[str], wrt: list[str], values: dict,
                   weights: dict, seed: int) -> list[tuple[str, Target]]:
    """FILE's grad_<x> against differences of L = sum over `of` of <u, y>: along a random v
    over every input at once (sum of <grad_<x>, v_x>), then elements of each input one at a
    time along their basis directions (`_picks`), which names a wrong one (grad_w[3,7])."""
    import numpy as np
    tangent = tangent_names(model, wrt)
    grad = {x: np.asarray(found[name], dtype=np.float64) for x, name in zip(wrt, grads)}

    def compare(analytic, at: dict) -> list[Target]:
        return _loss_against(model, of, wrt, weights, {"L": analytic}, at, tangent)
    rows = list(zip(["grad_* . v"], compare(sum(_contract(grad[x], values[tangent[x]]) for x in wrt), values)))
    rng = np.random.default_rng([seed, 3])  # the elements drawn as a matrix's columns are
    for x, name in zip(wrt, grads):
        for index in _picks(values[x].shape, rng):
            label = f"{name}[{','.join(map(str, index))}]" if index else name  # a scalar input: all of it
            rows += list(zip([label], compare(grad[x][index], _basis_direction(values, wrt, tangent, x, index))))
    return rows


def _given_backward_notes(model: Graph, of: list[str], wrt: list[str], grads: list[str],
                          rows: list[tuple[str, Target]]) -> list[str]:
    """For each input whose gradient failed (a row of its own, or the random direction) and
    flows through a CALL's given backward body, `check`'s note saying so."""
    from .check import custom_backward_note
    failed = {label.split("[")[0] for label, t in rows if not (t.passed or t.noisy)}
    notes = []
    for x, name in zip(wrt, grads):
        note = custom_backward_note(model, of, model.input(x)) if {name, "grad_* . v"} & failed else ""
        notes += [f"{x}: {note}"] if note else []
    return notes


def _weights(model: Graph, of: list[str], values: dict, cotangents: set) -> dict:
    """{output: u} as diff seeds it: 1 for a scalar, FILE's cotangent input (--cotangent
    input), else ones (--cotangent ones)."""
    import numpy as np
    names = cotangent_names(model, of)
    return {o: (np.asarray(values[names[o]], dtype=np.float64) if names[o] in cotangents else
                np.ones(model.outputs[o].shape or ())) for o in of}


def _loss_against(model: Graph, of: list[str], wrt: list[str], weights: dict, analytic: dict, values: dict,
                  tangent: dict) -> list[Target]:
    """{"L": directional derivative} against central differences of sum over `of` of
    <u, y> along values' tangents, DETACH values held (a gradient does not flow through one)."""
    import numpy as np
    still = standing_still(list(analytic), [values[tangent[name]] for name in wrt])
    if still is not None:
        return still
    outputs, h, sites = _outputs_along(model, of, wrt, values, tangent)

    def loss(t: float) -> dict:
        found = outputs(t)
        with np.errstate(all="ignore"):
            return {"L": np.float64(sum(np.sum(weights[o] * found[o]) for o in of))}
    return against_differences(Along(loss), analytic, {"L": "L"}, h, sites)


def _kept_rows(model: Graph, found: dict, values: dict) -> list[tuple[str, Target]]:
    """The forward outputs FILE kept (diff --keep-forward) against MODEL's at the point,
    with check's tolerances; the same non-finite value on both sides agrees."""
    import numpy as np
    from ..backends.reference import reference_evaluate
    from .forward_differences import compared
    forward = to_float64(model)
    with np.errstate(all="ignore"):
        theirs = reference_evaluate(list(forward.outputs.values()), {n.arg: values[n.arg] for n in forward.inputs})
    rows = []
    for name, model_value in zip(forward.outputs, theirs):
        a, b = np.asarray(found[name], dtype=np.float64), np.asarray(model_value, dtype=np.float64)
        alike = (a == b) | (np.isnan(a) & np.isnan(b))  # inf == inf; nan where the model has nan too
        rows.append((name, compared(name, np.where(alike, 0.0, a), np.where(alike, 0.0, b))))
    return rows


def _split(text: str) -> list[str]:
    return [name for name in text.split(",") if name]


def _expected(model: Graph, written: Graph, kind: str, of: list[str], wrt: list[str],
              file: str) -> tuple[list[str], list[UOp]]:
    """(the outputs `kind` writes, in order, the values kept for a jvp --keep-forward not
    among them; the inputs it adds after the model's) for this model, or refused."""
    for name in of:
        if name not in model.outputs:
            derived = re.match(r"^(grad|jvp|hvp|jacobian|hessian)[0-9]*_", name)  # a derivative of a derivative
            hint = f": {name} is an output uopgrad writes: give the file that has it as MODEL" if derived else ""
            raise EvaluationError(f"{file}: its meta says it is the {kind} of {name!r}, and the model has no such "
                                  f"output (its outputs: {', '.join(model.outputs)}){hint}")
    for name in wrt:
        if name not in model.input_names:
            raise EvaluationError(f"{file}: its meta says it is along {name!r}, and the model has no such input "
                                  f"(its inputs: {', '.join(model.input_names)})")
    tangent = tangent_names(model, wrt)
    tangents = [UOp.param(tangent[name], model.input(name).shape, model.input(name).dtype) for name in wrt]
    taken: set[str] = set()
    if kind == "gradient":
        return _expected_gradient(model, written, of, wrt)
    if kind == "jvp":
        kept = list(written.outputs)[:len(model.outputs)] == list(model.outputs)
        taken = set(model.outputs) if kept else set()
        return [fresh("jvp", name, taken) for name in of], tangents
    cotangent = cotangent_names(model, of)[of[0]]
    weights = [n for n in written.inputs if n.arg == cotangent]  # --cotangent input (else ones)
    if kind == "hvp":
        return [fresh("hvp", name, taken) for name in wrt], [*weights, *tangents]
    if kind == "jacobian":
        return [fresh("jacobian", f"{o}_{i}", taken) for o in of for i in wrt], []
    return [fresh("hessian", f"{a}_{b}", taken) for a in wrt for b in wrt], weights


def _expected_gradient(model: Graph, written: Graph, of: list[str], wrt: list[str]) -> tuple[list[str], list[UOp]]:
    """diff's outputs grad_<x> (numbered after the forward outputs FILE kept, with
    --keep-forward: all of them first, then as many gradients) and the cotangent inputs of
    the non-scalar outputs (--cotangent input: all of them, or none: --cotangent ones)."""
    kept = (len(written.outputs) == len(model.outputs) + len(wrt)
            and list(written.outputs)[:len(model.outputs)] == list(model.outputs))
    taken = set(model.outputs) if kept else set()
    names = cotangent_names(model, of)
    weights = [UOp.param(names[o], model.outputs[o].shape, model.outputs[o].dtype) for o in of
               if model.outputs[o].shape != ()]
    if not any(name in written.input_names for name in (w.arg for w in weights)):
        weights = []  # seeded with ones
    return [fresh("grad", name, taken) for name in wrt], weights


def _match(model: Graph, written: Graph, extra: list[UOp], outputs: list[str], file: str) -> None:
    """Refuse FILE unless its inputs are the model's then `extra` (names, shapes, dtypes)
    and it has `outputs`."""
    want = [*model.inputs, *extra]
    for i, (theirs, ours) in enumerate(zip(written.inputs, want)):
        if (theirs.arg, theirs.shape, theirs.dtype) != (ours.arg, ours.shape, ours.dtype):
            raise EvaluationError(f"{file}: its input {i + 1} is {_typed(theirs)}, where the model's {_kind_of(i, model)} "
                                  f"is {_typed(ours)}: not written from this model")
    if len(written.inputs) != len(want):
        names = ", ".join(n.arg for n in (written.inputs[len(want):] or want[len(written.inputs):]))
        more = len(written.inputs) > len(want)
        raise EvaluationError(f"{file}: it has {len(written.inputs)} inputs, the model and its directions "
                              f"{len(want)} ({'more' if more else 'missing'}: {names}): not written from this model")
    missing = [name for name in outputs if name not in written.outputs]
    if missing:
        raise EvaluationError(f"{file}: it has no output {', '.join(missing)}, which its meta says it holds "
                              f"(its outputs: {', '.join(written.outputs)})")


def _match_gradients(model: Graph, written: Graph, grads: list[str], wrt: list[str], file: str) -> None:
    """Refuse FILE unless each grad_<x> has x's shape (a gradient is an element per element)."""
    for name, x in zip(grads, wrt):
        if written.outputs[name].shape != model.input(x).shape:
            raise EvaluationError(f"{file}: its output {_typed(written.outputs[name], name)} is not shaped as the "
                                  f"model's input {_typed(model.input(x))}: not its gradient")


def _kind_of(i: int, model: Graph) -> str:
    return f"input {i + 1}" if i < len(model.inputs) else f"direction {i + 1 - len(model.inputs)}"


def _typed(node: UOp, name: str | None = None) -> str:
    return f"{node.arg if name is None else name} {node.dtype.name}[{','.join(map(str, node.shape or ()))}]"


def _direction(target: UOp, name: str, seed: int):
    import numpy as np
    from .values import random_value
    return random_value(UOp.param(name, target.shape, target.dtype), seed).astype(np.float64)


def _products(found: dict, outputs: list[str], of: list[str], wrt: list[str], values: dict, tangent: dict,
              kind: str) -> dict:
    """{output: FILE's J v}: jvp_<y> itself, or the sum over x of jacobian_<y>_<x> . v_x."""
    import numpy as np
    if kind == "jvp":
        return {o: np.asarray(found[name]) for o, name in zip(of, outputs)}
    blocks = iter(outputs)
    products = {}
    for o in of:
        products[o] = sum(_contract(found[next(blocks)], values[tangent[x]]) for x in wrt)
    return products


def _hessian_times(found: dict, outputs: list[str], wrt: list[str], values: dict, tangent: dict) -> dict:
    """{a: sum over b of hessian_<a>_<b> . v_b}."""
    blocks = iter(outputs)
    return {a: sum(_contract(found[next(blocks)], values[tangent[b]]) for b in wrt) for a in wrt}


def _contract(block, v):
    """block (shape out.shape + v.shape) . v over v's axes."""
    import numpy as np
    v = np.asarray(v, dtype=np.float64)
    return np.tensordot(np.asarray(block, dtype=np.float64), v, axes=v.ndim)


def _jvp_against(model: Graph, of: Sequence[str], wrt: Sequence[str], analytic: dict, values: dict,
                 tangent: dict) -> list[Target]:
    """{output: J v} against central differences of the model's outputs along v, DETACH
    values held (a jvp gives a DETACH a zero tangent)."""
    still = standing_still(list(analytic), [values[tangent[name]] for name in wrt])
    if still is not None:
        return still
    at, h, sites = _outputs_along(model, of, wrt, values, tangent)
    return against_differences(Along(at), analytic, {o: o for o in of}, h, sites)


def _outputs_along(model: Graph, of: Sequence[str], wrt: Sequence[str], values: dict, tangent: dict):
    """(t -> {output: its value at x + t v}, the step h, the kink sites) for the model's
    outputs `of`, v the values' tangents, DETACH values held at x."""
    import numpy as np
    from ..backends.reference import reference_evaluate
    forward = to_float64(Graph({o: model.outputs[o] for o in of}, inputs=model.inputs))
    held = freeze_detached(list(forward.outputs.values()), {n.arg: values[n.arg] for n in forward.inputs})
    h = step_base(np.float64) * max([1.0] + [float(np.max(np.abs(values[name]), initial=0.0)) for name in wrt])
    move = mover(values, wrt, tangent)

    def at(t: float) -> dict:
        feed = move(t)
        with np.errstate(all="ignore"):
            results = reference_evaluate(held, {n.arg: feed[n.arg] for n in forward.inputs})
        return {o: np.asarray(r, dtype=np.float64) for o, r in zip(of, results)}
    return at, h, KinkSites(model, [model.outputs[o] for o in of], wrt, move)
