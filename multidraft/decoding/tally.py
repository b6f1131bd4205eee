"""Accumulating a measurement and turning it into :class:`~multidraft.decoding.results.Results`.

Each verifier of a run accumulates a :class:`Tally` per prompt (records, blocks, texts, counts
and times); :func:`merge_tallies` joins one verifier's tallies in prompt order, and
:func:`aggregate` computes the aggregates of :mod:`multidraft.decoding.results` from them: the
martingale intervals of realised minus expected acceptance and accepted length, and the paired
scores of every verifier against the first on the same blocks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from multidraft.decoding.config import MeasureConfig
from multidraft.decoding.results import (
    TIE,
    BlockRecord,
    PairedScore,
    PositionRecord,
    Results,
    VerifierRun,
    difference_interval,
    finite_mean,
    martingale_interval,
)
from multidraft.decoding.verification import BlockOutcome

__all__ = ["Tally", "merge_tallies", "aggregate"]


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else float("nan")


@dataclass
class Tally:
    """What the per-prompt runs of one verifier accumulate (see :func:`aggregate`)."""

    verifier: str = ""
    records: list[PositionRecord] = field(default_factory=list)
    blocks: list[BlockOutcome] = field(default_factory=list)
    block_records: list[BlockRecord] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    gaps: set[str] = field(default_factory=set)
    block_gaps: set[str] = field(default_factory=set)
    notes: set[str] = field(default_factory=set)
    new_tokens: int = 0
    autoregressive_tokens: int = 0
    compiled: bool = True
    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("drafting", "verification", "selection", "theory", "autoregressive", "warmup"), 0.0)
    )

    @property
    def seconds_decoding(self) -> float:
        """Drafting + verification + selection: the time decoding took (theory excluded)."""
        return self.seconds["drafting"] + self.seconds["verification"] + self.seconds["selection"]


def merge_tallies(parts: Sequence[Tally], verifier: str) -> Tally:
    """One verifier's :class:`Tally` over several prompts from one tally per prompt, in
    prompt order: records, blocks and texts concatenated with block numbers running on from
    one prompt to the next (each part numbers its blocks from 0); counts and times summed,
    gaps and notes joined, compiled when every part was."""
    merged = Tally(verifier=verifier)
    for part in parts:
        offset = len(merged.blocks)
        merged.records.extend(dataclasses.replace(r, block=r.block + offset) for r in part.records)
        merged.block_records.extend(dataclasses.replace(r, block=r.block + offset) for r in part.block_records)
        merged.blocks.extend(part.blocks)
        merged.texts.extend(part.texts)
        merged.gaps |= part.gaps
        merged.block_gaps |= part.block_gaps
        merged.notes |= part.notes
        merged.new_tokens += part.new_tokens
        merged.autoregressive_tokens += part.autoregressive_tokens
        merged.compiled = merged.compiled and part.compiled
        for key, value in part.seconds.items():
            merged.seconds[key] += value
    return merged


def aggregate(
    tallies: Sequence[Tally], config: MeasureConfig, *, target: str, draft: str, device: str, missing_optimal: str
) -> Results:
    """:class:`Results` from the accumulated ``tallies``, one per verifier of
    ``config.verifiers`` in order (the first gives the top-level fields);
    ``missing_optimal`` explains positions without an optimal acceptance."""
    tally = tallies[0]
    records = tally.records
    accepted = np.array([r.accepted for r in records], dtype=np.float64)
    expected = np.array([r.expected for r in records], dtype=np.float64)
    optimal = np.array([r.optimal for r in records], dtype=np.float64)
    finite = np.isfinite(expected)
    notes = sorted(set().union(*(t.notes for t in tallies)))
    if (~finite).any():
        notes.append(
            f"expected acceptance unavailable at {int((~finite).sum())} of {len(records)} positions "
            f"({'; '.join(sorted(tally.gaps))}); expected_acceptance and ci95 cover the other {int(finite.sum())}, "
            "empirical_acceptance covers all"
        )
    missing = int((~np.isfinite(optimal)).sum())
    if missing:
        notes.append(f"optimal acceptance not computed at {missing} positions: {missing_optimal}")
    block_gaps = sorted(set().union(*(t.block_gaps for t in tallies)))
    if block_gaps:
        notes.append(f"expected accepted length not computed at some blocks: {'; '.join(block_gaps)}")
    seconds = tally.seconds
    speculative_rate = _ratio(tally.new_tokens, tally.seconds_decoding)
    baseline_rate = _ratio(tally.autoregressive_tokens, seconds["autoregressive"]) if config.baseline else float("nan")
    return Results(
        config=config,
        target=target,
        draft=draft,
        device=device,
        compiled=config.compile and all(t.compiled for t in tallies),
        positions=len(records),
        empirical_acceptance=float(accepted.mean()) if len(records) else float("nan"),
        expected_acceptance=finite_mean(expected),
        ci95=difference_interval(accepted[finite], expected[finite]),
        expected_positions=int(finite.sum()),
        optimal_acceptance=finite_mean(optimal),
        optimal_positions=int(np.isfinite(optimal).sum()),
        draft_support=float(np.mean([r.draft_support for r in records])) if records else float("nan"),
        block_efficiency=float(np.mean([b.accepted + 1 for b in tally.blocks])) if tally.blocks else float("nan"),
        blocks=len(tally.blocks),
        new_tokens=tally.new_tokens,
        autoregressive_tokens=tally.autoregressive_tokens,
        tokens_per_second=speculative_rate,
        autoregressive_tokens_per_second=baseline_rate,
        speedup=speculative_rate / baseline_rate if baseline_rate > 0 else float("nan"),
        seconds_drafting=seconds["drafting"],
        seconds_verification=seconds["verification"],
        seconds_selection=seconds["selection"],
        seconds_theory=sum(t.seconds["theory"] for t in tallies),
        seconds_autoregressive=seconds["autoregressive"],
        seconds_warmup=seconds["warmup"],
        notes=tuple(notes),
        texts=tuple(tally.texts),
        records=tuple(records),
        verifiers=tuple(_verifier_run(t, i, baseline_rate) for i, t in enumerate(tallies)),
        paired=_paired_scores([r for t in tallies for r in t.block_records], config.verifier_names),
        block_records=tuple(r for t in tallies for r in t.block_records),
    )


def _verifier_run(tally: Tally, index: int, baseline_rate: float) -> VerifierRun:
    """The :class:`VerifierRun` of the ``index``-th verifier from its own tally."""
    records = tally.block_records
    tau = np.array([r.accepted for r in records], dtype=np.float64)
    own = np.array([r.expected[index] for r in records], dtype=np.float64)
    variance = np.array([r.variance for r in records], dtype=np.float64)
    finite = np.isfinite(own) & np.isfinite(variance)
    rate = _ratio(tally.new_tokens, tally.seconds_decoding)
    return VerifierRun(
        name=tally.verifier,
        blocks=len(records),
        new_tokens=tally.new_tokens,
        block_efficiency=float(tau.mean() + 1) if len(records) else float("nan"),
        expected_block_efficiency=float(own[finite].mean() + 1) if finite.any() else float("nan"),
        ci95=martingale_interval(tau[finite] - own[finite], np.maximum(variance[finite], 0.0)),
        expected_blocks=int(finite.sum()),
        tokens_per_second=rate,
        speedup=rate / baseline_rate if baseline_rate > 0 else float("nan"),
        seconds_decoding=tally.seconds_decoding,
        seconds_verifier=tally.seconds["selection"],
    )


def _paired_scores(records: Sequence[BlockRecord], names: Sequence[str]) -> tuple[PairedScore, ...]:
    """Every verifier against the first, block by block over ``records`` (:class:`PairedScore`)."""
    if not records:
        return ()
    table = np.array([r.expected for r in records], dtype=np.float64)  # [blocks, verifiers]
    out = []
    for index, name in enumerate(names):
        both = np.isfinite(table[:, index]) & np.isfinite(table[:, 0])
        difference = table[both, index] - table[both, 0]
        count = int(both.sum())
        mean = float(difference.mean()) if count else float("nan")
        half = 1.96 * float(difference.std(ddof=1)) / math.sqrt(count) if count > 1 else float("nan")
        scale = 100 / float(table[both, 0].mean() + 1) if count else float("nan")
        out.append(
            PairedScore(
                verifier=name,
                reference=names[0],
                blocks=count,
                expected_block_efficiency=float(table[both, index].mean() + 1) if count else float("nan"),
                difference=mean,
                ci95=(mean - half, mean + half),
                ahead=int((difference > TIE).sum()),
                behind=int((difference < -TIE).sum()),
                percent=mean * scale,
                percent_ci95=((mean - half) * scale, (mean + half) * scale),
            )
        )
    return tuple(out)

