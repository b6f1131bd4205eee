"""The one tolerance policy for float inputs: how far from one a row's sum may be by rounding.

A row of n probabilities held in a float dtype is accepted when ``|Σ p − 1| <=
sum_tolerance(dtype, n)``, the most that dtype's rounding explains at that length, and then
divided by its sum (:func:`~multidraft.theory.as_distribution`, the draft laws, draft trees); a
larger error is refused by :func:`check_row_sums` with the error in the message
(``sum to 1 + 3.6e-06``). A ``float32`` softmax over 128,256 tokens (off by a few 1e-6) and any
``bfloat16`` one (off by up to 2^-8) pass; logits, unnormalised weights or a truncated row do not.
The schemes' and trees' batched torch paths apply the same check to their rows.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SUM_TOLERANCE", "UNIT_ROUNDOFF", "RESCALE_HINT", "dtype_name", "sum_tolerance", "check_row_sums"]

#: Smallest tolerance of :func:`sum_tolerance`: the float64 one (float64 rows often carry the
#: rounding of a float32 computation), and a floor for short rows of every dtype.
SUM_TOLERANCE = 1e-6
#: Unit roundoff ``u = 2^-p`` (``p`` significand bits) of the float dtypes a row may arrive in, by
#: name (numpy's and torch's: ``torch.bfloat16`` is ``"bfloat16"``, so torch need not be imported).
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
#: How a row that is off by more than its rounding can be rescaled, ending every such message.
RESCALE_HINT = "; rescale it with as_distribution(..., normalize=True) if that error is expected"


def dtype_name(values: object) -> str:
    """The float dtype a row arrives in, by name (``"float32"``, ``"bfloat16"``, ...), read off a
    numpy array or a torch tensor; ``"float64"`` for anything else (lists, Fractions, integers),
    whose entries are read as float64."""
    dtype = getattr(values, "dtype", None)
    if dtype is None or dtype is _FLOAT64:  # no dtype, or numpy's float64 (str(dtype) costs ~2 µs)
        return "float64"
    name = str(dtype).removeprefix("torch.")
    return name if name in UNIT_ROUNDOFF else "float64"


_FLOAT64 = np.dtype(np.float64)


def sum_tolerance(dtype: object, n: int) -> float:
    r"""Largest ``|Σ_i p_i − 1|`` that rounding alone explains for n probabilities held in ``dtype``:

    .. math:: \mathrm{tol}(d, n) = \max\bigl(10^{-6},\; 2\,(u_d + \sqrt{n}\, u_a)\bigr),

    with ``u_d`` the unit roundoff of ``d`` (:data:`UNIT_ROUNDOFF`) and ``u_a`` that of the
    accumulation, float32 for dtypes of 32 bits or fewer (torch and numpy sum half precision in
    float32) and float64 otherwise. Rounding each entry of a non-negative row to ``d`` moves its
    sum by at most ``u_d Σ p_i = u_d``; the softmax normaliser accumulated over n terms carries a
    relative error of order ``√n u_a`` (the probabilistic bound of Higham and Mary, "A new approach
    to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019, Theorem 3.1),
    and the factor 2 covers the exponential and the division. The floor
    :data:`SUM_TOLERANCE` keeps float64's long-standing tolerance for rows that were computed in
    float32 and cast.

    Parameters
    ----------
    dtype : str, numpy dtype or torch dtype
        The row's dtype; names outside :data:`UNIT_ROUNDOFF` count as float64.
    n : int
        The row's length (the vocabulary size).

    Examples
    --------
    >>> print(f"{sum_tolerance('float64', 3):.1e} {sum_tolerance('float32', 128256):.1e} {sum_tolerance('bfloat16', 128256):.1e}")
    1.0e-06 4.3e-05 7.9e-03
    """
    name = str(dtype).removeprefix("torch.")
    unit = UNIT_ROUNDOFF.get(name, UNIT_ROUNDOFF["float64"])
    accumulation = UNIT_ROUNDOFF["float64"] if unit <= UNIT_ROUNDOFF["float64"] else UNIT_ROUNDOFF["float32"]
    return max(SUM_TOLERANCE, 2.0 * (unit + float(np.sqrt(n)) * accumulation))


def check_row_sums(
    worst_sum: float, name: str, *, dtype: object, n: int, tolerance: float | None = None, rows: str = "entries"
) -> None:
    """Refuse a row whose sum ``worst_sum`` (the farthest from one among the rows checked) is off
    by more than ``tolerance``, by default :func:`sum_tolerance` of its dtype and length: the one
    tolerance policy of the package (module docstring).

    Raises
    ------
    ValueError
        ``"<name>: <rows> sum to 1 + 3.6e-06, more than float32 rounding explains at n = 128256
        (tolerance 4.3e-05); rescale it with as_distribution(..., normalize=True) if that error is
        expected"``.

    >>> check_row_sums(1 + 3.6e-6, "target", dtype="float32", n=128256)
    >>> check_row_sums(1.1, "target", dtype="float64", n=2)
    Traceback (most recent call last):
    ...
    ValueError: target: entries sum to 1 + 0.1, more than float64 rounding explains at n = 2 (tolerance 1e-06); rescale it with as_distribution(..., normalize=True) if that error is expected
    """
    limit = sum_tolerance(dtype, n) if tolerance is None else tolerance
    error = float(worst_sum) - 1.0
    if abs(error) > limit:
        sign = "+" if error > 0 else "-"
        kind = str(dtype).removeprefix("torch.")
        raise ValueError(
            f"{name}: {rows} sum to 1 {sign} {abs(error):.2g}, more than {kind} rounding explains at n = {n} "
            f"(tolerance {limit:.2g}){RESCALE_HINT}"
        )
