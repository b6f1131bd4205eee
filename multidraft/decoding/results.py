"""The outcome of a measurement: one record per verified position, and the aggregates.

Given the past, position i is accepted with probability ``a_i`` (the scheme's exact
acceptance there), so ``D_i = 1[acc_i] - a_i`` are martingale differences with conditional
variance ``a_i (1 - a_i)``. By the martingale central limit theorem (Hall and Heyde 1980,
Corollary 3.1) ``Σ D_i / sqrt(Σ a_i (1 - a_i))`` is approximately standard normal, so

    ci95 = mean(D) ± 1.96 sqrt(Σ a_i (1 - a_i)) / N

is a 95% interval for the mean of empirical minus expected acceptance, and it should contain 0
when the implementation matches the theory. The variance is the model's, known from the
expected values, not the sample spread of the D_i: that spread is 0 when every draw is accepted
(18 positions all accepted gave the degenerate interval [+0.108, +0.144] under the sample-based
formula), while the model's variance is not.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from multidraft.decoding.config import MeasureConfig
from multidraft.decoding.verification import BlockOutcome

__all__ = ["PositionRecord", "Results", "TIMING_FIELDS", "difference_interval"]

#: Keys of :meth:`Results.summary` that are wall-clock measurements (they vary run to run;
#: every other key is reproducible from the seed on a given device).
TIMING_FIELDS = (
    "tokens_per_second",
    "autoregressive_tokens_per_second",
    "speedup",
    "seconds_drafting",
    "seconds_verification",
    "seconds_selection",
    "seconds_theory",
    "seconds_autoregressive",
    "seconds_warmup",
)


def difference_interval(accepted: np.ndarray, expected: np.ndarray, z: float = 1.96) -> tuple[float, float]:
    """Interval ``mean(acc - a) ± z sqrt(Σ a (1 - a)) / N`` for the mean of empirical minus
    expected acceptance over N positions (module docstring); ``(nan, nan)`` when N = 0.

    >>> difference_interval(np.ones(4), np.full(4, 0.75))  # all accepted: still a real interval
    (-0.17435..., 0.67435...)
    """
    accepted = np.asarray(accepted, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if accepted.shape != expected.shape or accepted.ndim != 1:
        raise ValueError(f"accepted, expected: expected two 1-D arrays of one length, got {accepted.shape} and {expected.shape}")
    if accepted.size == 0:
        return (math.nan, math.nan)
    mean = float((accepted - expected).mean())
    half = z * math.sqrt(float(np.sum(expected * (1.0 - expected)))) / accepted.size
    return (mean - half, mean + half)


@dataclass(frozen=True)
class PositionRecord:
    """One verified position: what happened and what the theory says.

    ``draft_support`` is the number of tokens some live draft could have proposed (q_i > 0 for
    some i: what the optimal verifier's fit works on). ``expected`` is the scheme's exact
    acceptance and ``optimal`` the optimal acceptance for the same (p, q_i, live drafts); NaN
    when not computable. ``target`` and ``drafts`` hold p ``[V]`` and the live q_i
    ``[k_live, V]`` when the measurement keeps distributions.
    """

    prompt: int
    block: int
    depth: int
    k_live: int
    draft_support: int
    law: str
    draft_tokens: tuple[int, ...]
    token: int
    accepted: bool
    expected: float
    optimal: float
    target: np.ndarray | None = field(default=None, repr=False)
    drafts: np.ndarray | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Results:
    """Empirical versus theoretical acceptance of one measurement, and its speed.

    ``config`` is what ran; ``target``, ``draft`` and ``device`` name the models and where they
    ran; ``compiled`` whether the forwards ran compiled. Aggregates are over verified
    positions: ``empirical_acceptance`` (fraction accepted), ``expected_acceptance`` (mean of
    the scheme's exact acceptance, over the ``expected_positions`` positions where the scheme
    can compute it), ``ci95`` (the model-based 95% interval of mean(empirical - expected) over
    those positions, :func:`difference_interval`), ``optimal_acceptance`` (mean P*, over the
    ``optimal_positions`` where it is computable), ``draft_support`` (mean number of tokens
    the live drafts could propose, per position), ``block_efficiency`` (mean tokens emitted
    per target call). Speed: ``tokens_per_second`` (new tokens over decoding time, theory
    excluded), ``autoregressive_tokens_per_second`` (plain sampling of the same prompts in the
    same run, NaN without the baseline) and ``speedup`` (their ratio). Time split in seconds:
    drafting (draft forwards, sampling, draft-cache bookkeeping), verification (target forward
    and processing, target-cache bookkeeping), selection (the tree walk with the scheme),
    theory (expected and optimal acceptance, not part of decoding), autoregressive (the
    baseline) and warm-up (compilation, before anything is timed). ``records`` hold every
    position.
    """

    config: MeasureConfig
    target: str
    draft: str
    device: str
    compiled: bool
    positions: int
    empirical_acceptance: float
    expected_acceptance: float
    ci95: tuple[float, float]
    expected_positions: int
    optimal_acceptance: float
    optimal_positions: int
    draft_support: float
    block_efficiency: float
    blocks: int
    new_tokens: int
    autoregressive_tokens: int
    tokens_per_second: float
    autoregressive_tokens_per_second: float
    speedup: float
    seconds_drafting: float
    seconds_verification: float
    seconds_selection: float
    seconds_theory: float
    seconds_autoregressive: float
    seconds_warmup: float
    notes: tuple[str, ...]
    texts: tuple[str, ...] = field(repr=False)
    records: tuple[PositionRecord, ...] = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """The configuration and every aggregate (no records, no texts) as plain Python values;
        NaN -> None. Keys: scheme, target, draft, k, length, target_temperature, target_top_p,
        draft_temperatures, draft_top_p, without_replacement, seed, prompts (their number),
        max_new_tokens, device, compile, compiled, then the aggregates in field order."""
        config = self.config
        out: dict[str, Any] = {
            "scheme": config.scheme_name,
            "target": self.target,
            "draft": self.draft,
            "k": config.k,
            "length": config.length,
            "target_temperature": config.target_sampling.temperature,
            "target_top_p": config.target_sampling.top_p,
            "draft_temperatures": [s.temperature for s in config.draft_sampling],
            "draft_top_p": [s.top_p for s in config.draft_sampling],
            "without_replacement": config.without_replacement,
            "seed": config.seed,
            "prompts": len(config.prompts),
            "max_new_tokens": config.max_new_tokens,
            "device": self.device,
            "compile": config.compile,
        }
        for f in fields(self):
            if f.name in ("config", "target", "draft", "device", "records", "texts"):
                continue
            out[f.name] = _plain(getattr(self, f.name))
        return out

    def to_json(self) -> str:
        """:meth:`summary` as one JSON object (valid JSON: NaN is written as null)."""
        return json.dumps(self.summary(), allow_nan=False)

    def to_dataframe(self) -> Any:
        """One row per verified position (pandas DataFrame; distributions left out)."""
        import pandas as pd

        rows = []
        for record in self.records:
            row = asdict(record)
            row.pop("target"), row.pop("drafts")
            rows.append(row)
        columns = [f.name for f in fields(PositionRecord) if f.name not in ("target", "drafts")]
        return pd.DataFrame(rows, columns=columns)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else float("nan")


@dataclass
class Tally:
    """What the per-prompt runs of a measurement accumulate (see :func:`aggregate`)."""

    records: list[PositionRecord] = field(default_factory=list)
    blocks: list[BlockOutcome] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    gaps: set[str] = field(default_factory=set)
    notes: set[str] = field(default_factory=set)
    new_tokens: int = 0
    autoregressive_tokens: int = 0
    compiled: bool = True
    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("drafting", "verification", "selection", "theory", "autoregressive", "warmup"), 0.0)
    )


def aggregate(tally: Tally, config: MeasureConfig, *, target: str, draft: str, device: str, missing_optimal: str) -> Results:
    """:class:`Results` from the accumulated ``tally``; ``missing_optimal`` explains positions
    without an optimal acceptance."""
    records = tally.records
    accepted = np.array([r.accepted for r in records], dtype=np.float64)
    expected = np.array([r.expected for r in records], dtype=np.float64)
    optimal = np.array([r.optimal for r in records], dtype=np.float64)
    finite = np.isfinite(expected)
    notes = sorted(tally.notes)
    if (~finite).any():
        notes.append(
            f"expected acceptance unavailable at {int((~finite).sum())} of {len(records)} positions "
            f"({'; '.join(sorted(tally.gaps))}); expected_acceptance and ci95 cover the other {int(finite.sum())}, "
            "empirical_acceptance covers all"
        )
    missing = int((~np.isfinite(optimal)).sum())
    if missing:
        notes.append(f"optimal acceptance not computed at {missing} positions: {missing_optimal}")
    seconds = tally.seconds
    decoding = seconds["drafting"] + seconds["verification"] + seconds["selection"]
    speculative_rate = _ratio(tally.new_tokens, decoding)
    baseline_rate = _ratio(tally.autoregressive_tokens, seconds["autoregressive"]) if config.baseline else float("nan")
    return Results(
        config=config,
        target=target,
        draft=draft,
        device=device,
        compiled=config.compile and tally.compiled,
        positions=len(records),
        empirical_acceptance=float(accepted.mean()) if len(records) else float("nan"),
        expected_acceptance=_mean(expected),
        ci95=difference_interval(accepted[finite], expected[finite]),
        expected_positions=int(finite.sum()),
        optimal_acceptance=_mean(optimal),
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
        seconds_theory=seconds["theory"],
        seconds_autoregressive=seconds["autoregressive"],
        seconds_warmup=seconds["warmup"],
        notes=tuple(notes),
        texts=tuple(tally.texts),
        records=tuple(records),
    )

