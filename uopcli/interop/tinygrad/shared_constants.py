"""Named tensors that tinygrad 0.14 holds as the program's own constants.

tinygrad hash-conses every node: a 0-d tensor of a number or of a 0-d numpy array is a
CONST, the very node that each equal constant of the program is (the -1 and 1 that abs and
sign make with const_like, the 0 of relu), even after .contiguous().realize(); a tensor
computed from constants alone (Tensor.arange, Tensor.eye, a CONST's expand) is the node of
each equal computation. Once merged, nothing tells the input's uses from the constant's:
an export mapping the node to the input computed |x| at x = -1 as x * x. So such an input
is refused wherever the outputs reach its node. Where they do not reach it, neither the
input nor an equal constant is in the graph: the input is kept, unused, exactly.
A tensor with storage below it (a BUFFER: Tensor.full, ones, zeros, a list or a >=1-d
numpy array) is its own node, never merged with a constant.
"""

from __future__ import annotations

import math

from ._tinygrad import our_dtype


def built_from_constants(tg_ops, node) -> bool:
    """Whether tinygrad `node` reads no storage (no BUFFER below it), so that tinygrad
    shares it with every equal constant or computation of the program."""
    seen, stack = {node}, [node]
    while stack:
        current = stack.pop()
        if current.op is tg_ops.BUFFER:
            return False
        for source in current.src:
            if source not in seen:
                seen.add(source)
                stack.append(source)
    return True


def refusal(tg_ops, name: str, node, also: str | None = None) -> str:
    """The one line refusing input `name` on tinygrad `node` (built from constants), with
    the workaround tinygrad 0.14 keeps apart (storage: a BUFFER of the tensor's own);
    `also`: another input name given for the same node."""
    shared = f"input {also!r} and every" if also else "every"
    if node.op is tg_ops.CONST:
        value, dtype = _literal(node.arg), _dtype_keyword(node.dtype)
        return (f"input {name!r}: tinygrad holds this 0-d tensor as the {_dtype_name(node.dtype)} constant {value}, "
                f"the one node of {shared} equal constant of the program (the -1 and 1 of abs and sign, the 0 of relu), "
                f"so its uses cannot be told from theirs; give it storage: Tensor.full((), {value}{dtype}) "
                f"or Tensor([{value}]{dtype}).reshape(())")
    t = name if name.isidentifier() else "t"
    copy = f"Tensor({t}.numpy())" if node.shape else f"Tensor({t}.numpy().reshape(1)).reshape(())"
    return (f"input {name!r}: tinygrad holds this tensor as a computation on constants alone (as Tensor.arange and "
            f"Tensor.eye make one: no storage below it), the one node of {shared} equal computation of the program, "
            f"so its uses cannot be told from theirs; give it storage (realize() keeps it a computation): {copy}")


def _literal(value) -> str:
    """CONST arg `value` as Python source: tinygrad's float subclass as a float (-0.0 kept),
    nan and the infinities as float('nan'), ..."""
    if isinstance(value, float):
        value = float(value)
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    return repr(value if isinstance(value, bool) else int(value))


def _dtype_name(tg_dtype) -> str:
    ours = our_dtype(tg_dtype)
    return ours.name if ours is not None else str(tg_dtype).removeprefix("dtypes.")


def _dtype_keyword(tg_dtype) -> str:
    """`, dtype=dtypes.X` keeping a concrete dtype; nothing for a weak one (a Python
    number's), which Tensor.full makes tinygrad's default of its kind."""
    ours = our_dtype(tg_dtype)
    return f", dtype=dtypes.{ours.name}" if ours is not None else ""
