"""The Chebyshev coefficients of the ONNX importer's float64 erfc (uopcli/interop/onnx/
ops_tensor.py, _ERFC_CHEBYSHEV), and their error: run it to check or remake the table.

    python tools/erfc_chebyshev.py          # needs mpmath (a dependency of torch)

For z >= 1/2, erfc(z) = t exp(-z^2 + f(t)) with t = 2 / (2 + z) in (0, 4/5]: f is smooth on
that interval (f(0) = -ln(2 sqrt(pi)), the asymptote erfc(z) ~ exp(-z^2) / (z sqrt(pi))),
so a Chebyshev series of it in u = 5t/2 - 1 converges fast. The coefficients are those of
Chebyshev interpolation at N = 26 points, computed with 50 digits (the last ones are below
1e-17), and the errors printed are of the float64
evaluation (Clenshaw's recurrence, as the importer builds it) against mpmath: of erf = 1 -
erfc over z in [1/2, 6] (erf is 1 in float64 from z = 5.93), and of erfc itself over
[1/2, 26] (a normal float64 there), where rounding z^2 before exp costs up to ulp(z^2)
relative (1e-13 near 24; erf never sees it).
"""

from __future__ import annotations

import mpmath as mp

N = 26          # coefficients kept
END = 0.8       # t = 2 / (2 + z) at z = 1/2


def f(t):
    if t == 0:
        return -mp.log(2 * mp.sqrt(mp.pi))
    z = 2 / t - 2
    return mp.log(mp.erfc(z) / t) + z * z


def coefficients(n: int) -> list:
    mp.mp.dps = 50
    nodes = [mp.cos(mp.pi * (k + mp.mpf(1) / 2) / n) for k in range(n)]
    values = [f(END * (u + 1) / 2) for u in nodes]
    c = [2 * mp.fsum(values[k] * mp.cos(mp.pi * j * (k + mp.mpf(1) / 2) / n) for k in range(n)) / n
         for j in range(n)]
    c[0] /= 2
    return c


def clenshaw(u: float, c: list[float]) -> float:
    b2, b1 = 0.0, c[-1]
    for ck in reversed(c[1:-1]):
        b2, b1 = b1, 2 * u * b1 - b2 + ck
    return u * b1 - b2 + c[0]


def erfc64(z: float, c: list[float]) -> float:
    import math
    t = 2 / (2 + z)
    return t * math.exp(-z * z + clenshaw(t * 2.5 - 1, c))


def main() -> None:
    table = [float(x) for x in coefficients(N)]
    print("_ERFC_CHEBYSHEV = (")
    for i in range(0, N, 3):
        print("    " + " ".join(f"{x!r}," for x in table[i:i + 3]))
    print(")")
    erf = max((abs((1 - erfc64(z, table)) / float(mp.erf(z)) - 1), z) for z in _grid(0.5, 6.0))
    erfc = max((abs(erfc64(z, table) / float(mp.erfc(z)) - 1), z) for z in _grid(0.5, 26.0))
    print(f"largest relative error of erf over [1/2, 6] in float64: {erf[0]:.2e} at z = {erf[1]:.4f}")
    print(f"largest relative error of erfc over [1/2, 26] in float64: {erfc[0]:.2e} at z = {erfc[1]:.4f}")


def _grid(low: float, high: float, steps: int = 20000):
    return (low + (high - low) * k / steps for k in range(steps + 1))

if __name__ == "__main__":
    main()
