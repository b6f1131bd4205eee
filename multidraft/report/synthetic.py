"""The synthetic sections of the acceptance-gap report: numbers only, no plotting.

Three computations, each returning a frozen dataclass that the renderers turn into tables
and figures:

* :func:`family_curves` -- Figure 2 of Khisti et al. (ICLR 2025): the optimal acceptance
  against SpecTr, SpecInfer and a single draft over a one-parameter family of targets on
  three tokens with a uniform draft, with the exact interval where P* = 1 (Theorem 2).
* :func:`gap_table` -- the acceptance gap of each scheme to the optimum on Zipf-like
  large-vocabulary distributions, per number of drafts K and draft temperature, for iid and
  without-replacement laws and for non-identical draft pairs.
* :func:`truncation_sweep` -- the truncated importance LP (Section 4 of the paper):
  acceptance and solve time per position against the number s of tokens kept.

Schemes and LPs come from :mod:`multidraft.schemes` and :mod:`multidraft.lp`, imported when
needed; the optimum comes from :mod:`multidraft.theory`.
"""

from __future__ import annotations

import importlib
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import ModuleType

import numpy as np

from multidraft.theory import (
    IID,
    Independent,
    WithoutReplacement,
    optimal_acceptance,
    optimal_acceptance_batch,
    softmax,
    zipf,
)

__all__ = [
    "TargetFamily",
    "FIGURE2_FAMILY",
    "FamilyCurves",
    "family_curves",
    "unit_interval",
    "PositionSet",
    "zipf_positions",
    "GapRow",
    "GapTable",
    "GAP_COLUMNS",
    "gap_table",
    "pair_cut_upper_bound",
    "TruncationSweep",
    "truncation_sweep",
    "optional_module",
]

#: Columns of the gap table besides the optimum, in display order.
GAP_COLUMNS = ("truncated LP", "truncated LP, ratio key", "SpecTr", "SpecInfer", "single draft")

#: Rank key of each truncated-LP column (:func:`multidraft.lp.truncated_lp`).
_RANK_KEYS = {"truncated LP": "published", "truncated LP, ratio key": "ratio"}


def optional_module(name: str) -> ModuleType | None:
    """Import ``name`` if that module exists in this build, else None.

    Only a missing ``name`` itself (or its parent package), or a bare directory without
    ``__init__.py`` (a namespace package), yields None; an import error raised *inside* an
    existing module propagates, so a broken module is never hidden.
    """
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and name.startswith(error.name):
            return None
        raise
    return None if getattr(module, "__file__", None) is None else module


def _iterate(items: Iterable, progress: bool, description: str, total: int | None = None) -> Iterable:
    if not progress:
        return items
    from tqdm.auto import tqdm  # noqa: PLC0415 -- optional, only for progress bars

    return tqdm(items, desc=description, total=total, leave=False)


# ---------------------------------------------------------------------------------------------
# Figure 2: a one-parameter family of targets on three tokens
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetFamily:
    """Targets ``p(t) = base + t * direction`` for ``t`` in ``[lower, upper]``, one draft q.

    All numbers are exact Fractions so that the interval where P* = 1 can be stated exactly.
    """

    base: tuple[Fraction, ...]
    direction: tuple[Fraction, ...]
    lower: Fraction
    upper: Fraction
    draft: tuple[Fraction, ...]
    label: str

    def __post_init__(self) -> None:
        n = len(self.base)
        if len(self.direction) != n or len(self.draft) != n:
            raise ValueError("family: base, direction and draft need the same length")
        if sum(self.direction) != 0:
            raise ValueError("family: direction must sum to zero so that every p(t) sums to one")
        if self.lower >= self.upper:
            raise ValueError(f"family: empty parameter range [{self.lower}, {self.upper}]")

    def target(self, t: float | Fraction) -> np.ndarray:
        """The target ``p(t)`` as a float64 array (clipped at 0 against rounding)."""
        base = np.array([float(b) for b in self.base])
        direction = np.array([float(d) for d in self.direction])
        p = np.maximum(base + float(t) * direction, 0.0)
        return p / p.sum()

    def exact_target(self, t: Fraction) -> tuple[Fraction, ...]:
        """The target ``p(t)`` in exact arithmetic."""
        return tuple(b + t * d for b, d in zip(self.base, self.direction))


#: The family of Figure 2 in Khisti et al. (ICLR 2025): uniform draft on three tokens and
#: target ``p = (1/3, t, 2/3 - t)``, ``t`` in ``[0, 2/3]``.
FIGURE2_FAMILY = TargetFamily(
    base=(Fraction(1, 3), Fraction(0), Fraction(2, 3)),
    direction=(Fraction(0), Fraction(1), Fraction(-1)),
    lower=Fraction(0),
    upper=Fraction(2, 3),
    draft=(Fraction(1, 3),) * 3,
    label="p = (1/3, t, 2/3 - t), q = (1/3, 1/3, 1/3)",
)


def unit_interval(family: TargetFamily, k: int) -> tuple[Fraction, Fraction] | None:
    """The exact set of ``t`` where P* = 1 for K iid drafts, or None when it is empty.

    Theorem 2 (and its K-draft form, theory.md): ``P* = 1`` iff ``p(T) >= q(T)^K`` for every
    ``T ⊆ Ω``. Along the family ``p_t(T) = a(T) + t b(T)`` is affine in ``t``, so each T cuts
    a half-line and the set is the interval obtained by intersecting them (2^n constraints,
    exact Fractions).

    >>> unit_interval(FIGURE2_FAMILY, 2)
    (Fraction(1, 9), Fraction(5, 9))
    """
    if k < 1:
        raise ValueError(f"k: needs k >= 1, got {k}")
    low, high = family.lower, family.upper
    n = len(family.base)
    for size in range(1, n):
        for subset in itertools.combinations(range(n), size):
            a = sum((family.base[i] for i in subset), Fraction(0))
            b = sum((family.direction[i] for i in subset), Fraction(0))
            need = sum((family.draft[i] for i in subset), Fraction(0)) ** k
            if b > 0:
                low = max(low, (need - a) / b)
            elif b < 0:
                high = min(high, (need - a) / b)
            elif a < need:
                return None
    return (low, high) if low <= high else None


@dataclass(frozen=True)
class FamilyCurves:
    """Acceptance along a :class:`TargetFamily` for K iid drafts.

    ``optimal[i]`` is P* at ``t[i]``; ``unit[i]`` is whether P* = 1 there (up to 1e-12);
    ``interval`` is the exact Theorem-2 interval; ``schemes`` maps a scheme name to its exact
    acceptance along ``t``; ``single`` is the single-draft acceptance ``Σ min(p, q)``.
    """

    family: TargetFamily
    k: int
    t: np.ndarray
    optimal: np.ndarray
    unit: np.ndarray
    interval: tuple[Fraction, Fraction] | None
    single: np.ndarray
    schemes: dict[str, np.ndarray] = field(default_factory=dict)


#: Baselines drawn next to the optimum in Figure 2.
FAMILY_SCHEMES = ("spectr", "specinfer")


def family_curves(
    family: TargetFamily = FIGURE2_FAMILY,
    k: int = 2,
    points: int = 121,
    schemes: Sequence[str] = FAMILY_SCHEMES,
) -> FamilyCurves:
    """Optimal and baseline acceptance over ``points`` equally spaced values of ``t``.

    P*(t) = min_T [p_t(T) + 1 - q(T)^K] (theory.md, min-cut form; Khisti et al. Theorem 3)
    by the sorted prefix scan; the schemes' exact acceptance from :mod:`multidraft.schemes`
    (skipped when that package is not installed in this build).

    >>> curves = family_curves(points=7, schemes=())
    >>> [round(float(v), 4) for v in curves.optimal]
    [0.8889, 1.0, 1.0, 1.0, 1.0, 1.0, 0.8889]
    """
    if points < 2:
        raise ValueError(f"points: needs at least 2 points, got {points}")
    t = np.linspace(float(family.lower), float(family.upper), points)
    q = np.array([float(x) for x in family.draft])
    targets = np.stack([family.target(v) for v in t])
    law = IID(q, k)
    optimal = np.array([optimal_acceptance(p, law).value for p in targets])
    single = np.minimum(targets, q).sum(axis=1)
    curves: dict[str, np.ndarray] = {}
    registry = optional_module("multidraft.schemes") if schemes else None
    if registry is not None:
        for name in schemes:
            scheme = registry.get_scheme(name)
            curves[name] = np.array([float(scheme.acceptance(p, law)) for p in targets])
    return FamilyCurves(
        family=family,
        k=k,
        t=t,
        optimal=optimal,
        unit=optimal >= 1 - 1e-12,
        interval=unit_interval(family, k),
        single=single,
        schemes=curves,
    )


# ---------------------------------------------------------------------------------------------
# The gap table on Zipf-like large-vocabulary distributions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PositionSet:
    """Target distributions ``[B, n]`` standing in for B decoding positions.

    Each row is Zipf-like, ``p_(r) ∝ r^(-s_b)`` over ranks (tokens permuted at random), with
    exponent ``s_b`` drawn uniformly from ``exponent_range``; the target temperature is 1, so
    ``log p`` are the target logits. A draft at temperature T is ``softmax(log p / T)``.
    """

    targets: np.ndarray
    exponents: np.ndarray

    def drafts(self, temperature: float) -> np.ndarray:
        """Temperature-shifted drafts ``q_b = softmax(log p_b / T)``, shape ``[B, n]``."""
        return softmax(np.log(self.targets), temperature)


def zipf_positions(
    n: int, positions: int, rng: np.random.Generator, exponent_range: tuple[float, float] = (0.9, 1.5)
) -> PositionSet:
    """Draw ``positions`` Zipf-like targets on ``n`` tokens (see :class:`PositionSet`).

    >>> ps = zipf_positions(10, 3, np.random.default_rng(0))
    >>> ps.targets.shape, bool(np.allclose(ps.targets.sum(axis=1), 1))
    ((3, 10), True)
    """
    if positions < 1:
        raise ValueError(f"positions: needs at least one position, got {positions}")
    low, high = exponent_range
    if not 0 < low <= high:
        raise ValueError(f"exponent_range: needs 0 < low <= high, got {exponent_range}")
    exponents = rng.uniform(low, high, size=positions)
    targets = np.stack([zipf(n, float(s), rng) for s in exponents])
    return PositionSet(targets=targets, exponents=exponents)


@dataclass(frozen=True)
class GapRow:
    """One row of the gap table: mean acceptance over the positions for one setting.

    ``law`` is ``"iid"``, ``"wor"`` or ``"independent"`` (non-identical pair, one draft per
    temperature in ``draft_temperatures``). ``optimal`` is the mean P*; for independent pairs
    no exact large-n optimum is available and ``optimal`` is a certified *upper bound* (the
    best cut found, see :func:`pair_cut_upper_bound`; ``optimal_is_bound`` is True), so the
    fractions are lower bounds on the true fractions. ``values[column]`` is None where the
    scheme does not apply to the law; ``notes`` says why.
    """

    law: str
    k: int
    draft_temperatures: tuple[float, ...]
    optimal: float
    optimal_is_bound: bool
    values: dict[str, float | None]
    notes: dict[str, str] = field(default_factory=dict)

    def fraction(self, column: str) -> float | None:
        """``values[column] / optimal``, the share of the optimum the scheme reaches."""
        value = self.values.get(column)
        return None if value is None else value / self.optimal


@dataclass(frozen=True)
class GapTable:
    """The gap table and how it was made (vocabulary, positions, truncation size)."""

    n: int
    exponents: tuple[float, ...]
    target_temperature: float
    truncation_s: int
    scheme_names: dict[str, str]
    rows: tuple[GapRow, ...]


def _scheme_name(column: str, law: str) -> str | None:
    """Registry name of a baseline column for a law (the truncated LP is called directly)."""
    if column == "SpecTr":
        return "spectr"
    if column == "SpecInfer":
        return "rrs-wor" if law == "wor" else "specinfer"
    return None


def pair_cut_upper_bound(target: np.ndarray, draft: np.ndarray, draft2: np.ndarray, angles: int = 65) -> float:
    """A certified upper bound on P* for two independent non-identical drafts.

    Every token set T gives ``P* <= p(T) + 1 - q1(T) q2(T)`` (min-cut, theory.md). An optimal
    T is (up to the ``q1 q2`` term of single tokens) an upper set of a positive linear score
    ``(w q1(y) + (1 - w) q2(y)) / p(y)``, so this scans the prefixes of that score for
    ``angles`` weights ``w`` in [0, 1] and returns the smallest cut. O(angles · n log n).

    >>> q = np.array([0.5, 0.5, 0.0])
    >>> round(pair_cut_upper_bound(np.array([0.2, 0.2, 0.6]), q, q), 12)
    0.4
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(target > 0, target, 1.0)
        best = 1.0
        for w in np.linspace(0.0, 1.0, angles):
            mix = w * draft + (1.0 - w) * draft2
            score = np.where(target > 0, mix / safe, np.where(mix > 0, np.inf, 0.0))
            order = np.argsort(-score)
            p_prefix = np.concatenate([[0.0], np.cumsum(target[order])])
            contained = np.concatenate([[0.0], np.cumsum(draft[order])]) * np.concatenate(
                [[0.0], np.cumsum(draft2[order])]
            )
            best = min(best, float(np.min(p_prefix + 1.0 - np.minimum(contained, 1.0))))
    return best


def _truncated_acceptance(target: np.ndarray, law, s: int, rank_key: str) -> float:
    """Acceptance ``Σ_y min(p(y), r(y))`` of the truncated importance LP (K = 2) or of its
    multi-stage combination (K > 2) for independent drafts (Theorem 1; Section 4)."""
    from multidraft.lp import multistage, truncated_lp  # noqa: PLC0415 -- optional layer

    drafts = law.drafts if law.name == "independent" else [law.draft] * law.k
    if len(drafts) == 2:
        return float(truncated_lp(target, drafts[0], drafts[1], s=s, rank_key=rank_key).acceptance)
    return float(multistage(target, list(drafts), s=s, rank_key=rank_key).acceptance)


def _column_value(
    column: str, law_name: str, s: int, laws: Sequence, targets: np.ndarray
) -> tuple[float | None, str | None, str | None]:
    """Mean exact acceptance of a column over the positions: (value, registry/LP name, note).

    A scheme that does not apply to the law, or has no exact method at this vocabulary size
    (its ``ValueError`` says why), gives ``None`` and the reason as the note.
    """
    if column in _RANK_KEYS:
        if law_name == "wor":
            return None, None, "the importance LP is built for independent drafts, not drafts without replacement"
        if optional_module("multidraft.lp") is None:
            return None, None, "multidraft.lp is not available in this build"
        key = _RANK_KEYS[column]
        name = "lp.truncated_lp" if laws[0].k == 2 else "lp.multistage"
        values = [_truncated_acceptance(p, law, s, key) for p, law in zip(targets, laws)]
        return float(np.mean(values)), f"{name}(s={s}, rank_key={key!r})", None
    registry = optional_module("multidraft.schemes")
    if registry is None:
        return None, None, "multidraft.schemes is not available in this build"
    name = _scheme_name(column, law_name)
    scheme = registry.get_scheme(name)
    if not scheme.supports(laws[0]):
        return None, name, f"{name} does not support the {law_name} law"
    try:
        values = [float(scheme.acceptance(p, law)) for p, law in zip(targets, laws)]
    except ValueError as error:
        return None, name, f"{name} has no exact acceptance at n={targets.shape[1]} ({str(error).splitlines()[0]})"
    return float(np.mean(values)), name, None


def gap_table(
    positions: PositionSet,
    ks: Sequence[int] = (2, 4, 8),
    temperatures: Sequence[float] = (0.5, 0.8, 1.2, 1.6, 2.0),
    pairs: Sequence[tuple[float, float]] = ((0.5, 1.2), (0.8, 1.6), (1.2, 2.0), (0.5, 2.0), (1.6, 2.0)),
    laws: Sequence[str] = ("iid", "wor"),
    s: int = 5,
    progress: bool = False,
) -> GapTable:
    """Acceptance of each scheme against the optimum, averaged over the positions.

    For every law in ``laws``, K in ``ks`` and draft temperature T: the optimum
    ``P* = min_T [p(T) + 1 - P_D(set(X) ⊆ T)]`` by the batched prefix scan, the truncated
    importance LP (K = 2; the multi-stage combination for K > 2) with ``s`` tokens, SpecTr,
    SpecInfer (recursive rejection sampling; its without-replacement form for ``wor``) and
    the single-draft ``Σ min(p, q)``, each the mean over positions. For each temperature pair
    in ``pairs``: two independent non-identical drafts (K = 2), optimum bounded above by
    :func:`pair_cut_upper_bound`. References: Khisti et al. ICLR 2025 (Theorems 1-3,
    Section 4); Sun et al. 2023 (SpecTr); Miao et al. 2024 (SpecInfer); Jeon et al. 2024.
    """
    if s < 1:
        raise ValueError(f"s: the truncated LP needs s >= 1, got {s}")
    for law in laws:
        if law not in ("iid", "wor"):
            raise ValueError(f"laws: unknown law {law!r}; choose from iid, wor")
    targets = positions.targets
    settings = [(law, k, t) for law in laws for k in ks for t in temperatures]
    rows: list[GapRow] = []
    names: dict[str, str] = {}
    for law, k, temperature in _iterate(settings, progress, "gap table", total=len(settings)):
        drafts = positions.drafts(temperature)
        optimal = float(np.mean(optimal_acceptance_batch(targets, drafts, k, law)))
        law_objects = [IID(q, k) if law == "iid" else WithoutReplacement(q, k) for q in drafts]
        values, notes = _row_values(law, s, law_objects, targets, names)
        values["single draft"] = float(np.mean(np.minimum(targets, drafts).sum(axis=1)))
        rows.append(GapRow(law, k, (float(temperature),), optimal, False, values, notes))
    for pair in _iterate(pairs, progress, "draft pairs", total=len(pairs)):
        first, second = positions.drafts(pair[0]), positions.drafts(pair[1])
        bound = float(
            np.mean([pair_cut_upper_bound(p, a, b) for p, a, b in zip(targets, first, second)])
        )
        law_objects = [Independent([a, b]) for a, b in zip(first, second)]
        values, notes = _row_values("independent", s, law_objects, targets, names)
        values["single draft"] = float(np.mean(np.minimum(targets, first).sum(axis=1)))
        rows.append(GapRow("independent", 2, tuple(float(t) for t in pair), bound, True, values, notes))
    return GapTable(
        n=targets.shape[1],
        exponents=tuple(float(e) for e in positions.exponents),
        target_temperature=1.0,
        truncation_s=s,
        scheme_names=names,
        rows=tuple(rows),
    )


def _row_values(
    law: str, s: int, law_objects: Sequence, targets: np.ndarray, names: dict[str, str]
) -> tuple[dict[str, float | None], dict[str, str]]:
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for column in GAP_COLUMNS[:-1]:
        value, name, note = _column_value(column, law, s, law_objects, targets)
        values[column] = value
        if note is not None:
            notes[column] = note
        if value is not None:
            names[f"{column} ({law}, K={law_objects[0].k})"] = str(name)
    return values, notes


# ---------------------------------------------------------------------------------------------
# Truncated LP: acceptance and time against s
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TruncationSweep:
    """The truncated importance LP (K = 2, iid) for several truncation sizes s.

    ``acceptance[key][j]`` is the mean acceptance over positions with ``s_values[j]`` tokens
    and rank key ``key``; ``seconds[key][j]`` the median solve time per position (wall clock,
    machine-dependent -- kept apart from the reproducible numbers); ``optimal`` the mean P*.
    """

    n: int
    draft_temperature: float
    s_values: tuple[int, ...]
    optimal: float
    acceptance: dict[str, tuple[float, ...]]
    seconds: dict[str, tuple[float, ...]]


def truncation_sweep(
    positions: PositionSet,
    draft_temperature: float = 1.6,
    s_values: Sequence[int] = (1, 2, 3, 5, 8, 10, 15, 20, 30),
    rank_keys: Sequence[str] = ("published", "ratio"),
    repeats: int = 3,
    progress: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> TruncationSweep:
    """Truncated LP acceptance ``Σ_y min(p(y), r_s(y))`` and solve time against ``s``.

    For every s and rank key: :func:`multidraft.lp.truncated_lp` on each position (one
    warm-up call, then the median of ``repeats`` timed calls). The acceptance is
    non-decreasing in s towards the full pair LP and is bounded by P* (Khisti et al., ICLR
    2025, Section 4). Needs :mod:`multidraft.lp`.
    """
    from multidraft.lp import truncated_lp  # noqa: PLC0415 -- heavy optional layer

    if repeats < 1:
        raise ValueError(f"repeats: needs at least one timed repeat, got {repeats}")
    targets = positions.targets
    drafts = positions.drafts(draft_temperature)
    optimal = float(np.mean(optimal_acceptance_batch(targets, drafts, 2, "iid")))
    acceptance: dict[str, tuple[float, ...]] = {}
    seconds: dict[str, tuple[float, ...]] = {}
    grid = [(key, s) for key in rank_keys for s in s_values]
    results: dict[tuple[str, int], tuple[float, float]] = {}
    for key, s in _iterate(grid, progress, "truncated LP sweep", total=len(grid)):
        values, times = [], []
        for p, q in zip(targets, drafts):
            values.append(float(truncated_lp(p, q, s=s, rank_key=key).acceptance))
            samples = []
            for _ in range(repeats):
                start = clock()
                truncated_lp(p, q, s=s, rank_key=key)
                samples.append(clock() - start)
            times.append(float(np.median(samples)))
        results[key, s] = (float(np.mean(values)), float(np.median(times)))
    for key in rank_keys:
        acceptance[key] = tuple(results[key, s][0] for s in s_values)
        seconds[key] = tuple(results[key, s][1] for s in s_values)
    return TruncationSweep(
        n=targets.shape[1],
        draft_temperature=float(draft_temperature),
        s_values=tuple(int(s) for s in s_values),
        optimal=optimal,
        acceptance=acceptance,
        seconds=seconds,
    )
