"""ONNX's recurrent layers, RNN, GRU and LSTM, unrolled over their (known) sequence length.

They share the spec's frame (https://onnx.ai/onnx/operators/onnx__RNN.html and GRU, LSTM):
X [seq, batch, in] (layout 1: [batch, seq, in]), W [dirs, gates·H, in], R [dirs, gates·H, H],
B [dirs, 2·gates·H] (Wb then Rb), sequence_lens (only full lengths here), initial_h
[dirs, batch, H]; directions forward, reverse or bidirectional (dirs = 2, the second one
reversed); outputs Y [seq, dirs, batch, H] (layout 1: [batch, seq, dirs, H]) and Y_h
[dirs, batch, H] (layout 1: [batch, dirs, H]), for LSTM also Y_c. `activations` names the
functions per direction (f, g, h) with their alpha and beta; `clip` bounds every
activation's input to [-clip, clip] except LSTM's cell going into h, as onnxruntime's.
Same contract as ops_tensor.py.
"""

from __future__ import annotations

from uopcli import UOp, dtypes

from .float64 import sigmoid64, softplus64, softsign64
from .ops_activation import elu_of
from .ops_tensor import ints_of, tanh

_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}


def _scaled_tanh(ctx, x, alpha, beta): return ctx.call(tanh, x * beta) * alpha    # noqa: E704
def _hard_sigmoid(ctx, x, alpha, beta): return (x * alpha + beta).maximum(0).minimum(1)  # noqa: E704
def _thresholded_relu(ctx, x, alpha, beta): return (x > alpha).where(x, 0.0)  # noqa: E704


def _float64_or_builder(form64, builder_form):
    """An activation computed by float64.py's form for float64 (the builder's eˣ is
    float32-grade there, and softsign's slope cancels), by the builder's otherwise."""
    return lambda ctx, x, a, b: form64(x, a) if x.dtype is dtypes.float64 else builder_form(x, a)


# name (lower case, as onnxruntime reads them) -> (function(ctx, x, alpha, beta), default alpha, default beta);
# a None default means the function takes no alpha (or beta): the lists' values go to those that do
ACTIVATIONS = {
    "relu": (lambda ctx, x, a, b: (x > 0).where(x, 0.0), None, None),
    "tanh": (lambda ctx, x, a, b: ctx.call(tanh, x), None, None),
    "sigmoid": (_float64_or_builder(lambda x, a: sigmoid64(x), lambda x, a: x.sigmoid()), None, None),
    "affine": (lambda ctx, x, a, b: x * a + b, 1.0, 0.0),            # αx + β
    "leakyrelu": (lambda ctx, x, a, b: x.leaky_relu(a), 0.01, None),  # x, or αx below 0
    "thresholdedrelu": (_thresholded_relu, 1.0, None),                 # x above α, else 0
    "scaledtanh": (_scaled_tanh, 1.0, 1.0),                            # α·tanh(βx)
    "hardsigmoid": (_hard_sigmoid, 0.2, 0.5),                          # αx + β clamped to [0, 1]
    "elu": (_float64_or_builder(elu_of, lambda x, a: x.elu(a)), 1.0, None),                      # x, or α(eˣ - 1) below 0
    "softsign": (_float64_or_builder(lambda x, a: softsign64(x), lambda x, a: x.softsign()), None, None),  # x/(1 + |x|)
    "softplus": (_float64_or_builder(lambda x, a: softplus64(x), lambda x, a: x.softplus()), None, None),  # log(1 + eˣ)
}


class _Frame:
    """What the three layers share: the inputs in [seq, batch, ...] layout, the directions,
    hidden size, activations and clip, and the assembly of the outputs."""

    def __init__(self, ctx, gates: int, defaults: tuple[str, ...]):
        self.ctx = ctx
        x, w, r = ctx.x(0), ctx.x(1), ctx.x(2)
        direction = ctx.attr("direction")
        if direction not in _DIRECTIONS:
            ctx.refuse(f"direction={direction!r} is not forward, reverse or bidirectional")
        self.reversed = _DIRECTIONS[direction]
        self.layout = ctx.attr("layout")
        if self.layout not in (0, 1) or len(x.shape) != 3:
            ctx.refuse(f"layout={self.layout} (0 or 1) with input {list(x.shape)} (rank 3)")
        self.x = x.permute(1, 0, 2) if self.layout else x
        self.hidden = r.shape[-1]
        dirs = len(self.reversed)
        if ctx.attr("hidden_size") not in (None, self.hidden) or w.shape[:2] != (dirs, gates * self.hidden) \
                or r.shape != (dirs, gates * self.hidden, self.hidden) or w.shape[2] != self.x.shape[2]:
            ctx.refuse(f"W {list(w.shape)} and R {list(r.shape)} do not fit hidden_size {ctx.attr('hidden_size')}, "
                       f"{dirs} direction(s) and input {list(x.shape)}")
        self.w, self.r, self.b = w, r, ctx.x(3)
        if ctx.present(4):
            lengths = ints_of(ctx, 4, "sequence_lens")
            if any(n != self.x.shape[0] for n in lengths):
                ctx.refuse(f"sequence_lens {lengths} differ from the sequence length {self.x.shape[0]}: "
                           f"only full sequences")
        self.activations = self._activations(defaults * dirs, len(defaults))
        clip = ctx.attr("clip")
        if clip is not None and not clip > 0:
            ctx.refuse(f"clip={clip} must be > 0")
        self.clip = clip

    def _activations(self, defaults: tuple[str, ...], per_direction: int) -> list[list]:
        ctx = self.ctx
        names = list(ctx.attr("activations") or defaults)
        if len(names) != len(defaults):
            ctx.refuse(f"activations {names}: {len(defaults)} names needed ({per_direction} per direction)")
        alphas, betas = list(ctx.attr("activation_alpha") or ()), list(ctx.attr("activation_beta") or ())
        chosen = []
        for name in names:
            row = ACTIVATIONS.get(name.lower())
            if row is None:
                ctx.refuse(f"activation {name!r} is not one of {', '.join(ACTIVATIONS)}")
            function, alpha, beta = row
            alpha = alphas.pop(0) if alpha is not None and alphas else alpha
            beta = betas.pop(0) if beta is not None and betas else beta
            chosen.append((function, alpha, beta))
        if alphas or betas:
            ctx.refuse(f"activation_alpha/beta have values left over for activations {names}")
        return [chosen[d * per_direction:(d + 1) * per_direction] for d in range(len(defaults) // per_direction)]

    def act(self, direction: int, k: int, x, clip: bool = True):
        """The direction's k-th activation of x (clipped first with clip, unless `clip` is
        False: LSTM's h(C), whose input is the cell, not a gate's)."""
        function, alpha, beta = self.activations[direction][k]
        if clip and self.clip is not None:
            x = x.maximum(-self.clip).minimum(self.clip)
        return function(self.ctx, x, alpha, beta)

    def initial(self, i: int, direction: int):
        """Initial state input i for a direction ([batch, H]), zeros when absent."""
        state = self.ctx.x(i)
        if state is None:
            return UOp.full((self.x.shape[1], self.hidden), 0.0, self.x.dtype)
        state = state.permute(1, 0, 2) if self.layout else state
        return state[direction]

    def projected(self, direction: int, gates: int):
        """Every step's x·Wᵀ + Wb at once ([seq, batch, gates·H]), and Rb (or None)."""
        projected = self.x.matmul(self.w[direction].permute(1, 0))
        if self.b is None:
            return projected, None
        b = self.b[direction]
        return projected + b[:gates * self.hidden], b[gates * self.hidden:]

    def steps(self, direction: int):
        steps = range(self.x.shape[0])
        return reversed(steps) if self.reversed[direction] else steps

    def outputs(self, ys: list, finals: list[list]) -> list:
        """Y and the final states, each direction's [seq, batch, H] and [batch, H] stacked."""
        y = UOp.stack(*ys, dim=1) if len(ys) > 1 else ys[0].unsqueeze(1)   # [seq, dirs, batch, H]
        states = [UOp.stack(*per_direction) for per_direction in finals]    # [dirs, batch, H]
        if self.layout:
            y, states = y.permute(2, 0, 1, 3), [s.permute(1, 0, 2) for s in states]
        return [y, *states][:self.ctx.output_count]


def _gate(t, k: int, hidden: int):
    return t[:, k * hidden:(k + 1) * hidden]


def rnn(ctx):
    """RNN-14/22: h' = f(x·Wᵀ + h·Rᵀ + Wb + Rb), f = Tanh by default."""
    frame = _Frame(ctx, 1, ("Tanh",))
    ys, last = [], []
    for d in range(len(frame.reversed)):
        projected, rb = frame.projected(d, 1)
        h, r_t, out = frame.initial(5, d), frame.r[d].permute(1, 0), [None] * frame.x.shape[0]
        for t in frame.steps(d):
            z = projected[t] + h.matmul(r_t)
            h = frame.act(d, 0, z if rb is None else z + rb)
            out[t] = h
        ys.append(UOp.stack(*out))
        last.append(h)
    return frame.outputs(ys, [last])


def gru(ctx):
    """GRU-14/22, gates z, r, h: z = f(x·Wzᵀ + h·Rzᵀ + Wbz + Rbz), r likewise,
    ĥ = g(x·Whᵀ + (r⊙h)·Rhᵀ + Rbh + Wbh), or with linear_before_reset
    ĥ = g(x·Whᵀ + r⊙(h·Rhᵀ + Rbh) + Wbh); h' = (1 - z)⊙ĥ + z⊙h. f, g = Sigmoid, Tanh."""
    frame = _Frame(ctx, 3, ("Sigmoid", "Tanh"))
    hidden, linear = frame.hidden, ctx.attr("linear_before_reset")
    ys, last = [], []
    for d in range(len(frame.reversed)):
        projected, rb = frame.projected(d, 3)
        r_zr, r_h = frame.r[d][:2 * hidden].permute(1, 0), frame.r[d][2 * hidden:].permute(1, 0)
        h, out = frame.initial(5, d), [None] * frame.x.shape[0]
        for t in frame.steps(d):
            zr = projected[t][:, :2 * hidden] + h.matmul(r_zr)
            zr = zr if rb is None else zr + rb[:2 * hidden]
            z, r = frame.act(d, 0, _gate(zr, 0, hidden)), frame.act(d, 0, _gate(zr, 1, hidden))
            candidate_in = projected[t][:, 2 * hidden:]
            if linear:
                recurrent = h.matmul(r_h) if rb is None else h.matmul(r_h) + rb[2 * hidden:]
                candidate_in = candidate_in + r * recurrent
            else:
                candidate_in = candidate_in + (r * h).matmul(r_h)
                candidate_in = candidate_in if rb is None else candidate_in + rb[2 * hidden:]
            h = (1 - z) * frame.act(d, 1, candidate_in) + z * h
            out[t] = h
        ys.append(UOp.stack(*out))
        last.append(h)
    return frame.outputs(ys, [last])


def lstm(ctx):
    """LSTM-14/22, gates i, o, f, c: i = f(x·Wiᵀ + h·Riᵀ + Pi⊙c + Wbi + Rbi), f likewise with
    Pf (with input_forget, f = 1 - i), ĉ = g(x·Wcᵀ + h·Rcᵀ + Wbc + Rbc), c' = f⊙c + i⊙ĉ,
    o = f(x·Woᵀ + h·Roᵀ + Po⊙c' + Wbo + Rbo), h' = o⊙h(c'). f, g, h = Sigmoid, Tanh, Tanh."""
    frame = _Frame(ctx, 4, ("Sigmoid", "Tanh", "Tanh"))
    hidden, peepholes, coupled = frame.hidden, ctx.x(7), ctx.attr("input_forget")
    ys, last_h, last_c = [], [], []
    for d in range(len(frame.reversed)):
        projected, rb = frame.projected(d, 4)
        if rb is not None:
            projected = projected + rb
        peep = None if peepholes is None else peepholes[d]
        h, c, r_t = frame.initial(5, d), frame.initial(6, d), frame.r[d].permute(1, 0)
        out = [None] * frame.x.shape[0]
        for t in frame.steps(d):
            z = projected[t] + h.matmul(r_t)
            i_in, f_in = _gate(z, 0, hidden), _gate(z, 2, hidden)
            if peep is not None:
                i_in, f_in = i_in + peep[:hidden] * c, f_in + peep[2 * hidden:] * c
            i = frame.act(d, 0, i_in)
            f = 1 - i if coupled else frame.act(d, 0, f_in)
            c = f * c + i * frame.act(d, 1, _gate(z, 3, hidden))
            o_in = _gate(z, 1, hidden) if peep is None else _gate(z, 1, hidden) + peep[hidden:2 * hidden] * c
            # the cell is not clipped on its way into h: onnxruntime clips the gates' inputs
            # only (the spec's "input of activations"; onnx.reference ignores clip)
            h = frame.act(d, 0, o_in) * frame.act(d, 2, c, clip=False)
            out[t] = h
        ys.append(UOp.stack(*out))
        last_h.append(h)
        last_c.append(c)
    return frame.outputs(ys, [last_h, last_c])
