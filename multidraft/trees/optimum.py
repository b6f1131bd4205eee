"""The block-level optimum: the largest E[τ] of any lossless verifier, even one that sees every
table of the sequence model (theory.md, "Block level"; proofs in docs/block_level.md).

Draft trees that are permutations of each other, or differ only in how often a sequence was
drafted, are merged into one class T (the set of distinct drafted sequences): averaging any
verifier over a class changes neither feasibility nor value. The next token is coupled to the
tree only through the accepted node, which loses nothing: only the total emitted per string
enters losslessness. Two forms of the LP (:func:`block_optimum`, ``form=``):

**Prefix flow** (theory.md). ρ(T, s) >= 0 -- accepted node s of T -- and μ(s, z) >= 0, the
mass emitted as s followed by z; with m(sz) = μ(s, z) and N(ua) = P(a | u) (N(u) + m(u)) the
mass reaching ua by fresh target completion (N = 0 at length 1):

    maximise   Σ_{T, s} ρ(T, s) |s|
    subject to Σ_s ρ(T, s) = P(T)                  for every tree class T,
               Σ_T ρ(T, s) = Σ_z μ(s, z)           for every drafted prefix s,
               m(y) + N(y) = P(y)                   for every string y of L + 1 tokens.

**Tail** (the default). With β(s) = P(accepted node extends s), a verifier is lossless iff
``β(sz) <= P(z | s) β(s)`` for all s, z (β(ε) = 1; its next token after s is then
``norm(P(· | s) β(s) - β(s ·))``), and E[τ] = Σ_{s ≠ ε} β(s):

    maximise   Σ_{s ≠ ε} β(s)
    subject to Σ_s ρ(T, s) = P(T),   β(s) = Σ_T Σ_{s' ⪰ s} ρ(T, s'),   β(sz) <= P(z | s) β(s).

Both have single conditional probabilities as coefficients; only the tail form survives a
solver dropping tiny ones (see :func:`block_optimum`). The looser LP that couples the tree with
a whole target sequence of L + 1 tokens is *not* either of them: it lets the continuation
after the next token depend on the tree and gives 12/9 instead of 11/9 on Sun et al.'s example.

**Certificate.** HiGHS's answer is accepted only with status optimal, a primal point that
satisfies every constraint to 1e-7 (HiGHS's feasibility tolerance) and recomputes the
objective, and a *safe dual bound*: for any duals y (equalities) and w >= 0 (inequalities),
``c·v <= b_eq·y + b_ub·w + Σ_j (c - A_eqᵀy - A_ubᵀw)_j⁺ U_j`` with U_j a bound of variable j
(ρ(T, s) <= P(T), the others <= 1), evaluated in Fractions for an exact model. No lossless
verifier exceeds ``upper_bound``, whatever the solver did.

**Antichains** (:func:`tail_optimum`, a route with no trees): a coupling of the trees with the
accepted nodes exists iff ``Σ_{u ∈ U} β(u) <= P(T ∩ U ≠ ∅)`` for every antichain U of
prefixes (Hall's theorem; T is prefix-closed), so the optimum is an LP in β alone (small models:
the antichains are listed). For K = 1 the antichain bounds are β(u) <= Q(u) and the optimum
has the closed form :func:`single_path_optimum`,
``Σ_{s ≠ ε} min_{0 <= j <= |s|} Q(s_{<=j}) P(s_{>j} | s_{<=j})`` -- block verification's value
(Sun et al.'s optimality theorem).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from multidraft.theory.laws import SizeEstimate, check_size
from multidraft.trees.model import SequenceModel
from multidraft.trees.shape import TreeShape
from multidraft.trees.shaped import as_shape, shape_classes, shape_tree_count

__all__ = ["BlockOptimum", "block_optimum", "tail_optimum", "single_path_optimum", "tree_classes", "FORMS", "ANTICHAIN_LIMIT"]

#: Most antichains :func:`tail_optimum` lists.
ANTICHAIN_LIMIT = 200_000
#: Largest accepted constraint violation of the solver's primal point (HiGHS's own primal
#: feasibility tolerance is 1e-7).
PRIMAL_TOLERANCE = 1e-7
#: Largest accepted distance of the safe dual bound above the primal value.
DUAL_GAP_TOLERANCE = 1e-6


@dataclass(frozen=True, eq=False)
class BlockOptimum:
    """The certified block-level optimum of one sequence model.

    Attributes
    ----------
    value : float
        The objective recomputed from the checked primal point: E[τ] of the best lossless
        verifier (to the primal tolerance).
    upper_bound : float or Fraction
        The safe dual bound (a Fraction for an exact model): no lossless verifier exceeds it.
    accepted_law : dict
        ``{prefix: P(accepted node = prefix)}`` at the optimum found.
    classes, variables, constraints : int
        Tree classes and LP size.
    primal_error : float
        Largest constraint violation of the primal point.
    status, solver : str
    seconds : float
    lower_bound : Fraction
        E[τ] of a lossless verifier built from the solver's point after repairing it exactly
        (:func:`_repaired_value`, in Fractions): the optimum is certified to lie in
        ``interval = [lower_bound, upper_bound]``; ``value`` itself may lie above the optimum by
        the solver's primal tolerance.
    """

    value: float
    upper_bound: float | Fraction
    accepted_law: dict
    classes: int
    variables: int
    constraints: int
    primal_error: float
    status: str
    solver: str
    seconds: float
    lower_bound: Fraction = Fraction(0)

    @property
    def gap(self) -> float:
        """``upper_bound - value`` (the certificate's slack)."""
        return float(self.upper_bound) - self.value

    @property
    def interval(self) -> tuple[Fraction, float | Fraction]:
        """``(lower_bound, upper_bound)``: the optimum certainly lies in it."""
        return self.lower_bound, self.upper_bound


def tree_classes(model: SequenceModel, k: TreeShape | int, without_replacement: bool = False) -> dict[tuple, float | Fraction]:
    """``{sorted distinct sequences: probability}``: the draft trees merged into classes that
    differ only by the order and multiplicity of their rows (``k``: K chains, or any
    :class:`~multidraft.trees.TreeShape`, :func:`~multidraft.trees.shaped.shape_classes`)."""
    return shape_classes(model, as_shape(k, model, without_replacement))


def _prefixes(paths: tuple) -> list[tuple]:
    return sorted({path[:d] for path in paths for d in range(len(path) + 1)}, key=lambda s: (len(s), s))


def _class_bound(model: SequenceModel, k: int, without_replacement: bool) -> int:
    paths = len(model.paths())
    if without_replacement:
        return math.comb(paths, k)
    return sum(math.comb(paths, j) for j in range(1, k + 1))


@dataclass
class _Program:
    """``max c·v`` subject to ``A_eq v = b_eq``, ``A_ub v <= b_ub``, ``0 <= v <= upper`` (the
    upper bounds are implied by the constraints and serve only the certificate). Entries are
    ``(row, column, coefficient)``; coefficients and right-hand sides may be Fractions."""

    objective: list
    upper: list
    equalities: list = field(default_factory=list)
    b_eq: list = field(default_factory=list)
    inequalities: list = field(default_factory=list)
    b_ub: list = field(default_factory=list)


def _tail_program(model: SequenceModel, classes: dict, prefixes: list[tuple]) -> tuple[_Program, list[tuple[int, tuple]]]:
    """The tail form with trees: ρ(T, s) >= 0 and β(s) = Σ_T Σ_{s' ⪰ s} ρ(T, s') for the
    drafted prefixes s ≠ ε; ``β(sz) <= P(z | s) β(s)`` (β(ε) = 1); maximise Σ β."""
    strings = [s for s in prefixes if s]
    beta = {s: i for i, s in enumerate(strings)}
    rho: list[tuple[int, tuple]] = [(c, s) for c, key in enumerate(classes) for s in _prefixes(key)]
    offset = len(strings)
    program = _Program([1] * len(strings) + [0] * len(rho), [1] * len(strings) + [None] * len(rho))
    probs = list(classes.values())
    row = 0
    for c, prob in enumerate(probs):  # Σ_s ρ(T, s) = P(T)
        program.b_eq.append(prob)
    for j, (c, s) in enumerate(rho):
        program.equalities.append((c, offset + j, 1))
        program.upper[offset + j] = probs[c]
        for d in range(1, len(s) + 1):  # ρ(T, s) counts in β of every non-empty prefix of s
            program.equalities.append((len(probs) + beta[s[:d]], offset + j, -1))
    for s in strings:  # β(s) - Σ ρ = 0
        program.equalities.append((len(probs) + beta[s], beta[s], 1))
        program.b_eq.append(0)
    for s in strings:  # β(sz) - P(z | s) β(s) <= 0, or β(z) <= P(z)
        conditional = model.target_at(s[:-1])[s[-1]]
        program.inequalities.append((row, beta[s], 1))
        if s[:-1]:
            program.inequalities.append((row, beta[s[:-1]], -conditional))
            program.b_ub.append(0)
        else:
            program.b_ub.append(conditional)
        row += 1
    return program, rho


def _flow_program(model: SequenceModel, classes: dict, prefixes: list[tuple]) -> tuple[_Program, list[tuple[int, tuple]]]:
    """The prefix-flow form (module docstring): ρ(T, s), μ(s, z) and N(w), 2 <= |w| <= L + 1."""
    n, length = model.n, model.length
    where = {s: i for i, s in enumerate(prefixes)}
    rho: list[tuple[int, tuple]] = [(c, s) for c, key in enumerate(classes) for s in _prefixes(key)]
    n_rho, n_mu = len(rho), len(prefixes) * n
    start, offset = {}, n_rho + n_mu
    for d in range(2, length + 2):
        start[d] = offset
        offset += n**d
    probs = list(classes.values())
    program = _Program([len(s) for _, s in rho] + [0] * (offset - n_rho), [probs[c] for c, _ in rho] + [1] * (offset - n_rho))

    def mu(e: tuple) -> int | None:  # μ(e[:-1], e[-1]): the mass emitted as the string e
        return None if e[:-1] not in where else n_rho + where[e[:-1]] * n + e[-1]

    def completed(w: tuple) -> int | None:  # N(w); none for |w| = 1
        return None if len(w) < 2 else start[len(w)] + model.index(w)

    row = 0
    for c, prob in enumerate(probs):  # Σ_s ρ(T, s) = P(T)
        program.b_eq.append(prob)
    row = len(probs)
    for j, (c, s) in enumerate(rho):
        program.equalities.append((c, j, 1))
        program.equalities.append((row + where[s], j, 1))  # Σ_T ρ(T, s) - Σ_z μ(s, z) = 0
    for s_index in range(len(prefixes)):
        for z in range(n):
            program.equalities.append((row + s_index, n_rho + s_index * n + z, -1))
        program.b_eq.append(0)
    row += len(prefixes)
    for d in range(2, length + 2):  # N(ua) - P(a|u) N(u) - P(a|u) m(u) = 0
        for w in itertools.product(range(n), repeat=d):
            u, a = w[:-1], w[-1]
            coefficient = model.target_at(u)[a]
            program.equalities.append((row, completed(w), 1))
            for column in (completed(u), mu(u)):
                if column is not None:
                    program.equalities.append((row, column, -coefficient))
            program.b_eq.append(0)
            row += 1
    joint = model.joint()
    for y in itertools.product(range(n), repeat=length + 1):  # m(y) + N(y) = P(y)
        if mu(y) is not None:
            program.equalities.append((row, mu(y), 1))
        program.equalities.append((row, completed(y), 1))
        program.b_eq.append(joint[model.index(y)])
        row += 1
    return program, rho


#: The two LP forms of the block-level optimum.
FORMS = ("tail", "prefix-flow")


def block_optimum(
    model: SequenceModel,
    k: TreeShape | int,
    *,
    without_replacement: bool = False,
    form: str = "tail",
    solver: str = "HIGHS",
    max_variables: int | None = None,
    verbose: bool | None = None,
    progress: bool = False,
) -> BlockOptimum:
    """Solve and certify the LP of the block-level optimum (module docstring).

    Parameters
    ----------
    model : SequenceModel
    k : TreeShape or int
        The tree shape (any family and per-node law), or K for ``TreeShape.chains(K, L)``.
    without_replacement : bool
        With an integer K: trees drafted without replacement at the root (else iid rows).
    form : {"tail", "prefix-flow"}
        ``"tail"`` (default): ρ(T, s) and β(s) = P(accepted node extends s), losslessness as
        ``β(sz) <= P(z | s) β(s)``. ``"prefix-flow"``: the form of theory.md, with the emitted
        strings and their fresh completions as variables and losslessness as equalities for
        every string of L + 1 tokens. Both have single conditional probabilities as
        coefficients, but a solver drops coefficients below ~1e-9: in the tail form that only
        tightens an inequality (a feasible, slightly smaller LP, still certified by the dual
        bound), in the prefix-flow form it breaks an equality and can make the LP infeasible
        (it did on Dirichlet(0.3) tables), hence the default.
    solver : str
        A cvxpy solver (HiGHS by default).
    max_variables : int, optional
        Size guard (default :data:`multidraft.lp._solve.MAX_VARIABLES`), checked from an upper
        bound of the variable count before anything is built.
    verbose : bool, optional
        Let the solver print its log (:func:`multidraft.lp.solver_output` decides when None).
    progress : bool
        A bar on stderr (when it is a terminal) while a large LP is solved; off by default, as a
        library call should be quiet (the report and the command line turn it on).

    Returns
    -------
    BlockOptimum

    Raises
    ------
    ProblemTooLargeError
        Beyond the size guard.
    SolverError
        A status other than optimal, a primal point off by more than 1e-7, or a dual bound
        more than 1e-6 above the value.

    Examples
    --------
    >>> from multidraft.trees import sun_example
    >>> result = block_optimum(sun_example(), k=1)
    >>> round(result.value, 9), abs(result.upper_bound - Fraction(11, 9)) < Fraction(1, 10**9)
    (1.222222222, True)
    """
    from multidraft.lp._solve import MAX_VARIABLES, check_solver, lp_size

    start = time.perf_counter()
    if form not in FORMS:
        raise ValueError(f"form: unknown {form!r}; choose one of {', '.join(FORMS)}")
    solver = check_solver(solver)
    limit = MAX_VARIABLES if max_variables is None else max_variables
    n, length = model.n, model.length
    shape = as_shape(k, model, without_replacement)
    drafted = len({p[:d] for p, _ in model.paths() for d in range(length + 1)})
    if shape.family == "chains":
        trees = _class_bound(model, shape.k, shape.law == "without-replacement")
    else:
        trees = shape_tree_count(model, shape)
    bound = trees * (1 + shape.node_count) + drafted * (n + 1)
    if form == "prefix-flow":
        bound += sum(n**d for d in range(2, length + 2))
    what = f"block-optimum LP ({form}, n={n}, {shape!r})"
    advice = "use a smaller n, L or k (the LP grows with the number of draft trees)"
    lp_size(what, bound, bound, advice, max_variables=limit)

    classes = shape_classes(model, shape)
    prefixes = sorted({s for key in classes for s in _prefixes(key)}, key=lambda s: (len(s), s))
    program, rho = (_tail_program if form == "tail" else _flow_program)(model, classes, prefixes)
    variables = len(program.objective)
    constraints = len(program.b_eq) + len(program.b_ub)
    lp_size(what, variables, constraints, advice, max_variables=limit)

    # In the prefix-flow form the last string's constraint is implied by the others
    # (Σ_T P(T) = Σ_y P(y) = 1) and left to the re-check: with it a rounding mismatch of 1e-16
    # between the two sums can make the solver declare the system infeasible.
    solved = _solve(program, model.exact, what, solver, verbose, progress, implied=1 if form == "prefix-flow" else 0)
    point, value, upper_bound, primal_error, status = solved
    offset = variables - len(rho) if form == "tail" else 0
    accepted: dict[tuple, float] = {}
    for j, (_, s) in enumerate(rho):
        accepted[s] = accepted.get(s, 0.0) + float(point[offset + j])
    lower = _repaired_value(model, classes, [(c, s, point[offset + j]) for j, (c, s) in enumerate(rho)])
    return BlockOptimum(
        value, upper_bound, accepted, len(classes), variables, constraints, primal_error, status, solver,
        time.perf_counter() - start, lower,
    )  # fmt: skip


def _repaired_value(model: SequenceModel, classes: dict, rho: list) -> Fraction:
    """Σ_{s ≠ ε} β(s) of a feasible point built in Fractions from the solver's ρ(T, s): clip at 0;
    per class T put the leftover P(T) - Σ ρ on the root (or scale the class down to P(T));
    then top-down, wherever β(sz) > P(z | s) β(s), move the fraction 1 - P(z | s) β(s) / β(sz)
    of every ρ(T, s') with s' ⪰ sz to ρ(T, s) (s ∈ T: trees are prefix-closed). Scaling a
    whole subtree keeps the ratios inside it, and β(s) does not change, so every constraint of
    the tail form holds exactly afterwards: the value is E[τ] of a lossless verifier
    (Theorem 1 and Lemma 4) and a lower bound of the optimum."""
    probs = [Fraction(p) for p in classes.values()]
    by_class: list[dict] = [{(): Fraction(0)} for _ in probs]
    for c, prefix, x in rho:
        by_class[c][prefix] = by_class[c].get(prefix, Fraction(0)) + max(Fraction(float(x)), Fraction(0))
    for c, accepted in enumerate(by_class):
        total = sum(accepted.values(), Fraction(0))
        if total <= probs[c]:
            accepted[()] += probs[c] - total
        else:
            for prefix in accepted:
                accepted[prefix] *= probs[c] / total

    def beta(prefix: tuple) -> Fraction:
        depth = len(prefix)
        return sum((x for a in by_class for s, x in a.items() if s[:depth] == prefix and len(s) >= depth), Fraction(0))

    strings = sorted({s for a in by_class for s in a if s}, key=lambda s: (len(s), s))
    for string in strings:
        parent, token = string[:-1], string[-1]
        allowed = Fraction(model.target_at(parent)[token]) * beta(parent)
        below = beta(string)
        if below > allowed:
            keep = allowed / below
            for accepted in by_class:
                for s in [s for s in accepted if s[: len(string)] == string]:
                    moved = accepted[s] * (1 - keep)
                    accepted[s] -= moved
                    accepted[parent] = accepted.get(parent, Fraction(0)) + moved
    return sum((x * len(s) for a in by_class for s, x in a.items()), Fraction(0))


def _solve(program: _Program, exact: bool, what: str, solver: str, verbose, progress: bool, implied: int = 0):
    """Solve ``program`` through :func:`multidraft.lp._solve.solve` and certify the answer:
    ``(point, value, safe upper bound, primal error, status)``.

    The last ``implied`` equalities are left out of the solve (implied by the others up to
    rounding) and only re-checked. Raises :class:`~multidraft.lp.SolverError` unless the
    point satisfies every constraint to :data:`PRIMAL_TOLERANCE` and the safe dual bound is
    within :data:`DUAL_GAP_TOLERANCE` of its value.
    """
    import cvxpy as cp
    import scipy.sparse as sp

    from multidraft.lp._solve import certify, solve

    variables = len(program.objective)
    constraints = len(program.b_eq) + len(program.b_ub)

    def matrix(entries, rows):
        if not entries:
            return sp.csr_matrix((rows, variables))
        r, c, values = zip(*entries)
        return sp.csr_matrix((np.array([float(v) for v in values]), (r, c)), shape=(rows, variables))

    def verify(condition: bool, defect: str) -> None:
        certify(condition, what, defect, solver, variables, constraints)

    a_eq, b_eq = matrix(program.equalities, len(program.b_eq)), np.array([float(v) for v in program.b_eq])
    a_ub, b_ub = matrix(program.inequalities, len(program.b_ub)), np.array([float(v) for v in program.b_ub])
    c = np.array([float(v) for v in program.objective])
    v = cp.Variable(variables, nonneg=True)
    kept = len(program.b_eq) - implied
    parts = [a_eq[:kept] @ v == b_eq[:kept]] + ([a_ub @ v <= b_ub] if len(program.b_ub) else [])
    problem = cp.Problem(cp.Maximize(c @ v), parts)
    status, _ = solve(problem, solver, what, variables, constraints, verbose, progress)

    point = np.asarray(v.value, dtype=np.float64)
    verify(point.min() >= -PRIMAL_TOLERANCE, f"negative entry {point.min():.3g}")
    point = np.maximum(point, 0.0)
    primal_error = float(np.abs(a_eq @ point - b_eq).max())
    if len(program.b_ub):
        primal_error = max(primal_error, float(np.maximum(a_ub @ point - b_ub, 0.0).max()))
    verify(primal_error <= PRIMAL_TOLERANCE, f"constraints off by {primal_error:.3g}")
    value = float(c @ point)
    verify(abs(value - float(problem.value)) <= PRIMAL_TOLERANCE, "objective differs from the point")

    y = np.zeros(len(program.b_eq))
    y[:kept] = np.asarray(parts[0].dual_value, dtype=np.float64)
    w = np.asarray(parts[1].dual_value, dtype=np.float64) if len(parts) > 1 else np.zeros(0)
    if abs(b_eq @ y + b_ub @ w - value) > abs(-(b_eq @ y) - b_ub @ w - value):  # the solver's sign
        y, w = -y, -w
    upper_bound = _safe_dual_bound(program, y, np.maximum(w, 0.0), exact)
    verify(float(upper_bound) - value <= DUAL_GAP_TOLERANCE, f"dual bound {float(upper_bound):.12g} above the value {value:.12g}")
    return point, value, upper_bound, primal_error, status


def _safe_dual_bound(program: _Program, y: np.ndarray, w: np.ndarray, exact: bool) -> float | Fraction:
    """``b_eq·y + b_ub·w + Σ_j (c - A_eqᵀy - A_ubᵀw)_j⁺ U_j`` for any y and any w >= 0: an upper
    bound of ``max c·v`` over the program's feasible set (weak duality with the box
    ``0 <= v <= U``), in Fractions when ``exact`` (then the bound is rigorous)."""
    if exact:
        y_, w_ = [Fraction(float(v)) for v in y], [Fraction(float(v)) for v in w]
        reduced = [Fraction(v) for v in program.objective]
        for r, j, a in program.equalities:
            reduced[j] -= Fraction(a) * y_[r]
        for r, j, a in program.inequalities:
            reduced[j] -= Fraction(a) * w_[r]
        total = sum((Fraction(b) * v for b, v in zip(program.b_eq, y_)), Fraction(0))
        total += sum((Fraction(b) * v for b, v in zip(program.b_ub, w_)), Fraction(0))
        return total + sum((r * Fraction(u) for r, u in zip(reduced, program.upper) if r > 0), Fraction(0))
    reduced = np.array([float(v) for v in program.objective])
    for entries, dual in ((program.equalities, y), (program.inequalities, w)):
        for r, j, a in entries:
            reduced[j] -= float(a) * dual[r]
    upper = np.array([float(u) for u in program.upper])
    total = float(np.dot([float(b) for b in program.b_eq], y)) + float(np.dot([float(b) for b in program.b_ub], w))
    total += float(np.sum(np.maximum(reduced, 0.0) * upper))
    return total + 1e-12 * (1 + float(np.abs(y).sum() + np.abs(w).sum()))  # rounding of the sums


# ---------------------------------------------------------------------------------------------
# Second and third routes.


def _draft_mass(model: SequenceModel, prefix: tuple) -> float | Fraction:
    return model.sequence_probability(prefix, "draft")


def _hit_probability(model: SequenceModel, k: int, without_replacement: bool, antichain: list[tuple]):
    """``P(T ∩ U ≠ ∅)`` for an antichain U of drafted prefixes: iid rows,
    ``1 - (1 - Q(U))^K``; without replacement, ``1 - E[Π_i (1 - Q(U | c_i))]`` over the
    successive-sampling draws c of the first tokens."""
    one = Fraction(1) if model.exact else 1.0
    if not without_replacement:
        mass = sum((_draft_mass(model, u) for u in antichain), 0 * one)
        return one - (one - mass) ** k
    root = model.draft[0][0]
    inside = [0 * one] * model.n  # Q(U | first token t)
    for u in antichain:
        inside[u[0]] += _draft_mass(model, u) / root[u[0]]
    miss = 0 * one
    for firsts in itertools.permutations([t for t in range(model.n) if root[t] > 0], k):
        prob, left, survive = one, one, one
        for t in firsts:
            prob, left = prob * root[t] / left, left - root[t]
            survive *= one - inside[t]
        miss += prob * survive
    return one - miss


def _antichains(children: dict, node: tuple) -> list[list[tuple]]:
    """Every antichain of the subtree below ``node`` (not containing it), the empty one included."""
    combined: list[list[tuple]] = [[]]
    for child in children.get(node, []):
        options = [[child]] + _antichains(children, child)
        combined = [a + b for a in combined for b in options]
    return combined


def tail_optimum(
    model: SequenceModel, k: TreeShape | int, *, without_replacement: bool = False, max_antichains: int = ANTICHAIN_LIMIT
) -> float:
    """The block-level optimum by the tail form (module docstring): an LP over β(s) with one
    constraint per antichain of drafted prefixes -- for chains no trees enumerated (closed-form
    hit probabilities); for other shapes ``P(T ∩ U ≠ ∅)`` summed over the tree classes. Small
    models only (the antichains are listed; refused beyond ``max_antichains``).

    >>> from multidraft.trees import sun_example
    >>> round(tail_optimum(sun_example(), k=1), 9)
    1.222222222
    """
    import cvxpy as cp

    from multidraft.lp._solve import check_solver, solve

    shape = as_shape(k, model, without_replacement)
    if shape.family == "chains":
        hit_probability = lambda antichain: _hit_probability(model, shape.k, shape.law == "without-replacement", antichain)  # noqa: E731
    else:
        classes = shape_classes(model, shape)
        hit_probability = lambda antichain: sum(p for key, p in classes.items() if set(key) & set(antichain))  # noqa: E731
    strings = sorted({p[:d] for p, _ in model.paths() for d in range(1, model.length + 1)}, key=lambda s: (len(s), s))
    children: dict[tuple, list[tuple]] = {}
    for s in strings:
        children.setdefault(s[:-1], []).append(s)
    count = 1  # antichains below a node: Π over children of (1 + antichains below the child)
    memo: dict[tuple, int] = {}
    for s in reversed(strings):
        memo[s] = 1
        for child in children.get(s, []):
            memo[s] *= 1 + memo[child]
    for child in children.get((), []):
        count *= 1 + memo[child]
    check_size(SizeEstimate(f"antichains (n={model.n}, L={model.length})", count, 0, unit="antichains"),
               "use block_optimum (the prefix-flow LP)", max_variables=max_antichains, variables_name="max_antichains")  # fmt: skip
    where = {s: i for i, s in enumerate(strings)}
    beta = cp.Variable(len(strings), nonneg=True)
    constraints = []
    for s in strings:  # β(sz) <= P(z | s) β(s), β(ε) = 1
        p = float(model.target_at(s[:-1])[s[-1]])
        constraints.append(beta[where[s]] <= p * (beta[where[s[:-1]]] if s[:-1] else 1.0))
    for antichain in _antichains(children, ()):
        if antichain:
            hit = float(hit_probability(antichain))
            constraints.append(cp.sum(beta[[where[u] for u in antichain]]) <= hit)
    problem = cp.Problem(cp.Maximize(cp.sum(beta)), constraints)
    solve(problem, check_solver("HIGHS"), "tail-form LP", len(strings), len(constraints), None, False)
    return float(problem.value)


def single_path_optimum(model: SequenceModel) -> float | Fraction:
    """The block-level optimum for one draft (K = 1) in closed form:

        E[τ]* = Σ_{s ≠ ε} β(s),   β(s) = min_{0 <= j <= |s|} Q(s_{<=j}) · P(s_{>j} | s_{<=j}),

    the greedy solution of the tail form (β(sz) = min(P(z | s) β(s), Q(sz)) is largest
    node by node, and every bound only grows with β above it). Equal to block verification's
    E[τ] (Sun et al., Theorem 2); exact for an exact model.

    >>> from multidraft.trees import sun_example
    >>> single_path_optimum(sun_example())
    Fraction(11, 9)
    """
    one = Fraction(1) if model.exact else 1.0
    total = 0 * one
    frontier = [((), one)]  # (prefix s, β(s))
    for _ in range(model.length):
        following = []
        for s, beta in frontier:
            p, q = model.target_at(s), model.draft_at(s)
            mass = _draft_mass(model, s)
            for z in range(model.n):
                value = min(p[z] * beta, mass * q[z])
                following.append((s + (z,), value))
                total += value
        frontier = following
    return total
