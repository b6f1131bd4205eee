"""The ordered split: both drafts' laws moved together, by a linear programme over two token orders.

Drafts ``X_1 ~ q_1``, ``X_2 ~ q_2``; per-draft laws ``x_i(y) = P(draft i selected, X_i = y)``
satisfy (GR) ``x_1(A_1) + x_2(A_2) <= h(q_1(A_1), q_2(A_2))``, ``h(a, b) = a + b - ab``, and
every pair that does (with ``x_1(Ω) + x_2(Ω) = 1``) is realised by one staircase path
(:mod:`._staircase`, docs/nonidentical_verifier.md §4c). The staircase's alternation moves one
draft's law at a time and stalls where both must move together; this module moves both.

**Fixed orders.** Fix an order ``σ_i`` of each draft's tokens and ask the densities
``d_i = x_i / q_i`` to be non-increasing along it. With ``a_k = q_1(σ_1[:k])``,
``b_m = q_2(σ_2[:m])`` and prefix sums ``C_1[k] = x_1(σ_1[:k])``, ``C_2[m] = x_2(σ_2[:m])``,

    C_1[k] + C_2[m] <= h(a_k, b_m)   for all k, m          (prefix pairs)

implies (GR) for all sets (docs/nonidentical_verifier.md §4d: the best set of mass a is a
density prefix, and between prefixes ``X_1(a) + X_2(b) - h(a, b)`` is bilinear, so its maximum
over a cell is at a corner). So the linear programme

    max Σ_y z_y   s.t.  z <= p,  z <= q_1 d_1 + q_2 d_2,  d_i non-increasing along σ_i, in [0, 1],
                        prefix pairs,  C_1[end] + C_2[end] = 1,  U tight: C_1[|U|] + C_2[|U|] = h(U)

(U's tokens first in both orders) has only rule laws as solutions; its prefix pairs are
generated lazily (for each k the worst m is where ``d_2`` crosses ``1 - a_k``, a binary search),
and HiGHS's dual simplex solves it: the model is built once per round (highspy) and each pass
adds its new pair rows and re-solves from the last optimal basis. Its value is a lower bound on P* that one staircase path reaches.

**Blocks.** Draft 1's density is one variable per *block* of consecutive tokens of its order
(:func:`blocks`: single tokens at both ends of each part, doubling blocks between), draft 2's one
per token, ``z`` one per token. Inside a block ``C_1`` is affine in the prefix mass, so Lemma 5's
cell argument runs over the block-end grid: the pairs at block ends imply (GR), and every
solution is still a pair of rule laws. It is a restriction of the programme (value at most the
per-token one's) with about 3n variables and far fewer pair rows: on the Zipf pairs the optimal
draft-1 density is free only on the most and least likely tokens (n = 4096, 0.8/2.0: 51 levels
on the 51 likeliest tokens, 1 on the other 4045), which the single tokens at the ends cover.

**Orders.** Round 0 orders each draft's tokens by decreasing ``p / q_i`` inside each part (the
iid curtain's order); every later round by the residual key ``(p - x_o)_+ / q_i`` of the best laws
so far (the seed's or a round's: the order of the staircase step's own fit, ties by ``p / q_i``,
residuals within :data:`TIE` of p counted as 0); where that round gains nothing and draft 1 has
blocks, the round is retried with draft 1's order kept (its blocks' order in the best round) and
only draft 2's re-keyed. A round stops as soon as its programme's value (an upper bound on the
round, rows only lower it) gains nothing. The rounds stop at P* (to :data:`REACH`), when a later round gains nothing, or after ``rounds`` rounds. That the rounds reach P* is
measured (docs/nonidentical_verifier.md §4d, §6), not proved; whatever they reach is exact.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory._silence import silenced

__all__ = ["ordered_split", "prefix_pair_violation", "ROUNDS"]

#: Most order rounds of :func:`ordered_split` (each one linear programme, re-solved while
#: prefix pairs are added).
ROUNDS = 8
#: Most constraint-generation passes per round.
PASSES = 12
#: A prefix pair is violated beyond this (HiGHS's feasibility tolerance is 1e-10 per row, scaled).
SLACK = 1e-9
#: The rounds stop this close to P*: HiGHS's feasibility tolerances (1e-10) certify no closer; the
#: staircase from the laws is exact either way (0.8/2.0 at n = 49152: -8.9e-12 after 4 rounds,
#: then 4 more rounds of 190 s CPU that did not reach 1e-12).
REACH = 1e-10
#: A round that gains less than this ends the rounds.
GAIN = 1e-13
#: A residual ``p - x_o`` below this share of p orders a token as 0 (:func:`_orders`).
TIE = 1e-9
#: HiGHS drops matrix entries below this (its least allowed value; its default is 1e-9). A draft
#: mass below it still drops out of the programme's rows (the staircase from the laws is exact
#: either way).
SMALL_ENTRY = 1e-12
#: Draft 1's density is free on this many tokens at each end of each part of its order, and
#: shared by blocks of doubling length between (:func:`blocks`); draft 2's is free on every token.
HEAD = 64


def _h(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b - a * b


def _orders(p: np.ndarray, qs: tuple, parts: tuple, laws: tuple | None) -> tuple[np.ndarray, np.ndarray]:
    """Each draft's tokens (those it can propose), part after part, by decreasing key: ``p / q_i``
    without ``laws``, else the residual key ``(p - x_o)_+ / q_i`` with ties by ``p / q_i``; a
    residual within :data:`TIE` of p counts as 0 (the programme's x_o meets p up to rounding on
    most tokens, and that rounding must not order them)."""
    out = []
    for i in range(2):
        pieces = []
        for part in parts:
            mine = part[qs[i][part] > 0]
            base = p[mine] / qs[i][mine]
            if laws is None:
                pieces.append(mine[np.argsort(-base, kind="stable")])
            else:
                residual = p[mine] - laws[1 - i][mine]
                residual[residual <= TIE * p[mine]] = 0.0
                pieces.append(mine[np.lexsort((-base, -residual / qs[i][mine]))])
        out.append(np.concatenate(pieces))
    return out[0], out[1]


def blocks(size: int, part_sizes: tuple, head: int | None) -> np.ndarray:
    """Block starts along an order of ``size`` tokens, part after part (``part_sizes``): single
    tokens at the first and last ``head`` positions of each part, and between them blocks that
    double in length towards the part's middle; all single tokens for ``head=None``. Raises
    ValueError for ``head`` < 1.

    >>> blocks(12, (12,), 2).tolist()
    [0, 1, 2, 3, 5, 7, 9, 10, 11]
    """
    if head is not None and (isinstance(head, bool) or not isinstance(head, (int, np.integer)) or head < 1):
        raise ValueError(f"head: single tokens at each end of a part, an integer >= 1 or None, got {head!r}")
    if head is None:
        return np.arange(size, dtype=np.int64)
    starts, lo = [], 0
    for count in part_sizes:
        hi = lo + count
        # doubling lengths 1, 2, 4, ... from both ends of the part's middle, single tokens outside
        offsets = np.cumsum(np.concatenate([[0], 2 ** np.arange(max(count, 1).bit_length())]))
        steps, back = lo + head + offsets, hi - head - offsets
        middle = (lo + hi) / 2
        starts += [np.arange(lo, min(lo + head, hi)), np.arange(max(hi - head, lo), hi), steps[steps < middle], back[back > middle]]
        lo = hi
    return np.unique(np.concatenate(starts).astype(np.int64))


def _block_means(laws: tuple, qs: tuple, orders: tuple, starts: tuple) -> tuple:
    """``laws`` with each draft's density replaced by its mean on each block (the same block
    masses and law masses: a seed for the prefix pairs of the blocked programme)."""
    out = []
    for i in range(2):
        q = qs[i][orders[i]]
        block_of = _block_of(starts[i], len(orders[i]))
        law = np.zeros(len(laws[i]))
        law[orders[i]] = (_sums(laws[i][orders[i]], starts[i]) / _sums(q, starts[i]))[block_of] * q
        out.append(law)
    return out[0], out[1]


def _block_of(starts: np.ndarray, size: int) -> np.ndarray:
    """The block index of each of ``size`` positions (blocks from ``starts``)."""
    return np.repeat(np.arange(len(starts)), np.diff(np.append(starts, size)))


def _sums(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per-block sums of ``values`` (blocks from ``starts``)."""
    return np.add.reduceat(values, starts) if len(values) else np.zeros(0)


def prefix_pair_violation(qs: tuple, orders: tuple, laws: tuple, tol: float = SLACK, starts: tuple | None = None) -> tuple[set, float]:
    """The prefix pairs ``(k, m)`` (block ends: k-th of draft 1, m-th of draft 2; every token its own
    block for ``starts=None``) whose constraint ``C_1[k] + C_2[m] <= h(a_k, b_m)`` is violated
    beyond ``-tol`` at the worst m for every k and the worst k for every m (module docstring),
    and the largest violation. Exact for laws whose densities are non-increasing along the
    orders and constant on the blocks (the worst m for k is the count of blocks with
    ``d_2 > 1 - a_k``; interior prefixes are implied, Lemma 5); O(n log n)."""
    if starts is None:
        starts = tuple(np.arange(len(o), dtype=np.int64) for o in orders)
    masses = [_sums(qs[i][orders[i]], starts[i]) for i in range(2)]
    mass_laws = [_sums(laws[i][orders[i]], starts[i]) for i in range(2)]
    dens = [mass_laws[i] / masses[i] for i in range(2)]
    a, b = (np.concatenate([[0.0], np.cumsum(m)]) for m in masses)
    c1, c2 = (np.concatenate([[0.0], np.cumsum(m)]) for m in mass_laws)
    m = np.searchsorted(-dens[1], -(1.0 - a), side="left")  # count of d_2 > 1 - a_k (d_2 non-increasing)
    k = np.searchsorted(-dens[0], -(1.0 - b), side="left")
    first = c1 + c2[m] - _h(a, b[m])
    second = c1[k] + c2 - _h(a[k], b)
    pairs = {(int(i), int(m[i])) for i in np.flatnonzero(first > -tol)}
    pairs |= {(int(k[j]), int(j)) for j in np.flatnonzero(second > -tol)}
    return pairs, float(max(first.max(), second.max()))


class _Programme:
    """The linear programme of the module docstring for fixed orders and blocks (``starts``: each
    draft's block starts along its order; a density per block), built once in HiGHS; prefix pairs
    (block ends) are added as rows between solves, and HiGHS's dual simplex re-solves from the
    last optimal basis (the old rows stay primal feasible, the new ones are the only infeasibilities)."""

    def __init__(self, p: np.ndarray, qs: tuple, orders: tuple, starts: tuple) -> None:
        import highspy
        import scipy.sparse as sparse

        n = len(p)
        s = [len(b) for b in starts]
        # variables: D_1 [s1], D_2 [s2] (block densities), C_1 [s1 + 1], C_2 [s2 + 1] (at block ends), z [n]
        self.od = (0, s[0])
        self.oc = (s[0] + s[1], s[0] + s[1] + s[0] + 1)
        oz = self.oc[1] + s[1] + 1
        size = oz + n
        self.masses = [qs[i][orders[i]] for i in range(2)]
        self.cum = [np.concatenate([[0.0], np.cumsum(_sums(self.masses[i], starts[i]))]) for i in range(2)]
        self.block_of = [_block_of(starts[i], len(orders[i])) for i in range(2)]
        self.target, self.orders, self.n, self.s = p, orders, n, s
        rows, cols, vals, lower, upper = [], [], [], [], []
        row = 0
        for i in range(2):  # C_i[0] = 0; C_i[k] - C_i[k - 1] - q(block) D[k - 1] = 0
            k = np.arange(1, s[i] + 1)
            rows += [np.array([row]), row + k, row + k, row + k]
            cols += [np.array([self.oc[i]]), self.oc[i] + k, self.oc[i] + k - 1, self.od[i] + k - 1]
            vals += [np.ones(1), np.ones(s[i]), -np.ones(s[i]), -np.diff(self.cum[i])]
            lower.append(np.zeros(s[i] + 1))
            upper.append(np.zeros(s[i] + 1))
            row += s[i] + 1
        rows.append(np.array([row, row]))  # totals 1
        cols.append(np.array([self.oc[0] + s[0], self.oc[1] + s[1]]))
        vals.append(np.ones(2))
        lower.append(np.ones(1))
        upper.append(np.ones(1))
        row += 1
        for i in range(2):  # D[k + 1] - D[k] <= 0
            k = np.arange(s[i] - 1)
            rows += [row + k, row + k]
            cols += [self.od[i] + k + 1, self.od[i] + k]
            vals += [np.ones(len(k)), -np.ones(len(k))]
            lower.append(np.full(len(k), -np.inf))
            upper.append(np.zeros(len(k)))
            row += len(k)
        t = np.arange(n)  # z - q_1 D_1[block] - q_2 D_2[block] <= 0, per token
        rows.append(row + t)
        cols.append(oz + t)
        vals.append(np.ones(n))
        for i in range(2):
            rows.append(row + orders[i])
            cols.append(self.od[i] + self.block_of[i])
            vals.append(-self.masses[i])
        lower.append(np.full(n, -np.inf))
        upper.append(np.zeros(n))
        row += n
        matrix = sparse.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row, size))
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = size, row
        lp.col_cost_ = np.concatenate([np.zeros(oz), -np.ones(n)])
        lp.col_lower_ = np.zeros(size)
        lp.col_upper_ = np.concatenate([np.ones(oz), p])
        lp.row_lower_, lp.row_upper_ = np.concatenate(lower), np.concatenate(upper)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = matrix.indptr, matrix.indices, matrix.data
        self.highs = _highs()
        self.highs.passModel(lp)
        self.pairs: set = set()

    def add(self, pairs: set) -> None:
        """Rows ``C_1[k] + C_2[m] <= h(a_k, b_m)`` for the pairs not yet in the programme."""
        new = np.array(sorted(pairs - self.pairs), dtype=np.int64).reshape(-1, 2)
        self.pairs |= pairs
        if len(new):
            count = len(new)
            columns = np.stack([self.oc[0] + new[:, 0], self.oc[1] + new[:, 1]], axis=1).ravel()
            self.highs.addRows(
                count, np.full(count, -np.inf), _h(self.cum[0][new[:, 0]], self.cum[1][new[:, 1]]), 2 * count,
                np.arange(0, 2 * count, 2, dtype=np.int32), columns.astype(np.int32), np.ones(2 * count),
            )  # fmt: skip

    def solve(self) -> tuple | None:
        """The two laws at the optimum over the rows so far, or None when HiGHS reports no optimum;
        ``bound``: the programme's value, an upper bound for every later solve (rows only lower it)."""
        import highspy

        with silenced():
            self.highs.run()
        self.bound = -self.highs.getInfo().objective_function_value
        # a warm start from the last basis with Devex pricing: the dual steepest-edge weights of a
        # given basis cost one solve per row to set up (46 s against 0.25 s, n = 49152, 0.8/1.6)
        self.highs.setOptionValue("simplex_dual_edge_weight_strategy", 1)
        if self.highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        x = np.asarray(self.highs.getSolution().col_value)
        laws = []
        for i in range(2):
            law = np.zeros(self.n)
            density = np.minimum.accumulate(np.clip(x[self.od[i] : self.od[i] + self.s[i]], 0.0, 1.0))  # non-increasing
            law[self.orders[i]] = density[self.block_of[i]] * self.masses[i]
            laws.append(law)
        return laws[0], laws[1]


def _highs():
    """A silent HiGHS instance: the dual simplex (7x faster than the interior point at n = 8192),
    feasibility tolerances 1e-10, and matrix entries kept down to :data:`SMALL_ENTRY` (HiGHS's
    default drops entries below 1e-9: the draft masses of 38,870 tokens at n = 49152, 0.5/1.2,
    7.3e-6 of draft 1's mass, so the programme's ``C_1`` and the laws read off its densities
    disagreed; docs/nonidentical_verifier.md §4d). Created and run inside
    :func:`~multidraft.theory._silence.silenced`: HiGHS prints its banner to the process's standard
    output when a process first creates one, whatever ``output_flag`` says."""
    import highspy

    with silenced():
        highs = highspy.Highs()
    for name, value in (("output_flag", False), ("solver", "simplex"), ("simplex_strategy", 1),
                        ("primal_feasibility_tolerance", 1e-10), ("dual_feasibility_tolerance", 1e-10),
                        ("small_matrix_value", SMALL_ENTRY)):  # fmt: skip
        highs.setOptionValue(name, value)
    return highs


def _round(p: np.ndarray, qs: tuple, orders: tuple, starts: tuple, seed: tuple, floor: float) -> tuple[float, tuple | None]:
    """One round of :func:`ordered_split` for fixed orders: the programme seeded with the pairs
    ``seed`` (laws) violates beyond 1e-3, re-solved while its solution violates new pairs (at most
    :data:`PASSES` solves); ``(Σ min(p, x_1 + x_2), laws)``, or ``(-inf, None)`` when HiGHS fails or
    the passes run out. A programme whose value is already at most ``floor`` ends the round
    (rows only lower it)."""
    pairs, _ = prefix_pair_violation(qs, orders, _block_means(seed, qs, orders, starts), tol=1e-3, starts=starts)
    programme = _Programme(p, qs, orders, starts)
    for _ in range(PASSES):
        programme.add(pairs)
        solved = programme.solve()
        if solved is None:
            return -np.inf, None
        value = float(np.minimum(p, solved[0] + solved[1]).sum())
        new, violation = prefix_pair_violation(qs, orders, solved, starts=starts)
        if violation <= SLACK or new <= pairs or programme.bound <= floor + GAIN:  # done, HiGHS's rounding, no gain left
            return value, solved
        pairs |= new
    return -np.inf, None


def ordered_split(
    p: np.ndarray, qs: tuple, parts: tuple, laws: tuple, optimum: float, rounds: int = ROUNDS, head: int | None = HEAD
) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-draft laws ``(x_1, x_2, Σ min(p, x_1 + x_2))`` that satisfy (GR) (to the LP's
    tolerance; where HiGHS's rounding leaves a row violated beyond :data:`SLACK`, the laws as they
    are: the staircase's own law is exact either way), from the fixed-order linear programme of the module docstring over at most
    ``rounds`` rounds of orders (``p / q_i``, then the residual keys); ``laws`` (a rule's
    per-draft laws, U first) seed the prefix pairs and are returned when no round beats them.

    ``parts`` = (U, T*) as token ids; ``optimum`` = P* (the rounds stop there, to :data:`REACH`).
    A staircase from the returned ``x_1`` (:func:`._staircase.fit_staircase`) reaches at least
    their acceptance (docs/nonidentical_verifier.md §4c-§4d). ``head``: draft 1's blocks
    (:func:`blocks`; ``None``: a density per token, the unrestricted programme).

    Complexity: one sparse LP with about 3n variables per round (HiGHS's dual simplex, warm
    re-solves per pass); a whole fit at n = 49152 took 3 s CPU (0.8/1.6), 57 s (0.5/1.2) and
    about 250 s (0.8/2.0) (docs/nonidentical_verifier.md §4d).

    The instance where the fitted path stops at 0.772285 < P* = 0.78 (T* = {1, 2}):

    >>> import numpy as np
    >>> from multidraft.theory.verifier import fit_path_curtain
    >>> p, q1, q2 = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8])
    >>> one = fit_path_curtain(p, q1, q2)
    >>> x1, x2, value = ordered_split(p, (q1, q2), (np.array([0]), np.array([1, 2])), (one.law1, one.law2), one.optimum)
    >>> round(value, 9), (x1 + x2).round(9).tolist()
    (0.78, [0.28, 0.32, 0.4])
    """
    best = (float(np.minimum(p, laws[0] + laws[1]).sum()), laws[0], laws[1])
    source = None
    # every round orders the same tokens (those each draft can propose, part after part): one block layout
    sizes = [tuple(int((qs[i][part] > 0).sum()) for part in parts) for i in range(2)]
    starts = (blocks(sum(sizes[0]), sizes[0], head), np.arange(sum(sizes[1]), dtype=np.int64))
    blocked, kept = len(starts[0]) < sum(sizes[0]), None
    for index in range(rounds):
        orders = _orders(p, qs, parts, source)
        kept = orders[0] if kept is None else kept
        # draft 1's residual key can move its tokens across its blocks; then retry with the order
        # its blocks were fitted along (0.5/1.2 at n = 49152: -4.9e-2 against P*, docs §4d)
        candidates = [orders] + ([(kept, orders[1])] if blocked and source is not None else [])
        improved = False
        for orders in candidates:
            value, solved = _round(p, qs, orders, starts, source if source is not None else laws, best[0])
            if value > best[0] + GAIN:
                best, kept, improved = (value, *solved), orders[0], True
                break
        if best[0] >= optimum - REACH or (index > 0 and not improved):
            break
        source = best[1:]
    return best[1], best[2], best[0]
