"""The exact min-cut for independent, non-identical drafts: threshold sets found by branch and bound.

Drafts ``X_i ~ q_i`` independently (i = 1..K) contain ``P(set(X) ⊆ T) = Π_i q_i(T)``, so by
max-flow/min-cut (theory.md, "Optimal acceptance in closed form")

    P* = 1 + min_{T ⊆ Ω} F(T),        F(T) = p(T) - Π_i q_i(T).

With ``c(T) = (q_1(T), ..., q_K(T))`` and the score ``s_y(c) = Σ_i q_i(y) Π_{j≠i} c_j - p(y)``
(nondecreasing in every ``c_j``), a minimiser T* is a threshold set of ``s(c(T*))``: it holds
every token of positive score and none of negative score (Lemma 1). The weights depend on T*
itself, so the search locates ``c* = c(T*)`` instead, best first over boxes ``W = [l, h]`` of
draft masses: a box decides the tokens whose score at its corners has one sign (Lemma 2) and
shrinks to ``[c(IN), c(IN ∪ M)]``; it is settled by evaluating every subset of its undecided
classes when at most :data:`LEAF_SIZE` remain, discarded when its McCormick lower bound
(Lemma 3) is not below the best cut found, else halved. A half is first bounded before it is
decided, and dropped when that bound already reaches the best value (the bound only rises as
the box shrinks and classes are decided, so nothing in it could win). The search is complete:
the chain of boxes that contain c* ends in a leaf that evaluates T*, or in a box whose bound is
at most F(T*). Proofs of the reductions, the lemmas and completeness: docs/independent_optimum.md.

*Arithmetic.* With ``exact=True`` everything is Fractions and the result is exact. In floats a
token is decided only when its score clears the rounding of its terms by a relative margin,
shrinking keeps a relative slack of 1e-12, and a box is discarded when its bound comes within
:data:`FLOAT_TOLERANCE` of the best value. *Termination* is not proved by a bound on the
number of boxes: a box that cannot be halved is settled exhaustively when at most
:data:`COLLAPSED_LEAF_SIZE` classes are undecided and refused with an error otherwise, and
:data:`NODE_LIMIT` caps the search (measured box counts: docs/independent_optimum.md).

*Cost.* Two O(n) radix sorts (the grouping's hash and the first candidate's scores), then
O(K |M|) per deciding round (tens of rounds in all); the undecided set shrinks quickly. In
floats the rounds, the bounds, the hash and the first candidate's prefix scan are compiled
passes (:mod:`~multidraft.theory.optimum._independent_kernels`) that give the doubles of the
numpy expressions they replace, sums left to numpy (tests/test_independent_passes.py).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from multidraft.theory.laws import subset_sums

__all__ = ["ProductCut", "product_cut", "LEAF_SIZE", "COLLAPSED_LEAF_SIZE", "NODE_LIMIT", "FLOAT_TOLERANCE"]

#: Undecided token classes at or below which a box is settled by evaluating every subset.
LEAF_SIZE = 10
#: Largest undecided set settled exhaustively in a box too narrow to halve in floats.
COLLAPSED_LEAF_SIZE = 16
#: Most boxes the search visits before it gives up with an error.
NODE_LIMIT = 100_000
#: Float mode discards a box whose lower bound is within this of the best value found.
FLOAT_TOLERANCE = 1e-13
#: Relative slack kept when a box shrinks to the masses of its decided tokens (float mode).
_SLACK = 1e-12


@dataclass(frozen=True)
class ProductCut:
    """``min_T F(T)``, ``F(T) = p(T) - Π_i q_i(T)``, with a minimising set and the search size.

    ``value`` is F at ``certificate`` (sorted token ids) as the search summed it; ``boxes`` and
    ``leaves`` count the boxes visited and those settled by enumeration.
    """

    value: float | Fraction
    certificate: np.ndarray
    boxes: int
    leaves: int


@dataclass(frozen=True)
class _Classes:
    """The reduced instance: forced tokens (R1) and classes of parallel tokens (R3)."""

    p: np.ndarray  # [m] target mass of each class
    q: np.ndarray  # [K, m] draft masses of each class
    forced: np.ndarray  # token ids always in the cut
    active: np.ndarray  # token ids that belong to a class
    class_of: np.ndarray  # [len(active)] class of each active token
    n: int  # vocabulary size

    def tokens(self, classes: np.ndarray) -> np.ndarray:
        """Sorted token ids of the forced tokens and of the given classes."""
        chosen = np.zeros(len(self.p), dtype=bool)
        chosen[classes] = True
        members = np.zeros(self.n, dtype=bool)
        members[self.forced] = True
        members[self.active[chosen[self.class_of]]] = True
        return np.flatnonzero(members)


def _classes(p: np.ndarray, q: np.ndarray, exact: bool) -> _Classes:
    """Reductions R1-R3: forced tokens, and classes of tokens with equal ratios ``q_i/p``."""
    draftable = (q > 0).any(axis=0)
    positive = p > 0
    forced = np.flatnonzero(draftable & ~positive)
    active = np.flatnonzero(draftable & positive)
    if exact:  # parallel vectors have equal ratios
        ratios = q[:, active] / p[active]
        keys: dict[tuple, int] = {}
        class_of = np.array([keys.setdefault(tuple(column), len(keys)) for column in ratios.T.tolist()], dtype=np.int64)
    else:
        # Sort by a hash of the ratio bits, then merge neighbours with equal ratios. A hash
        # collision can only leave one class in two pieces, which is still correct (merging is
        # a reduction, not a requirement).
        ratios, digest = np.empty((len(q), len(active))), np.empty(len(active), dtype=np.uint64)
        _kernels().ratio_digest(p, q, active, ratios, digest)
        class_of = np.empty(len(active), dtype=np.int64)
        _kernels().label_runs(ratios, _kernels().radix_order(digest), class_of)
    m = int(class_of.max()) + 1 if len(active) else 0
    if exact:
        class_p = np.array([Fraction(0)] * m, dtype=object)
        class_q = np.array([[Fraction(0)] * m for _ in q], dtype=object).reshape(len(q), m)
        for token, cls in zip(active.tolist(), class_of.tolist()):
            class_p[cls] += p[token]
            class_q[:, cls] += q[:, token]
    else:
        class_p = np.bincount(class_of, weights=p[active], minlength=m)
        class_q = np.stack([np.bincount(class_of, weights=row[active], minlength=m) for row in q])
    return _Classes(class_p, class_q, forced, active, class_of, len(p))


def _prefix_sums(values: np.ndarray) -> np.ndarray:
    """``[0, v_0, v_0 + v_1, ...]`` for floats or Fractions."""
    out = np.zeros(len(values) + 1, dtype=values.dtype)
    np.cumsum(values, out=out[1:])
    return out


def _weights(c: Sequence) -> list:
    """``w_i = Π_{j≠i} c_j``: the score weights at the draft masses c."""
    return [math.prod(c[:i]) * math.prod(c[i + 1 :]) for i in range(len(c))]


def _overestimators(lo: Sequence, hi: Sequence) -> list[tuple[list, object]]:
    """Linear bounds ``v·c + κ >= Π_i c_i`` on the box [lo, hi] (recursive McCormick, Lemma 3).

    Every order and choice for K <= 3; for larger K the K cyclic orders with all-lower and
    all-upper choices (any subset of valid bounds is valid).
    """
    k = len(lo)
    if k <= 3:
        plans = [
            (order, choice)
            for order in itertools.permutations(range(k))
            if k == 1 or order[0] < order[1]  # the first two factors are symmetric
            for choice in itertools.product((False, True), repeat=k - 1)
        ]
    else:
        plans = [(tuple((r + j) % k for j in range(k)), (upper,) * (k - 1)) for r in range(k) for upper in (False, True)]
    bounds = []
    for order, choice in plans:
        v = [0] * k
        v[order[0]] = 1
        kappa = 0
        low, high = lo[order[0]], hi[order[0]]  # the range of R = Π of the factors so far
        for use_upper, factor in zip(choice, order[1:]):
            # R x <= R_u x + x_l R - R_u x_l   or   R x <= R_l x + x_u R - R_l x_u
            r_coef, x_coef = (low, hi[factor]) if use_upper else (high, lo[factor])
            v = [x_coef * value for value in v]
            kappa = x_coef * kappa - r_coef * x_coef
            v[factor] = v[factor] + r_coef
            low, high = low * lo[factor], high * hi[factor]
        bounds.append((v, kappa))
    return bounds


@dataclass
class _Box:
    """A box [lo, hi] of draft masses with its decided (inside) and undecided classes."""

    lo: list
    hi: list
    undecided: np.ndarray  # class ids
    inside: list  # arrays of class ids decided inside
    p_in: object  # p of the inside classes
    c_in: list  # draft masses of the inside classes


class _Undecided:
    """The undecided classes of a box while it is decided: their ids, p and q in the first
    ``size`` entries of arrays of their own. A class is decided inside when its weighted draft
    mass exceeds ``p · up``, outside when it falls below ``p · down`` (both 1 in exact arithmetic).
    Floats are sifted by one compiled pass per round, in place
    (:func:`~multidraft.theory.optimum._independent_kernels.sift`), Fractions by numpy masks;
    either way the classes keep their order and the sums are numpy's over contiguous rows."""

    def __init__(self, classes: _Classes, ids: np.ndarray, margin: float, exact: bool) -> None:
        self.exact, self.size = exact, len(ids)
        if exact:
            self.all_ids, self.p, self.q = ids, classes.p[ids], classes.q[:, ids]
            return
        self.all_ids = ids.copy()  # sifted in place: the box's array is shared with its sibling
        self.p, self.q = np.empty(len(ids)), np.empty((len(classes.q), len(ids)))
        self.up, self.down = (1 + margin) / (1 - margin), (1 - margin) / (1 + margin)
        _kernels().gather(ids, classes.p, classes.q, self.p, self.q)
        self.buffers = (np.empty(len(ids), dtype=np.int64), np.empty(len(ids)), np.empty(self.q.shape))

    @property
    def ids(self) -> np.ndarray:
        """The undecided class ids, in their order."""
        return self.all_ids[: self.size]

    def rest(self, zero) -> list:
        """``q_i`` of the undecided classes, for each draft i."""
        return [row[: self.size].sum() if self.size else zero for row in self.q]

    def sift(self, w_lo: list, w_hi: list) -> tuple | None:
        """One round of Lemma 2 at the weights of the box's corners: the classes decided inside
        as (ids, p, q), those outside dropped; None when no class is decided."""
        if not self.exact:
            in_ids, in_p, in_q = self.buffers
            weights = np.array(w_lo, dtype=np.float64), np.array(w_hi, dtype=np.float64)
            inside, kept = _kernels().sift(*weights, self.up, self.down, self.all_ids, self.p, self.q, self.size, in_ids, in_p, in_q)
            if kept == self.size:
                return None
            self.size = kept
            return in_ids[:inside].copy(), in_p[:inside], in_q[:, :inside]
        low = sum(w * row for w, row in zip(w_lo, self.q))
        high = sum(w * row for w, row in zip(w_hi, self.q))
        inside, outside = low > self.p, high < self.p
        if not (inside.any() or outside.any()):
            return None
        moved = self.all_ids[inside], self.p[inside], self.q[:, inside]
        keep = ~(inside | outside)
        self.all_ids, self.p, self.q, self.size = self.all_ids[keep], self.p[keep], self.q[:, keep], int(keep.sum())
        return moved


def _negative_parts(vs: list, classes: _Classes, ids: np.ndarray, exact: bool) -> list[np.ndarray]:
    """For each v of ``vs``: the negative entries of ``p - Σ_i v_i q_i`` over the classes
    ``ids``, in order (floats: one compiled pass for all of them)."""
    if exact:
        reduced = [classes.p[ids] - sum(v[i] * classes.q[i, ids] for i in range(len(classes.q))) for v in vs]
        return [r[r < 0] for r in reduced]
    out, counts = np.empty((len(vs), len(ids))), np.empty(len(vs), dtype=np.int64)
    _kernels().negative_parts(np.array(vs, dtype=np.float64), ids, classes.p, classes.q, out, counts)
    return [row[:count] for row, count in zip(out, counts)]


def _kernels():
    """:mod:`multidraft.theory.optimum._independent_kernels`, its kernels compiled (on first use)."""
    from multidraft.theory.optimum import _independent_kernels

    _independent_kernels.compiled()
    return _independent_kernels


class _Search:
    """Best-first branch and bound over boxes (see the module docstring)."""

    def __init__(self, classes: _Classes, forced_mass: list, exact: bool) -> None:
        self.classes = classes
        self.exact = exact
        self.k = len(forced_mass)
        self.zero = Fraction(0) if exact else 0.0
        eps = np.finfo(np.float64).eps
        self.margin = 0.0 if exact else 8 * (self.k + 2) * eps
        self.tolerance = self.zero if exact else FLOAT_TOLERANCE
        self.best_value = self.zero - math.prod(forced_mass)  # T = the forced tokens
        self.best_classes = np.zeros(0, dtype=np.int64)
        self.boxes = self.leaves = 0

    # -- candidates ------------------------------------------------------------------------
    def offer(self, value: object, box: _Box, extra: np.ndarray) -> None:
        if value < self.best_value:
            self.best_value = value
            self.best_classes = np.concatenate(box.inside + [np.asarray(extra, dtype=np.int64)])

    def cut_values(self, box: _Box, classes: np.ndarray, sums) -> np.ndarray:
        """``F(IN ∪ S)`` for the sets S of ``classes`` whose totals ``sums`` lists (all subset
        sums, or prefix sums along an order)."""
        cls = self.classes
        contained = math.prod(sums(cls.q[i, classes]) + c for i, c in enumerate(box.c_in))
        return sums(cls.p[classes]) + box.p_in - contained

    def offer_subsets(self, box: _Box) -> None:
        """Evaluate ``IN ∪ S`` for every subset S of the undecided classes."""
        self.leaves += 1
        values = self.cut_values(box, box.undecided, subset_sums)
        best = int(np.argmin(values))
        self.offer(values[best], box, box.undecided[[b for b in range(len(box.undecided)) if best >> b & 1]])

    def offer_prefixes(self, box: _Box) -> None:
        """Every prefix of the undecided classes ordered by decreasing score at the box centre
        (ties in class order; floats by compiled passes and the radix sort)."""
        cls = self.classes
        idx = box.undecided
        weights = _weights([(a + b) / 2 for a, b in zip(box.lo, box.hi)])
        if self.exact:
            score = sum(w * cls.q[i, idx] for i, w in enumerate(weights)) / cls.p[idx]
            order = idx[np.argsort(-score, kind="stable")]
            values = self.cut_values(box, order, _prefix_sums)
        else:
            kernels, bits = _kernels(), np.empty(len(idx), dtype=np.uint64)
            kernels.score_bits(np.array(weights, dtype=np.float64), idx, cls.p, cls.q, bits)
            order = idx[kernels.radix_order(bits)]
            values = np.empty(len(order) + 1)
            kernels.prefix_values(order, cls.p, cls.q, float(box.p_in), np.array(box.c_in, dtype=np.float64), values)
        best = int(np.argmin(values))
        self.offer(values[best], box, order[:best])

    # -- one box ---------------------------------------------------------------------------
    def decide(self, box: _Box) -> bool:
        """Lemma 2 until nothing changes; False when the box holds no c*.

        In floats a class counts as inside only when its weighted draft mass exceeds p by the
        relative margin, and as outside likewise (the rounding of both sides stays below it).
        """
        undecided = _Undecided(self.classes, box.undecided, self.margin, self.exact)
        rest = undecided.rest(self.zero)
        while True:
            moved = undecided.sift(_weights(box.lo), _weights(box.hi))
            if moved is not None:
                ids, p_in, q_in = moved
                box.inside = box.inside + [ids]
                box.p_in = box.p_in + p_in.sum()
                box.c_in = [c + row.sum() for c, row in zip(box.c_in, q_in)]
                rest = undecided.rest(self.zero)
                box.undecided = undecided.ids
            c_all = [c + r for c, r in zip(box.c_in, rest)]
            if self.exact:
                lo = [max(a, c) for a, c in zip(box.lo, box.c_in)]
                hi = [min(b, c) for b, c in zip(box.hi, c_all)]
            else:
                lo = [max(a, c * (1 - _SLACK)) for a, c in zip(box.lo, box.c_in)]
                hi = [min(b, c * (1 + _SLACK)) for b, c in zip(box.hi, c_all)]
            shrunk = lo != box.lo or hi != box.hi
            box.lo, box.hi = lo, hi
            if any(a > b for a, b in zip(lo, hi)):
                return False
            if moved is None and not shrunk:
                return True

    def lower_bound(self, box: _Box) -> object:
        """The best bound of Lemma 3 over the McCormick overestimators."""
        best = None
        bounds = _overestimators(box.lo, box.hi)
        for (v, kappa), negative in zip(bounds, _negative_parts([v for v, _ in bounds], self.classes, box.undecided, self.exact)):
            value = box.p_in - sum(v[i] * box.c_in[i] for i in range(self.k)) - kappa + negative.sum()
            best = value if best is None or value > best else best
        return best

    def beaten(self, box: _Box, parent_bound: object) -> bool:
        """A half (``parent_bound`` finite) whose bound already reaches the best value before it
        is decided: no set in it beats the best, so its deciding rounds are skipped (one pass
        instead of several; the bound only rises as a box shrinks and classes are decided)."""
        return parent_bound > -math.inf and self.lower_bound(box) >= self.best_value

    def split(self, box: _Box) -> list[_Box] | None:
        """Halve the widest side (weighted by Π_{j≠i} hi_j); None when it cannot be halved (a point
        in exact arithmetic, adjacent floats otherwise)."""
        widths = [float(b - a) for a, b in zip(box.lo, box.hi)]
        sizes = [width * float(w) for width, w in zip(widths, _weights(box.hi))]
        side = int(np.argmax(sizes if max(sizes) > 0 else widths))
        a, b = box.lo[side], box.hi[side]
        middle = (a + b) / 2
        if not a < middle < b:
            return None
        halves = []
        for lo_side, hi_side in ((a, middle), (middle, b)):
            lo, hi = list(box.lo), list(box.hi)
            lo[side], hi[side] = lo_side, hi_side
            halves.append(_Box(lo, hi, box.undecided, box.inside, box.p_in, list(box.c_in)))
        return halves

    # -- the loop --------------------------------------------------------------------------
    def run(self, root: _Box) -> None:
        counter = itertools.count()
        queue: list = [(-math.inf, next(counter), root)]
        first = True
        while queue:
            bound, _, box = heapq.heappop(queue)
            if bound >= self.best_value - self.tolerance:
                continue
            self.boxes += 1
            if self.boxes > NODE_LIMIT:
                raise RuntimeError(
                    f"method 'threshold': the search exceeded {NODE_LIMIT} boxes without settling the optimum; "
                    "use method='subsets' (small n) or the transport LP"
                )
            if self.beaten(box, bound):
                continue
            if not self.decide(box):
                continue
            self.offer(box.p_in - math.prod(box.c_in), box, np.zeros(0, dtype=np.int64))
            if first and len(box.undecided):
                self.offer_prefixes(box)
                first = False
            if len(box.undecided) <= LEAF_SIZE:
                self.offer_subsets(box)
                continue
            bound = self.lower_bound(box)
            if bound >= self.best_value - self.tolerance:
                continue
            halves = self.split(box)
            if halves is None:
                if len(box.undecided) > COLLAPSED_LEAF_SIZE:
                    raise RuntimeError(
                        f"method 'threshold': {len(box.undecided)} token classes stay undecided in a box that "
                        "cannot be halved further (its sides are points or adjacent floats); use method='subsets' "
                        "(small n) or the transport LP"
                    )
                self.offer_subsets(box)
                continue
            for half in halves:
                heapq.heappush(queue, (bound, next(counter), half))


def product_cut(target: np.ndarray | Sequence[Fraction], drafts: np.ndarray | Sequence[Sequence[Fraction]], exact: bool = False) -> ProductCut:
    """Minimise ``F(T) = p(T) - Π_i q_i(T)`` over token sets T, with a minimising set.

    ``P* = 1 + min_T F(T)`` for K independent drafts ``X_i ~ q_i`` (see the module docstring
    for the search and the proof that it is complete).

    Parameters
    ----------
    target : array_like, shape (n,)
        Target distribution p (validated by the caller): floats, or Fractions with ``exact=True``.
    drafts : array_like, shape (K, n)
        The K draft distributions, of the same kind.
    exact : bool
        Fraction arithmetic throughout.

    Returns
    -------
    ProductCut
        The minimum, a minimising token set and the number of boxes searched.

    Raises
    ------
    RuntimeError
        When the search cannot settle the optimum (see the module docstring): never a wrong
        number.

    >>> cut = product_cut(np.array([0.5, 0.3, 0.2]), np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]))
    >>> cut.certificate.tolist(), round(1 + cut.value, 12)
    ([1, 2], 0.78)
    """
    if exact:
        p = np.array(list(target), dtype=object)
        q = np.array([list(row) for row in drafts], dtype=object).reshape(-1, len(p))
    else:
        p = np.asarray(target, dtype=np.float64)
        q = np.asarray(drafts, dtype=np.float64).reshape(-1, len(p))
    classes = _classes(p, q, exact)
    zero = Fraction(0) if exact else 0.0
    forced_mass = [q[i, classes.forced].sum() if len(classes.forced) else zero for i in range(len(q))]
    search = _Search(classes, forced_mass, exact)
    all_classes = np.arange(len(classes.p))
    rest = [classes.q[i].sum() if len(all_classes) else zero for i in range(len(q))]
    root = _Box(list(forced_mass), [f + r for f, r in zip(forced_mass, rest)], all_classes, [], zero, list(forced_mass))
    search.run(root)
    value = search.best_value if exact else float(search.best_value)
    return ProductCut(value, classes.tokens(search.best_classes), search.boxes, search.leaves)
