"""The target split at a draft's support: p on the tokens the drafts can propose, and the rest as
one mass.

A token no draft can propose (q_i(y) = 0 for every i) is never drafted, so a verifier never
accepts it, and every residual a scheme forms there is p up to its normaliser (``(w - c·q)_+ = w``
where q = 0). So a scheme whose acceptance is a sum over the drafts' support S needs p only on S
and the single number ``p(Ω ∖ S)``; its residual law is ``(weights on S, c·p off S)``, drawn by
choosing the part by mass and, off S, drawing from p restricted to ``Ω ∖ S``
(:class:`OutsideTarget`, blocked inverse CDF without copying p). Reading p stays O(n) (one pass
of block sums for the outside mass); everything else is O(|S|).

:class:`TargetSplit` holds that split for the schemes (SpecInfer, SpecTr; the optimal verifier's
:class:`~multidraft.theory.verifier.CurtainRule` uses the same pieces). A support that is the
whole vocabulary is the dense case: p itself, nothing outside, nothing copied.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from functools import cached_property

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.laws._row_scan import every_token  # re-exported: the support of a full-support draft

__all__ = ["TargetSplit", "OutsideTarget", "draw_levels", "support_index", "every_token"]

#: Tokens per block of the blocked inverse-CDF draws.
BLOCK = 2048


def support_index(support: np.ndarray, n: int, tokens: object) -> np.ndarray:
    """The positions in ``support`` (ascending token ids of a vocabulary of n) of the token ids
    ``tokens`` (any shape): one binary search, the identity for a full support.

    Raises ValueError for a token outside the support (a draft of draft probability zero).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    if len(support) == n:
        if tokens.size and (tokens.min() < 0 or tokens.max() >= n):
            raise ValueError(f"drafts: token ids must lie in [0, {n})")
        return tokens
    local = np.searchsorted(support, tokens)
    inside = (tokens >= 0) & (local < len(support))
    inside[inside] = support[local[inside]] == tokens[inside]
    if not inside.all():
        raise ValueError("drafts: a draft token has draft probability zero")
    return local


def draw_levels(weights: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """The indices whose cumulative weight interval ``[W_{i-1}, W_i)`` holds each level in
    ``[0, Σ weights)`` (inverse CDF; an index of weight zero is never returned). Few levels
    over a long vector go by blocks: one vectorised sum per block, then one block's cumsum."""
    if len(levels) * BLOCK >= len(weights):
        cumulative = np.cumsum(weights)
        return np.searchsorted(cumulative, np.minimum(levels, np.nextafter(cumulative[-1], 0.0)), side="right")
    ends = np.cumsum(np.add.reduceat(weights, np.arange(0, len(weights), BLOCK)))
    levels = np.minimum(levels, np.nextafter(ends[-1], 0.0))
    out = np.empty(len(levels), dtype=np.int64)
    for i, block in enumerate(np.searchsorted(ends, levels, side="right")):  # a block of positive mass
        within = np.cumsum(weights[block * BLOCK : (block + 1) * BLOCK])
        offset = min(levels[i] - (ends[block - 1] if block else 0.0), np.nextafter(within[-1], 0.0))
        out[i] = block * BLOCK + int(np.searchsorted(within, offset, side="right"))
    return out


class OutsideTarget:
    """The target p restricted to the tokens outside a support, drawn by inverse CDF in blocks of
    ``BLOCK`` tokens without copying p: one pass of block sums (``numpy.add.reduceat``; the
    support's entries taken out), then one block's running sum per draw (or, for as many draws
    as blocks, one masked cumsum of p for all of them). The steps after the pass are compiled
    (:func:`_outside_blocks`, :func:`_draw_in_blocks`: numpy's ``bincount``, ``cumsum`` and
    binary searches to the bit, one call each instead of ~15 numpy calls per fresh position).

    Attributes
    ----------
    mass : float
        ``p(Ω ∖ support)`` (block sums; 0 when the support is everything).
    """

    def __init__(self, target: np.ndarray, support: np.ndarray) -> None:
        self.target, self.support = target, support
        compile_in_place(globals(), KERNELS)
        self.blocks = np.add.reduceat(target, np.arange(0, len(target), BLOCK))
        self.ends = np.empty(len(self.blocks))
        self.mass = _outside_blocks(target, support, self.blocks, self.ends)

    def _weights(self, block: int) -> np.ndarray:
        """p on one block with the support's entries zeroed."""
        start, stop = block * BLOCK, min((block + 1) * BLOCK, len(self.target))
        weights = self.target[start:stop].copy()
        first, last = np.searchsorted(self.support, (start, stop))
        weights[self.support[first:last] - start] = 0.0
        return weights

    def draw(self, uniforms: np.ndarray) -> np.ndarray:
        """One token per uniform in [0, 1), with probability ``p(y) / p(Ω ∖ support)`` for y
        outside the support (never a token of zero mass)."""
        uniforms = np.asarray(uniforms, dtype=np.float64)
        if len(uniforms) >= len(self.blocks):  # many draws: one masked pass over p
            weights = self.target.copy()
            weights[self.support] = 0.0
            return draw_levels(weights, uniforms * float(weights.sum()))
        out = np.empty(len(uniforms), dtype=np.int64)
        if not _draw_in_blocks(self.target, self.support, self.ends, uniforms, self.mass, out):
            return out
        levels = np.minimum(uniforms * self.mass, np.nextafter(self.mass, 0.0))
        for i in np.flatnonzero(out < 0):  # the block's mass was rounding residue: the nearest one that holds some
            block = int(np.searchsorted(self.ends, levels[i], side="right"))
            later, earlier = range(block + 1, len(self.blocks)), range(block - 1, -1, -1)
            block = next(b for b in itertools.chain(later, earlier) if self._weights(b).sum() > 0)
            within = np.cumsum(self._weights(block))
            out[i] = block * BLOCK + int(np.searchsorted(within, 0.0, side="right"))
        return out


class TargetSplit:
    """A target p split at a support S (ascending token ids): p on S, and p off S as one mass.

    A law on the vocabulary that equals ``c · p`` off S (a residual) is held as ``(weights on S,
    c)``: :meth:`dense` writes it out, :meth:`draw` samples it in O(|S|) plus one block of p.

    Attributes
    ----------
    target : ndarray [n]
        p (the caller's array, not copied; float64, or Fractions with a full support).
    support : ndarray [s] int64
        S; ``every_token(n)`` when S is the whole vocabulary.
    inside : ndarray [s]
        p on S (p itself for a full support).
    whole : bool
        S is the whole vocabulary (the dense case).
    """

    def __init__(self, target: np.ndarray, support: np.ndarray | None = None) -> None:
        self.target, self.n = target, len(target)
        self.whole = support is None or len(support) == self.n
        if self.whole:
            self.support, self.inside = every_token(self.n), target
        else:
            if target.dtype == object:
                raise ValueError("target: a split at a strict support is for float targets (exact plans stay dense)")
            self.support, self.inside = np.asarray(support, dtype=np.int64), target[support]

    @cached_property
    def outside(self) -> OutsideTarget:
        """p restricted to ``Ω ∖ S`` (for draws there)."""
        return OutsideTarget(self.target, self.support)

    @cached_property
    def outside_mass(self) -> float | Fraction:
        """``p(Ω ∖ S)``: 0 (in the target's arithmetic) for a full support, else one pass of
        block sums."""
        if self.whole:
            return Fraction(0) if self.target.dtype == object else 0.0
        return self.outside.mass

    def local(self, tokens: object) -> np.ndarray:
        """Positions in S of token ids (ValueError for a token outside S)."""
        return support_index(self.support, self.n, tokens)

    def dense(self, weights: np.ndarray, scale: float | Fraction) -> np.ndarray:
        """The law ``weights`` on S, ``scale · p`` off S, written out over the vocabulary ([..., n],
        a fresh array)."""
        if self.whole:
            return np.array(weights, copy=True)
        out = np.broadcast_to(self.target * scale, (*np.shape(weights)[:-1], self.n)).copy()
        out[..., self.support] = weights
        return out

    def draw(self, weights: np.ndarray, scale: float, uniforms: np.ndarray) -> np.ndarray:
        """One token per uniform in [0, 1) from the law ``weights`` on S, ``scale · p`` off S (up to
        its normaliser): the part chosen by mass, then inverse CDF on S (:func:`draw_levels`) or
        from p off S (:class:`OutsideTarget`, the uniform rescaled to that part). Never a token
        of zero mass; the law must have positive mass."""
        weights = np.asarray(weights, dtype=np.float64)
        inside = float(weights.sum())
        outside = float(scale) * self.outside_mass if not self.whole else 0.0
        levels = np.asarray(uniforms, dtype=np.float64) * (inside + outside)
        within = levels < inside if outside > 0 else np.ones(len(levels), dtype=bool)
        out = np.empty(len(levels), dtype=np.int64)
        if within.any():
            out[within] = self.support[draw_levels(weights, levels[within])]
        if not within.all():
            out[~within] = self.outside.draw((levels[~within] - inside) / outside)
        return out


# -- the compiled steps of OutsideTarget (numba on first use: compile_in_place) -----------------


def _outside_blocks(target, support, blocks, ends):
    """In place: ``blocks[b]`` (p summed over block b) less the support's mass there (summed in
    support order from zero, as ``numpy.bincount`` does), clipped at zero (rounding of the
    subtraction: never negative); ``ends`` their running sums (``numpy.cumsum``'s order).
    Returns the last running sum, the mass outside the support."""
    inside = np.zeros(blocks.shape[0])
    for i in range(support.shape[0]):
        inside[support[i] // BLOCK] += target[support[i]]
    total = 0.0
    for b in range(blocks.shape[0]):
        blocks[b] = max(blocks[b] - inside[b], 0.0)
        total += blocks[b]
        ends[b] = total
    return total


def _draw_in_blocks(target, support, ends, uniforms, mass, out):
    """``out[i]``: the token outside ``support`` at the level ``min(uniforms[i] · mass,
    nextafter(mass, 0))`` of the blocks' running sums ``ends`` -- the block holding the level,
    then the first token whose running sum of p in that block (the support's entries as zeros,
    ``numpy.cumsum``'s order) exceeds the level's offset there, the offset kept below the
    block's sum; -1 where that block has no mass (rounding residue: :meth:`OutsideTarget.draw`
    looks for the nearest block that holds some). Returns the number of such -1 entries."""
    n = target.shape[0]
    missing = 0
    for i in range(uniforms.shape[0]):
        level = min(uniforms[i] * mass, np.nextafter(mass, 0.0))
        block = np.searchsorted(ends, level, side="right")
        out[i] = -1
        missing += 1
        if block >= ends.shape[0]:
            continue
        offset = level - (ends[block - 1] if block > 0 else 0.0)
        start, stop = block * BLOCK, min((block + 1) * BLOCK, n)
        first = np.searchsorted(support, start)
        total = _running_sum(target, support, first, start, stop, np.inf)[1]
        if not total > 0.0:
            continue
        out[i] = _running_sum(target, support, first, start, stop, min(offset, np.nextafter(total, 0.0)))[0]
        missing -= 1
    return missing


def _running_sum(target, support, first, start, stop, offset):
    """The running sum of p over the tokens ``start:stop``, the support's entries (from
    ``support[first]`` on) as zeros: ``(the first token where it exceeds offset, else -1; the
    sum reached)``."""
    running, held = 0.0, first
    for j in range(start, stop):
        if held < support.shape[0] and support[held] == j:
            held += 1
        else:
            running += target[j]
            if running > offset:
                return j, running
    return -1, running


KERNELS = ("_outside_blocks", "_draw_in_blocks", "_running_sum")
