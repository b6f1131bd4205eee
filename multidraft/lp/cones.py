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
from sympy.polys.rings import PolyRing

from multidraft.lp._polyhedra import enumerate_generators
from multidraft.theory.distributions import as_distribution, as_exact_distribution, check_count, is_exact_input
from multidraft.theory.limits import SizeEstimate, check_size
from multidraft.theory.laws import check_k

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

#: Draft laws with a symbolic structure here.
CONE_LAWS = ("iid", "wor", "independent")
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
#: Most atoms :func:`draft_structure` builds symbolically.
ATOM_LIMIT = 10_000

Subset = tuple[int, ...]
Vector = tuple[Fraction, ...]


# --------------------------------------------------------------------------- structure


def _atom_tokens(n: int, k: int, law: str, merged: bool) -> list[tuple[int, ...]]:
    if law == "wor":
        return list(itertools.combinations(range(n), k) if merged else itertools.permutations(range(n), k))
    if merged:
        return list(itertools.combinations_with_replacement(range(n), k))
    return list(itertools.product(range(n), repeat=k))


def _atom_count(n: int, k: int, law: str, merged: bool) -> int:
    if law == "wor":
        return math.comb(n, k) if merged else math.perm(n, k)
    return math.comb(n + k - 1, k) if merged else n**k


def _unit_count(n: int, k: int, law: str, merged: bool) -> int:
    """Σ_x |set(x)| over the atoms: the number of constraints of the acceptance-one cone."""
    if law == "wor":
        return k * _atom_count(n, k, law, merged)
    if merged:
        return n * math.comb(n + k - 2, k - 1)
    return n * (n**k - (n - 1) ** k)


def _check_arguments(n: int, k: int, law: str, merge: bool | None) -> tuple[int, int, str, bool]:
    n = check_count(n, "n", meaning="the vocabulary size")
    k = check_k(k)
    if law not in CONE_LAWS:
        raise ValueError(f"law: unknown draft law {law!r}; choose one of {', '.join(CONE_LAWS)}")
    if law == "wor" and k > n:
        raise ValueError(f"k: without replacement needs k <= n, got k={k} > n={n}")
    if merge is None:
        merge = law != "independent"
    if merge and law == "independent":
        raise ValueError("merge: independent (non-identical) drafts are not exchangeable; tuples cannot be merged")
    return int(n), k, law, bool(merge)


def cone_size(n: int, k: int, law: str = "iid", *, merge: bool | None = None, unit: bool = False) -> tuple[int, int]:
    """``(variables, constraints)`` of the dual polyhedron (or, with ``unit``, the acceptance-one cone).

    Variables: one u_x per atom plus one v_y per token; constraints: one per pair (x, y)
    (dual) or per pair with y ∈ set(x) (unit cone). Counted combinatorially, nothing built.

    >>> cone_size(3, 3)          # multisets of 3 tokens out of 3: C(5, 3) = 10 atoms
    (13, 30)
    >>> cone_size(3, 2, "independent", unit=True)
    (12, 15)
    """
    n, k, law, merged = _check_arguments(n, k, law, merge)
    atoms = _atom_count(n, k, law, merged)
    return atoms + n, _unit_count(n, k, law, merged) if unit else atoms * n


def _refuse_if_large(
    n: int, k: int, law: str, unit: bool, variables: int, constraints: int, max_variables: int, max_constraints: int
) -> None:
    """Refuse a cone too large to enumerate in reasonable time (the one size guard of
    :mod:`multidraft.theory.limits`), giving its size. Memory is not the binding limit here:
    the double description of a cone this small fits in a few MiB, time is what explodes."""
    what = "acceptance-one cone" if unit else "dual polyhedron"
    estimate = SizeEstimate(f"{what} (n={n}, k={k}, law={law})", variables, 0, constraints)
    alternative = (
        "the double-description enumeration would not finish in reasonable time; use "
        "multidraft.theory.optimal_acceptance (min-cut) for numbers, or raise the limits"
    )
    check_size(estimate, alternative, max_variables=max_variables, max_constraints=max_constraints)


def _check_size(n: int, k: int, law: str, merged: bool, unit: bool, max_variables: int, max_constraints: int) -> None:
    atoms = _atom_count(n, k, law, merged)
    constraints = _unit_count(n, k, law, merged) if unit else atoms * n
    _refuse_if_large(n, k, law, unit, atoms + n, constraints, max_variables, max_constraints)
    factors = sum(math.comb(n, j) for j in range(1, k)) if law == "wor" else 0
    estimate = SizeEstimate(
        f"exact simplification (n={n}, k={k}, law=wor)", factors, 0, unit="factors 1 - q(S) (|S| < k) in the common denominator"
    )
    alternative = "sympy would not finish in reasonable time; use multidraft.theory.optimal_acceptance (min-cut) for numbers"
    check_size(estimate, alternative, max_variables=DENOMINATOR_LIMIT, variables_name="DENOMINATOR_LIMIT")


@dataclass(frozen=True)
class DraftStructure:
    """The atoms of a draft law with their symbolic probabilities D(x).

    Attributes
    ----------
    n, k : int
        Vocabulary size and number of drafts.
    law : str
        ``"iid"``, ``"wor"`` or ``"independent"``: decides :meth:`containment` (the closed form
        of P_D(set(X) ⊆ T) taken from the law's definition, not from ``atoms``).
    merged : bool
        Whether atoms are multisets (exchangeable laws) rather than ordered tuples.
    atoms : tuple of tuple of int
        The draft atoms x (sorted when merged).
    probabilities : tuple of sympy.Expr
        D(x) for each atom, valid on the simplex Σ q = 1.
    target : tuple of sympy.Symbol
        ``p0..p{n-1}``.
    drafts : tuple of tuple of sympy.Symbol
        One symbol family per draft distribution: ``(q0..,)`` or ``(q1_0.., q2_0.., ...)``.
    """

    n: int
    k: int
    law: str
    merged: bool
    atoms: tuple[tuple[int, ...], ...]
    probabilities: tuple[sympy.Expr, ...]
    target: tuple[sympy.Symbol, ...]
    drafts: tuple[tuple[sympy.Symbol, ...], ...]

    def __post_init__(self) -> None:
        if len(self.atoms) != len(self.probabilities):
            raise ValueError(
                f"atoms: {len(self.atoms)} atoms but {len(self.probabilities)} probabilities"
            )
        if not self.atoms:
            raise ValueError("atoms: a draft structure needs at least one atom")
        for atom in self.atoms:
            if len(atom) != self.k or not all(0 <= t < self.n for t in atom):
                raise ValueError(f"atoms: {atom!r} is not a {self.k}-tuple of tokens in [0, {self.n})")

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """All symbols: the target's, then each draft family's."""
        return self.target + tuple(s for family in self.drafts for s in family)

    def containment(self, tokens: Sequence[int]) -> sympy.Expr:
        """Closed form of ``P_D(set(X) ⊆ T)`` from the law's definition.

        iid: q(T)^K; independent: Π_i q_i(T); without replacement: Σ over ordered K-tuples of
        distinct tokens of T of Π_i q(x_i) / (1 - Σ_{j<i} q(x_j)).
        """
        tokens = sorted(set(tokens))
        if self.law == "iid":
            return sympy.Add(*(self.drafts[0][t] for t in tokens)) ** self.k
        if self.law == "independent":
            return sympy.Mul(*(sympy.Add(*(family[t] for t in tokens)) for family in self.drafts))
        return sympy.Add(*(_wor_sequence(self.drafts[0], x) for x in itertools.permutations(tokens, self.k)))

    def on_simplex(self, expression: sympy.Expr) -> sympy.Expr:
        """Canonical form ``N / L`` of an expression on the simplex.

        Each draft family's last symbol is replaced by ``1 - Σ others``; L is the fixed common
        denominator of the law (the product of the factors ``1 - q(S)`` of the
        without-replacement probabilities; 1 for iid and independent drafts) and N the
        expanded polynomial ``expression · L`` in the remaining symbols. Two expressions agree
        on the simplex iff their forms are equal; a zero form proves an identity (a
        polynomial vanishing on an open set is zero).

        >>> s = draft_structure(2, 2)
        >>> s.on_simplex(sum(s.probabilities))
        1
        >>> draft_structure(3, 2, "wor").on_simplex(draft_structure(3, 2, "wor").containment([0, 1, 2]))
        1
        """
        return self._reduced(expression).as_expr() / self._algebra[3].as_expr()

    @cached_property
    def _algebra(self):
        """(ring, substitution, denominator factors {base: power}, L as a ring element)."""
        free = self.target + tuple(s for family in self.drafts for s in family[:-1])
        ring = PolyRing(free, sympy.QQ)
        last = {family[-1]: 1 - sympy.Add(*family[:-1]) for family in self.drafts}
        factors: dict[sympy.Expr, int] = {}
        for expression in (*self.probabilities, self.containment(range(self.n))):
            for term in sympy.Add.make_args(expression):
                for base, power in _split(term)[1].items():
                    factors[base] = max(factors.get(base, 0), power)
        bases = {base: ring.from_expr(base.xreplace(last)) for base in factors}
        common = ring.one
        for base, power in factors.items():
            common *= bases[base] ** power
        cofactors: dict[frozenset, object] = {}  # L / (a term's denominator), memoised
        return ring, last, factors, common, bases, cofactors

    def _reduced(self, expression: sympy.Expr):
        """The numerator N of :meth:`on_simplex` as a (hashable) ring element."""
        ring, last, factors, _, bases, cofactors = self._algebra
        total = ring.zero
        for term in sympy.Add.make_args(expression):
            numerator, denominator = _split(term)
            if any(power > factors.get(base, 0) for base, power in denominator.items()):
                raise ValueError(
                    f"expression: a denominator of {term} is not among the draft law's {sorted(map(str, factors))}"
                )
            try:
                poly = ring.from_expr(numerator.xreplace(last))
            except ValueError:
                raise ValueError(f"expression: {term} is not a polynomial over the law's denominators") from None
            key = frozenset(denominator.items())
            if key not in cofactors:
                cofactor = ring.one
                for base, power in factors.items():
                    cofactor *= bases[base] ** (power - denominator.get(base, 0))
                cofactors[key] = cofactor
            total += poly * cofactors[key]
        return total

    @cached_property
    def _reduced_atoms(self) -> tuple:
        """N for every atom probability D(x): formulas reduce by linear combination."""
        return tuple(self._reduced(d) for d in self.probabilities)

    def _reduced_combination(self, weights: Sequence[Fraction]):
        ring = self._algebra[0]
        total = ring.zero
        for weight, atom in zip(weights, self._reduced_atoms):
            if weight:
                total += atom * ring.domain(weight.numerator, weight.denominator)
        return total

    @cached_property
    def _float_probabilities(self):
        """D(x) for all atoms as one float function of (p, q...) (sympy.lambdify, math module)."""
        return sympy.lambdify(self.symbols, list(self.probabilities), "math")

    def atom_values(self, target: object, draft: object) -> tuple[np.ndarray, np.ndarray, bool]:
        """Evaluate ``(p, D(x) for every atom, exact)`` at a point.

        ``draft`` is one distribution (iid, wor) or a sequence of K (independent). Exact
        Fractions (or ``"a/b"`` strings) give exact object arrays; floats give float arrays.
        """
        families = [draft] if len(self.drafts) == 1 else list(draft)
        if len(families) != len(self.drafts):
            raise ValueError(
                f"draft: the {self.law} law needs {len(self.drafts)} draft distributions, got {len(families)}"
            )
        exact = is_exact_input(target) and all(is_exact_input(f) for f in families)
        convert = as_exact_distribution if exact else as_distribution
        p = convert(target, "target")
        qs = [convert(f, "draft" if len(families) == 1 else f"draft[{i}]") for i, f in enumerate(families)]
        for name, values in [("target", p)] + [("draft", q) for q in qs]:
            if len(values) != self.n:
                raise ValueError(f"{name}: length {len(values)} does not match n={self.n}")
        if exact:
            coordinates = (*p, *itertools.chain(*qs))
            mapping = {s: sympy.Rational(v.numerator, v.denominator) for s, v in zip(self.symbols, coordinates)}
            values = [expression.xreplace(mapping) for expression in self.probabilities]
            if not all(isinstance(v, sympy.Rational) for v in values):
                raise ValueError("draft: the draft law's probabilities are undefined at this point")
            atoms = np.array([Fraction(int(v.p), int(v.q)) for v in values], dtype=object)
            return np.array(p, dtype=object), atoms, True
        try:
            atoms = np.asarray(self._float_probabilities(*p, *itertools.chain(*qs)), dtype=np.float64).reshape(-1)
        except ZeroDivisionError:
            raise ValueError("draft: the draft law's probabilities are undefined at this point") from None
        return p, atoms, False


def _split(term: sympy.Expr) -> tuple[sympy.Expr, dict[sympy.Expr, int]]:
    """A product term as (numerator, {denominator base: power})."""
    numerator, denominator = [], {}
    for factor in sympy.Mul.make_args(term):
        base, power = factor.as_base_exp()
        if power.is_Integer and power < 0:
            denominator[base] = denominator.get(base, 0) - int(power)
        else:
            numerator.append(factor)
    return sympy.Mul(*numerator), denominator


def _wor_sequence(family: Sequence[sympy.Symbol], ordered: Sequence[int]) -> sympy.Expr:
    """Π_i q(x_i) / (1 - Σ_{j<i} q(x_j)): one ordered draw without replacement."""
    factors, drawn = [], []
    for t in ordered:
        factors.append(family[t] / (1 - sympy.Add(*drawn)) if drawn else family[t])
        drawn.append(family[t])
    return sympy.Mul(*factors)


def draft_structure(n: int, k: int, law: str = "iid", *, merge: bool | None = None) -> DraftStructure:
    """The atoms x and symbolic probabilities D(x) of a draft law on Ω = {0..n-1}.

    iid: D(x) = Π_i q(x_i) per tuple, or multinomial(K; counts) · Π_i q(x_i) per multiset;
    independent: D(x) = Π_i q_i(x_i) per tuple; wor: the sequential product per tuple of
    distinct tokens, summed over orderings per set. ``merge=None`` merges exactly the
    exchangeable laws (iid, wor).

    >>> s = draft_structure(2, 2)
    >>> s.atoms, s.probabilities
    (((0, 0), (0, 1), (1, 1)), (q0**2, 2*q0*q1, q1**2))
    >>> draft_structure(2, 2, "independent").probabilities[1]
    q1_0*q2_1
    """
    n, k, law, merged = _check_arguments(n, k, law, merge)
    count = _atom_count(n, k, law, merged)
    estimate = SizeEstimate(f"draft structure (n={n}, k={k}, law={law})", count, 0, unit="draft atoms")
    check_size(estimate, "use multidraft.theory.optimal_acceptance (min-cut) for numbers", max_variables=ATOM_LIMIT,
               variables_name="ATOM_LIMIT")  # fmt: skip
    target = sympy.symbols(f"p0:{n}")
    if law == "independent":
        drafts = tuple(sympy.symbols(f"q{i + 1}_0:{n}") for i in range(k))
    else:
        drafts = (sympy.symbols(f"q0:{n}"),)
    atoms = _atom_tokens(n, k, law, merged)
    probabilities = []
    for atom in atoms:
        if law == "independent":
            probabilities.append(sympy.Mul(*(drafts[i][t] for i, t in enumerate(atom))))
        elif law == "wor":
            orders = itertools.permutations(atom) if merged else [atom]
            probabilities.append(sympy.Add(*(_wor_sequence(drafts[0], x) for x in orders)))
        else:
            q = drafts[0]
            weight = math.factorial(k) // math.prod(math.factorial(atom.count(t)) for t in set(atom)) if merged else 1
            probabilities.append(weight * sympy.Mul(*(q[t] for t in atom)))
    return DraftStructure(n, k, law, merged, tuple(atoms), tuple(probabilities), tuple(target), tuple(drafts))


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
        return tuple(t for t in every if t not in present and not (t and _never_contains(self.structure, t)))

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


def _never_contains(structure: DraftStructure, subset: Subset) -> bool:
    """Whether P_D(set(X) ⊆ T) ≡ 0 on the simplex (T = ∅; |T| < K without replacement)."""
    return structure._reduced(structure.containment(subset)) == 0


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
    m, n = len(structure.atoms), structure.n
    _refuse_if_large(n, structure.k, structure.law, False, m + n, m * n, max_variables, max_constraints)
    rows = []
    for i, atom in enumerate(structure.atoms):
        for y in range(n):
            row = [0] * (1 + m + n)
            row[0], row[1 + i], row[1 + m + y] = -int(y in atom), 1, 1
            rows.append(row)
    generators = enumerate_generators(rows)
    components = _components(structure, unit=False)
    _check_lineality(generators.lineality, components, m)

    distinct: dict[tuple, tuple[Vector, Vector]] = {}
    for vertex in generators.vertices:
        u, v = _canonical(vertex, components, m, ray=False)
        key = (v, structure._reduced_combination(u))
        distinct.setdefault(key, (u, v))
    formulas = sorted((_formula(structure, u, v, key[1]) for key, (u, v) in distinct.items()), key=_order)
    formulas = _with_witnesses(structure, formulas)
    return AcceptanceFormulas(
        structure=structure,
        vertices=len(generators.vertices),
        rays=len(generators.rays),
        lineality=len(generators.lineality),
        formulas=tuple(formulas),
        duplicates=len(generators.vertices) - len(distinct),
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
    n, k, law, merged = _check_arguments(n, k, law, merge)
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
        return tuple(t for t in expected if t not in present and not _never_contains(self.structure, t))

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
    m, n = len(structure.atoms), structure.n
    pairs = [(i, y) for i, atom in enumerate(structure.atoms) for y in sorted(set(atom))]
    _refuse_if_large(n, structure.k, structure.law, True, m + n, len(pairs), max_variables, max_constraints)
    rows = []
    for i, y in pairs:
        row = [0] * (1 + m + n)
        row[1 + i], row[1 + m + y] = 1, 1
        rows.append(row)
    generators = enumerate_generators(rows)
    components = _components(structure, unit=True)
    _check_lineality(generators.lineality, components, m)

    seen, nontrivial, trivial = set(), [], []
    for ray in generators.rays:
        u, v = _canonical(ray, components, m, ray=True)
        key = (v, structure._reduced_combination(u))
        if key in seen:
            continue
        seen.add(key)
        inequality = _inequality(structure, u, v, key[1])
        (trivial if min(u) >= 0 else nontrivial).append(inequality)
    equalities = ()
    if len(components) > 1:
        equalities = tuple(
            (sympy.Add(*(structure.probabilities[a] for a in atoms)), sympy.Add(*(structure.target[y] for y in tokens)))
            for atoms, tokens in components
        )
    return UnitCone(
        structure=structure,
        rays=len(generators.rays),
        lineality=len(generators.lineality),
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
    n, k, law, merged = _check_arguments(n, k, law, merge)
    _check_size(n, k, law, merged, True, max_variables, max_constraints)
    structure = draft_structure(n, k, law, merge=merged)
    return unit_cone(structure, max_variables=max_variables, max_constraints=max_constraints)
