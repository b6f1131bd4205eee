"""Draft structures: the atoms of a draft law with their symbolic probabilities D(x), and the
exact algebra on the simplex that the double-description duals of :mod:`multidraft.lp.cones`
are simplified and compared in.

A :class:`DraftStructure` lists the draft atoms x (tuples, or multisets for an exchangeable law)
with D(x) as sympy expressions in ``p0..p{n-1}`` and ``q0..q{n-1}`` (``q1_0.., q2_0..`` for
independent drafts), gives the closed form of ``P_D(set(X) ⊆ T)`` from the law's definition,
and reduces any expression to a canonical form ``N / L`` on the simplex (each family's last
symbol eliminated by Σ q = 1, L the law's fixed common denominator), so that two expressions
agree on the simplex iff their forms are equal. Public names are re-exported by
:mod:`multidraft.lp.cones`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np
import sympy
from sympy.polys.rings import PolyRing

from multidraft.theory.laws import (
    IID,
    DraftLaw,
    Independent,
    SizeEstimate,
    WithoutReplacement,
    as_distribution,
    as_exact_distribution,
    check_count,
    check_k,
    check_size,
    is_exact_input,
)

__all__ = [
    "CONE_LAWS",
    "ATOM_LIMIT",
    "Subset",
    "Vector",
    "DraftStructure",
    "draft_structure",
    "atom_count",
    "unit_count",
    "check_arguments",
    "never_contains",
]

#: Most atoms :func:`draft_structure` builds symbolically.
ATOM_LIMIT = 10_000

Subset = tuple[int, ...]
Vector = tuple[Fraction, ...]


class _Symbolic:
    """The symbolic side of one draft-law class: its atoms and D(x) as sympy expressions, and
    ``P_D(set(X) ⊆ T)`` in closed form from the law's definition (next to the numeric law in
    :mod:`multidraft.theory.laws`). Defaults: K coordinates drawn from one draft family."""

    law: type[DraftLaw]

    def check(self, n: int, k: int) -> None:
        """Refuse an (n, K) the law cannot have."""

    def atoms(self, n: int, k: int, merged: bool) -> list[tuple[int, ...]]:
        if merged:
            return list(itertools.combinations_with_replacement(range(n), k))
        return list(itertools.product(range(n), repeat=k))

    def atom_count(self, n: int, k: int, merged: bool) -> int:
        return math.comb(n + k - 1, k) if merged else n**k

    def unit_count(self, n: int, k: int, merged: bool) -> int:
        if merged:
            return n * math.comb(n + k - 2, k - 1)
        return n * (n**k - (n - 1) ** k)

    def families(self, n: int, k: int) -> tuple[tuple[sympy.Symbol, ...], ...]:
        return (sympy.symbols(f"q0:{n}"),)

    def denominator_factors(self, n: int, k: int) -> int:
        """Factors ``1 - q(S)`` of the law's common denominator (0: a polynomial law)."""
        return 0


class _SymbolicIID(_Symbolic):
    law = IID

    def probability(self, atom: tuple[int, ...], drafts, merged: bool) -> sympy.Expr:
        q, k = drafts[0], len(atom)
        weight = math.factorial(k) // math.prod(math.factorial(atom.count(t)) for t in set(atom)) if merged else 1
        return weight * sympy.Mul(*(q[t] for t in atom))

    def containment(self, tokens: Sequence[int], drafts, k: int) -> sympy.Expr:
        return sympy.Add(*(drafts[0][t] for t in tokens)) ** k


class _SymbolicIndependent(_Symbolic):
    law = Independent

    def families(self, n: int, k: int) -> tuple[tuple[sympy.Symbol, ...], ...]:
        return tuple(sympy.symbols(f"q{i + 1}_0:{n}") for i in range(k))

    def probability(self, atom: tuple[int, ...], drafts, merged: bool) -> sympy.Expr:
        return sympy.Mul(*(drafts[i][t] for i, t in enumerate(atom)))

    def containment(self, tokens: Sequence[int], drafts, k: int) -> sympy.Expr:
        return sympy.Mul(*(sympy.Add(*(family[t] for t in tokens)) for family in drafts))


class _SymbolicWithoutReplacement(_Symbolic):
    law = WithoutReplacement

    def check(self, n: int, k: int) -> None:
        if k > n:
            raise ValueError(f"k: without replacement needs k <= n, got k={k} > n={n}")

    def atoms(self, n: int, k: int, merged: bool) -> list[tuple[int, ...]]:
        return list(itertools.combinations(range(n), k) if merged else itertools.permutations(range(n), k))

    def atom_count(self, n: int, k: int, merged: bool) -> int:
        return math.comb(n, k) if merged else math.perm(n, k)

    def unit_count(self, n: int, k: int, merged: bool) -> int:
        return k * self.atom_count(n, k, merged)

    def denominator_factors(self, n: int, k: int) -> int:
        return sum(math.comb(n, j) for j in range(1, k))

    def probability(self, atom: tuple[int, ...], drafts, merged: bool) -> sympy.Expr:
        orders = itertools.permutations(atom) if merged else [atom]
        return sympy.Add(*(_wor_sequence(drafts[0], x) for x in orders))

    def containment(self, tokens: Sequence[int], drafts, k: int) -> sympy.Expr:
        return sympy.Add(*(_wor_sequence(drafts[0], x) for x in itertools.permutations(tokens, k)))


#: The symbolic form of each draft-law class that has one, by kind (``law.name``).
_SYMBOLIC: dict[str, _Symbolic] = {
    form.law.name: form for form in (_SymbolicIID(), _SymbolicWithoutReplacement(), _SymbolicIndependent())
}
#: Kinds of draft law with a symbolic structure here.
CONE_LAWS = tuple(_SYMBOLIC)


def _symbolic(law: str) -> _Symbolic:
    if law not in _SYMBOLIC:
        raise ValueError(f"law: unknown draft law {law!r}; choose one of {', '.join(CONE_LAWS)}")
    return _SYMBOLIC[law]


def atom_count(n: int, k: int, law: str, merged: bool) -> int:
    """Number of draft atoms: K-tuples or K-multisets of Ω (iid, independent); K-permutations
    or K-subsets (without replacement)."""
    return _symbolic(law).atom_count(n, k, merged)


def unit_count(n: int, k: int, law: str, merged: bool) -> int:
    """Σ_x |set(x)| over the atoms: the number of constraints of the acceptance-one cone."""
    return _symbolic(law).unit_count(n, k, merged)


def denominator_factors(n: int, k: int, law: str) -> int:
    """Factors ``1 - q(S)`` in the common denominator of the law's D(x) (0 for a polynomial law)."""
    return _symbolic(law).denominator_factors(n, k)


def check_arguments(n: int, k: int, law: str, merge: bool | None) -> tuple[int, int, str, bool]:
    """Validated ``(n, k, law, merged)``; ``merge=None`` merges exactly the exchangeable laws."""
    n = check_count(n, "n", meaning="the vocabulary size")
    k = check_k(k)
    form = _symbolic(law)
    form.check(n, k)
    if merge is None:
        merge = form.law.symmetric
    if merge and not form.law.symmetric:
        raise ValueError(f"merge: {law} (non-identical) drafts are not exchangeable; tuples cannot be merged")
    return int(n), k, law, bool(merge)


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
        return _symbolic(self.law).containment(sorted(set(tokens)), self.drafts, self.k)

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
    n, k, law, merged = check_arguments(n, k, law, merge)
    count = atom_count(n, k, law, merged)
    estimate = SizeEstimate(f"draft structure (n={n}, k={k}, law={law})", count, 0, unit="draft atoms")
    check_size(estimate, "use multidraft.theory.optimal_acceptance (min-cut) for numbers", max_variables=ATOM_LIMIT,
               variables_name="ATOM_LIMIT")  # fmt: skip
    form = _symbolic(law)
    target = sympy.symbols(f"p0:{n}")
    drafts = form.families(n, k)
    atoms = form.atoms(n, k, merged)
    probabilities = [form.probability(atom, drafts, merged) for atom in atoms]
    return DraftStructure(n, k, law, merged, tuple(atoms), tuple(probabilities), tuple(target), tuple(drafts))


def never_contains(structure: DraftStructure, subset: Subset) -> bool:
    """Whether P_D(set(X) ⊆ T) ≡ 0 on the simplex (T = ∅; |T| < K without replacement)."""
    return structure._reduced(structure.containment(subset)) == 0
