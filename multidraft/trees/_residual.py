"""The one vector operation of block-level verifiers: a scaled residual and its mass.

Block verification (Sun et al. 2025, Algorithm 2) and traversal verification (Weng et al.
2025) both form, at a node with acceptance weight a, target residual B and draft law D,

    W = (a·B - D)_+,     S = Σ_x W(x),

then continue with ``norm(W)`` and ``S / (S + 1 - a)``. The weights are kept unnormalised
(``B = w / mass``), so one call is ``(s_w·w - s_q·q)_+`` with ``s_w = a / mass`` and
``s_q = 1 / (draft mass left)``; tokens removed from the draft law (traversal's update
without replacement) count as ``q = 0``. Float64 runs one compiled pass (numba) over the
vocabulary; Fraction object arrays (exact mode) run in numpy object arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["scaled_residual"]

#: The compiled kernel, module-level so that numba's disk cache finds it in the next process.
KERNELS = ("_residual",)


def _kernel():
    """``_residual``, numba-compiled on first use
    (:func:`~multidraft.theory._numba.compile_in_place`) and cached on disk."""
    compile_in_place(globals(), KERNELS)
    return _residual


def _residual(w, scale_w, q, scale_q, out, store):  # pragma: no cover - compiled
    """``out = (s_w·w - s_q·q)_+`` (written only with ``store``); returns ``Σ out``."""
    total = 0.0
    for i in range(w.shape[0]):
        value = scale_w * w[i] - scale_q * q[i]
        if value > 0.0:
            total += value
        else:
            value = 0.0
        if store:
            out[i] = value
    return total


def scaled_residual(
    weights: np.ndarray, weight_scale, draft: np.ndarray, draft_scale, removed: Sequence[int] = (), keep: bool = True
) -> tuple[np.ndarray | None, float | Fraction]:
    """``W = (s_w·w - s_q·q·1[x ∉ removed])_+`` and ``S = Σ W`` (a new array; inputs untouched).

    Float64 arrays take the compiled pass, object arrays of Fractions exact arithmetic.
    ``keep=False`` (floats, nothing ``removed``): ``(None, S)``, the same S without writing W.
    """
    removed = list(dict.fromkeys(int(t) for t in removed))
    if weights.dtype == object:
        q = draft.copy()
        q[removed] = Fraction(0)
        values = weight_scale * weights - draft_scale * q
        out = np.array([v if v > 0 else Fraction(0) for v in values], dtype=object)
        return out, sum(out, Fraction(0))
    if not keep and not removed:
        return None, _kernel()(weights, float(weight_scale), draft, float(draft_scale), weights[:0], False)
    out = np.empty(weights.shape[0])
    total = _kernel()(weights, float(weight_scale), draft, float(draft_scale), out, True)
    for t in removed:  # D(t) = 0: the pass subtracted s_q·q(t) that is not there
        fixed = max(float(weight_scale) * weights[t], 0.0)
        total += fixed - out[t]
        out[t] = fixed
    return out, total
