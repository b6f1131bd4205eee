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

**Blocks.** The same holds one level up: given the past and the drafted tree, a block accepts
τ tokens with ``E[τ | tree]`` and ``Var[τ | tree]`` known exactly from the distributions on
the tree (:meth:`~multidraft.trees.TreeVerifier.law`; Rao-Blackwell), so ``τ_b - E[τ_b | tree_b]``
are martingale differences and ``mean ± 1.96 sqrt(Σ Var[τ_b | tree_b]) / N`` is the interval of
realised minus expected accepted length of a verifier (:class:`VerifierRun`). Because
``E[τ | tree]`` needs only the tree, every verifier of the run is scored on every block, whoever
drove it: the paired difference ``E_V - E_ref`` per block ranks the verifiers on the same trees
(:class:`PairedScore`; its interval is the sample spread over blocks, which treats the blocks as
independent draws of trees -- blocks of one prompt share their context, so it is approximate).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from multidraft.decoding.config import MeasureConfig

__all__ = [
    "PositionRecord",
    "BlockRecord",
    "VerifierRun",
    "PairedScore",
    "TaskSummary",
    "Results",
    "TIMING_FIELDS",
    "VERIFIER_TIMING_FIELDS",
    "TIE",
    "difference_interval",
]

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
#: Paired differences of ``E[τ | tree]`` below this many tokens are ties (rounding): half the
#: last digit of a printed difference (4 decimals); the float32 logits behind the distributions
#: leave ``E[τ | tree]`` uncertain by about 1e-6 relative, so smaller differences say nothing.
TIE = 5e-5
#: Keys of each verifier's summary (:meth:`VerifierRun.summary`) that are wall-clock measurements.
VERIFIER_TIMING_FIELDS = ("tokens_per_second", "speedup", "seconds_decoding", "seconds_verifier")


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
    return martingale_interval(accepted - expected, expected * (1.0 - expected), z)


def martingale_interval(differences: np.ndarray, variances: np.ndarray, z: float = 1.96) -> tuple[float, float]:
    """``mean(D) ± z sqrt(Σ v) / N`` for N martingale differences D with conditional variances
    v (Hall and Heyde 1980, Corollary 3.1; module docstring); ``(nan, nan)`` when N = 0."""
    if len(differences) == 0:
        return (math.nan, math.nan)
    mean = float(np.mean(differences))
    half = z * math.sqrt(float(np.sum(variances))) / len(differences)
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
class BlockRecord:
    """One verified block: what the driving verifier accepted, and what every verifier of the
    run would accept on average on the same tree.

    ``verifier`` drove the block (its run), ``accepted`` is its τ; ``expected[i]`` is
    ``E[τ | tree]`` of the run's i-th verifier (:attr:`MeasureConfig.verifier_names` order; NaN
    where not computable) and ``variance`` the driving verifier's ``Var[τ | tree]``.
    """

    verifier: str
    prompt: int
    block: int
    accepted: int
    expected: tuple[float, ...]
    variance: float


@dataclass(frozen=True)
class VerifierRun:
    """One verifier driving the generation of every prompt (same prompts and seeds as the
    others).

    ``block_efficiency`` is the realised mean of τ + 1 over its ``blocks``;
    ``expected_block_efficiency`` 1 + the mean of its own ``E[τ | tree]`` over the
    ``expected_blocks`` blocks where that is computable, and ``ci95`` the 95% interval of
    mean(τ − E[τ | tree]) over them (model variance, module docstring: it should contain 0).
    Speed: ``tokens_per_second`` (new tokens over drafting + verification + selection time,
    ``seconds_decoding``), ``seconds_verifier`` (the tree verifier's share), ``speedup``
    against the autoregressive baseline of the run (NaN without it).
    """

    name: str
    blocks: int
    new_tokens: int
    block_efficiency: float
    expected_block_efficiency: float
    ci95: tuple[float, float]
    expected_blocks: int
    tokens_per_second: float
    speedup: float
    seconds_decoding: float
    seconds_verifier: float

    def summary(self) -> dict[str, Any]:
        """Every field as plain Python values (NaN -> None)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class PairedScore:
    """A verifier scored on every block of the run (every driving verifier's trees) against
    the reference (the run's first verifier), block by block.

    ``blocks``: blocks where both expectations are computable; ``expected_block_efficiency``
    1 + the mean of its ``E[τ | tree]`` over them; ``difference`` the mean of
    ``E_V[τ | tree] − E_ref[τ | tree]`` with ``ci95`` ± 1.96 × sample sd / sqrt(blocks);
    ``ahead`` / ``behind``: blocks where its expectation is above / below the reference's by
    more than :data:`TIE` (smaller differences are ties, not ranked). ``percent`` the gain
    ``100 · mean(E_V − E_ref) / mean(E_ref + 1)`` over the reference's block efficiency, with
    ``percent_ci95`` the tokens interval ``ci95`` on the same scale (the reference's mean
    block efficiency on these blocks taken as the scale, not re-estimated: the interval says
    the same as ``ci95`` about whether the gain is above 0).
    """

    verifier: str
    reference: str
    blocks: int
    expected_block_efficiency: float
    difference: float
    ci95: tuple[float, float]
    ahead: int
    behind: int
    percent: float = float("nan")
    percent_ci95: tuple[float, float] = (float("nan"), float("nan"))

    def summary(self) -> dict[str, Any]:
        """Every field as plain Python values (NaN -> None)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def gain(self) -> dict[str, Any]:
        """The paired gain over the reference, plainly: tokens per target call and percent of
        the reference's block efficiency, each with its 95% interval, and the blocks ahead,
        behind and tied (within :data:`TIE`)."""
        plain = {
                "verifier": self.verifier,
                "reference": self.reference,
                "tokens_per_call": self.difference,
                "tokens_per_call_ci95": self.ci95,
                "percent": self.percent,
                "percent_ci95": self.percent_ci95,
                "blocks": self.blocks,
                "ahead": self.ahead,
                "behind": self.behind,
                "tied": self.blocks - self.ahead - self.behind,
        }
        return {key: _plain(value) for key, value in plain.items()}


@dataclass(frozen=True)
class TaskSummary:
    """The first verifier's run restricted to the prompts of one task (:meth:`Results.by_task`).

    ``empirical_acceptance``, ``expected_acceptance`` and ``optimal_acceptance`` are means over
    the task's ``positions`` (the last two over the finite values); ``block_efficiency`` the
    realised and ``expected_block_efficiency`` 1 + the mean ``E[τ | tree]`` of the driving
    verifier over the task's ``blocks``.
    """

    task: str
    prompts: int
    positions: int
    empirical_acceptance: float
    expected_acceptance: float
    optimal_acceptance: float
    blocks: int
    block_efficiency: float
    expected_block_efficiency: float

    def summary(self) -> dict[str, Any]:
        """Every field as plain Python values (NaN -> None)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


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
    and processing, target-cache bookkeeping), selection (the tree verifier), theory (expected
    and optimal acceptance and every verifier's expected accepted length, not part of
    decoding), autoregressive (the baseline) and warm-up (compilation, before anything is
    timed). ``records`` hold every position.

    These describe the run of the first verifier (``config.verifiers[0]``; token-level
    positions exist for the token walk only). ``verifiers`` has one :class:`VerifierRun` per
    verifier, each driving its own run on the same prompts and seeds; ``paired`` scores every
    verifier against the first on every block of every run (:class:`PairedScore`);
    ``block_records`` hold every block.
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
    verifiers: tuple[VerifierRun, ...] = ()
    paired: tuple[PairedScore, ...] = ()
    block_records: tuple[BlockRecord, ...] = field(default=(), repr=False)

    def summary(self) -> dict[str, Any]:
        """The configuration and every aggregate (no records, no texts) as plain Python values;
        NaN -> None. Keys: ``gain`` first (every further verifier's paired gain over the first,
        :meth:`PairedScore.gain`), scheme, verifier_names, target, draft, k, length, target_temperature,
        target_top_p, draft_temperatures, draft_top_p, without_replacement, shape, seed, prompts (their
        number), max_new_tokens, device, compile, compiled, then the aggregates in field order
        (``verifiers`` and ``paired`` as lists of their summaries), then ``tasks``
        (:meth:`by_task` as a list of summaries; empty for untagged prompts)."""
        config = self.config
        out: dict[str, Any] = {
            "gain": [score.gain() for score in self.paired[1:]],
            "scheme": config.scheme_name,
            "verifier_names": list(config.verifier_names),
            "target": self.target,
            "draft": self.draft,
            "k": config.k,
            "length": config.length,
            "target_temperature": config.target_sampling.temperature,
            "target_top_p": config.target_sampling.top_p,
            "draft_temperatures": [s.temperature for s in config.draft_sampling],
            "draft_top_p": [s.top_p for s in config.draft_sampling],
            "without_replacement": config.without_replacement,
            "shape": None if config.shape is None else repr(config.shape),
            "seed": config.seed,
            "prompts": len(config.prompts),
            "max_new_tokens": config.max_new_tokens,
            "device": self.device,
            "compile": config.compile,
        }
        for f in fields(self):
            if f.name in ("config", "target", "draft", "device", "records", "texts", "block_records"):
                continue
            value = getattr(self, f.name)
            out[f.name] = [item.summary() for item in value] if f.name in ("verifiers", "paired") else _plain(value)
        out["tasks"] = [task.summary() for task in self.by_task()]
        return out

    def by_task(self) -> tuple[TaskSummary, ...]:
        """One :class:`TaskSummary` per task tag of ``config.tasks`` (order of first
        appearance) over the first verifier's positions and blocks; empty when the prompts are
        untagged."""
        tasks = self.config.tasks
        if not any(tasks):
            return ()
        first = self.config.verifiers[0].name
        out = []
        for task in dict.fromkeys(tasks):
            mine = {i for i, t in enumerate(tasks) if t == task}
            records = [r for r in self.records if r.prompt in mine]
            blocks = [b for b in self.block_records if b.prompt in mine and b.verifier == first]
            accepted = np.array([r.accepted for r in records], dtype=np.float64)
            own = np.array([b.expected[0] for b in blocks], dtype=np.float64)
            out.append(
                TaskSummary(
                    task=task,
                    prompts=len(mine),
                    positions=len(records),
                    empirical_acceptance=float(accepted.mean()) if records else float("nan"),
                    expected_acceptance=finite_mean(np.array([r.expected for r in records], dtype=np.float64)),
                    optimal_acceptance=finite_mean(np.array([r.optimal for r in records], dtype=np.float64)),
                    blocks=len(blocks),
                    block_efficiency=float(np.mean([b.accepted + 1 for b in blocks])) if blocks else float("nan"),
                    expected_block_efficiency=finite_mean(own) + 1,
                )
            )
        return tuple(out)

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

    def blocks_dataframe(self) -> Any:
        """One row per verified block of every verifier's run (pandas DataFrame): the driving
        verifier, prompt, block, τ, its ``Var[τ | tree]`` and one ``expected:<name>`` column
        per verifier of the run."""
        import pandas as pd

        names = self.config.verifier_names
        rows = [
            {"verifier": r.verifier, "prompt": r.prompt, "block": r.block, "accepted": r.accepted, "variance": r.variance}
            | {f"expected:{name}": value for name, value in zip(names, r.expected)}
            for r in self.block_records
        ]
        columns = ["verifier", "prompt", "block", "accepted", "variance", *(f"expected:{name}" for name in names)]
        return pd.DataFrame(rows, columns=columns)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def finite_mean(values: np.ndarray) -> float:
    """The mean of the finite entries of ``values`` (NaN marks a value not computed); NaN when none is."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")
