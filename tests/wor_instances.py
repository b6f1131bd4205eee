"""Adversarial small instances for the without-replacement verifier (shared by its tests and
benchmarks/bench_verifier_wor.py): Dirichlet targets and drafts of several concentrations,
near-equal p and q, ties, zeros, p = q and disjoint supports; and the acceptance of the
front/back rule as shipped before the J-curtain, the baseline both compare with."""

from __future__ import annotations

import numpy as np

from multidraft.theory.verifier._front_back import front_back_nodes, front_back_pass
from multidraft.theory.optimum._wor_race import optimal_cut

KINDS = ("dir01", "dir02", "dir05", "dir1", "near-q", "ties", "zeros", "p-equals-q", "disjoint")


def _normalised(x: np.ndarray) -> np.ndarray:
    return x / x.sum()


def instance(rng: np.random.Generator, kind: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """One (p, q) of the given kind on n tokens (q has at least n - 1 positive entries)."""
    if kind.startswith("dir"):
        a = {"dir01": 0.1, "dir02": 0.2, "dir05": 0.5, "dir1": 1.0}[kind]
        return rng.dirichlet(np.full(n, a)), rng.dirichlet(np.full(n, a))
    if kind == "near-q":
        q = rng.dirichlet(np.ones(n))
        return _normalised(q * np.exp(0.3 * rng.normal(size=n))), q
    if kind == "ties":
        levels = rng.integers(1, 4, size=n).astype(float)
        return _normalised(rng.integers(1, 3, size=n) * levels), _normalised(levels)
    if kind == "zeros":
        p, q = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))
        p[rng.integers(n)] = 0.0
        q[rng.integers(n)] = 0.0
        return _normalised(p), _normalised(q)
    if kind == "p-equals-q":
        q = rng.dirichlet(np.ones(n))
        return q.copy(), q
    if kind == "disjoint":
        split = max(1, n // 3)
        p, q = np.zeros(n), np.zeros(n)
        p[:split] = rng.dirichlet(np.ones(split))
        q[split:] = rng.dirichlet(np.ones(n - split))
        return p, q
    raise ValueError(f"kind: unknown {kind!r}")


def instances(seed: int, count: int, max_n: int = 7, max_k: int = 4):
    """``count`` tuples ``(kind, p, q, k)`` with 3 <= n <= max_n and 2 <= k <= min(max_k, |supp q|)."""
    rng = np.random.default_rng(seed)
    made = 0
    while made < count:
        kind = KINDS[made % len(KINDS)]
        n = int(rng.integers(3, max_n + 1))
        p, q = instance(rng, kind, n)
        support = int(np.count_nonzero(q))
        if support < 2:
            continue
        k = int(rng.integers(2, min(max_k, support) + 1))
        made += 1
        yield kind, p, q, k


def front_back_today(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """Acceptance of the front/back rule over the whole vocabulary in one pass (U then T*, each by
    decreasing p/q, ties by token id), or of the first draft where that accepts more."""
    order, boundary = positions(p, q, k)
    nodes, weights = front_back_nodes(q, k)
    _, r = front_back_pass(p[order], q[order], boundary, k, nodes, weights)
    return max(float(np.minimum(p[order], r).sum()), float(np.minimum(p, q).sum()))


def positions(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, int]:
    """Front/back's position order over the whole vocabulary (U, then T*, each by decreasing
    p/q, ties by token id) and |U|."""
    cut = optimal_cut(p, q, k)
    n = len(p)
    in_cut = np.zeros(n, dtype=bool)
    in_cut[cut.order[: cut.size]] = True
    ratio = np.full(n, np.inf)
    np.divide(p, q, out=ratio, where=q > 0)
    return np.lexsort((np.arange(n), -ratio, in_cut)), n - cut.size
