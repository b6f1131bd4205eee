"""Block efficiency, walltime and throughput of speculative decoding, single chain and trees.

One iteration of speculative decoding drafts ``length`` = L tokens per draft sequence, runs
the target once on all of them, and emits the accepted prefix plus one token sampled by the
target. Its **block efficiency** is the expected number of tokens emitted per target call.

* Single chain with i.i.d. per-token acceptance α (Leviathan et al., ICML 2023, Eq. 1 and
  Theorem 3.8)::

      E[tokens per call] = (1 - α^{L+1}) / (1 - α)          (= L + 1 at α = 1, = 1 at α = 0)
      walltime improvement = (1 - α^{L+1}) / ((1 - α)(L·c + 1)),

  with c the cost of one draft step relative to one target call; a speedup needs α > c.

* K drafts forming a tree: at each depth the token-level scheme runs on the drafts still
  consistent with the accepted prefix (the *live* drafts), so its acceptance depends on how
  many are live, and that number shrinks as drafts fall away. :func:`tree_block_efficiency`
  is exact for the **i.i.d. tree model** defined there.

* Throughput (Yan, Agarwal and Venkataraman, "Decoding Speculative Decoding", 2024)::

      throughput = E[tokens per iteration] / (L · t_draft(K, 1) + t_target(K, L + 1)),

  where t(b, m) is the latency of one forward pass over b sequences of m new tokens each
  (:class:`LatencyModel`, profiled by :func:`multidraft.decoding.profiling.profile_latency`).
  :func:`best_configuration` scans K and L and returns the whole curve.

All functions are pure numpy; inputs are validated at the boundary with a ``ValueError`` that
names the argument. The block efficiencies (chain and tree) and the shared validation live in
:mod:`multidraft.theory._block_efficiency` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.theory._block_efficiency import (
    MAX_GRID_POINTS,
    _accepted_through_depth,
    _check_acceptance_by_live,
    _check_grid,
    _check_nonnegative,
    _check_survival,
    chain_block_efficiency,
    tree_block_efficiency,
    walltime_improvement,
)
from multidraft.theory.laws import check_count

__all__ = [
    "MAX_GRID_POINTS",
    "LatencyModel",
    "SpeedCurve",
    "chain_block_efficiency",
    "walltime_improvement",
    "tree_block_efficiency",
    "iteration_seconds",
    "throughput",
    "best_configuration",
    "best_length",
]


# --------------------------------------------------------------------------------------------
# latency and throughput
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LatencyModel:
    """Latency t(b, m) in seconds of one forward pass over b sequences of m new tokens each.

    A table on a grid of batch sizes × token counts, bilinear interpolation in between;
    queries outside the profiled range raise ``ValueError`` (no silent extrapolation).
    A decode step of the draft is t(K, 1); verifying K drafts of length L is t(K, L + 1).

    Attributes
    ----------
    batch_sizes : tuple[int, ...]
        Increasing batch sizes b (at least two, or use :meth:`constant`).
    token_counts : tuple[int, ...]
        Increasing token counts m.
    seconds : numpy.ndarray, shape (len(batch_sizes), len(token_counts))
        Median latency per call (read-only).

    Examples
    --------
    >>> model = LatencyModel((1, 4), (1, 9), [[1.0, 2.0], [3.0, 4.0]])
    >>> model(1, 5), model(4, 1), model(2, 1)
    (1.5, 3.0, 1.6666666666666665)
    """

    batch_sizes: tuple[int, ...]
    token_counts: tuple[int, ...]
    seconds: np.ndarray

    def __post_init__(self) -> None:
        batches = tuple(check_count(b, "batch_sizes") for b in self.batch_sizes)
        tokens = tuple(check_count(m, "token_counts") for m in self.token_counts)
        for name, grid in (("batch_sizes", batches), ("token_counts", tokens)):
            if len(grid) < 2 or any(b <= a for a, b in zip(grid, grid[1:])):
                raise ValueError(f"{name}: expected at least two strictly increasing values, got {grid}")
        seconds = np.array(self.seconds, dtype=float)
        if seconds.shape != (len(batches), len(tokens)):
            raise ValueError(
                f"seconds: expected shape {(len(batches), len(tokens))} (batch sizes × token "
                f"counts), got {seconds.shape}"
            )
        if not np.isfinite(seconds).all() or (seconds < 0).any():
            raise ValueError("seconds: latencies must be finite and non-negative")
        seconds.setflags(write=False)
        object.__setattr__(self, "batch_sizes", batches)
        object.__setattr__(self, "token_counts", tokens)
        object.__setattr__(self, "seconds", seconds)

    @classmethod
    def constant(cls, seconds: float, max_batch: int = 1024, max_tokens: int = 1024) -> LatencyModel:
        """t(b, m) = ``seconds`` for every b <= max_batch, m <= max_tokens (memory-bound ideal).

        >>> LatencyModel.constant(0.02)(8, 5)
        0.02
        """
        value = _check_nonnegative(seconds, "seconds")
        grid_b = (1, check_count(max_batch, "max_batch", minimum=2))
        grid_m = (1, check_count(max_tokens, "max_tokens", minimum=2))
        return cls(grid_b, grid_m, np.full((2, 2), value))

    def __call__(self, batch: int, tokens: int) -> float:
        """Interpolated latency of one call with ``batch`` sequences of ``tokens`` new tokens."""
        b = check_count(batch, "batch")
        m = check_count(tokens, "tokens")
        if not self.batch_sizes[0] <= b <= self.batch_sizes[-1]:
            raise ValueError(f"batch: {b} lies outside the profiled batch sizes {self.batch_sizes}")
        if not self.token_counts[0] <= m <= self.token_counts[-1]:
            raise ValueError(f"tokens: {m} lies outside the profiled token counts {self.token_counts}")
        by_batch = np.array([np.interp(m, self.token_counts, row) for row in self.seconds])
        return float(np.interp(b, self.batch_sizes, by_batch))


def iteration_seconds(k: int, length: int, draft_latency: LatencyModel, target_latency: LatencyModel) -> float:
    """Time of one iteration: ``L · t_draft(K, 1) + t_target(K, L + 1)``.

    L sequential draft steps, each one token for each of the K sequences (a batch of K), then
    one target call over the K sequences of L + 1 tokens (the last emitted token plus L drafts).

    >>> iteration_seconds(2, 3, LatencyModel.constant(0.1), LatencyModel.constant(1.0))
    1.3

    References
    ----------
    Yan, Agarwal and Venkataraman, "Decoding Speculative Decoding", 2024, Section 3.
    """
    k = check_count(k, "k", meaning="the number of drafts")
    length = check_count(length, "length")
    seconds = length * draft_latency(k, 1) + target_latency(k, length + 1)
    if seconds <= 0:
        raise ValueError(f"latency: an iteration with K={k}, L={length} takes no time; latencies must not all be zero")
    return seconds


def throughput(
    acceptance: object,
    length: int,
    draft_latency: LatencyModel,
    target_latency: LatencyModel,
    survival: float = 0.0,
) -> float:
    """Tokens per second ``E[tokens per iteration] / (L · t_draft(K, 1) + t_target(K, L + 1))``.

    E[tokens] is :func:`tree_block_efficiency` (K = ``len(acceptance)``; one number means a
    single chain), the denominator :func:`iteration_seconds`. With constant latencies c·t and t
    this is ``walltime_improvement / t``. Drafting overheads (catching up on the bonus token,
    sampling, selection) are not modelled.

    Parameters
    ----------
    acceptance : float or sequence of float, length K
        a_j for j = 1..K live drafts (see :func:`tree_block_efficiency`).
    length : int
        Draft length L >= 1.
    draft_latency, target_latency : LatencyModel
        Per-call latencies of the draft and the target.
    survival : float
        ρ of the i.i.d. tree model.

    Returns
    -------
    float
        Expected tokens per second.

    Examples
    --------
    >>> draft, target = LatencyModel.constant(0.05), LatencyModel.constant(1.0)
    >>> abs(throughput(0.8, 4, draft, target) - walltime_improvement(0.8, 4, 0.05)) < 1e-12
    True

    References
    ----------
    Yan, Agarwal and Venkataraman, "Decoding Speculative Decoding", 2024, Eq. (1).
    """
    a = _check_acceptance_by_live(acceptance)
    tokens = tree_block_efficiency(a, length, survival)
    return tokens / iteration_seconds(a.size, length, draft_latency, target_latency)


@dataclass(frozen=True, eq=False)
class SpeedCurve:
    """Block efficiency and throughput over a grid of K (rows) × L (columns), with the best.

    Attributes
    ----------
    ks, lengths : tuple[int, ...]
        The grid.
    block_efficiency : numpy.ndarray, shape (len(ks), len(lengths))
        Expected tokens per iteration.
    seconds : numpy.ndarray, same shape
        Seconds per iteration, ``L · t_draft(K, 1) + t_target(K, L + 1)``.
    throughput : numpy.ndarray, same shape
        Tokens per second, ``block_efficiency / seconds``.
    speedup : numpy.ndarray, same shape
        ``throughput · t_target(1, 1)``: the factor over plain decoding with the target. With a
        draft cost ratio c and unit target time it is Leviathan's walltime improvement.
    best_k, best_length : int
        The argmax of throughput (ties: the smallest K, then the smallest L).
    best_throughput, best_speedup : float
        Throughput and speedup there.
    """

    ks: tuple[int, ...]
    lengths: tuple[int, ...]
    block_efficiency: np.ndarray
    seconds: np.ndarray
    throughput: np.ndarray
    speedup: np.ndarray
    best_k: int
    best_length: int
    best_throughput: float
    best_speedup: float


def _grid(values: Sequence[int] | None, default: Sequence[int], name: str) -> tuple[int, ...]:
    grid = tuple(default if values is None else values)
    if not grid:
        raise ValueError(f"{name}: expected at least one value")
    return tuple(sorted({check_count(v, name) for v in grid}))


def best_configuration(
    acceptance: object,
    draft_latency: LatencyModel,
    target_latency: LatencyModel,
    *,
    ks: Sequence[int] | None = None,
    lengths: Sequence[int] | None = None,
    survival: float = 0.0,
) -> SpeedCurve:
    """The number of drafts K and draft length L that maximise :func:`throughput`, with the curve.

    ``argmax_{K, L} tree_block_efficiency(a_1..a_K, L, ρ) / (L · t_draft(K, 1) + t_target(K, L + 1))``
    over the grid ``ks`` × ``lengths``; K drafts use the first K entries of ``acceptance``.

    Parameters
    ----------
    acceptance : float or sequence of float
        a_j for j = 1..K_max live drafts; must cover ``max(ks)``.
    draft_latency, target_latency : LatencyModel
        Per-call latencies; the grid must stay inside their profiled range.
    ks : sequence of int, optional
        Numbers of drafts; default ``1..len(acceptance)``.
    lengths : sequence of int, optional
        Draft lengths; default ``1..16``.
    survival : float
        ρ of the i.i.d. tree model.

    Returns
    -------
    SpeedCurve

    Raises
    ------
    ValueError
        Bad acceptance, a K larger than the acceptances given, a grid point outside the
        profiled latencies.
    ProblemTooLargeError
        More than :data:`MAX_GRID_POINTS` points ``len(ks) × max(lengths)`` (refused before any work).

    Examples
    --------
    >>> curve = best_configuration([0.7, 0.8], LatencyModel.constant(0.1),
    ...                            LatencyModel.constant(1.0), lengths=range(1, 9))
    >>> curve.throughput.shape, curve.best_k, curve.best_length
    ((2, 8), 2, 4)

    References
    ----------
    Yan, Agarwal and Venkataraman, "Decoding Speculative Decoding", 2024; Leviathan et al.,
    ICML 2023, Section 3.5 (optimal L).
    """
    a = _check_acceptance_by_live(acceptance)
    ks = _grid(ks, range(1, a.size + 1), "ks")
    lengths = _grid(lengths, range(1, 17), "lengths")
    if ks[-1] > a.size:
        raise ValueError(
            f"ks: K = {ks[-1]} needs acceptances for 1..{ks[-1]} live drafts, got {a.size}"
        )
    rho = _check_survival(survival)
    _check_grid(len(ks), lengths[-1])
    efficiency = np.array(
        [1.0 + np.cumsum(_accepted_through_depth(a[:k], lengths[-1], rho))[np.array(lengths) - 1] for k in ks]
    )
    seconds = np.array([[iteration_seconds(k, L, draft_latency, target_latency) for L in lengths] for k in ks])
    rate = efficiency / seconds
    speedup = rate * target_latency(1, 1)
    row, column = np.unravel_index(int(np.argmax(rate)), rate.shape)
    return SpeedCurve(
        ks=ks,
        lengths=lengths,
        block_efficiency=efficiency,
        seconds=seconds,
        throughput=rate,
        speedup=speedup,
        best_k=ks[row],
        best_length=lengths[column],
        best_throughput=float(rate[row, column]),
        best_speedup=float(speedup[row, column]),
    )


def best_length(
    acceptance: object, cost_ratio: float, *, max_length: int = 64, survival: float = 0.0
) -> SpeedCurve:
    """The draft length maximising the walltime improvement ``E[tokens] / (L·c + 1)``, L <= max_length.

    :func:`best_configuration` with constant latencies c (draft step, for all K drafts at once)
    and 1 (target call, whatever its size: the memory-bound idealisation of Leviathan et al.),
    for K = ``len(acceptance)`` only. ``speedup`` is then the walltime improvement.

    Examples
    --------
    >>> curve = best_length(0.8, 0.05)
    >>> curve.best_length, round(curve.best_speedup, 4), round(walltime_improvement(0.8, 8, 0.05), 4)
    (8, 3.0921, 3.0921)

    References
    ----------
    Leviathan, Kalman and Matias, ICML 2023, Section 3.5 and Figure 3.
    """
    a = _check_acceptance_by_live(acceptance)
    cost = _check_nonnegative(cost_ratio, "cost_ratio")
    max_length = check_count(max_length, "max_length")
    _check_grid(1, max_length)  # before the grid of lengths is built
    top = max(2, a.size, max_length + 1)
    return best_configuration(
        a,
        LatencyModel.constant(cost, top, top),
        LatencyModel.constant(1.0, top, top),
        ks=(a.size,),
        lengths=range(1, max_length + 1),
        survival=survival,
    )
