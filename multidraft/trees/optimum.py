"""The block-level optimum: the largest E[τ] of any lossless verifier, even one that sees every
table of the sequence model (theory.md, "Block level"; proofs in docs/block_level.md).

**Prefix-flow LP** (:func:`block_optimum`). Variables ρ(T, s) >= 0 -- tree class T (the set of
distinct drafted sequences), accepted node s of T -- and μ(s, z) >= 0, the mass emitted as s
followed by the token z; with m(sz) = μ(s, z) the mass emitted as the string sz and
N(ua) = P(a | u) (N(u) + m(u)) the mass reaching ua by fresh target completion (N = 0 at
length 1):

    maximise   Σ_{T, s} ρ(T, s) |s|
    subject to Σ_s ρ(T, s) = P(T)                  for every tree class T,
               Σ_T ρ(T, s) = Σ_z μ(s, z)           for every drafted prefix s,
               m(y) + N(y) = P(y)                   for every string y of L + 1 tokens.

Every coefficient is a single conditional probability (the numerically kind form). The
next token is coupled to the tree only through the accepted node, which loses nothing: a
verifier may draw it from any law given (T, s), and only the total emitted per string enters
losslessness. Trees that are permutations of each other, or differ only in how often a
sequence was drafted, are merged into one class: any verifier's ρ can be averaged over a
class without changing feasibility or value. The looser LP that couples the tree with a
whole target sequence of L + 1 tokens is *not* used: it lets the continuation after the next
token depend on the tree, and gives 12/9 instead of 11/9 on Sun et al.'s example.

**Certificate.** HiGHS's answer is accepted only with status optimal, a primal point that
satisfies every constraint to 1e-9 and recomputes the objective, and a *safe dual bound*: for
any dual vector y, ``c·v <= b·y + Σ_j (c - Aᵀy)_j⁺ · U_j`` with U_j an upper bound of variable j
(ρ(T, s) <= P(T), μ, N <= 1), evaluated in Fractions for an exact model. The returned
interval [value, upper_bound] is certified whatever the solver did.

**Tail form** (:func:`tail_optimum`, a second route): with β(s) = P(accepted node extends s),
losslessness is exactly ``β(sz) <= P(z | s) β(s)`` (β(ε) = 1), and a coupling with the trees
exists iff ``Σ_{u ∈ U} β(u) <= P(T ∩ U ≠ ∅)`` for every antichain U of prefixes (Hall's
theorem; T is prefix-closed). E[τ] = Σ_{s ≠ ε} β(s). No trees are enumerated; the antichains
are (small models only). For K = 1 the antichain bounds are β(u) <= Q(u) and the optimum is
the closed form :func:`single_path_optimum`, ``Σ_{s ≠ ε} min_{0 <= j <= |s|} Q(s_{<=j}) P(s_{>j} | s_{<=j})``
-- block verification's value (Sun et al.'s optimality theorem).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from multidraft.theory.limits import SizeEstimate, check_size
from multidraft.trees.model import SequenceModel

__all__ = ["BlockOptimum", "block_optimum", "tail_optimum", "single_path_optimum", "tree_classes", "ANTICHAIN_LIMIT"]

#: Most antichains :func:`tail_optimum` lists.
ANTICHAIN_LIMIT = 200_000
#: Largest accepted constraint violation of the solver's primal point.
PRIMAL_TOLERANCE = 1e-9


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

    @property
    def gap(self) -> float:
        """``upper_bound - value`` (the certificate's slack)."""
        return float(self.upper_bound) - self.value


def tree_classes(model: SequenceModel, k: int, without_replacement: bool = False) -> dict[tuple, float | Fraction]:
    """``{sorted distinct sequences: probability}``: the draft trees merged into classes that
    differ only by the order and multiplicity of their rows."""
    classes: dict[tuple, float | Fraction] = {}
    for tokens, prob in model.trees(k, without_replacement=without_replacement):
        key = tuple(sorted(set(map(tuple, tokens.tolist()))))
        classes[key] = classes.get(key, 0) + prob
    return classes


def _prefixes(paths: tuple) -> list[tuple]:
    return sorted({path[:d] for path in paths for d in range(len(path) + 1)}, key=lambda s: (len(s), s))


def _class_bound(model: SequenceModel, k: int, without_replacement: bool) -> int:
    paths = len(model.paths())
    if without_replacement:
        return math.comb(paths, k)
    return sum(math.comb(paths, j) for j in range(1, k + 1))


def block_optimum(
    model: SequenceModel,
    k: int,
    *,
    without_replacement: bool = False,
    solver: str = "HIGHS",
    max_variables: int | None = None,
    verbose: bool | None = None,
    progress: bool = True,
) -> BlockOptimum:
    """Solve and certify the prefix-flow LP of the block-level optimum (module docstring).

    Parameters
    ----------
    model : SequenceModel
    k : int
        Draft sequences per tree.
    without_replacement : bool
        Trees drafted without replacement at the root (else iid rows).
    solver : str
        A cvxpy solver (HiGHS by default).
    max_variables : int, optional
        Size guard (default :data:`multidraft.lp._solve.MAX_VARIABLES`), checked from an upper
        bound of the variable count before anything is built.

    Returns
    -------
    BlockOptimum

    Raises
    ------
    ProblemTooLargeError
        Beyond the size guard.
    SolverError
        A status other than optimal, a primal point off by more than 1e-9, or a dual bound
        more than 1e-7 above the value.

    Examples
    --------
    >>> from multidraft.trees import sun_example
    >>> result = block_optimum(sun_example(), k=1)
    >>> round(result.value, 9), result.upper_bound <= Fraction(11, 9) + Fraction(1, 10**9)
    (1.222222222, True)
    """
    import cvxpy as cp
    import scipy.sparse as sp

    from multidraft.lp._solve import MAX_VARIABLES, certify, check_solver, lp_size, solve

    start = time.perf_counter()
    solver = check_solver(solver)
    n, length, exact = model.n, model.length, model.exact
    strings = sum(n**d for d in range(2, length + 2))
    drafted = len({p[:d] for p, _ in model.paths() for d in range(length + 1)})
    bound = _class_bound(model, k, without_replacement) * (1 + k * length) + drafted * n + strings
    what = f"block-optimum LP (n={n}, L={length}, k={k}, {'without replacement' if without_replacement else 'iid'})"
    lp_size(
        what,
        bound,
        bound,
        "use a smaller n, L or k (the LP grows with the number of draft trees)",
        max_variables=MAX_VARIABLES if max_variables is None else max_variables,
    )

    classes = tree_classes(model, k, without_replacement)
    prefixes = sorted({s for key in classes for s in _prefixes(key)}, key=lambda s: (len(s), s))
    where = {s: i for i, s in enumerate(prefixes)}
    # Variable layout: [ρ(T, s) for each class and node | μ(s, z) | N(w), 2 <= |w| <= L + 1].
    rho_rows, rho_cols, rho_depth, rho_upper = [], [], [], []
    class_probs = []
    for c, (key, prob) in enumerate(classes.items()):
        class_probs.append(prob)
        for s in _prefixes(key):
            rho_rows.append(c)
            rho_cols.append(where[s])
            rho_depth.append(len(s))
            rho_upper.append(prob)
    n_rho, n_mu = len(rho_rows), len(prefixes) * n
    n_offset = {}
    offset = n_rho + n_mu
    for d in range(2, length + 2):
        n_offset[d] = offset
        offset += n**d
    variables = offset

    def mu(s: tuple) -> int | None:  # the μ variable of the string s = s[:-1] + (s[-1],)
        return None if s[:-1] not in where else n_rho + where[s[:-1]] * n + s[-1]

    def n_var(w: tuple) -> int | None:  # N(w); None for |w| = 1 (no completion reaches it)
        return None if len(w) < 2 else n_offset[len(w)] + model.index(w)

    entries: list[tuple[int, int, object]] = []
    rhs: list = []
    row = 0
    for c in range(len(classes)):  # Σ_s ρ(T, s) = P(T)
        rhs.append(class_probs[c])
    entries += [(r, j, 1) for j, r in enumerate(rho_rows)]
    row = len(classes)
    for j, s_index in enumerate(rho_cols):  # Σ_T ρ(T, s) - Σ_z μ(s, z) = 0
        entries.append((row + s_index, j, 1))
    for s_index in range(len(prefixes)):
        for z in range(n):
            entries.append((row + s_index, n_rho + s_index * n + z, -1))
        rhs.append(0)
    row += len(prefixes)
    for d in range(2, length + 2):  # N(ua) - P(a|u) N(u) - P(a|u) m(u) = 0
        for w in itertools.product(range(n), repeat=d):
            u, a = w[:-1], w[-1]
            coefficient = model.target[len(u)][model.index(u)][a]
            entries.append((row, n_var(w), 1))
            if n_var(u) is not None:
                entries.append((row, n_var(u), -coefficient))
            if mu(u) is not None:
                entries.append((row, mu(u), -coefficient))
            rhs.append(0)
            row += 1
    joint = model.joint()
    for y in itertools.product(range(n), repeat=length + 1):  # m(y) + N(y) = P(y)
        if mu(y) is not None:
            entries.append((row, mu(y), 1))
        entries.append((row, n_var(y), 1))
        rhs.append(joint[model.index(y)])
        row += 1
    constraints = row
    lp_size(what, variables, constraints, "use a smaller n, L or k", max_variables=MAX_VARIABLES if max_variables is None else max_variables)

    rows_, cols_, vals_ = zip(*entries)
    matrix = sp.csr_matrix((np.array([float(v) for v in vals_]), (rows_, cols_)), shape=(constraints, variables))
    b = np.array([float(v) for v in rhs])
    c = np.zeros(variables)
    c[:n_rho] = rho_depth
    v = cp.Variable(variables, nonneg=True)
    equality = matrix @ v == b
    problem = cp.Problem(cp.Maximize(c @ v), [equality])
    status, _ = solve(problem, solver, what, variables, constraints, verbose, progress)

    def verify(condition: bool, defect: str) -> None:
        certify(condition, what, defect, solver, variables, constraints)

    point = np.asarray(v.value, dtype=np.float64)
    verify(point.min() >= -PRIMAL_TOLERANCE, f"negative entry {point.min():.3g}")
    point = np.maximum(point, 0.0)
    primal_error = float(np.abs(matrix @ point - b).max())
    verify(primal_error <= PRIMAL_TOLERANCE, f"constraints off by {primal_error:.3g}")
    value = float(c @ point)
    verify(abs(value - float(problem.value)) <= 1e-7, "objective differs from the point")

    dual = np.asarray(equality.dual_value, dtype=np.float64)
    if abs(b @ dual - value) > abs(b @ -dual - value):
        dual = -dual
    upper = np.concatenate([np.array(rho_upper, dtype=object), np.ones(variables - n_rho, dtype=object)])
    upper_bound = _safe_dual_bound(entries, rhs, c, upper, dual, exact)
    verify(float(upper_bound) - value <= 1e-7, f"dual bound {float(upper_bound):.12g} above the value {value:.12g}")

    accepted = {}
    for j, s_index in enumerate(rho_cols):
        accepted[prefixes[s_index]] = accepted.get(prefixes[s_index], 0.0) + point[j]
    return BlockOptimum(
        value, upper_bound, accepted, len(classes), variables, constraints, primal_error, status, solver,
        time.perf_counter() - start,
    )  # fmt: skip


def _safe_dual_bound(entries, rhs, c, upper, dual, exact: bool) -> float | Fraction:
    """``b·y + Σ_j (c_j - (Aᵀy)_j)⁺ U_j``: an upper bound of ``max c·v`` over ``A v = b``,
    ``0 <= v <= U`` for *any* y (weak duality with the box), in Fractions when ``exact``."""
    if exact:
        y = [Fraction(float(value)) for value in dual]
        reduced = [Fraction(int(cj)) for cj in c]
        for r, j, a in entries:
            reduced[j] -= Fraction(a) * y[r]
        return sum((Fraction(bi) * yi for bi, yi in zip(rhs, y)), Fraction(0)) + sum(
            (rj * Fraction(uj) for rj, uj in zip(reduced, upper) if rj > 0), Fraction(0)
        )
    reduced = np.array(c, dtype=np.float64)
    for r, j, a in entries:
        reduced[j] -= float(a) * dual[r]
    slack = float(np.sum(np.maximum(reduced, 0.0) * np.asarray(upper, dtype=np.float64)))
    value = float(np.dot(np.asarray(rhs, dtype=np.float64), dual)) + slack
    return value + 1e-12 * (1 + float(np.abs(dual).sum()))  # rounding of the two sums


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


def tail_optimum(model: SequenceModel, k: int, *, without_replacement: bool = False, max_antichains: int = ANTICHAIN_LIMIT) -> float:
    """The block-level optimum by the tail form (module docstring): an LP over β(s) with one
    constraint per antichain of drafted prefixes -- no trees enumerated. Small models only
    (the antichains are listed; refused beyond ``max_antichains``).

    >>> from multidraft.trees import sun_example
    >>> round(tail_optimum(sun_example(), k=1), 9)
    1.222222222
    """
    import cvxpy as cp

    from multidraft.lp._solve import check_solver, solve

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
            hit = float(_hit_probability(model, k, without_replacement, antichain))
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
