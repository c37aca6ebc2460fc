"""ONNX's signal ops as UOp graphs: DFT (17, 20), STFT (17) and MelWeightMatrix (17).

A DFT of length n is linear in its input: products with tables of cosines and sines (the
twiddles, computed in float64 from the exact angle index j·k mod n, exact at the quarter
turns, and rounded once to the input's type), so it is matrix products the evaluator runs as
BLAS calls, and its gradient is the same tables transposed. That is n² work per signal where
an FFT does n log n: for the lengths of audio frames and of token mixing (FNet) a product of
that size is what the model costs anyway.

ONNX writes a complex value as a last axis of 2 (real, imaginary); a real input has a last
axis of 1. With a and b the real and imaginary parts, C = cos(2π jk/n), S = sin(2π jk/n):

  forward  y_k = Σ_j x_j e^(-2πi jk/n):    re = a·C + b·S,      im = b·C - a·S
  inverse  x_j = Σ_k y_k e^(+2πi jk/n) / n: re = (a·C - b·S)/n,  im = (b·C + a·S)/n
  RFFT     (onesided forward, real input): the first n//2 + 1 bins
  IRFFT    (onesided inverse, complex input): the first n//2 + 1 bins of a Hermitian
           spectrum to n reals, the other bins their conjugates: re = Σ_k w_k (a_k·C - b_k·S)/n,
           w = 1 at k = 0 and n/2, else 2 (the imaginary parts there unused, as numpy's irfft)

`dft_length` zero-pads the signal or cuts it (https://onnx.ai/onnx/operators/onnx__DFT.html);
onnx.reference's op_dft.py, built on numpy.fft, gives the conformance cases' values.
"""

from __future__ import annotations

import math

import numpy as np

from uopcli import UOp, dtypes

from .ops_tensor import FOLD_LIMIT, dtype_from_code, ints_of

# cos and sin at the quarter turns (4·jk ≡ 0 mod n), exactly: sin(π) is 1.2e-16 in float64
_QUARTER_COS, _QUARTER_SIN = np.array([1.0, 0.0, -1.0, 0.0]), np.array([0.0, 1.0, 0.0, -1.0])


def _twiddles(rows: int, columns: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2π jk/n for j < rows, k < columns, in float64."""
    turns = np.outer(np.arange(rows), np.arange(columns)) % n  # jk mod n: the angle stays below 2π
    angle = (2 * math.pi / n) * turns
    cos, sin = np.cos(angle), np.sin(angle)
    quarter = (4 * turns) % n == 0
    index = (4 * turns[quarter]) // n
    cos[quarter], sin[quarter] = _QUARTER_COS[index], _QUARTER_SIN[index]
    return cos, sin


def _twiddle_nodes(rows: int, columns: int, n: int) -> tuple[UOp, UOp]:
    """_twiddles as nodes computed when the graph runs, for a table of more than FOLD_LIMIT
    elements (a 200-byte model's DFT of 40,000 points was a 38 GB table when importing):
    the same jk mod n, angle and exact quarter turns; sin is np.sin of the same angle, cos
    is sin(π/2 - 2π jk/n) with its angle from the exact integer n - 4·(jk mod n), within
    an ulp of the angle as np.cos's."""
    j = UOp.arange(rows, dtype=dtypes.int64).reshape(rows, 1)
    k = UOp.arange(columns, dtype=dtypes.int64).reshape(1, columns)
    turns = (j * k).cmod(n)  # jk mod n, both >= 0: C's remainder is the floored one
    sin = (turns.cast(dtypes.float64) * (2 * math.pi / n)).sin()
    cos = ((turns * -4 + n).cast(dtypes.float64) * (math.pi / (2 * n))).sin()
    four = turns * 4
    quarter, index = four.cmod(n).eq(0), four.cdiv(n)  # the quarter turns: 0, 1, 2, 3
    one, zero = sin.const_like(1.0), sin.const_like(0.0)
    exact_cos = index.eq(0).where(one, index.eq(2).where(-one, zero))
    exact_sin = index.eq(1).where(one, index.eq(3).where(-one, zero))
    return quarter.where(exact_cos, cos), quarter.where(exact_sin, sin)


def _product(x: UOp | None, table) -> UOp | None:
    """x [..., rows] times a constant table [rows, columns] (an array, or nodes computed
    when the graph runs), in x's type (None: zero)."""
    if x is None:
        return None
    if isinstance(table, UOp):
        return x @ table.cast(x.dtype)
    return x @ UOp.buffer(table.astype(x.dtype.np))


def _plus(a: UOp | None, b: UOp | None) -> UOp | None:
    return b if a is None else a if b is None else a + b


def transform(a: UOp, b: UOp | None, n: int, inverse: bool, onesided: bool) -> tuple[UOp, UOp | None]:
    """The DFT of length n along the last axis of a + ib (b None: a real signal): the real
    and imaginary parts (the imaginary None for IRFFT, whose result is real). The signal is
    cut to the rows the transform reads, and rows past its end are zeros (no row at all).
    float32 and float16 are transformed in float64 and rounded once, as numpy.fft (and so
    onnx.reference) computes them: a float32 product would leave a cancelling sum's rounding
    (the zero imaginary parts of a Hermitian spectrum's inverse are 0.0 there, 1.9e-7 in
    float64 of the same float32 input: the conformance cases' atol is 1e-7)."""
    dtype = a.dtype
    if dtype is not dtypes.float64:
        real, imaginary = transform(a.cast(dtypes.float64), None if b is None else b.cast(dtypes.float64),
                                    n, inverse, onesided)
        return real.cast(dtype), (None if imaginary is None else imaginary.cast(dtype))
    length = a.shape[-1]
    rows = min(length, n // 2 + 1 if inverse and onesided else n)
    if rows < length:
        cut = tuple((0, size) for size in a.shape[:-1]) + ((0, rows),)
        a, b = a.shrink(cut), (None if b is None else b.shrink(cut))
    columns = n // 2 + 1 if onesided and not inverse else n
    lazy = rows * columns > FOLD_LIMIT  # the tables made when the graph runs
    cos, sin = _twiddle_nodes(rows, columns, n) if lazy else _twiddles(rows, columns, n)
    if not inverse:
        return _plus(_product(a, cos), _product(b, sin)), _plus(_product(a, -sin), _product(b, cos))
    if not onesided:
        cos, sin = cos / n, sin / n
        return _plus(_product(a, cos), _product(b, -sin)), _plus(_product(a, sin), _product(b, cos))
    if lazy:  # 1 at bins 0 and n/2, else 2
        j = UOp.arange(rows, dtype=dtypes.int64).reshape(rows, 1)
        ends = j.eq(0) | j.eq(n // 2) if n % 2 == 0 else j.eq(0)
        weight = ends.where(UOp.const(1.0, dtypes.float64), UOp.const(2.0, dtypes.float64))
    else:
        weight = np.full((rows, 1), 2.0)
        weight[0] = 1.0
        if n % 2 == 0 and rows > n // 2:
            weight[n // 2] = 1.0
    return _plus(_product(a, weight * cos / n), _product(b, -weight * sin / n)), None


def _parts(x: UOp, order: list[int]) -> tuple[UOp, UOp | None]:
    """The real and imaginary parts of ONNX's complex x (last axis 1 or 2), the axes put in
    `order` (the transformed axis last)."""
    rank = len(x.shape)
    real = x.shrink(tuple((0, s) for s in x.shape[:-1]) + ((0, 1),)).reshape(x.shape[:-1])
    imaginary = None
    if x.shape[-1] == 2:
        imaginary = x.shrink(tuple((0, s) for s in x.shape[:-1]) + ((1, 2),)).reshape(x.shape[:-1])
    if order != list(range(rank - 1)):
        real = real.permute(*order)
        imaginary = None if imaginary is None else imaginary.permute(*order)
    return real, imaginary


def _complex(real: UOp, imaginary: UOp | None, order: list[int]) -> UOp:
    """Parts in `order` back in the input's axis order, as ONNX's complex (or real) tensor."""
    back = [order.index(axis) for axis in range(len(order))]
    if back != list(range(len(order))):
        real = real.permute(*back)
        imaginary = None if imaginary is None else imaginary.permute(*back)
    if imaginary is None:
        return real.unsqueeze(-1)
    return real.stack(imaginary, dim=-1)


def _scalar(ctx, i: int, what: str) -> int | None:
    values = ints_of(ctx, i, what)
    if values is None:
        return None
    if len(values) != 1:
        ctx.refuse(f"{what} must be a scalar, got {len(values)} values")
    return values[0]


def dft(ctx):
    """DFT-17 (axis an attribute, default 1) and DFT-20 (axis an input, default -2)."""
    x = ctx.x(0)
    rank = len(x.shape)
    if not x.dtype.is_float or rank < 2 or x.shape[-1] not in (1, 2):
        ctx.refuse(f"input {x.dtype.name}{list(x.shape)} must be floats [..., signal, 1 or 2] (real or complex)")
    axis = ctx.attr("axis", 1) if ctx.since < 20 else _scalar(ctx, 2, "axis")
    axis = -2 if axis is None else axis
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        ctx.refuse(f"axis {axis} is not a signal axis of rank {rank}: [{-rank}, -2] or [0, {rank - 2}]")
    axis %= rank
    inverse, onesided = bool(ctx.attr("inverse")), bool(ctx.attr("onesided"))
    complex_input = x.shape[-1] == 2
    if onesided and complex_input != inverse:
        ctx.refuse("onesided=1 takes a real input forward (RFFT) and a complex one inverse (IRFFT)")
    n = _scalar(ctx, 1, "dft_length")
    if n is None:
        n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if n < 1:
        ctx.refuse(f"dft_length {n} must be at least 1")
    order = [a for a in range(rank - 1) if a != axis] + [axis]
    real, imaginary = transform(*_parts(x, order), n, inverse, onesided)
    return _complex(real, imaginary, order)


def stft(ctx):
    """STFT-17: frames of frame_length every frame_step along the signal, each times the
    window (a value of the graph, differentiable like the signal), then their DFTs."""
    signal, window = ctx.x(0), ctx.x(2)
    if not signal.dtype.is_float or len(signal.shape) != 3 or signal.shape[-1] not in (1, 2):
        ctx.refuse(f"signal {signal.dtype.name}{list(signal.shape)} must be floats [batch, length, 1 or 2]")
    step, length = _scalar(ctx, 1, "frame_step"), _scalar(ctx, 3, "frame_length")
    if window is not None and (len(window.shape) != 1 or window.dtype is not signal.dtype):
        ctx.refuse(f"window {window.dtype.name}{list(window.shape)} must be one axis of the signal's type")
    if length is None:
        length = window.shape[0] if window is not None else signal.shape[1]
    elif window is not None and window.shape[0] != length:
        ctx.refuse(f"window of {window.shape[0]} does not fit frame_length {length}")
    onesided = bool(ctx.attr("onesided"))
    if onesided and signal.shape[-1] == 2:
        ctx.refuse("onesided=1 takes a real signal (a complex one has no onesided spectrum)")
    if step is None or step < 1 or not 1 <= length <= signal.shape[1]:
        ctx.refuse(f"frame_step {step} must be at least 1 and frame_length {length} in [1, {signal.shape[1]}] "
                   f"(the signal's length)")
    frames = signal.unfold(1, length, step).permute(0, 1, 3, 2)  # [batch, frames, length, 1 or 2]
    if window is not None:
        frames = frames * window.reshape(1, 1, length, 1)
    order = [0, 1, 2]
    real, imaginary = transform(*_parts(frames, order), length, False, onesided)
    return _complex(real, imaginary, order)


def mel_weight_matrix(ctx):
    """MelWeightMatrix-17: the [dft_length // 2 + 1, num_mel_bins] matrix of triangular
    filters, peaks 1, their edges num_mel_bins + 2 points spread evenly on the mel scale,
    mel(f) = 2595 log10(1 + f/700), from lower_edge_hertz to upper_edge_hertz, each point at
    the spectrogram bin floor((dft_length + 1)·f / sample_rate) (onnx.reference's
    op_mel_weight_matrix.py; the spec leaves the binning to it). A constant: every input
    must be known when importing."""
    bins, dft_length, rate = (_scalar(ctx, i, what) for i, what in enumerate(("num_mel_bins", "dft_length",
                                                                              "sample_rate")))
    low, high = (float(np.asarray(ctx.static(i, what)).reshape(-1)[0]) for i, what in
                 ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")))
    dtype = dtype_from_code(ctx, ctx.attr("output_datatype"), "output_datatype")
    if bins < 1 or dft_length < 1 or rate < 1 or not 0 <= low < high:
        ctx.refuse(f"num_mel_bins {bins}, dft_length {dft_length}, sample_rate {rate} must be at least 1 and "
                   f"0 <= lower_edge_hertz {low} < upper_edge_hertz {high}")
    if bins + 2 > FOLD_LIMIT:  # the filters' edges are computed when importing
        ctx.refuse(f"num_mel_bins {bins} makes {bins + 2} filter edges when importing, more than {FOLD_LIMIT}")
    mel_low, mel_high = (2595 * math.log1p(f / 700) / math.log(10) for f in (low, high))
    points = np.arange(bins + 2) * ((mel_high - mel_low) / (bins + 2)) + mel_low
    hertz = 700 * np.expm1(points / 2595 * math.log(10))
    edges = (((dft_length + 1) * hertz) // rate).astype(np.int64)
    spectrum = dft_length // 2 + 1
    if edges.max() >= spectrum:
        ctx.refuse(f"upper_edge_hertz {high} is above the spectrum's top bin ({spectrum} bins of "
                   f"sample_rate {rate} / dft_length {dft_length})")
    if spectrum * bins > FOLD_LIMIT:  # made when the graph runs (a 300-byte model's was 40 GB when importing)
        return _mel_nodes(edges, spectrum, bins).cast(dtype)
    out = np.zeros((spectrum, bins))
    for i in range(bins):
        left, centre, right = edges[i], edges[i + 1], edges[i + 2]
        if centre == left:
            out[centre, i] = 1.0
        else:
            out[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            out[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    return out.astype(dtype.np)


def _mel_nodes(edges: np.ndarray, spectrum: int, bins: int) -> UOp:
    """mel_weight_matrix's loop as nodes computed when the graph runs, in float64: at bin k
    of filter i (edges left, centre, right), (k - left)/(centre - left) rising to 1 at the
    centre, then (right - k)/(right - centre), 0 elsewhere; the same integer differences
    divided in float64 as numpy's, so the same values bit for bit."""
    def row(part):
        return UOp.buffer(np.ascontiguousarray(part)).reshape(1, bins)
    left, centre, right = row(edges[:-2]), row(edges[1:-1]), row(edges[2:])
    k = UOp.arange(spectrum, dtype=dtypes.int64).reshape(spectrum, 1)
    rising = (k - left).cast(dtypes.float64) / (centre - left).maximum(1).cast(dtypes.float64)
    falling = (right - k).cast(dtypes.float64) / (right - centre).maximum(1).cast(dtypes.float64)
    zero, one = UOp.const(0.0, dtypes.float64), UOp.const(1.0, dtypes.float64)
    out = ((k < right) & (k > centre)).where(falling, zero)
    out = ((k < centre) & (k >= left)).where(rising, out)
    return k.eq(centre).where(one, out)
