"""The double-description pipeline shared by the dual polyhedron and the acceptance-one cone
of :mod:`multidraft.lp.cones`: the size guard (refuse before anything is built), the rows
``u_x + v_y >= c`` of a draft structure, their exact generators (pycddlib), the check of
cddlib's lineality against the constraint graph, and the canonical representatives modulo
lineality, deduplicated on the simplex.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import sympy

from multidraft.lp._polyhedra import Generators, enumerate_generators
from multidraft.lp._structure import (
    DraftStructure,
    Subset,
    Vector,
    atom_count,
    check_arguments,
    denominator_factors,
    draft_structure,
    unit_count,
)
from multidraft.theory.laws import SizeEstimate, check_size

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
        :mod:`multidraft.theory.laws`), giving its size. Memory is not the binding limit here:
        the double description of a cone this small fits in a few MiB, time is what explodes."""
        what = "acceptance-one cone" if self.unit else "dual polyhedron"
        estimate = SizeEstimate(f"{what} (n={self.n}, k={self.k}, law={self.law})", self.variables, 0, self.constraints)
        alternative = (
            "the double-description enumeration would not finish in reasonable time; use "
            "multidraft.theory.optimal_acceptance (min-cut) for numbers, or raise the limits"
        )
        check_size(estimate, alternative, max_variables=max_variables, max_constraints=max_constraints)


def checked_structure(
    n: int, k: int, law: str, merge: bool | None, unit: bool, max_variables: int, max_constraints: int
) -> DraftStructure:
    """The draft structure of (n, K, law), refused before it is built when its cone is too
    large (:data:`VARIABLE_LIMIT`, :data:`CONSTRAINT_LIMIT`) or, for drafts without
    replacement, its common denominator has too many factors (:data:`DENOMINATOR_LIMIT`)."""
    n, k, law, merged = check_arguments(n, k, law, merge)
    size = _ConeSize.counted(n, k, law, merged, unit)
    size.refuse_if_large(max_variables, max_constraints)
    factors = denominator_factors(n, k, law)
    estimate = SizeEstimate(
        f"exact simplification (n={n}, k={k}, law={law})", factors, 0, unit="factors 1 - q(S) (|S| < k) in the common denominator"
    )
    alternative = "sympy would not finish in reasonable time; use multidraft.theory.optimal_acceptance (min-cut) for numbers"
    check_size(estimate, alternative, max_variables=DENOMINATOR_LIMIT, variables_name="DENOMINATOR_LIMIT")
    return draft_structure(n, k, law, merge=merged)


# --------------------------------------------------------------------------- lineality


def constraint_components(structure: DraftStructure, unit: bool) -> list[tuple[list[int], list[int]]]:
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
class CanonicalGenerators:
    """A cone's generators from cddlib, and the distinct canonical ones (see :func:`canonical_generators`)."""

    generators: Generators
    components: list[tuple[list[int], list[int]]]
    #: ``(u, v, N)`` per distinct generator in cddlib's order, N the canonical form of
    #: Σ u_x D(x) on the simplex (``DraftStructure._reduced_combination``).
    distinct: tuple[tuple[Vector, Vector, object], ...]


def canonical_generators(
    structure: DraftStructure, unit: bool, max_variables: int, max_constraints: int
) -> CanonicalGenerators:
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
    components = constraint_components(structure, unit)
    _check_lineality(generators.lineality, components, m)
    distinct: dict[tuple, tuple[Vector, Vector]] = {}
    for generator in generators.rays if unit else generators.vertices:
        u, v = _canonical(generator, components, m, ray=unit)
        distinct.setdefault((v, structure._reduced_combination(u)), (u, v))
    return CanonicalGenerators(generators, components, tuple((u, v, key[1]) for key, (u, v) in distinct.items()))


def subset_of(v: Vector) -> Subset | None:
    if all(b in (0, 1) for b in v):
        return tuple(y for y, b in enumerate(v) if b == 1)
    return None


def linear(weights: Sequence[Fraction], symbols: Sequence[sympy.Expr]) -> sympy.Expr:
    return sympy.Add(*(sympy.Rational(w.numerator, w.denominator) * s for w, s in zip(weights, symbols) if w))
