"""Double-description duals: the optimal-acceptance formula and Theorem 2, derived symbolically.

The acceptance LP of K-draft speculative sampling has the dual (theory.md, "The
double-description view"; Khisti et al., ICLR 2025, Appendix D)

    P* = min  Σ_x u_x D(x) + Σ_y v_y p(y)   over   P = {(u, v) : u_x + v_y >= 1[y ∈ set(x)]},

x over the draft atoms (tuples, or multisets for an exchangeable law), y over Ω. P depends only
on (n, K) and the atoms, so its vertices -- enumerated once, exactly, by the double description
method (pycddlib) -- are every candidate formula, and P* is their minimum. Each vertex, taken
modulo the lineality (u + t, v - t) and with D(x) substituted, becomes a sympy formula in
``p0..`` and ``q0..`` (``q1_0.., q2_0..`` for independent drafts), deduplicated on the simplex
(:meth:`DraftStructure.on_simplex`) and matched against the min-cut family
``p(T) + 1 - P_D(set(X) ⊆ T)`` (Remark 2; iid: ``p(T) + 1 - q(T)^K``) by exact cancellation.
No vertex formula is dropped: every recognised one carries a rational witness point where it is
the strict unique minimum (:attr:`CutFormula.witness`). The acceptance-one cone's extreme rays
give the inequalities of Theorem 2; a ray is *trivial* when all its coefficients are >= 0.

The derivation, the argument that no vertex dominates another, and the canonical shift:
docs/cones.md. Layout: the draft structures live in :mod:`multidraft.lp._structure`, the
pipeline from a structure to canonical generators (with the size guard) in
:mod:`multidraft.lp._cone_generators`; this module reads formulas and inequalities off them.

References: Khisti et al., "Multi-Draft Speculative Sampling: Canonical Decomposition and
Theoretical Limits", ICLR 2025 (Theorems 2-3, Remark 2, Appendix D); Fukuda, cddlib;
Hu et al. 2025 (the K-draft min-cut form).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

import numpy as np
import sympy

from multidraft.lp._cone_generators import (
    CONSTRAINT_LIMIT,
    DENOMINATOR_LIMIT,
    VARIABLE_LIMIT,
    canonical_generators,
    checked_structure,
    cone_size,
    constraint_components,
    linear,
    subset_of,
)
from multidraft.lp._structure import CONE_LAWS, DraftStructure, Subset, Vector, draft_structure, never_contains

__all__ = [
    "CONE_LAWS",
    "CONSTRAINT_LIMIT",
    "VARIABLE_LIMIT",
    "DENOMINATOR_LIMIT",
    "DraftStructure",
    "CutFormula",
    "AcceptanceFormulas",
    "ConeInequality",
    "UnitCone",
    "cone_size",
    "draft_structure",
    "dual_formulas",
    "acceptance_formulas",
    "unit_cone",
    "unit_inequalities",
]

# --------------------------------------------------------------------------- formulas


@dataclass(frozen=True)
class CutFormula:
    """One vertex of the dual polyhedron as a formula for the acceptance on the simplex.

    Attributes
    ----------
    expression : sympy.Expr
        The formula's value on the simplex: ``p(T) + 1 - P_D(set(X) ⊆ T)`` in closed form
        when recognised (``1`` for T = ∅, which is the same vertex as T = Ω), else
        ``Σ v_y p_y + Σ u_x D(x)``.
    subset : tuple of int or None
        The recovered set T (proved by symbolic cancellation), None if not of that form.
    target_weights, atom_weights : tuple of Fraction
        The canonical vertex (v, u) (min_y v_y = 0).
    witness : tuple or None
        ``(p, drafts)`` in Fractions at which this formula is the strict unique minimum of
        all surviving formulas (drafts: one tuple per draft family), or None.
    """

    expression: sympy.Expr
    subset: Subset | None
    target_weights: Vector
    atom_weights: Vector
    witness: tuple[Vector, tuple[Vector, ...]] | None = None

    def __str__(self) -> str:
        return str(self.expression)


@dataclass(frozen=True)
class AcceptanceFormulas:
    """Every candidate acceptance formula from the vertices of the dual polyhedron.

    P* = min over ``formulas`` at any (p, q) on the simplex.

    Attributes
    ----------
    structure : DraftStructure
    vertices : int
        Vertices reported by cddlib (minimal faces, modulo the lineality).
    rays : int
        Extreme rays of the recession cone (modulo the lineality).
    lineality : int
        Dimension of the lineality space (1: the shift (u + t, v - t)).
    formulas : tuple of CutFormula
        The distinct vertex formulas, recognised sets first (by size, then lexicographic).
    duplicates : int
        Vertices merged because their formulas agree on the simplex.
    seconds : float
        Wall time of enumeration and simplification.
    """

    structure: DraftStructure
    vertices: int
    rays: int
    lineality: int
    formulas: tuple[CutFormula, ...]
    duplicates: int
    seconds: float = field(compare=False)

    @property
    def certified(self) -> bool:
        """True iff every formula has a witness point, so none can be dropped."""
        return all(f.witness is not None for f in self.formulas)

    @property
    def subsets(self) -> tuple[Subset | None, ...]:
        """The recovered set T of each formula (None if unrecognised)."""
        return tuple(f.subset for f in self.formulas)

    @cached_property
    def missing_subsets(self) -> tuple[Subset, ...]:
        """Sets T ⊆ Ω (T = Ω identified with ∅) whose cut formula is not among the formulas,
        leaving out those with P_D(set(X) ⊆ T) ≡ 0 on the simplex: their formula p(T) + 1 is
        dominated by the constant 1 of T = ∅ (e.g. |T| < K without replacement)."""
        present = set(self.subsets)
        every = (t for size in range(self.structure.n) for t in itertools.combinations(range(self.structure.n), size))
        return tuple(t for t in every if t not in present and not (t and never_contains(self.structure, t)))

    @property
    def matches_subset_family(self) -> bool:
        """True iff the formulas are exactly the undominated members of
        {p(T) + 1 - P_D(set(X) ⊆ T) : T ⊆ Ω} (all of them for iid and independent drafts)."""
        return None not in self.subsets and not self.missing_subsets

    def values(self, target: object, draft: object) -> np.ndarray:
        """Every surviving formula at (p, q): Fractions for exact input, else floats.

        ``draft`` is one distribution (iid, wor) or a list of K (independent).
        """
        p, atoms, exact = self.structure.atom_values(target, draft)
        v = np.array([f.target_weights for f in self.formulas], dtype=object)
        u = np.array([f.atom_weights for f in self.formulas], dtype=object)
        if exact:
            return v.dot(p) + u.dot(atoms)
        return v.astype(np.float64) @ p + u.astype(np.float64) @ atoms

    def minimum(self, target: object, draft: object) -> Fraction | float:
        """P* = min over the formulas (Fraction for exact input)."""
        values = self.values(target, draft)
        return min(values.tolist()) if values.dtype == object else float(values.min())


def _witness(structure: DraftStructure, subset: Subset) -> tuple[Vector, tuple[Vector, ...]]:
    """Rational point where p(T) + 1 - P_D(set(X) ⊆ T) should be the strict unique minimum:
    p uniform on Ω \\ T and every draft uniform on T (value 0; any S ≠ T loses mass of q or
    gains mass of p), or p = q uniform for T = ∅ (value 1; K >= 2)."""
    n = structure.n
    inside = subset or tuple(range(n))
    outside = tuple(y for y in range(n) if y not in subset) or tuple(range(n))
    p = tuple(Fraction(1, len(outside)) if y in outside else Fraction(0) for y in range(n))
    q = tuple(Fraction(1, len(inside)) if y in inside else Fraction(0) for y in range(n))
    return p, tuple(q for _ in structure.drafts)


def dual_formulas(
    structure: DraftStructure, *, max_variables: int = VARIABLE_LIMIT, max_constraints: int = CONSTRAINT_LIMIT
) -> AcceptanceFormulas:
    """Vertices of P = {(u, v) : u_x + v_y >= 1[y ∈ set(x)]} turned into acceptance formulas.

    Formula of a vertex: f = Σ_x u_x D(x) + Σ_y v_y p(y); P* = min over the survivors.
    Steps: exact enumeration (cddlib, Fractions), lineality check and canonical shift,
    deduplication on the simplex, recognition of T with a symbolic proof, and an exact
    witness point per recognised formula (see the module docstring on domination).

    Raises
    ------
    ProblemTooLargeError
        (a ValueError) More than ``max_variables`` variables or ``max_constraints``
        constraints (the message gives both numbers).
    RuntimeError
        cddlib's lineality differs from the expected shifts.
    """
    start = time.perf_counter()
    cone = canonical_generators(structure, False, max_variables, max_constraints)
    formulas = sorted((_formula(structure, u, v, reduced) for u, v, reduced in cone.distinct), key=_order)
    formulas = _with_witnesses(structure, formulas)
    generators = cone.generators
    return AcceptanceFormulas(
        structure=structure,
        vertices=len(generators.vertices),
        rays=len(generators.rays),
        lineality=len(generators.lineality),
        formulas=tuple(formulas),
        duplicates=len(generators.vertices) - len(cone.distinct),
        seconds=time.perf_counter() - start,
    )


def _order(item: CutFormula | ConeInequality) -> tuple:
    """Display order: recognised sets by size then lexicographically, unrecognised last."""
    if item.subset is None:
        return (1, 0, (), item.target_weights, item.atom_weights)
    return (0, len(item.subset), item.subset, (), ())


def _formula(structure: DraftStructure, u: Vector, v: Vector, reduced) -> CutFormula:
    """Recognise p(T) + 1 - P_D(set(X) ⊆ T) (T from v = 1_T) by exact cancellation;
    ``reduced`` is the canonical form of Σ u_x D(x) (see :meth:`DraftStructure.on_simplex`)."""
    q_part = linear(u, structure.probabilities)
    subset = subset_of(v)
    if subset is not None:
        claim = 1 - structure.containment(subset) if subset else sympy.Integer(1)
        if reduced == structure._reduced(claim):
            expression = linear(v, structure.target) + claim
            return CutFormula(expression, subset, v, u)
    return CutFormula(linear(v, structure.target) + q_part, None, v, u)


def _integers(rows: Sequence[Sequence[Fraction]]) -> np.ndarray:
    """Rows scaled by positive integers to exact Python-int object arrays (order-preserving)."""
    out = []
    for row in rows:
        scale = math.lcm(*(x.denominator for x in row))
        out.append([int(x * scale) for x in row])
    return np.array(out, dtype=object)


def _with_witnesses(structure: DraftStructure, formulas: list[CutFormula]) -> list[CutFormula]:
    """Attach to each recognised formula its witness point if the formula is the strict unique
    minimum there. Exact: each point's coordinates (p, D(x)) are scaled to integers by a
    positive factor, which preserves the order of the formula values at that point."""
    weights = _integers([f.target_weights + f.atom_weights for f in formulas])
    points, owners = [], []
    for j, formula in enumerate(formulas):
        if formula.subset is None:
            continue
        p, drafts = _witness(structure, formula.subset)
        try:
            _, atoms, _ = structure.atom_values(p, drafts[0] if len(drafts) == 1 else drafts)
        except ValueError:  # the law is undefined at this point (e.g. q(a) = 1 without replacement)
            continue
        points.append((*p, *atoms.tolist()))
        owners.append(j)
    witnesses: dict[int, tuple] = {}
    if points:
        coordinates = _integers(points)
        bound = int(np.abs(coordinates).max()) * int(np.abs(weights).max()) * weights.shape[1]
        dtype = np.int64 if bound < 2**62 else object
        values = coordinates.astype(dtype) @ weights.astype(dtype).T  # [points, formulas]
        for row, j in enumerate(owners):
            others = np.delete(values[row], j)
            if (others > values[row, j]).all():
                witnesses[j] = _witness(structure, formulas[j].subset)
    return [
        CutFormula(f.expression, f.subset, f.target_weights, f.atom_weights, witnesses.get(j))
        for j, f in enumerate(formulas)
    ]


def acceptance_formulas(
    n: int,
    k: int,
    law: str = "iid",
    *,
    merge: bool | None = None,
    max_variables: int = VARIABLE_LIMIT,
    max_constraints: int = CONSTRAINT_LIMIT,
) -> AcceptanceFormulas:
    """Derive the optimal-acceptance formula of (n, K, law) from the dual polyhedron's vertices.

    P*(acc) = min over the returned formulas; for iid drafts the survivors are exactly
    ``{p(T) + 1 - q(T)^K : T ⊆ Ω}`` (Remark 2 of Khisti et al., checked here for any small
    n, K rather than assumed). See :func:`dual_formulas` for the steps.

    Parameters
    ----------
    n, k : int
        Vocabulary size and number of drafts (>= 1).
    law : {"iid", "wor", "independent"}
    merge : bool, optional
        Atoms as multisets (default for iid and wor) or ordered tuples.
    max_variables, max_constraints : int
        Size limits; larger problems raise ValueError with the size instead of hanging.

    Examples
    --------
    >>> result = acceptance_formulas(2, 2)
    >>> [str(f) for f in result.formulas], result.matches_subset_family
    (['1', 'p0 - q0**2 + 1', 'p1 - q1**2 + 1'], True)
    >>> result.minimum(["1/3", "2/3"], ["1/2", "1/2"])
    Fraction(1, 1)

    References
    ----------
    Khisti et al., ICLR 2025, Remark 2 and Appendix D (double description, K = 3, n = 3).
    """
    structure = checked_structure(n, k, law, merge, False, max_variables, max_constraints)
    return dual_formulas(structure, max_variables=max_variables, max_constraints=max_constraints)


# --------------------------------------------------------------------------- unit cone


@dataclass(frozen=True)
class ConeInequality:
    """An extreme ray of the acceptance-one cone's dual as the inequality ``lhs >= rhs``.

    ``subset`` is T when the inequality is p(T) >= P_D(set(X) ⊆ T) (proved by cancellation),
    else None; ``target_weights``/``atom_weights`` the canonical ray (v, u).
    """

    lhs: sympy.Expr
    rhs: sympy.Expr
    subset: Subset | None
    target_weights: Vector
    atom_weights: Vector

    def __str__(self) -> str:
        return f"{self.lhs} >= {self.rhs}"


@dataclass(frozen=True)
class UnitCone:
    """The acceptance-one cone (Theorem 2): P* = 1 iff every inequality and equality holds.

    Attributes
    ----------
    structure : DraftStructure
    rays : int
        Extreme rays reported by cddlib (modulo the lineality).
    lineality : int
        Dimension of the lineality space (the number of components of the atom–token graph).
    inequalities : tuple of ConeInequality
        The nontrivial ray inequalities.
    trivial : tuple of ConeInequality
        Rays whose inequality has only nonnegative coefficients (e.g. D(x) >= 0).
    equalities : tuple of (sympy.Expr, sympy.Expr)
        Σ_{x ∈ c} D(x) = Σ_{y ∈ c} p(y) per component c, when there is more than one.
    seconds : float
    """

    structure: DraftStructure
    rays: int
    lineality: int
    inequalities: tuple[ConeInequality, ...]
    trivial: tuple[ConeInequality, ...]
    equalities: tuple[tuple[sympy.Expr, sympy.Expr], ...]
    seconds: float = field(compare=False)

    @property
    def subsets(self) -> tuple[Subset | None, ...]:
        return tuple(i.subset for i in self.inequalities)

    @cached_property
    def missing_subsets(self) -> tuple[Subset, ...]:
        """Sets ∅ ≠ T ⊊ Ω with P_D(set(X) ⊆ T) not identically 0 whose inequality is absent
        (when it is ≡ 0 the inequality p(T) >= 0 is trivial)."""
        n, present = self.structure.n, set(self.subsets)
        expected = (t for size in range(1, n) for t in itertools.combinations(range(n), size))
        return tuple(t for t in expected if t not in present and not never_contains(self.structure, t))

    @property
    def matches_subset_family(self) -> bool:
        """True iff the nontrivial inequalities are exactly p(T) >= P_D(set(X) ⊆ T) and there
        are no equalities beyond Σ D = Σ p."""
        return None not in self.subsets and not self.missing_subsets and not self.equalities

    def holds(self, target: object, draft: object, tolerance: float = 1e-12) -> bool:
        """Whether every inequality and equality holds at (p, q) (exactly for exact input)."""
        p, atoms, exact = self.structure.atom_values(target, draft)
        slack = tolerance if not exact else 0
        rows = list(self.inequalities) + list(self.trivial)
        for row in rows:
            value = sum((w * x for w, x in zip(row.target_weights, p)), 0) + sum(
                (w * x for w, x in zip(row.atom_weights, atoms)), 0
            )
            if value < -slack:
                return False
        for atom_set, token_set in self._components:
            gap = sum((atoms[a] for a in atom_set), 0) - sum((p[y] for y in token_set), 0)
            if abs(gap) > slack:
                return False
        return True

    @cached_property
    def _components(self):
        return constraint_components(self.structure, unit=True)


def unit_cone(
    structure: DraftStructure, *, max_variables: int = VARIABLE_LIMIT, max_constraints: int = CONSTRAINT_LIMIT
) -> UnitCone:
    """Extreme rays of C = {(u, v) : u_x + v_y >= 0 for y ∈ set(x)} as inequalities.

    By Farkas' lemma a coupling with acceptance one exists iff Σ u_x D(x) + Σ v_y p(y) >= 0
    for every extreme ray (u, v) of C and = 0 on its lineality. Each ray is canonicalised
    (min v = 0 per component, scaled), split into trivial (all coefficients >= 0) and
    nontrivial, and matched against p(T) >= P_D(set(X) ⊆ T) with T recovered from v = 1_T.

    Raises
    ------
    ProblemTooLargeError
        (a ValueError) More than ``max_variables`` variables or ``max_constraints`` constraints.
    """
    start = time.perf_counter()
    cone = canonical_generators(structure, True, max_variables, max_constraints)
    nontrivial, trivial = [], []
    for u, v, reduced in cone.distinct:
        inequality = _inequality(structure, u, v, reduced)
        (trivial if min(u) >= 0 else nontrivial).append(inequality)
    equalities = ()
    if len(cone.components) > 1:
        equalities = tuple(
            (sympy.Add(*(structure.probabilities[a] for a in atoms)), sympy.Add(*(structure.target[y] for y in tokens)))
            for atoms, tokens in cone.components
        )
    return UnitCone(
        structure=structure,
        rays=len(cone.generators.rays),
        lineality=len(cone.generators.lineality),
        inequalities=tuple(sorted(nontrivial, key=_order)),
        trivial=tuple(sorted(trivial, key=_order)),
        equalities=equalities,
        seconds=time.perf_counter() - start,
    )


def _inequality(structure: DraftStructure, u: Vector, v: Vector, reduced) -> ConeInequality:
    subset = subset_of(v)
    if subset and min(u) < 0:
        containment = structure.containment(subset)
        if reduced == -structure._reduced(containment):
            return ConeInequality(linear(v, structure.target), containment, subset, v, u)
    positive = [max(a, Fraction(0)) for a in u]
    negative = [max(-a, Fraction(0)) for a in u]
    lhs = linear(v, structure.target) + linear(positive, structure.probabilities)
    return ConeInequality(lhs, linear(negative, structure.probabilities), None, v, u)


def unit_inequalities(
    n: int,
    k: int,
    law: str = "iid",
    *,
    merge: bool | None = None,
    max_variables: int = VARIABLE_LIMIT,
    max_constraints: int = CONSTRAINT_LIMIT,
) -> UnitCone:
    """Theorem 2 derived: the inequalities under which the optimal acceptance is one.

    For iid drafts with K >= 2 the nontrivial extreme rays are exactly p(T) >= q(T)^K for
    ∅ ≠ T ⊊ Ω; the remaining rays say D(x) >= 0.

    >>> cone = unit_inequalities(3, 2)
    >>> [str(i) for i in cone.inequalities if i.subset == (0, 1)], cone.matches_subset_family
    (['p0 + p1 >= (q0 + q1)**2'], True)
    >>> cone.holds(["1/3", "1/6", "1/2"], ["1/3", "1/3", "1/3"])  # TV = 1/6, yet P* = 1
    True

    References
    ----------
    Khisti et al., ICLR 2025, Theorem 2 and Appendix D.
    """
    structure = checked_structure(n, k, law, merge, True, max_variables, max_constraints)
    return unit_cone(structure, max_variables=max_variables, max_constraints=max_constraints)
