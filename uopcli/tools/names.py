"""The names differentiation gives what it adds to a graph, and what it does when a name is
taken: the rule `diff`, `jvp`, `hvp`, `jacobian` and `hessian` (and `check`) share.

A new input or output is `<kind>_<name>`: inputs `tangent_<input>` (jvp, hvp) and
`cotangent_<output>` (--cotangent input); outputs `grad_<input>`, `jvp_<output>`,
`hvp_<input>`, `jacobian_<output>_<input>`, `hessian_<a>_<b>`. When that name is taken (an
input of the graph for an input; for an output, a forward output kept with keep_forward, or
a block made before it in the same result), the new one is `<kind><k>_<name>` for the
lowest k >= 2 free: a jvp of a jvp file along x adds `tangent2_x` (x's second tangent), of
that file `tangent3_x`. The number goes after the kind, not after the name: `tangent_w_2`
would read as the first tangent of an input `w_2`; `tangent2_w` reads one way only.
Names are given in order (`wrt`, `of`, then row-major blocks), so the same graph and
arguments always give the same names.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from ..core.uop import numbered_name
from ..errors import GradientError

KINDS = ("tangent", "cotangent", "grad", "jvp", "hvp", "jacobian", "hessian")
_NUMBERED = re.compile(r"^(" + "|".join(KINDS) + r")([2-9]|[1-9][0-9]+)_(.+)$")
_DIRECTION = re.compile(r"^(tangent|cotangent)([2-9]|[1-9][0-9]+)?_.")


def name_list(names: str | Iterable[str], what: str) -> list[str]:
    """`names` (the `wrt` or `of` of a differentiation) as a list of names: one str is one
    name (list("xy") would be "x" and "y"); a node instead of a name is refused."""
    if isinstance(names, str):
        return [names]
    names = list(names)
    for name in names:
        if not isinstance(name, str):
            hint = f": name it {name.arg!r}" if isinstance(getattr(name, "arg", None), str) else ""
            raise GradientError(f"{what} takes names (str), got a {type(name).__name__}{hint}")
    return names


def wrt_words(name: str) -> tuple[str, str]:
    """How to ask for the gradient with respect to input `name`: in Python's words and in
    the command line's (a message's `cli`, errors.UOpError)."""
    return f"wrt=[{name!r}]", f"--wrt {name}"


def wrt_and_of(wrt, of) -> tuple[list[str], list[str] | None]:
    """A differentiation's `wrt` and `of` as name lists (name_list); `of` None stays None
    (every float output)."""
    return name_list(wrt, "wrt"), None if of is None else name_list(of, "of")


def fresh(kind: str, name: str, taken: set[str]) -> str:
    """`<kind>_<name>` when not in `taken`, else `<kind><k>_<name>` for the lowest k >= 2
    that is not; added to `taken`, so names given one after another never meet."""
    return numbered_name(f"{kind}_", name, taken)


def tangent_names(graph, wrt: Sequence[str]) -> dict[str, str]:
    """{input: the name of its new tangent input}, as `jvp` and `hvp` name them."""
    taken = set(graph.input_names)
    return {name: fresh("tangent", name, taken) for name in wrt}


def cotangent_names(graph, of: Sequence[str]) -> dict[str, str]:
    """{output: the name of its new cotangent input}, as `--cotangent input` names them
    (a scalar output gets none, but its name is reserved the same way)."""
    taken = set(graph.input_names)
    return {name: fresh("cotangent", name, taken) for name in of}


def is_direction(name: str) -> bool:
    """True for the inputs differentiation adds: tangent_<x>, cotangent_<y>, and their
    numbered forms tangent2_<x>, cotangent3_<y>, ..."""
    return _DIRECTION.match(name) is not None


def numbered(names: Iterable[str]) -> list[tuple[str, str]]:
    """(the plain name, the numbered one) for each numbered name among `names` (the new
    names of a result): what a command tells the user it renamed."""
    found = []
    for name in names:
        m = _NUMBERED.match(name)
        if m:
            found.append((f"{m.group(1)}_{m.group(3)}", name))
    return found


def renamed_note(new_inputs: Sequence[str], new_outputs: Sequence[str]) -> str | None:
    """One line naming what was numbered among a result's new inputs and outputs, or None:
    `names already taken, so numbered: tangent_x -> tangent2_x (input), ...`."""
    pairs = [f"{plain} -> {new} (input)" for plain, new in numbered(new_inputs)]
    pairs += [f"{plain} -> {new} (output)" for plain, new in numbered(new_outputs)]
    if not pairs:
        return None
    return f"names already taken, so numbered: {briefly(pairs)}"


def briefly(items: Sequence[str], most: int = 4) -> str:
    """`items` for one line of a note: the first `most`, then how many in all."""
    return ", ".join(items[:most]) + (f", ... ({len(items)} in all)" if len(items) > most else "")
