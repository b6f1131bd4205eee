"""One arithmetic for float and exact computations (the backend idea of POT's ``get_backend``).

Every computation on distributions here runs either in float64 numpy arrays or, in exact mode,
in numpy object arrays of :class:`fractions.Fraction`. A :class:`Field` is chosen once (``FLOAT``
or ``EXACT``, :func:`field`) and supplies the few verbs that differ between the two -- a zero
vector, a sum, prefix sums, the ratio order, a clip at one that only float rounding needs -- so
the laws and the optimum are written once. The helpers below it (``positive_part``,
``safe_divide``, ``normalise`` and the canonical single-draft step) take either kind of array.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.laws._kernels import exact_ratio_order, ratio_order

__all__ = ["Field", "FLOAT", "EXACT", "field", "positive_part", "safe_divide", "normalise", "canonical_step"]


@dataclass(frozen=True)
class Field:
    """The arithmetic of one mode: float64 (``exact=False``) or Fractions (``exact=True``)."""

    exact: bool

    @property
    def zero(self) -> float | Fraction:
        return Fraction(0) if self.exact else 0.0

    @property
    def one(self) -> float | Fraction:
        return Fraction(1) if self.exact else 1.0

    def array(self, values: object) -> np.ndarray:
        """``values`` as an array of this field (a copy): object Fractions or float64."""
        if self.exact:
            return np.array([Fraction(v) for v in values], dtype=object)
        return np.array(values, dtype=np.float64)

    def zeros(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """An array of zeros of this field."""
        return self.full(shape, self.zero)

    def ones(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """An array of ones of this field."""
        return self.full(shape, self.one)

    def full(self, shape: int | tuple[int, ...], value: object) -> np.ndarray:
        """An array of this field filled with ``value``."""
        if self.exact:
            out = np.empty(shape, dtype=object)
            out[...] = Fraction(value)
            return out
        return np.full(shape, float(value))

    def total(self, values: np.ndarray) -> float | Fraction:
        """``Σ values`` (Fraction(0) for an empty exact sum)."""
        return sum(values.tolist(), Fraction(0)) if self.exact else float(np.sum(values))

    def prefix_sums(self, values: np.ndarray) -> np.ndarray:
        """``[0, v_0, v_0 + v_1, ...]`` along the last axis (length + 1)."""
        out = self.zeros(values.shape[:-1] + (values.shape[-1] + 1,))
        np.cumsum(values, axis=-1, out=out[..., 1:])
        return out

    def clip_one(self, values):
        """``min(values, 1)``: float rounding can overshoot a probability; Fractions cannot."""
        return values if self.exact else np.minimum(values, 1.0)

    def probability(self, value) -> float | Fraction:
        """One computed probability: a Fraction as it is, a float clipped at one."""
        return value if self.exact else float(min(value, 1.0))

    def ratio_order(self, target: np.ndarray, draft: np.ndarray) -> np.ndarray:
        """The decreasing-q/p token order (:func:`~multidraft.theory.laws._kernels.ratio_order`;
        exact comparisons for Fractions, where a float ratio could misorder near-ties)."""
        return exact_ratio_order(target, draft) if self.exact else ratio_order(target, draft)


FLOAT = Field(False)
EXACT = Field(True)


def field(exact: bool) -> Field:
    """:data:`EXACT` or :data:`FLOAT`."""
    return EXACT if exact else FLOAT


def positive_part(values: np.ndarray) -> np.ndarray:
    """``(x)_+ = max(x, 0)`` elementwise, for float and Fraction arrays alike."""
    if values.dtype == object:
        return np.array([v if v > 0 else Fraction(0) for v in values.reshape(-1)], dtype=object).reshape(values.shape)
    return np.maximum(values, 0.0)


def safe_divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``a / b`` where ``b > 0``, else 0 (never evaluates a division by zero)."""
    positive = denominator > 0
    return np.where(positive, numerator / np.where(positive, denominator, 1), 0)


def normalise(weights: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """``w / Σ w`` along the last axis; rows of zero mass become ``fallback`` (broadcast).

    A residual of zero mass is reached with probability zero, so any distribution inside the
    target's support can stand in for it; the callers pass the target or the previous residual.
    """
    mass = weights.sum(axis=-1, keepdims=True)
    return np.where(mass > 0, weights / np.where(mass > 0, mass, 1), fallback)


def canonical_step(p: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The single-draft speculative step against a draft (or selection) law r (Leviathan et al.
    2023; Chen et al. 2023; the second step of the canonical decomposition, Khisti et al.,
    ICLR 2025, Theorem 1): accept a draft y ~ r with probability ``min(1, p(y)/r(y))`` (0 where
    r = 0), else sample ``norm((p - r)_+)`` (p itself when that mass is zero).

    Returns ``(accept [n], residual [n])``, in float or Fraction arithmetic like the inputs. The
    output is distributed exactly as p, with acceptance ``Σ_y min(p(y), r(y))``.

    Two float64 rows of at least :data:`COMPILED_FROM` tokens, in a process that has loaded
    numba (the verifiers' paths), take one compiled pass for ``min(1, p/r)`` and ``(p - r)_+``,
    then numpy's sum and one in-place division: the same bits as the numpy expressions (the
    same operations per entry, the same pairwise sum), in two arrays of n and no temporaries
    (at n = 49152 in the tree walks: 0.10 ms a call for 0.37, most of it the page faults of
    fresh temporaries).

    >>> accept, residual = canonical_step(np.array([0.5, 0.5]), np.array([0.75, 0.25]))
    >>> accept.tolist(), residual.tolist()
    ([0.6666666666666666, 1.0], [0.0, 1.0])
    """
    if _compiled_rows(p, r):
        compile_in_place(globals(), KERNELS)
        accept, weights = np.empty(len(p)), np.empty(len(p))
        _step(p, r, accept, weights)
        mass = weights.sum()
        if not mass > 0:
            return accept, p.copy()
        weights /= mass
        return accept, weights
    return np.minimum(safe_divide(p, r), 1), normalise(positive_part(p - r), p)


#: Rows at least this long take the compiled single-draft step (:func:`canonical_step`).
COMPILED_FROM = 4096


def _compiled_rows(p: object, r: object) -> bool:
    """Whether :func:`canonical_step` takes its compiled pass: two contiguous float64 rows of one
    length >= :data:`COMPILED_FROM`, numba loaded (the step alone never imports it)."""
    return (
        isinstance(p, np.ndarray) and isinstance(r, np.ndarray) and p.dtype == r.dtype == np.float64
        and p.ndim == r.ndim == 1 and len(p) == len(r) >= COMPILED_FROM
        and p.flags.c_contiguous and r.flags.c_contiguous and "numba" in sys.modules
    )  # fmt: skip


def _step(p, r, accept, weights):  # pragma: no cover - compiled
    """``accept = min(safe_divide(p, r), 1)`` and ``weights = (p - r)_+``, entry by entry as numpy
    computes them (NaN kept by both clips, as by ``np.minimum``/``np.maximum``)."""
    for i in range(p.shape[0]):
        ratio = p[i] / r[i] if r[i] > 0.0 else 0.0
        accept[i] = 1.0 if ratio > 1.0 else ratio
        difference = p[i] - r[i]
        weights[i] = 0.0 if difference < 0.0 else difference


#: The compiled kernel of this module (:func:`~multidraft.theory._numba.compile_in_place`).
KERNELS = ("_step",)
