"""Adversarial small instances for the without-replacement verifier (shared by its tests and
benchmarks/bench_verifier_wor.py): Dirichlet targets and drafts of several concentrations,
near-equal p and q, ties, zeros, p = q and disjoint supports."""

from __future__ import annotations

import numpy as np

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
