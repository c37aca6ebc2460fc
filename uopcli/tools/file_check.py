"""`uopgrad check MODEL --against FILE`: a written jvp, hvp, jacobian or hessian FILE against
finite differences of MODEL, in float64 (`check --hvp` rebuilds the HVP from the model and
never reads a file; `check FILE` checks the file's own derivatives, which a wrong file has
consistently).

    report = check_file(model, written, inputs={"w": w}, seed=0, file="hvp.uop")

FILE's meta says what it is (tools/forward.py writes it): `jvp_of`/`jvp_wrt`,
`hvp_of`/`hvp_wrt`, `jacobian_of`/`jacobian_wrt`, `hessian_of`/`hessian_wrt`. Its inputs
must be MODEL's, in order, then what that command adds (tangents; a non-scalar output's
cotangent, when it was made with --cotangent input), named as it names them; its outputs
named as it names them. Anything else is refused in one line naming FILE.

At the point (inputs given, else seeded random, as `check` draws them) and a seeded random
direction v (the file's tangent inputs; for a matrix, a direction drawn as they are):
- jvp:      FILE's jvp_<y>                  against (y(x + h v) - y(x - h v)) / 2h of MODEL;
- jacobian: FILE's jacobian_<y>_<x> . v     against the same (every column at once), then
            COLUMNS columns of each input (all of a smaller one) along their basis directions;
- hvp:      FILE's hvp_<x>                  against differences of MODEL's gradient along v;
- hessian:  sum over b of hessian_<a>_<b> . v_b, against the same, then columns likewise;
with `check --hvp`'s comparison (tools/forward_differences: kinks named, noise told apart,
never ok with nothing compared) and its exit status.
"""

from __future__ import annotations

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

KINDS = ("jvp", "hvp", "jacobian", "hessian")  # meta <kind>_of and <kind>_wrt say which
COLUMNS = 4  # a matrix's columns compared one at a time, per input (all of a smaller one)


@dataclass
class FileReport:
    file: str
    kind: str
    of: list[str]
    wrt: list[str]
    rows: list[tuple[str, Target]] = field(default_factory=list)  # (what of FILE, its comparison)
    not_finite: tuple[str, list[str]] | None = None

    @property
    def passed(self) -> bool:
        return self.not_finite is None and verdict([t for _, t in self.rows]) == "ok"

    def to_dict(self) -> dict:
        found = {"check": "against", "file": self.file, "kind": self.kind, "of": self.of, "wrt": self.wrt,
                 "passed": self.passed, "rtol": RTOL, "atol": ATOL, "dtype": "float64",
                 "targets": [{**t.to_dict(), "target": label} for label, t in self.rows]}
        if self.not_finite is not None:
            found.update(forward_finite=False, not_finite=self.not_finite[1])
        return found

    def lines(self) -> list[str]:
        if self.not_finite is not None:
            return not_finite_lines(self.not_finite[0], self.not_finite[1], f"value of {self.file}")
        rows = [(label, replace(t, name=label)) for label, t in self.rows]
        differences = "its gradient" if self.kind in ("hvp", "hessian") else "its outputs"
        out = target_lines(f"{self.file}", rows)
        out += verdict_lines([t for _, t in rows], "", f"ok: {self.file} ({self.kind} of {', '.join(self.of)} along "
                             f"{', '.join(self.wrt)}) matches finite differences of {differences} (float64)",
                             "the derivative jumps")
        return out


def written_as(written: Graph, file: str, model: Graph | None = None) -> tuple[str, list[str], list[str]]:
    """(kind, of, wrt) from FILE's meta; refused when it says none. A kind the model's meta
    says too, alike, is the model's own (a jvp of an hvp file keeps hvp_of): not FILE's."""
    meta, inherited = written.meta or {}, (model.meta or {}) if model is not None else {}
    kinds = [kind for kind in KINDS if f"{kind}_of" in meta and f"{kind}_wrt" in meta
             and any(meta[key] != inherited.get(key) for key in (f"{kind}_of", f"{kind}_wrt"))]
    if len(kinds) > 1:
        raise EvaluationError(f"{file}: its meta says it is {' and '.join(kinds)} at once "
                              f"({', '.join(kind + '_of' for kind in kinds)}): not a file one uopgrad command wrote")
    if not kinds:
        hint = (": a gradient file (diff): check its model with `uopgrad check MODEL --wrt ...`"
                if "gradient_of" in meta else "")
        raise EvaluationError(f"{file}: its meta names none of jvp_of, hvp_of, jacobian_of, hessian_of (with their "
                              f"_wrt): not a file uopgrad jvp, hvp, jacobian or hessian wrote{hint}")
    kind = kinds[0]
    return kind, _split(meta[f"{kind}_of"]), _split(meta[f"{kind}_wrt"])


def check_file(model: Graph, written: Graph, inputs: Mapping | None = None, seed: int = 0,
               file: str = "FILE") -> FileReport:
    """FILE (`written`) against finite differences of `model` at `inputs` (the rest seeded
    random), as the module says."""
    import numpy as np
    from ..backends.inputs import checked_inputs
    from ..backends.numpy import evaluate_graph
    kind, of, wrt = written_as(written, file, model)
    expected_outputs, extra = _expected(model, written, kind, of, wrt, file)
    _match(model, written, extra, expected_outputs, file)
    given = checked_inputs(written, inputs or {}, float_points=True)
    values = point(model, written, given, seed)
    tangent = tangent_names(model, wrt)
    for name in wrt:  # a matrix file has no tangent inputs: its direction is drawn as they are
        if tangent[name] not in values:
            values[tangent[name]] = _direction(model.input(name), tangent[name], seed)
    report = FileReport(file, kind, of, wrt)
    loss = of if kind in ("jvp", "jacobian") else of[:1]
    report.not_finite = forward_not_finite(model, loss, values)
    if report.not_finite is not None:
        return report
    found = evaluate_graph(to_float64(written), {n.arg: values[n.arg] for n in written.inputs}, simplify=None)
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
        size = int(np.prod(values[name].shape, dtype=np.int64))
        picks = range(size) if size <= COLUMNS else sorted(rng.choice(size, COLUMNS, replace=False).tolist())
        for flat in picks:
            index = np.unravel_index(flat, values[name].shape)
            at = {**values, **{tangent[x]: np.zeros_like(values[tangent[x]]) for x in wrt}}
            basis = np.zeros(values[name].shape)
            basis[index] = 1.0
            at[tangent[name]] = basis
            columns = {key: np.asarray(found[row[i]])[(Ellipsis, *index)] for key, row in zip(keys, rows)}
            at_index = f"[..., {','.join(map(str, index))}]" if index else ""  # a scalar input's one column: all of it
            shown = [row[i] + at_index for row in rows]
            found_rows += list(zip(shown, compare(columns, at)))
    return found_rows



def _split(text: str) -> list[str]:
    return [name for name in text.split(",") if name]


def _expected(model: Graph, written: Graph, kind: str, of: list[str], wrt: list[str],
              file: str) -> tuple[list[str], list[UOp]]:
    """(the outputs `kind` writes, in order, the values kept for a jvp --keep-forward not
    among them; the inputs it adds after the model's) for this model, or refused."""
    for name in of:
        if name not in model.outputs:
            raise EvaluationError(f"{file}: its meta says it is the {kind} of {name!r}, and the model has no such "
                                  f"output (its outputs: {', '.join(model.outputs)})")
    for name in wrt:
        if name not in model.input_names:
            raise EvaluationError(f"{file}: its meta says it is along {name!r}, and the model has no such input "
                                  f"(its inputs: {', '.join(model.input_names)})")
    tangent = tangent_names(model, wrt)
    tangents = [UOp.param(tangent[name], model.input(name).shape, model.input(name).dtype) for name in wrt]
    taken: set[str] = set()
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


def _kind_of(i: int, model: Graph) -> str:
    return f"input {i + 1}" if i < len(model.inputs) else f"direction {i + 1 - len(model.inputs)}"


def _typed(node: UOp) -> str:
    return f"{node.arg} {node.dtype.name}[{','.join(map(str, node.shape or ()))}]"


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
    still = standing_still(list(analytic), [values[tangent[name]] for name in wrt])
    if still is not None:
        return still
    sites = KinkSites(model, [model.outputs[o] for o in of], wrt, move)
    return against_differences(Along(at), analytic, {o: o for o in of}, h, sites)
