"""Double-description duals: the optimal-acceptance formula and Theorem 2, derived symbolically.

The acceptance LP of K-draft speculative sampling (theory.md, "The optimal-transport LP")
has the dual (theory.md, "The double-description view"; Khisti et al., ICLR 2025, Appendix D)

    P* = min  Σ_x u_x D(x) + Σ_y v_y p(y)   over   P = {(u, v) : u_x + v_y >= 1[y ∈ set(x)]},

where x runs over the draft *atoms* (tuples, or multisets when the law is exchangeable) and
y over the vocabulary Ω = {0, ..., n-1}. The polyhedron P depends only on (n, K) and the law's
atoms, not on the numbers, so its vertices -- enumerated once, exactly, by the double
description method (pycddlib, ``cdd.gmp``) -- are every candidate formula; P* is their
minimum. P has the lineality (u + t, v - t): the objective changes by t (Σ D - Σ p) = 0 on
the simplex, so each vertex is taken modulo it (canonical representative: min_y v_y = 0).

Substituting D(x) (iid: multinomial · Π q(x_i); independent: Π q_i(x_i); without
replacement: the sequential product) turns each vertex into a sympy expression in
``p0..p{n-1}`` and ``q0..q{n-1}`` (``q1_0.., q2_0..`` for independent drafts). The formulas
are deduplicated on the simplex (the canonical shift makes the p-part unique; the q-part is
compared exactly after eliminating each family's last symbol by Σ q = 1, see
:meth:`DraftStructure.on_simplex`), and each one is matched against the min-cut family
(Remark 2 of the paper; theory.md)

    p(T) + 1 - P_D(set(X) ⊆ T),  T ⊆ Ω      (iid: p(T) + 1 - q(T)^K),

with T recovered from the vertex (v = 1_T) and the identity proved by exact symbolic
cancellation on the simplex.

**Domination: what can be dropped, and why nothing is.** The general rule: with D >= 0,
p >= 0 and Σ D = Σ p = 1, the formula of (u', v') is <= that of (u, v) everywhere on the
simplex when some t gives u' + t <= u and v' - t <= v coordinatewise (then
f - f' = Σ (u - u' - t) D + Σ (v - v' + t) p >= 0). Between *vertices* this never happens:
it would write (u, v) = (u', v') + r + lineality with r >= 0 a nonzero recession direction
of P, and a point of that form is the midpoint of two points of P, not a vertex. Any
domination would have to come from the law's D(q) instead, and the code rules that out
where it can: every recognised formula gets an exact rational *witness* point (p, q) at
which it is the strict unique minimum of all formulas (:attr:`CutFormula.witness`), so
no formula with a witness can be dropped, even against the minimum of all the others.
Hence the output keeps every distinct vertex formula; ``certified`` says whether all of them
carry a witness.

A ray inequality of the acceptance-one cone is *trivial* (true for every law) when all its
coefficients are >= 0 after the canonical shift (then it reads Σ u_x D(x) >= 0).

Layout: the draft structures (atoms, symbolic D(x), the algebra on the simplex) live in
:mod:`multidraft.lp._structure`; this module builds the two cones from a structure through one
pipeline (:func:`_generators`) and reads formulas and inequalities off their generators.

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

from multidraft.lp._polyhedra import Generators, enumerate_generators
from multidraft.lp._structure import (
    CONE_LAWS,
    DraftStructure,
    Subset,
    Vector,
    atom_count,
    denominator_factors,
    check_arguments,
    draft_structure,
    never_contains,
    unit_count,
)
from multidraft.theory.limits import SizeEstimate, check_size

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

#: Size limits of the cones handed to the double description method; larger ones are refused
#: with the estimate. Measured on the 2-core development machine: the iid dual with n = 7,
#: K = 2 (35 variables, 196 constraints) takes 5 s in cddlib alone and n = 8, K = 2 (44, 288)
#: 21 s; independent drafts with n = 3, K = 4 (84 variables, 243 constraints) took over a
#: minute. The last two are refused.
VARIABLE_LIMIT = 60
CONSTRAINT_LIMIT = 250
#: Most factors 1 - q(S) in the common denominator of a without-replacement law (the sympy
#: step expands their product: n = 4, K = 3 has 10 and takes about 2 s; n = 5, K = 3 has 15
#: and took about a minute).
DENOMINATOR_LIMIT = 10


# --------------------------------------------------------------------------- size


def cone_size(n: int, k: int, law: str = "iid", *, merge: bool | None = None, unit: bool = False) -> tuple[int, int]:
    """``(variables, constraints)`` of the dual polyhedron (or, with ``unit``, the acceptance-one cone).

    Variables: one u_x per atom plus one v_y per token; constraints: one per pair (x, y)
    (dual) or per pair with y ∈ set(x) (unit cone). Counted combinatorially, nothing built.

    >>> cone_size(3, 3)          # multisets of 3 tokens out of 3: C(5, 3) = 10 atoms
    (13, 30)
    >>> cone_size(3, 2, "independent", unit=True)
    (12, 15)
    """
    n, k, law, merged = check_arguments(n, k, law, merge)
    size = _ConeSize.counted(n, k, law, merged, unit)
    return size.variables, size.constraints


@dataclass(frozen=True)
class _ConeSize:
    """A cone handed to the double description method: which one, and its size.

    ``unit``: the acceptance-one cone, else the dual polyhedron. Variables: one u_x per atom
    and one v_y per token; constraints: one per pair (x, y), or per pair with y ∈ set(x).
    """

    n: int
    k: int
    law: str
    unit: bool
    variables: int
    constraints: int

    @classmethod
    def counted(cls, n: int, k: int, law: str, merged: bool, unit: bool) -> _ConeSize:
        """The size for the full atom set of (n, K, law), counted combinatorially."""
        atoms = atom_count(n, k, law, merged)
        return cls(n, k, law, unit, atoms + n, unit_count(n, k, law, merged) if unit else atoms * n)

    @classmethod
    def of(cls, structure: DraftStructure, unit: bool) -> _ConeSize:
        """The size for the atoms a structure actually holds."""
        m, n = len(structure.atoms), structure.n
        constraints = sum(len(set(atom)) for atom in structure.atoms) if unit else m * n
        return cls(n, structure.k, structure.law, unit, m + n, constraints)

    def refuse_if_large(self, max_variables: int, max_constraints: int) -> None:
        """Refuse a cone too large to enumerate in reasonable time (the one size guard of
        :mod:`multidraft.theory.limits`), giving its size. Memory is not the binding limit here:
        the double description of a cone this small fits in a few MiB, time is what explodes."""
        what = "acceptance-one cone" if self.unit else "dual polyhedron"
        estimate = SizeEstimate(f"{what} (n={self.n}, k={self.k}, law={self.law})", self.variables, 0, self.constraints)
        alternative = (
            "the double-description enumeration would not finish in reasonable time; use "
            "multidraft.theory.optimal_acceptance (min-cut) for numbers, or raise the limits"
        )
        check_size(estimate, alternative, max_variables=max_variables, max_constraints=max_constraints)


def _check_size(n: int, k: int, law: str, merged: bool, unit: bool, max_variables: int, max_constraints: int) -> None:
    """Refuse (n, K, law) before its structure is built: the cone's size, and for drafts without
    replacement the number of factors of the common denominator."""
    size = _ConeSize.counted(n, k, law, merged, unit)
    size.refuse_if_large(max_variables, max_constraints)
    factors = denominator_factors(n, k, law)
    estimate = SizeEstimate(
        f"exact simplification (n={n}, k={k}, law={law})", factors, 0, unit="factors 1 - q(S) (|S| < k) in the common denominator"
    )
    alternative = "sympy would not finish in reasonable time; use multidraft.theory.optimal_acceptance (min-cut) for numbers"
    check_size(estimate, alternative, max_variables=DENOMINATOR_LIMIT, variables_name="DENOMINATOR_LIMIT")


# --------------------------------------------------------------------------- lineality


def _components(structure: DraftStructure, unit: bool) -> list[tuple[list[int], list[int]]]:
    """Connected components (atoms, tokens) of the constraint graph: x ~ y for every
    constraint u_x + v_y >= c. The lineality space of the system is one shift
    (u + t_c, v - t_c) per component."""
    m, n = len(structure.atoms), structure.n
    parent = list(range(m + n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, atom in enumerate(structure.atoms):
        for y in set(atom) if unit else range(n):
            parent[find(i)] = find(m + y)
    groups: dict[int, tuple[list[int], list[int]]] = {}
    for node in range(m + n):
        atoms, tokens = groups.setdefault(find(node), ([], []))
        (atoms if node < m else tokens).append(node if node < m else node - m)
    return list(groups.values())


def _check_lineality(lineality: Sequence[Vector], components, m: int) -> None:
    """cddlib's lineality basis must span exactly the component shifts (u + t_c, v - t_c)."""
    if len(lineality) != len(components):
        raise RuntimeError(
            f"cddlib reported a lineality space of dimension {len(lineality)}; the constraint graph "
            f"has {len(components)} components"
        )
    for vector in lineality:
        for atoms, tokens in components:
            values = {vector[a] for a in atoms} | {-vector[m + y] for y in tokens}
            if len(values) > 1:
                raise RuntimeError(f"cddlib's lineality vector {vector} is not a component shift")


def _canonical(vector: Vector, components, m: int, ray: bool) -> tuple[Vector, Vector]:
    """Representative modulo lineality: shift each component so that min v = 0; a ray is
    also scaled (positively) so that max v = 1, or max |u| = 1 when v = 0."""
    u, v = list(vector[:m]), list(vector[m:])
    for atoms, tokens in components:
        shift = min(v[y] for y in tokens)
        for a in atoms:
            u[a] += shift
        for y in tokens:
            v[y] -= shift
    if ray:
        scale = max(v) if max(v) > 0 else max(abs(a) for a in u)
        u, v = [a / scale for a in u], [b / scale for b in v]
    return tuple(u), tuple(v)


@dataclass(frozen=True)
class _CanonicalGenerators:
    """A cone's generators from cddlib, and the distinct canonical ones (see :func:`_generators`)."""

    generators: Generators
    components: list[tuple[list[int], list[int]]]
    #: ``(u, v, N)`` per distinct generator in cddlib's order, N the canonical form of
    #: Σ u_x D(x) on the simplex (``DraftStructure._reduced_combination``).
    distinct: tuple[tuple[Vector, Vector, object], ...]


def _generators(
    structure: DraftStructure, unit: bool, max_variables: int, max_constraints: int
) -> _CanonicalGenerators:
    """The pipeline of both cones: rows ``u_x + v_y >= c`` → generators (cddlib, exact) →
    lineality check → canonical representatives → deduplication on the simplex.

    Dual polyhedron (``unit=False``): a row per pair (x, y) with c = 1[y ∈ set(x)]; its vertices
    are kept. Acceptance-one cone (``unit=True``): a row per pair with y ∈ set(x) and c = 0; its
    extreme rays are kept. Two generators are the same when their v and their Σ u_x D(x) agree
    on the simplex; the first one cddlib reports stands for both.
    """
    _ConeSize.of(structure, unit).refuse_if_large(max_variables, max_constraints)
    m, n = len(structure.atoms), structure.n
    rows = []
    for i, atom in enumerate(structure.atoms):
        for y in sorted(set(atom)) if unit else range(n):
            row = [0] * (1 + m + n)
            row[0], row[1 + i], row[1 + m + y] = 0 if unit else -int(y in atom), 1, 1
            rows.append(row)
    generators = enumerate_generators(rows)
    components = _components(structure, unit)
    _check_lineality(generators.lineality, components, m)
    distinct: dict[tuple, tuple[Vector, Vector]] = {}
    for generator in generators.rays if unit else generators.vertices:
        u, v = _canonical(generator, components, m, ray=unit)
        distinct.setdefault((v, structure._reduced_combination(u)), (u, v))
    return _CanonicalGenerators(generators, components, tuple((u, v, key[1]) for key, (u, v) in distinct.items()))


def _subset_of(v: Vector) -> Subset | None:
    if all(b in (0, 1) for b in v):
        return tuple(y for y, b in enumerate(v) if b == 1)
    return None


def _linear(weights: Sequence[Fraction], symbols: Sequence[sympy.Expr]) -> sympy.Expr:
    return sympy.Add(*(sympy.Rational(w.numerator, w.denominator) * s for w, s in zip(weights, symbols) if w))


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
    cone = _generators(structure, False, max_variables, max_constraints)
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
    q_part = _linear(u, structure.probabilities)
    subset = _subset_of(v)
    if subset is not None:
        claim = 1 - structure.containment(subset) if subset else sympy.Integer(1)
        if reduced == structure._reduced(claim):
            expression = _linear(v, structure.target) + claim
            return CutFormula(expression, subset, v, u)
    return CutFormula(_linear(v, structure.target) + q_part, None, v, u)


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
    n, k, law, merged = check_arguments(n, k, law, merge)
    _check_size(n, k, law, merged, False, max_variables, max_constraints)
    structure = draft_structure(n, k, law, merge=merged)
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
        return _components(self.structure, unit=True)


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
    cone = _generators(structure, True, max_variables, max_constraints)
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
    subset = _subset_of(v)
    if subset and min(u) < 0:
        containment = structure.containment(subset)
        if reduced == -structure._reduced(containment):
            return ConeInequality(_linear(v, structure.target), containment, subset, v, u)
    positive = [max(a, Fraction(0)) for a in u]
    negative = [max(-a, Fraction(0)) for a in u]
    lhs = _linear(v, structure.target) + _linear(positive, structure.probabilities)
    return ConeInequality(lhs, _linear(negative, structure.probabilities), None, v, u)


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
    n, k, law, merged = check_arguments(n, k, law, merge)
    _check_size(n, k, law, merged, True, max_variables, max_constraints)
    structure = draft_structure(n, k, law, merge=merged)
    return unit_cone(structure, max_variables=max_variables, max_constraints=max_constraints)
