"""Probability distributions on a finite vocabulary: validation at the boundary.

A distribution is a 1-D ``float64`` numpy array validated once at the boundary by
:func:`as_distribution` (or a tuple of :class:`fractions.Fraction` from
:func:`as_exact_distribution`). Every later computation may assume the invariants
checked here: finite, non-negative entries summing to one, non-empty, and every positive
entry at least :data:`MASS_FLOOR`.

**Tiny masses** (the one policy for them, applied here and nowhere else): a float probability
below ``MASS_FLOOR = 1e-300`` is set to zero; every other entry is kept exactly as given,
however small (1e-300, 1e-20, 1e-13 next to exact zeros), and every computation of the package
is exact for it to rounding. Float64 cannot compute with smaller masses: below 2.2e-308 they are
subnormal (fewer than 53 significant bits; 5e-324 carries one) and their reciprocals overflow
to infinity, so no ratio, odds, rate or residual built on them means anything; the floor leaves
eight orders of magnitude of headroom above that, so that a reciprocal times a modest factor (a
count, a rate bound) stays finite. Dropping such entries moves less than ``n · 1e-300`` of
probability, far below the rounding of any sum to one; what changes is only whether the token
counts as supported (a draft law without replacement needs K supported tokens, and a draft
token of probability zero is refused). Exact (Fraction) inputs are never floored: their float
copies keep a positive entry at ``MASS_FLOOR`` at least, so that the float and the exact law
agree on the support.

**Sums off by rounding** (the one tolerance policy for float inputs, stated here and applied by
:func:`check_row_sums` everywhere a float row is validated: distributions, draft laws, schemes'
batched rows, draft trees and sequence models): a row of n probabilities held in a float dtype is
accepted when ``|Σ p − 1| <= sum_tolerance(dtype, n)``, the most that dtype's rounding explains at
that length, and then divided by its sum; a larger error is refused, with the error in the message
(``sum = 1 + 3.6e-06``). A ``float32`` softmax over 128,256 tokens (off by a few 1e-6) and any
``bfloat16`` one (off by up to 2^-8) pass; logits, unnormalised weights or a truncated row do not.

Accepted inputs: sequences and numpy arrays of numbers, Fractions and ``"a/b"`` strings, and
torch tensors of any float dtype and device (recognised by their methods, so this module does
not import torch; converted to float64 on the CPU). Mappings and sets are refused with a
``TypeError``: their iteration order is not a token order (a dict iterates over its *keys*).

The sampling transforms and the random families built on these checks are in
:mod:`~multidraft.theory.laws._families`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from fractions import Fraction
from numbers import Rational

import numpy as np

from multidraft.theory.laws._row_scan import SparseRow, least_and_support
from multidraft.theory.laws._tolerance import SUM_TOLERANCE, UNIT_ROUNDOFF, check_row_sums, dtype_name, sum_tolerance

__all__ = [
    "SUM_TOLERANCE",
    "UNIT_ROUNDOFF",
    "MASS_FLOOR",
    "sum_tolerance",
    "check_row_sums",
    "check_count",
    "check_number",
    "check_generator",
    "as_distribution",
    "as_exact_distribution",
    "parse_distribution",
    "is_exact_input",
]

#: Smallest positive probability a float distribution keeps; :func:`as_distribution` sets
#: smaller entries to zero (the tiny-mass policy of the module docstring).
MASS_FLOOR = 1e-300


def check_count(value: object, name: str, *, minimum: int = 1, meaning: str = "") -> int:
    """``int(value)`` once ``value`` is checked to be an integer ``>= minimum``.

    The one check of every count in the package (the number of drafts K, a vocabulary size, a
    draft length, a number of kept tokens, repeats, ...). Python and numpy integers pass;
    booleans, floats and strings do not, even when integral (``2.0`` is refused, never rounded).

    Parameters
    ----------
    value : object
        The count to check.
    name : str
        The argument's name, which every error message starts with.
    minimum : int
        The smallest allowed value (default 1; 0 for counts that may be empty).
    meaning : str
        What the count is, for the message (``"the number of drafts"``); may be empty.

    Returns
    -------
    int
        ``value`` as a Python ``int``.

    Raises
    ------
    ValueError
        ``"<name>: [<meaning> ]must be an integer >= <minimum>, got <value>"``.

    Examples
    --------
    >>> check_count(3, "k")
    3
    >>> check_count(0, "k", meaning="the number of drafts")
    Traceback (most recent call last):
    ...
    ValueError: k: the number of drafts must be an integer >= 1, got 0
    """
    integer = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not integer or value < minimum:
        subject = f"{meaning} must" if meaning else "must"
        shown = int(value) if integer else repr(value)
        raise ValueError(f"{name}: {subject} be an integer >= {minimum}, got {shown}")
    return int(value)


def _shown(value: object) -> str:
    """``repr`` of a value as the user typed it: numpy scalars shown as Python numbers."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def check_number(value: object, name: str, rule: str, inside: Callable[[float], bool]) -> float:
    """``float(value)`` once checked to be a finite real number with ``inside(value)`` true.

    The one check of every real-valued parameter (temperatures, tolerances, masses): Python and
    numpy reals pass; booleans, strings, NaN and infinities do not.

    Raises
    ------
    ValueError
        ``"<name>: must be a finite number <rule>, got <value>"``.

    >>> check_number(1e-9, "tolerance", ">= 0", lambda t: t >= 0)
    1e-09
    >>> check_number(float("nan"), "tolerance", ">= 0", lambda t: t >= 0)
    Traceback (most recent call last):
    ...
    ValueError: tolerance: must be a finite number >= 0, got nan
    """
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not real or not np.isfinite(value) or not inside(float(value)):
        raise ValueError(f"{name}: must be a finite number {rule}, got {_shown(value)}")
    return float(value)


def check_generator(rng: object, name: str = "rng") -> np.random.Generator:
    """``rng`` if it is a ``numpy.random.Generator``, else a ``TypeError`` saying how to make one
    (the one check of every random generator argument)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{name}: expected a numpy.random.Generator, e.g. numpy.random.default_rng(0), got {type(rng).__name__}"
        )
    return rng


def _check_values(values: np.ndarray, name: str) -> None:
    if values.shape[-1] == 0:
        raise ValueError(f"{name}: the vocabulary is empty (a distribution needs n >= 1 entries)")
    if np.isnan(values).any():
        raise ValueError(f"{name}: contains NaN entries")
    if np.isinf(values).any():
        raise ValueError(f"{name}: contains infinite entries")
    if (values < 0).any():
        where = tuple(int(i) for i in np.argwhere(values < 0)[0])
        index = where[0] if len(where) == 1 else where
        raise ValueError(f"{name}: contains negative entries (first at index {index}: {float(values[where])!r})")


def as_distribution(
    values: object,
    name: str = "distribution",
    *,
    normalize: bool = False,
    tolerance: float | None = None,
    batched: bool = False,
    copy: bool = True,
) -> np.ndarray:
    """Validate ``values`` as a probability vector and return a fresh float64 copy (or, with
    ``copy=False``, ``values`` itself where the checks leave it unchanged).

    Checks, in order: a sequence, array or tensor (not a mapping or set), numeric and 1-D
    (``[..., n]`` when ``batched``), non-empty, no NaN, no infinity, no negative entry, and
    ``|sum - 1| <= tolerance``, by default the rounding of the input's dtype at its length
    (:func:`sum_tolerance`: 1e-6 for float64, 4.3e-5 for a float32 row of 128,256 tokens, 7.9e-3
    for bfloat16), or rescale when ``normalize=True`` (an all-zero vector cannot be rescaled). An accepted vector is divided by its sum, so later computations may rely on
    ``sum == 1`` up to rounding, and then every entry below :data:`MASS_FLOOR` (1e-300) is set
    to zero (the module's tiny-mass policy). The caller's array is never
    modified.

    Parameters
    ----------
    values : array_like, shape (n,) or (..., n) when ``batched``
        Probabilities; Fractions and ``"a/b"`` strings are accepted and converted to float, and
        so are torch tensors (any float dtype, any device).
    name : str
        Argument name used in error messages (``"target"``, ``"draft"``, ...).
    normalize : bool
        Divide by the sum instead of rejecting a sum that is off.
    tolerance : float, optional
        Largest accepted deviation of the sum from one; default :func:`sum_tolerance` of the
        input's dtype and length (the module's one tolerance policy).
    batched : bool
        Accept a stack of distributions along the last axis.
    copy : bool
        False: a float64 array that sums to exactly one and needs no floor comes back as
        itself, not copied (a 10⁵-token target read once per position: one pass over it
        fewer); for a caller that drops the result before the array can change.

    Returns
    -------
    numpy.ndarray of float64, the validated distribution(s).

    Raises
    ------
    TypeError
        For a mapping or a set (``{0: 0.3, 1: 0.7}`` would be read by its keys), naming
        ``name`` and what to pass instead.
    ValueError
        Naming ``name`` and the defect.

    Examples
    --------
    >>> as_distribution([0.25, 0.75], "target")
    array([0.25, 0.75])
    >>> as_distribution([1e-300, 1e-310, 1.0], "draft")  # below MASS_FLOOR = 1e-300: zero
    array([1.e-300, 0.e+000, 1.e+000])
    >>> as_distribution([1, 3], "draft", normalize=True)
    array([0.25, 0.75])
    >>> as_distribution([0.5, 0.6], "draft")
    Traceback (most recent call last):
    ...
    ValueError: draft: entries sum to 1 + 0.1, more than float64 rounding explains at n = 2 (tolerance 1e-06); rescale it with as_distribution(..., normalize=True) if that error is expected
    """
    return checked_row(values, name, normalize=normalize, tolerance=tolerance, batched=batched, copy=copy)[0]


def checked_row(
    values: object, name: str, *, normalize: bool = False, tolerance: float | None = None, batched: bool = False,
    copy: bool = True, sparse: bool = False,
) -> tuple[np.ndarray | SparseRow, np.ndarray | None]:  # fmt: skip
    """``(as_distribution(values, ...), support)``: the same checks and result, and the support
    (ascending ids of the positive entries, int64) when the checks found it on the way -- a
    sparse float64 row (a top-k or top-p draft) -- else None. A draft law keeps it, so that a
    verifier fitted on the support does not search the row for it again (O(n)); with
    ``sparse=True`` such a row comes as a :class:`SparseRow`, not written out (O(n) saved)."""
    if isinstance(values, str):
        values = parse_distribution(values, name)
    dtype = dtype_name(values)
    values = _plain(values, name)
    if tolerance is not None:
        tolerance = check_number(tolerance, "tolerance", ">= 0", lambda t: t >= 0)
    fast = _fast_path(values, batched, normalize, SUM_TOLERANCE if tolerance is None else tolerance, copy)
    if fast is not None:
        return fast if sparse or fast[1] is None else (fast[0].dense(), fast[1])
    try:
        array = np.array(_to_float_list(values), dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: not a numeric array ({error})") from None
    if array.ndim == 0:
        raise ValueError(f"{name}: expected an array of probabilities, got a scalar")
    if not batched and array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of probabilities, got shape {array.shape}")
    _check_values(array, name)
    total = array.sum(axis=-1, keepdims=True)
    if normalize:
        if (total <= 0).any():
            raise ValueError(f"{name}: all entries are zero, cannot normalize")
        return _floored(array / total), None
    worst = float(total.reshape(-1)[int(np.argmax(np.abs(total - 1.0)))])
    check_row_sums(worst, name, dtype=dtype, n=array.shape[-1], tolerance=tolerance)
    return _floored(array / total), None


def _floored(probabilities: np.ndarray) -> np.ndarray:
    """``probabilities`` (a fresh array) with every entry below :data:`MASS_FLOOR` set to zero,
    in place: the tiny-mass policy of the module docstring. Masked writes are slow in numpy, so
    the entries are written only when some lie strictly between zero and the floor (two counts
    decide it; a dense softmax output needs one comparison)."""
    below = probabilities < MASS_FLOOR
    if below.any() and np.count_nonzero(below) != np.count_nonzero(probabilities == 0.0):
        np.copyto(probabilities, 0.0, where=below)
    return probabilities


def _plain(values: object, name: str) -> object:
    """``values`` as something numpy reads in token order: a torch tensor (duck-typed: detached,
    moved to the CPU, in float64, since numpy has no bfloat16) becomes a numpy array; a mapping
    or a set is refused (``TypeError``), since iterating it gives keys or an arbitrary order."""
    if isinstance(values, (Mapping, AbstractSet)):
        kind = "mapping" if isinstance(values, Mapping) else "set"
        hint = "list(d.values()) if d is ordered by token id" if kind == "mapping" else "a list"
        raise TypeError(
            f"{name}: got a {kind} ({type(values).__name__}); pass the probabilities as a sequence "
            f"or array in token order, entry i for token i (e.g. {hint})"
        )
    if all(callable(getattr(values, method, None)) for method in ("detach", "cpu", "double", "numpy", "is_complex")):
        if values.is_complex():
            raise ValueError(f"{name}: expected real probabilities, got a complex tensor")
        return values.detach().cpu().double().numpy()
    return values


def _fast_path(
    values: object, batched: bool, normalize: bool, tolerance: float, copy: bool = True
) -> tuple[np.ndarray | SparseRow, np.ndarray | None] | None:
    """The checks of :func:`as_distribution` in two passes for a float64 array that passes
    them (None otherwise, and the full checks name the defect): a minimum >= 0 excludes NaN
    and negative entries, and a finite sum excludes infinities. This keeps validation cheap on
    the per-position hot paths at a 10⁵-token vocabulary; the floor costs nothing more when the
    minimum already clears it (a softmax without zeros).

    A sparse 1-D row (at most 1/:data:`SPARSE_SHARE` of its entries positive: a top-k or top-p
    draft) is summed over its positive entries only: with the minimum >= 0 every other entry is
    exactly zero, so that is the same sum up to the order of the additions (within the
    tolerance policy's rounding bound, which holds for any order), and the row's support comes
    with it (:func:`checked_row`; the minimum and the support of a long row in one compiled
    pass, :mod:`~multidraft.theory.laws._row_scan`). Returns ``(row, support or None)``, the
    row of the sparse route a :class:`SparseRow`."""
    if not (isinstance(values, np.ndarray) and values.dtype == np.float64 and values.size):
        return None
    if values.ndim != 1 and not (batched and values.ndim > 1):
        return None
    # a 1-D row: its least entry and sparse support in one compiled pass (_row_scan)
    least, support = least_and_support(values, len(values) // SPARSE_SHARE) if values.ndim == 1 else (values.min(), None)
    if not least >= 0:  # also False for NaN
        return None
    if support is not None:
        inside = values[support]
        total = float(inside.sum())
        return _sparse_scaled(len(values), support, inside, total) if _sum_passes(total, total, normalize, tolerance) else None
    total = values.sum(axis=-1, keepdims=True)  # one row: its sum as a float, bounds without small-array ufuncs
    low, high = (float(total[0]),) * 2 if values.ndim == 1 else (float(total.min()), float(total.max()))
    if not _sum_passes(low, high, normalize, tolerance):
        return None
    # x / 1.0 == x: a row sum of exactly one (common) needs a copy, not a division (~3x slower),
    # and no copy at all where the caller allows it and the floor changes nothing
    unit, clear = low == high == 1.0, bool(least >= MASS_FLOOR * high)
    if unit and clear and not copy:
        return values, None
    out = values.copy() if unit else values / total
    return (out if clear else _floored(out)), None


def _sum_passes(low: float, high: float, normalize: bool, tolerance: float) -> bool:
    """Whether row sums between ``low`` and ``high`` (the least and the largest) are finite and,
    for :func:`_fast_path`, positive (to rescale) or within ``tolerance`` of one (a NaN sum
    fails every comparison)."""
    if not (-math.inf < low and high < math.inf):
        return False
    return low > 0 if normalize else (abs(low - 1.0) <= tolerance and abs(high - 1.0) <= tolerance)


#: A 1-D input with at most 1/SPARSE_SHARE of its entries positive is scaled on those entries
#: only (:func:`_sparse_scaled`).
SPARSE_SHARE = 8


def _sparse_scaled(n: int, positive: np.ndarray, inside: np.ndarray, total: float) -> tuple[SparseRow, np.ndarray]:
    """``(row, support)`` for a row of n entries that is ``inside`` at the ids ``positive`` and
    zero elsewhere: ``inside / total`` with the floor applied (zero stays zero) on the support,
    so that the division and the floor's test touch the positive entries only (a top-100 draft
    at n = 131072: a few µs instead of ~100 µs); the support is ``positive`` less the entries
    the floor set to zero, and the row a :class:`SparseRow` there (:func:`checked_row`)."""
    scaled = inside / total
    kept = scaled >= MASS_FLOOR
    if not kept.all():
        positive, scaled = positive[kept], scaled[kept]
    return SparseRow(n, positive, scaled), positive


def _to_float_list(values: object) -> object:
    """Convert nested Fractions / ``"a/b"`` strings to floats; leave arrays alone."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values
    if isinstance(values, (str, Fraction)):
        return float(Fraction(values))
    if isinstance(values, Iterable):
        return [_to_float_list(v) for v in values]
    return values


def is_exact_input(values: object) -> bool:
    """True when every entry of a 1-D input is a Fraction, an int or an ``"a/b"`` string.

    Such inputs can be used with ``exact=True``; floats cannot, since a float carries a
    rounding error that exact mode would silently promote to a "proof".

    >>> is_exact_input(["1/3", "2/3"]), is_exact_input([0.5, 0.5])
    (True, False)
    """
    if isinstance(values, np.ndarray) and values.dtype != object:
        return np.issubdtype(values.dtype, np.integer)
    if isinstance(values, (str, Mapping, AbstractSet)) or not isinstance(values, Iterable):
        return False
    return all(isinstance(v, (str, Rational)) and not isinstance(v, bool) for v in values)


def as_exact_distribution(
    values: object, name: str = "distribution", *, normalize: bool = False
) -> tuple[Fraction, ...]:
    """Validate ``values`` as an exact probability vector of :class:`~fractions.Fraction`.

    Entries must be Fractions, integers or ``"a/b"`` strings (floats are refused because
    their rounding error would be passed off as exact). The entries must sum to exactly one
    unless ``normalize=True``.

    >>> as_exact_distribution(["1/3", "1/6", "1/2"], "target")
    (Fraction(1, 3), Fraction(1, 6), Fraction(1, 2))
    >>> as_exact_distribution(["1/3", "1/3"], "draft")
    Traceback (most recent call last):
    ...
    ValueError: draft: exact entries sum to 2/3, not 1; rescale it with as_exact_distribution(..., normalize=True) if that is expected
    """
    if isinstance(values, str):
        values = values.split(",")
    values = _plain(values, name)
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if not isinstance(values, Iterable):
        raise ValueError(f"{name}: expected a sequence of fractions, got {type(values).__name__}")
    entries: list[Fraction] = []
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (str, Rational)):
            raise ValueError(
                f"{name}: entry {index} is {value!r}; exact mode needs Fractions, integers or "
                "'a/b' strings (floats carry rounding error)"
            )
        try:
            entry = Fraction(value.strip() if isinstance(value, str) else value)
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{name}: cannot parse entry {index} {value!r} as a fraction") from None
        if entry < 0:
            raise ValueError(f"{name}: contains negative entries (first at index {index}: {entry})")
        entries.append(entry)
    if not entries:
        raise ValueError(f"{name}: the vocabulary is empty (a distribution needs n >= 1 entries)")
    total = sum(entries, Fraction(0))
    if normalize:
        if total == 0:
            raise ValueError(f"{name}: all entries are zero, cannot normalize")
        return tuple(e / total for e in entries)
    if total != 1:
        raise ValueError(
            f"{name}: exact entries sum to {total}, not 1; "
            "rescale it with as_exact_distribution(..., normalize=True) if that is expected"
        )
    return tuple(entries)


def parse_distribution(text: str, name: str = "distribution") -> list[Fraction | float]:
    """Parse a comma-separated list such as ``"12/25,6/25,4/25,3/25"`` or ``"0.5,0.5"``.

    Entries written as integers or ``a/b`` become Fractions; decimals become floats.

    >>> parse_distribution("1/2, 0.25,1/4")
    [Fraction(1, 2), 0.25, Fraction(1, 4)]
    """
    entries: list[Fraction | float] = []
    for index, token in enumerate(text.split(",")):
        token = token.strip()
        try:
            entries.append(Fraction(token) if "." not in token and "e" not in token.lower() else float(token))
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{name}: cannot parse entry {index} {token!r} as a number") from None
    return entries
