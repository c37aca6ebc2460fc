"""The compiler: an explicit-stack walk from the outputs gives every value a register and
emits one Step per computing node (calls inlined per call site), then the passes of
`PASSES` rewrite the program, in that order (each pass's docstring says what it needs
from the ones before it).

Nothing here reads an input's values: the program depends on the graph and on which nodes
are supplied (a node given by itself is not evaluated), and each input register records
the name or node it takes (Program.inputs); compiled.bind fills them, call by call."""

from __future__ import annotations

from typing import Iterable, Sequence


from ...errors import EvaluationError
from ...core.ops import Ops
from ...core.uop import UOp
from ..inputs import describe
from .passes.broadcast import shrink_broadcast_steps
from .passes.contractions import fuse_contractions
from .passes.frees import plan_frees
from .passes.in_place import plan_in_place
from .passes.scatter_layout import lay_out_for_scatters
from .passes.strided_views import fuse_strided
from .passes.view_order import order_view_readers
from .program import Program, Step, memory_kind
from .table import IMPL, SAME_AS_SOURCE_0, SAME_AS_SOURCE_1

# The passes, in the order they must run (each one's docstring says why it comes where it does).
PASSES = (fuse_contractions, fuse_strided, lay_out_for_scatters, plan_frees, plan_in_place, order_view_readers,
          shrink_broadcast_steps)

# What the walk does per op: emit a step, reuse a source's register, or call plumbing.
_STEP, _RENAME0, _RENAME1, _PARAM, _GETTUPLE, _CALL, _VOID = range(7)


def _walk_kind(op: str, impl) -> int:
    if impl is SAME_AS_SOURCE_0:
        return _RENAME0
    if impl is SAME_AS_SOURCE_1:
        return _RENAME1
    return {Ops.PARAM: _PARAM, Ops.GETTUPLE: _GETTUPLE, Ops.FUNCTION: _CALL, Ops.CALL: _CALL,
            Ops.TUPLE: _VOID, Ops.NOOP: _VOID}.get(op, _STEP)


_OP_INFO = {op: (_walk_kind(op, impl), impl, memory_kind(op)) for op, impl in IMPL.items()}


_VISITED = object()  # stack marker: the node below it has all its sources done


class _Compiler:
    """Walks the graph from the outputs (explicit stack, post-order) and emits the program.

    A value is keyed by its node at the top level and by (context, node) inside a call
    body: context ids are given per call site, so one body called twice runs twice, with
    its own slot bindings, and one call node read by several GETTUPLEs runs once."""

    def __init__(self, supplied_nodes: Iterable[UOp]):
        self.by_node: frozenset[UOp] = frozenset(supplied_nodes)  # supplied by the caller: not evaluated
        self.program = Program()
        self.register: dict = {}         # key -> register
        self.call_context: dict = {}     # key of a call node -> its body's context id
        self.context_args: dict = {}     # context id -> registers of the call's args

    def context_of(self, call_key) -> int:
        context = self.call_context.get(call_key)
        if context is None:
            context = self.call_context[call_key] = len(self.call_context) + 1
        return context

    def walk(self, roots: Sequence[UOp]) -> None:
        """The top level: an explicit stack of bare nodes (no tuple per visit: this loop
        is most of the cost of evaluating a long chain). A node is pushed, then _VISITED
        on top of it, then its sources; popping _VISITED means its sources are done."""
        register, by_node, info, program = self.register, self.by_node, _OP_INFO, self.program
        steps, count = program.steps, program.register_count
        stack = list(reversed(roots))
        push, pop = stack.append, stack.pop
        while stack:
            node = pop()
            if node is _VISITED:
                node = pop()
                how, impl, memory = info[node.op]
                if how == _STEP:
                    register[node] = count
                    steps.append(Step(impl, node, tuple(map(register.__getitem__, node.src)), count, memory))
                    count += 1
                elif how == _RENAME0:
                    register[node] = register[node.src[0]]
                elif how == _RENAME1:
                    register[node] = register[node.src[1]]
                elif how == _PARAM:
                    register[node] = count
                    program.inputs.append((count, self.input_name(node), node))
                    count += 1
                elif how == _CALL:
                    self.context_args[self.context_of(node)] = tuple(map(register.__getitem__, node.src[1:]))
                    register[node] = -1
                else:  # _GETTUPLE: its call's args are done; compile the body output it reads
                    call = node.src[0]
                    program.register_count = count
                    register[node] = self.walk_body(call.src[0].src[node.arg], self.call_context[call])
                    count = program.register_count
                continue
            if node in register:
                continue
            if by_node and node in by_node:
                if node.shape is None:
                    raise EvaluationError(f"input {node!r}: a {node.op} node has no value to supply")
                register[node] = count
                program.inputs.append((count, node, node))
                count += 1
                continue
            how = info[node.op][0]
            push(node)
            push(_VISITED)
            if how == _STEP:
                sources = node.src
            elif how == _RENAME0 or how == _GETTUPLE:
                sources = node.src[:1]
            elif how == _RENAME1:
                sources = node.src[1:2]
            elif how == _CALL:
                sources = node.src[1:]
            elif how == _VOID:
                raise EvaluationError(f"{node.op} cannot be used as a value: {node!r}")
            else:
                continue
            for s in reversed(sources):
                if s not in register:
                    push(s)
        program.register_count = count

    def walk_body(self, root: UOp, root_context: int) -> int:
        """A node inside a call body (context >= 1), and what it needs, possibly in nested
        calls: the same walk over (node, context) pairs. Returns the root's register."""
        register, info, program = self.register, _OP_INFO, self.program
        steps, count = program.steps, program.register_count
        stack = [(root, root_context, False)]
        push, pop = stack.append, stack.pop
        while stack:
            node, context, ready = pop()
            key = (context, node)
            if key in register:
                continue
            how, impl, memory = info[node.op]
            if not ready:  # first visit: sources first
                push((node, context, True))
                if how == _STEP:
                    for s in reversed(node.src):
                        push((s, context, False))
                elif how == _RENAME0:
                    push((node.src[0], context, False))
                elif how == _RENAME1:
                    push((node.src[1], context, False))
                elif how == _GETTUPLE:
                    call = node.src[0]
                    push((call.src[0].src[node.arg], self.context_of((context, call)), False))
                    push((call, context, False))  # the call's args first: the body's slots read them
                elif how == _CALL:
                    for s in reversed(node.src[1:]):
                        push((s, context, False))
                elif how == _VOID:
                    raise EvaluationError(f"{node.op} cannot be used as a value: {node!r}")
                continue
            if how == _STEP:  # second visit: sources have registers
                register[key] = count
                steps.append(Step(impl, node, tuple([register[(context, s)] for s in node.src]), count, memory))
                count += 1
            elif how == _RENAME0:
                register[key] = register[(context, node.src[0])]
            elif how == _RENAME1:
                register[key] = register[(context, node.src[1])]
            elif how == _PARAM:
                if not isinstance(node.arg, int):
                    raise EvaluationError(f"a function body reads graph input {node.arg!r}: bodies must be closed")
                register[key] = self.context_args[context][node.arg]
            elif how == _GETTUPLE:
                call = node.src[0]
                register[key] = register[(self.call_context[(context, call)], call.src[0].src[node.arg])]
            else:  # _CALL: its args have registers now; its body runs when a GETTUPLE asks
                self.context_args[self.context_of(key)] = tuple(register[(context, s)] for s in node.src[1:])
                register[key] = -1
        program.register_count = count
        return register[(root_context, root)]

    @staticmethod
    def input_name(node: UOp) -> str:
        name = node.arg
        if not isinstance(name, str):
            raise EvaluationError(f"slot PARAM {name} {describe(node)} is outside any function body: "
                                  "bind it by passing the node itself as an input key")
        return name


def _output_roots(output: UOp) -> tuple[list[UOp], object]:
    """The value nodes an output needs, and how to assemble it from them: a node, None
    (NOOP), or a tuple of those (TUPLE, FUNCTION, CALL outputs)."""
    if not isinstance(output, UOp):
        raise EvaluationError(f"outputs must be UOps, got {type(output).__name__}")
    if output.op == Ops.TUPLE:
        layout = tuple(None if e.op == Ops.NOOP else e for e in output.src)
    elif output.op in (Ops.FUNCTION, Ops.CALL):
        layout = tuple(output.gettuple(i) for i in range(len(output.src[0].src)))
    elif output.op == Ops.STORE:
        return [output.src[1]], output.src[1]
    elif output.op == Ops.NOOP:
        return [], None
    else:
        return [output], output
    return [e for e in layout if e is not None], layout


def compile_program(outputs: Sequence[UOp], supplied_nodes: Iterable[UOp] = ()) -> Program:
    """The program computing `outputs` (see evaluate), after every pass: graph inputs are
    read by name, and each node of `supplied_nodes` is an input too (its sources are not
    evaluated). Binding the arrays is compiled.bind's, per call."""
    compiler = _Compiler(supplied_nodes)
    layouts, roots = [], []
    for output in outputs:
        needed, layout = _output_roots(output)
        roots.extend(needed)
        layouts.append(layout)
    compiler.walk(roots)
    register, program = compiler.register, compiler.program
    for layout in layouts:
        if isinstance(layout, tuple):
            program.outputs.append(tuple(None if e is None else register[e] for e in layout))
        else:
            program.outputs.append(None if layout is None else register[layout])
    for run_pass in PASSES:
        run_pass(program)
    return program
