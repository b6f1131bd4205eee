"""Importance-weighted selection (Theorem 1 of Khisti et al.) and its LPs.

Theorem 1 (canonical decomposition): every optimal multi-draft scheme can be rebuilt as

1. **importance-weighted selection** -- from the draft tuple x pick ``Y' ∈ set(x)`` with
   weights ``β_y(x) >= 0``, ``Σ_{y ∈ set(x)} β_y(x) = 1``; this induces the intermediate law
   ``r(y) = Σ_x D(x) β_y(x)``;
2. **single-draft speculative sampling** of Y' against the target p with draft distribution r
   (accept with probability ``min(1, p(Y')/r(Y'))``, else sample ``norm((p - r)_+)``),

with acceptance ``Σ_y min(p(y), r(y))``, so ``P* = max_β Σ_y min(p(y), r(y))``. Any fixed β is
lossless (step 2 outputs exactly p), so every selection here is lossless by construction and the
LPs only decide how much is accepted.

This module solves that maximisation several ways (theory.md, "Canonical decomposition" and
"Importance-weighted LP and its truncation"):

* :func:`importance_lp` -- over tuples, any K and any draft law;
* :func:`importance_from_coupling` -- β read off an optimal transport plan;
* :func:`pair_importance_lp` -- K = 2 pair form with weights ``w_ij`` (O(n²) variables);

and :mod:`multidraft.lp.truncated` builds on it: the truncation of Section 4 (an optimum over
the tuples of the top-s tokens only, any K) and the multi-stage selection for K > 2.

Every result is an :class:`ImportanceSelection`: ``acceptance``, the intermediate law
``intermediate`` (checked to be a probability distribution) and
``selection_probabilities(drafts)``, the probability of selecting each draft position. The
acceptance is that of the returned selection, exact by construction (r is recomputed from the
weights), so a true lower bound on P*; the LPs here also certify it against the min-cut P*
(``certification``: within 1e-9, else another solver route, else ``SolverError``).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

import numpy as np

from multidraft.lp._solve import (
    CERTIFIED_GAP,
    FEASIBILITY_TOLERANCE,
    MAX_VARIABLES,
    Certification,
    certify,
    check_lp_solver,
    lp_size,
    min_cut_bound,
    solve_certified,
)
from multidraft.lp.transport import TransportSolution, law_tuples
from multidraft.theory.laws import IID, DraftLaw, Independent, check_law, optimum_advice

__all__ = [
    "ImportanceSelection",
    "TupleSelection",
    "PairSelection",
    "importance_lp",
    "importance_from_coupling",
    "pair_importance_lp",
    "drafts_law",
]


def _check_drafts(drafts: object, k: int, n: int) -> np.ndarray:
    """Validate draft token ids ``[..., k]`` against k and the vocabulary size n."""
    array = np.asarray(drafts)
    if array.ndim < 1 or array.shape[-1] != k:
        raise ValueError(f"drafts: expected token ids of shape [..., {k}] (k={k}), got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"drafts: token ids must be integers, got dtype {array.dtype}")
    if array.size and ((array < 0).any() or (array >= n).any()):
        raise ValueError(f"drafts: token ids must lie in [0, {n})")
    return array.astype(np.int64)


def _certified_intermediate(r: np.ndarray, what: str, solver: str, variables: int, constraints: int) -> np.ndarray:
    """Check that r is a probability distribution (up to the solver tolerance) and return it
    with rounding removed (negative rounding clipped, renormalised)."""
    smallest, total = float(r.min()), float(r.sum())
    certify(smallest >= -FEASIBILITY_TOLERANCE, what, f"intermediate law has entry {smallest:.3g} < 0", solver, variables, constraints)
    certify(abs(total - 1.0) <= FEASIBILITY_TOLERANCE, what, f"intermediate law sums to {total:.9g}", solver, variables, constraints)
    if smallest < 0:
        r = np.maximum(r, 0.0)
        total = float(r.sum())
    return r / total


def _acceptance(p: np.ndarray, r: np.ndarray) -> float:
    return float(np.minimum(p, r).sum())


def _certify_objective(z: np.ndarray, p: np.ndarray, r: np.ndarray, what: str, solver: str, size: tuple[int, int]) -> None:
    """Check the solver's ``z`` against ``z_y <= min(p(y), r(y))`` entry by entry, r recomputed
    from the returned weights. Then the returned ``Σ min(p, r)`` (the exact acceptance of the
    returned, lossless selection) is at least the solver's optimum ``Σ z`` minus these
    violations: the certificate does not loosen with the number of rows, as a test of the
    total objective against a fixed tolerance would."""
    excess = float(np.max(z - np.minimum(p, r), initial=0.0))
    certify(excess <= FEASIBILITY_TOLERANCE, what, f"solver's z exceeds min(p, r) by {excess:.3g}", solver, *size)


@dataclass(frozen=True, eq=False)
class ImportanceSelection(ABC):
    """Step 1 of Theorem 1 for K drafts: selection weights and the law r they induce.

    Attributes
    ----------
    acceptance : float
        ``Σ_y min(p(y), r(y))``: the acceptance of selection followed by the single-draft step.
    intermediate : ndarray, shape (n,)
        ``r(y) = Σ_x D(x) β_y(x)``, the law of the selected token; a probability distribution.
    status, solver : str
        Solver status (``"optimal"``) and the solver that answered.
    seconds : float
        Wall time to build, solve and check.
    certification : Certification or None
        For the optima (:func:`importance_lp`, :func:`pair_importance_lp`,
        :func:`importance_from_coupling`): the route that answered, the min-cut P* and the gap
        ``P* - acceptance`` (at most 1e-9). None for selections that are not optima
        (truncated, multi-stage).
    """

    acceptance: float
    intermediate: np.ndarray
    status: str
    solver: str
    seconds: float
    certification: Certification | None = field(default=None, kw_only=True)

    @property
    @abstractmethod
    def k(self) -> int:
        """Number of drafts the selection chooses among."""

    @abstractmethod
    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        """``drafts [..., K]`` int -> ``[..., K]``: probability of selecting draft position i.

        Rows sum to one; a token repeated at several positions shares its weight among them.
        """


@dataclass(frozen=True, eq=False)
class TupleSelection(ImportanceSelection):
    """Selection weights stored per draft tuple (any K): :func:`importance_lp` and
    :func:`importance_from_coupling`.

    ``weights[i, j]`` is the probability of selecting position j of ``tuples[i]`` (sorted
    multiset representatives when ``merged``). Looking up a tuple of probability zero raises
    ``ValueError``.
    """

    tuples: np.ndarray
    weights: np.ndarray
    merged: bool
    _alphabets: tuple[np.ndarray, ...] = field(init=False, repr=False)
    _codes: np.ndarray = field(init=False, repr=False)
    _order: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Tuples are coded in a mixed radix over the tokens seen at each position, so the code
        # range is at most Π_j |alphabet_j| (about m, or m·K! for merged multisets).
        alphabets = tuple(np.unique(column) for column in self.tuples.T)
        object.__setattr__(self, "_alphabets", alphabets)
        codes, _ = self._encode(self.tuples)
        object.__setattr__(self, "_order", np.argsort(codes, kind="stable"))
        object.__setattr__(self, "_codes", codes[self._order])

    @property
    def k(self) -> int:
        return int(self.tuples.shape[1])

    def _encode(self, tuples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mixed-radix codes of tuple rows and whether every token was seen at its position."""
        codes = np.zeros(len(tuples), dtype=np.int64)
        known = np.ones(len(tuples), dtype=bool)
        for column, alphabet in zip(tuples.T, self._alphabets):
            index = np.minimum(np.searchsorted(alphabet, column), len(alphabet) - 1)
            known &= alphabet[index] == column
            codes = codes * len(alphabet) + index
        return codes, known

    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        drafts = _check_drafts(drafts, self.k, len(self.intermediate))
        flat = drafts.reshape(-1, self.k)
        perm = np.argsort(flat, axis=-1, kind="stable") if self.merged else np.tile(np.arange(self.k), (len(flat), 1))
        codes, known = self._encode(np.take_along_axis(flat, perm, axis=-1))
        slot = np.minimum(np.searchsorted(self._codes, codes), len(self._codes) - 1)
        known &= self._codes[slot] == codes
        if not known.all():
            bad = flat[int(np.argmin(known))].tolist()
            raise ValueError(f"drafts: tuple {bad} has probability zero under the law this selection was built for")
        out = np.empty(flat.shape)
        np.put_along_axis(out, perm, self.weights[self._order[slot]], axis=-1)
        return out.reshape(drafts.shape)


@dataclass(frozen=True, eq=False)
class PairSelection(ImportanceSelection):
    """K = 2 selection with a full weight matrix: ``weights[i, j]`` is the probability of
    selecting the first draft when the drafts are (i, j) (1 on the diagonal and on pairs of
    probability zero, where the choice does not matter)."""

    weights: np.ndarray

    @property
    def k(self) -> int:
        return 2

    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        drafts = _check_drafts(drafts, 2, len(self.intermediate))
        first = self.weights[drafts[..., 0], drafts[..., 1]]
        return np.stack([first, 1.0 - first], axis=-1)


def _distinct_pairs(tuples: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (tuple row i, token y ∈ set(x_i)), each once, sorted by (i, y); O(m·K) memory."""
    codes = np.unique(np.repeat(np.arange(len(tuples), dtype=np.int64), tuples.shape[1]) * n + tuples.reshape(-1))
    return codes // n, codes % n


def _tuple_selection(
    p: np.ndarray,
    tuples: np.ndarray,
    probs: np.ndarray,
    merged: bool,
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    status: str,
    solver: str,
    what: str,
    size: tuple[int, int],
) -> TupleSelection:
    """Assemble a TupleSelection from selected masses ``mass ≈ D(x_i) β_y(x_i)`` given as
    ``pairs = (rows, tokens, mass)`` over :func:`_distinct_pairs`.

    The masses must sum to ``D(x_i)`` per tuple up to the solver tolerance (absolute). The
    weights are the masses normalised per tuple (a tuple of tiny probability may carry a large
    *relative* solver error, which is harmless but must not break ``Σ β = 1``), and r is then
    recomputed from those weights, so it is exactly the law that ``selection_probabilities``
    induces.
    """
    rows, tokens, mass = pairs
    m, k, n = len(tuples), tuples.shape[1], len(p)
    row_mass = np.bincount(rows, weights=mass, minlength=m)
    row_error = float(np.abs(row_mass - probs).max()) if m else 0.0
    certify(row_error <= FEASIBILITY_TOLERANCE, what, f"selected mass differs from D(x) by {row_error:.3g}", solver, *size)
    # Mass of the token at each position, shared among the positions holding that token.
    slot = np.searchsorted(rows * n + tokens, np.arange(m, dtype=np.int64)[:, None] * n + tuples)
    multiplicity = (tuples[:, :, None] == tuples[:, None, :]).sum(axis=-1)
    chosen = mass[slot] / multiplicity
    totals = chosen.sum(axis=1, keepdims=True)
    weights = np.where(totals > 0, chosen / np.where(totals > 0, totals, 1.0), 1.0 / k)
    r = np.bincount(tuples.reshape(-1), weights=(probs[:, None] * weights).reshape(-1), minlength=n)
    r = _certified_intermediate(r, what, solver, *size)
    return TupleSelection(_acceptance(p, r), r, status, solver, 0.0, tuples, weights, merged)


def importance_lp(
    target: object,
    law,
    *,
    solver: str = "HIGHS",
    merge_symmetric: bool = True,
    max_variables: int = MAX_VARIABLES,
    verbose: bool | None = None,
    progress: bool = True,
) -> TupleSelection:
    """Solve ``max_β Σ_y min(p(y), r(y))`` with ``r(y) = Σ_x D(x) β_y(x)`` over tuples (any K).

    In mass variables ``b(x, y) = D(x) β_y(x)`` for ``y ∈ set(x)``:

        maximise Σ_y z_y  s.t.  Σ_{y ∈ set(x)} b(x, y) = D(x),  z_y <= p(y),
                                z_y <= Σ_x b(x, y),  b >= 0.

    At most ``m·K + n`` variables (m tuples; multisets for exchangeable laws), against ``m·n``
    for the transport LP; the optimum is the same P* (Theorem 1).

    The returned ``Σ min(p, r)`` is certified against the min-cut P* (within 1e-9;
    ``certification``). Raises ``ProblemTooLargeError`` beyond ``max_variables`` (or the
    memory limit), before anything is built, and ``SolverError`` when no solver route gives a
    point that passes the re-check (status optimal, selected mass sums to D(x) per tuple, r a
    distribution, objective = ``Σ min(p, r)``) and lies within 1e-9 of the min-cut. Memory
    O(m·K + n). ``solver``, ``verbose`` and ``progress`` as for
    :func:`~multidraft.lp.transport_lp`.

    >>> from multidraft.theory import IID
    >>> selection = importance_lp([1/3, 1/6, 1/2], IID([1/3, 1/3, 1/3], k=2))
    >>> round(selection.acceptance, 9)
    1.0
    >>> selection.selection_probabilities([[2, 1]]).sum(axis=-1)
    array([1.])

    Reference: Khisti et al., ICLR 2025, Theorem 1 and eq. (5).
    """
    import cvxpy as cp
    import scipy.sparse as sp

    solver = check_lp_solver(solver)
    start = time.perf_counter()
    p = check_law(law).check_target(target)
    n = law.n
    what = f"importance LP ({law.name} law, n={n}, k={law.k})"
    m_estimate = law.tuple_count(merged=merge_symmetric)
    lp_size(what, m_estimate * law.k + n, m_estimate + 2 * n, optimum_advice(law, lp=False), max_variables=max_variables)

    tuples, probs, merged = law_tuples(law, merge_symmetric)
    m = len(tuples)
    bound = min_cut_bound(p, law)
    rows, tokens = _distinct_pairs(tuples, n)
    pairs = len(rows)
    size = (pairs + n, m + 2 * n)
    per_tuple = sp.csr_matrix((np.ones(pairs), (rows, np.arange(pairs))), shape=(m, pairs))
    per_token = sp.csr_matrix((np.ones(pairs), (tokens, np.arange(pairs))), shape=(n, pairs))
    mass = cp.Variable(pairs, nonneg=True)
    z = cp.Variable(n)
    problem = cp.Problem(cp.Maximize(cp.sum(z)), [per_tuple @ mass == probs, z <= p, z <= per_token @ mass])

    def read(solver_name: str) -> tuple[TupleSelection, float]:
        values = np.maximum(np.asarray(mass.value, dtype=np.float64), 0.0)
        selection = _tuple_selection(p, tuples, probs, merged, (rows, tokens, values), "optimal", solver_name, what, size)
        _certify_objective(np.asarray(z.value, dtype=np.float64), p, selection.intermediate, what, solver_name, size)
        return selection, selection.acceptance

    selection, certification = solve_certified(
        problem, read, bound, solver=solver, what=what, size=size, verbose=verbose, progress=progress
    )
    return replace(selection, seconds=time.perf_counter() - start, certification=certification)


def importance_from_coupling(solution: TransportSolution, target: object, law) -> TupleSelection:
    """Importance weights from an optimal coupling π (Theorem 1, proof direction "⇒").

    ``β_y(x) = [π(x, y) + u(x)/|set(x)|] / D(x)`` for ``y ∈ set(x)``, where
    ``u(x) = D(x) - Σ_{y ∈ set(x)} π(x, y)`` is the unaccepted mass of x, spread evenly over the
    distinct tokens of x. Then ``r(y) >= Σ_{x: y ∈ set(x)} π(x, y)`` and that accepted flow is
    ``<= p(y)``, so ``Σ_y min(p, r) >= Σ_x Σ_{y ∈ set(x)} π(x, y) = P*``; as no selection beats
    P*, the two are equal (checked here against the solution's min-cut: a distance above
    1e-9 raises ``SolverError``).

    >>> from multidraft.theory import IID
    >>> from multidraft.lp.transport import transport_lp
    >>> law = IID([0.5, 0.3, 0.2], k=2)
    >>> solution = transport_lp([0.2, 0.3, 0.5], law)
    >>> selection = importance_from_coupling(solution, [0.2, 0.3, 0.5], law)
    >>> abs(selection.acceptance - solution.acceptance) < 1e-9
    True
    """
    start = time.perf_counter()
    if not isinstance(solution, TransportSolution):
        raise ValueError(f"solution: expected a TransportSolution, got {type(solution).__name__}")
    p = check_law(law).check_target(target)
    n = law.n
    tuples, probs, plan = solution.tuples, solution.tuple_probs, solution.plan
    if tuples.ndim != 2 or tuples.shape[1] != law.k or plan.shape != (len(tuples), n):
        raise ValueError(
            f"solution: tuples {tuples.shape} / plan {plan.shape} do not match the law (k={law.k}, n={n})"
        )
    expected, expected_probs, _ = law_tuples(law, solution.merged)
    if expected.shape != tuples.shape or not np.array_equal(expected, tuples) or not np.allclose(expected_probs, probs, rtol=0, atol=1e-12):
        raise ValueError("solution: its draft tuples and probabilities are not those of the given law")
    if np.abs(plan.sum(axis=0) - p).max() > FEASIBILITY_TOLERANCE:
        raise ValueError("solution: its plan's target marginal is not the given target")
    rows, tokens = _distinct_pairs(tuples, n)
    accepted = plan[rows, tokens]
    distinct = np.bincount(rows, minlength=len(tuples))
    unaccepted = np.maximum(probs - np.bincount(rows, weights=accepted, minlength=len(tuples)), 0.0)
    mass = accepted + (unaccepted / distinct)[rows]
    what = f"importance weights from the coupling ({law.name} law, n={n}, k={law.k})"
    size = (solution.variables, solution.constraints)
    selection = _tuple_selection(p, tuples, probs, solution.merged, (rows, tokens, mass), solution.status, solution.solver, what, size)
    # The weights lose nothing of the plan's accepted flow, so Σ min(p, r) is within the
    # certificate of the min-cut too; a larger distance means they were read off wrongly.
    gap = solution.certification.min_cut - selection.acceptance
    certify(abs(gap) <= CERTIFIED_GAP, what, f"Σ min(p, r) lies {gap:.3g} below the min-cut", solution.solver, *size)
    certification = replace(solution.certification, gap=gap)
    return replace(selection, seconds=solution.seconds + time.perf_counter() - start, certification=certification)


def drafts_law(draft: object, draft2: object | None = None, *, k: int | None = None) -> DraftLaw:
    """The law of drafts given as distributions: ``draft`` alone (K = ``k`` iid drafts, default
    2) or ``draft`` and ``draft2`` (two independent drafts); a bad distribution is named
    ``draft`` or ``draft2``."""
    from multidraft.theory.laws import as_distribution

    if draft2 is None:
        return IID(draft, 2 if k is None else k)
    if k not in (None, 2):
        raise ValueError(f"k: two draft distributions make k = 2, got k={k}")
    first, second = as_distribution(draft, "draft"), as_distribution(draft2, "draft2")  # errors by name
    if len(second) != len(first):
        raise ValueError(f"draft2: length {len(second)} differs from draft's {len(first)}")
    return Independent([draft, draft2])


def _balance_matrix(first: np.ndarray, second: np.ndarray, mass: np.ndarray, n: int):
    """Sparse ``n × V`` map from pair weights w to the change of r: a pair (i, j) of mass M
    selecting i instead of j moves M from r(j) to r(i). With ``mass`` all ones it maps the
    moved masses ``b = M w`` themselves."""
    import scipy.sparse as sp

    count = len(mass)
    return sp.csr_matrix(
        (np.concatenate([mass, -mass]), (np.concatenate([first, second]), np.tile(np.arange(count), 2))),
        shape=(n, count),
    )


def pair_importance_lp(
    target: object,
    draft: object,
    draft2: object | None = None,
    *,
    solver: str = "HIGHS",
    max_variables: int = MAX_VARIABLES,
    verbose: bool | None = None,
    progress: bool = True,
) -> PairSelection:
    """K = 2 importance-weighted LP in pair form (Khisti et al., Section 4, eq. (10)).

    Drafts ``X₁ ~ q₁``, ``X₂ ~ q₂`` independently (``draft2=None``: iid). With
    ``w_ij ∈ [0, 1]`` the probability of selecting i from the pair (i, j), i ≠ j:

        r(k) = q₁(k) q₂(k) + Σ_{j≠k} w_kj q₁(k) q₂(j) + Σ_{i≠k} (1 - w_ik) q₁(i) q₂(k)
        maximise Σ_k z_k  s.t.  z_k <= p(k),  z_k <= r(k),  0 <= w <= 1.

    It is solved in the moved masses ``b_ij = q₁(i) q₂(j) w_ij ∈ [0, q₁(i) q₂(j)]``, so the
    constraint matrix holds only ±1: with the masses as coefficients, HiGHS drops those below
    its ``small_matrix_value`` (1e-9) and the optimum fell up to 3.9e-8 short of P* on
    Dirichlet(0.05-0.5) drafts. Only pairs of positive probability get a variable (at most
    n² - n). The returned r is recomputed from the weights and checked to be a distribution,
    the solver's ``z_k`` may exceed ``min(p(k), r(k))`` by at most the feasibility tolerance,
    and ``Σ min(p, r)`` is certified against the min-cut P* of the two drafts (within 1e-9; see
    :func:`~multidraft.lp.transport_lp` for ``solver`` and the routes). Refused before anything
    is built beyond ``max_variables`` (``ProblemTooLargeError``: use :func:`truncated_lp`
    instead); ``verbose`` and ``progress`` as for :func:`~multidraft.lp.transport_lp`.

    >>> selection = pair_importance_lp([1/3, 1/6, 1/2], [1/3, 1/3, 1/3])
    >>> round(selection.acceptance, 9)
    1.0
    """
    import cvxpy as cp

    start = time.perf_counter()
    solver = check_lp_solver(solver)
    law = drafts_law(draft, draft2)
    p, (q1, q2) = law.check_target(target), law.marginals()
    n = len(p)
    what = f"pair importance LP (n={n})"
    support1, support2 = np.count_nonzero(q1), np.count_nonzero(q2)
    alternative = "use truncated_lp(target, draft, draft2, s=...) (an LP over the top s tokens only)"
    lp_size(what, support1 * support2 + n, 2 * n, alternative, max_variables=max_variables)
    bound = min_cut_bound(p, law)
    outer = np.outer(q1, q2)
    first, second = np.nonzero((outer > 0) & ~np.eye(n, dtype=bool))
    mass = outer[first, second]
    size = (len(mass) + n, 2 * n)
    moved = cp.Variable(len(mass), bounds=[np.zeros(len(mass)), mass]) if len(mass) else None
    z = cp.Variable(n)
    r_expr = q2 + _balance_matrix(first, second, np.ones(len(mass)), n) @ moved if moved is not None else q2
    problem = cp.Problem(cp.Maximize(cp.sum(z)), [z <= p, z <= r_expr])
    balance = _balance_matrix(first, second, mass, n)

    def read(solver_name: str) -> tuple[PairSelection, float]:
        values = np.clip(np.asarray(moved.value, dtype=np.float64) / mass, 0.0, 1.0) if moved is not None else np.zeros(0)
        r = _certified_intermediate(q2 + balance @ values, what, solver_name, *size)
        _certify_objective(np.asarray(z.value, dtype=np.float64), p, r, what, solver_name, size)
        weights = np.ones((n, n))
        weights[first, second] = values
        acceptance = _acceptance(p, r)
        return PairSelection(acceptance, r, "optimal", solver_name, 0.0, weights), acceptance

    selection, certification = solve_certified(
        problem, read, bound, solver=solver, what=what, size=size, verbose=verbose, progress=progress
    )
    return replace(selection, seconds=time.perf_counter() - start, certification=certification)
