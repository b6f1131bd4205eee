"""Empirical multi-draft acceptance on real models, with the theory's numbers beside it.

For every verified position (tree node) the measurement keeps what happened -- the live
drafts, the chosen token, accepted or not -- and what the theory says for the very same
distributions: the scheme's exact acceptance ``E[acc] = scheme.acceptance(p, law)`` and the
optimal acceptance ``P* = min_T [p(T) + 1 - P_D(set(X) ⊆ T)]`` (Khisti et al., ICLR 2025,
Theorem 3 and Remark 2; :func:`multidraft.theory.optimal_acceptance`).

Given the past, position i is accepted with probability ``E_i``, so ``D_i = 1[acc_i] - E_i``
are martingale differences: the 95% interval ``mean(D) ± 1.96 sd(D) / sqrt(N)`` for the mean
of empirical minus expected acceptance should contain 0 when the implementation matches the
theory.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import torch

from multidraft.decoding.drafting import DraftSpec, ModelState, check_processing, draft_block, process_logits, sample_tokens
from multidraft.decoding.models import LoadedModel, check_compatible, load_model
from multidraft.decoding.verification import BlockOutcome, NodeStep, node_scheme, verify_block, walk_tree
from multidraft.theory.distributions import check_count
from multidraft.theory.laws import IID, Independent, WithoutReplacement, check_k
from multidraft.theory.optimal import optimal_acceptance

__all__ = [
    "DEFAULT_PROMPTS",
    "SUPPORT_LIMIT",
    "PositionRecord",
    "Generation",
    "Results",
    "encode_prompt",
    "node_optimal_acceptance",
    "speculative_generate",
    "sample_autoregressive",
    "measure",
]

#: Prompts used when none are given (open-ended, so that sampling matters).
DEFAULT_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator works to a ten-year-old.",
    "List some ideas for a weekend trip in the mountains and say why each is fun.",
    "Describe the taste of your favourite fruit without naming it.",
)
#: Largest joint support on which the optimum of an Independent law is computed by subsets.
SUPPORT_LIMIT = 20


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a prompt: the chat template with a generation prompt when the tokenizer
    has one (instruction-tuned models), else the plain encoding."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"prompts: every prompt must be a non-empty string, got {text!r}")
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
    else:
        ids = tokenizer(text)["input_ids"]
    if len(ids) == 0:
        raise ValueError(f"prompts: {text!r} encodes to no tokens")
    return [int(t) for t in ids]


def node_optimal_acceptance(target: np.ndarray, law: Any) -> float:
    """Optimal acceptance P* at one node; NaN when no exact method applies.

    Laws with prefix structure (iid, without replacement) use the O(n log n) sorted scan.
    Independent (non-identical) drafts have none; tokens outside the joint support
    ``{y : p(y) > 0 or q_i(y) > 0 for some i}`` carry no mass and drop out of every cut, so the
    subset method runs on the joint support when it has at most :data:`SUPPORT_LIMIT` tokens
    (e.g. under a small top-p); otherwise the value is NaN (not computed).
    """
    if law.has_prefix_structure:
        return float(optimal_acceptance(target, law, method="sorted").value)
    support = (target > 0) | (law.drafts > 0).any(axis=0)
    if int(support.sum()) > SUPPORT_LIMIT:
        return float("nan")
    restricted = Independent(list(law.drafts[:, support]), normalize=True)
    return float(optimal_acceptance(target[support] / target[support].sum(), restricted, method="subsets").value)


@dataclass(frozen=True)
class PositionRecord:
    """One verified position: what happened and what the theory says.

    ``expected`` is the scheme's exact acceptance and ``optimal`` the optimal acceptance for
    the same (p, q_i, live drafts); NaN when not computable. ``target`` and ``drafts`` hold p
    ``[V]`` and the live q_i ``[k_live, V]`` when the measurement keeps distributions.
    """

    prompt: int
    block: int
    depth: int
    k_live: int
    law: str
    draft_tokens: tuple[int, ...]
    token: int
    accepted: bool
    expected: float
    optimal: float
    target: np.ndarray | None = field(default=None, repr=False)
    drafts: np.ndarray | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Generation:
    """Speculative generation for one prompt: tokens, blocks and the time split (seconds)."""

    tokens: tuple[int, ...]
    blocks: tuple[BlockOutcome, ...]
    seconds_drafting: float
    seconds_verification: float
    seconds_selection: float


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _resolve_scheme(scheme: Any) -> Any:
    if isinstance(scheme, str):
        from multidraft.schemes import get_scheme

        return get_scheme(scheme)
    if not callable(getattr(scheme, "select", None)):
        raise ValueError(f"scheme: expected a scheme name or an object with select(), got {scheme!r}")
    return scheme


def _check_without_replacement(settings: Sequence[tuple[float, float]], without_replacement: bool) -> None:
    """Drafts drawn without replacement: one shared (temperature, top_p), and a full support."""
    if not without_replacement:
        return
    if len(set(settings)) > 1:
        raise ValueError(
            "without_replacement: the first position is drawn without replacement from one q, so all "
            "drafts need the same temperature and top_p"
        )
    if any(temperature == 0 or top_p < 1 for temperature, top_p in settings):
        raise ValueError(
            "without_replacement: K distinct drafts need at least K tokens of positive draft "
            "probability at every position, which a draft temperature of 0 or top_p < 1 cannot "
            "guarantee"
        )


def _check_scheme_laws(scheme: Any, k: int, without_replacement: bool, non_identical: bool) -> None:
    """Fail early unless ``scheme`` supports the root law of these K drafts."""
    supports = getattr(scheme, "supports", None)
    if supports is None:
        return
    uniform = np.full(k + 1, 1.0 / (k + 1))
    if without_replacement:
        law = WithoutReplacement(uniform, k)
    elif non_identical and k > 1:
        law = Independent([uniform] * k)
    else:
        law = IID(uniform, k)
    if not supports(law):
        raise ValueError(
            f"scheme: {getattr(scheme, 'name', scheme)!r} supports the laws "
            f"{tuple(getattr(scheme, 'supported_laws', ()))}, but does not apply to these drafts "
            f"(the {law.name} law with k={k})"
        )


def _check_specs(target: LoadedModel, specs: Sequence[DraftSpec], without_replacement: bool) -> LoadedModel:
    """The one draft model of ``specs`` (the target when None), checked for compatibility."""
    if len(specs) == 0:
        raise ValueError("specs: need at least one draft")
    models = {id(spec.model) for spec in specs}
    if len(models) > 1:
        raise ValueError("specs: all drafts must use the same draft model (vary temperature and top_p instead)")
    _check_without_replacement([(spec.temperature, spec.top_p) for spec in specs], without_replacement)
    draft = specs[0].model or target
    if draft is not target:
        check_compatible(target, draft)
    return draft


def speculative_generate(
    target: LoadedModel,
    specs: Sequence[DraftSpec],
    prompt: Sequence[int],
    *,
    length: int,
    scheme: Any,
    max_new_tokens: int,
    rng: np.random.Generator,
    generator: torch.Generator,
    target_temperature: float = 1.0,
    target_top_p: float = 1.0,
    without_replacement: bool = False,
    on_block: Callable[[BlockOutcome], None] | None = None,
) -> Generation:
    """Multi-draft speculative sampling of up to ``max_new_tokens`` tokens after ``prompt``.

    Each block: draft K = ``len(specs)`` sequences of ``length`` tokens (one batched,
    KV-cached draft pass per position), run one batched target forward over them, select
    along the tree with ``scheme`` (lossless), emit the accepted tokens plus the residual or
    bonus token, and keep the KV caches of the accepted row. Stops after ``max_new_tokens``
    or the tokenizer's end-of-sequence token.
    """
    length = check_count(length, "length")
    max_new_tokens = check_count(max_new_tokens, "max_new_tokens")
    check_processing(target_temperature, target_top_p, "target")
    scheme = _resolve_scheme(scheme)
    draft = _check_specs(target, specs, without_replacement)
    eos = getattr(target.tokenizer, "eos_token_id", None)
    device = target.device
    times = {"drafting": 0.0, "verification": 0.0, "selection": 0.0}

    start = _clock(device)
    draft_state = ModelState(draft, prompt)
    mark = _clock(device)
    times["drafting"] += mark - start
    target_state = ModelState(target, prompt)
    times["verification"] += _clock(device) - mark

    emitted: list[int] = []
    blocks: list[BlockOutcome] = []
    while len(emitted) < max_new_tokens and (eos is None or eos not in emitted):
        draft_base, target_base = draft_state.length, target_state.length
        draft_pending, target_pending = len(draft_state.pending), len(target_state.pending)
        t0 = _clock(device)
        drafts = draft_block(draft_state, specs, length, generator, without_replacement)
        t1 = _clock(device)
        p = verify_block(target_state, drafts, target_temperature, target_top_p)
        t2 = _clock(device)
        outcome = walk_tree(p, drafts, specs, scheme, rng, without_replacement)
        t3 = _clock(device)
        accepted_row = drafts.tokens[outcome.row].tolist()
        # Draft cache holds pending + x_1..x_{L-1}; keep what the accepted prefix covers.
        kept = min(outcome.accepted, length - 1)
        draft_state.commit(
            outcome.row,
            draft_base + draft_pending + kept,
            accepted_row[kept : outcome.accepted] + [outcome.tokens[-1]],
        )
        t4 = _clock(device)
        target_state.commit(outcome.row, target_base + target_pending + outcome.accepted, [outcome.tokens[-1]])
        t5 = _clock(device)
        # Cache bookkeeping is charged to the model whose cache it is.
        times["drafting"] += (t1 - t0) + (t4 - t3)
        times["verification"] += (t2 - t1) + (t5 - t4)
        times["selection"] += t3 - t2
        blocks.append(outcome)
        emitted.extend(outcome.tokens)
        if on_block is not None:
            on_block(outcome)
    if eos is not None and eos in emitted:
        emitted = emitted[: emitted.index(eos) + 1]
    return Generation(
        tuple(emitted[:max_new_tokens]),
        tuple(blocks),
        times["drafting"],
        times["verification"],
        times["selection"],
    )


@torch.inference_mode()
def sample_autoregressive(
    target: LoadedModel,
    prompt: Sequence[int],
    *,
    max_new_tokens: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_p: float = 1.0,
    stop_at_eos: bool = True,
) -> tuple[int, ...]:
    """Plain autoregressive sampling ``y_t ~ top_p(softmax(logits_t / T))``, KV-cached: the
    reference law speculative sampling must reproduce, and the speed baseline."""
    max_new_tokens = check_count(max_new_tokens, "max_new_tokens")
    check_processing(temperature, top_p, "target")
    eos = getattr(target.tokenizer, "eos_token_id", None) if stop_at_eos else None
    state = ModelState(target, prompt)
    out: list[int] = []
    while len(out) < max_new_tokens:
        logits = state.forward(state.pending_rows(1))[:, -1, :]
        token = int(sample_tokens(process_logits(logits, temperature, top_p), generator)[0])
        out.append(token)
        state.commit(0, state.length, [token])
        if token == eos:
            break
    return tuple(out)


def _mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


@dataclass(frozen=True)
class Results:
    """Empirical versus theoretical acceptance of one measurement.

    Aggregates are over verified positions: ``empirical_acceptance`` (fraction accepted),
    ``expected_acceptance`` (mean of the scheme's exact acceptance, over the
    ``expected_positions`` positions where the scheme can compute it), ``ci95`` (95% interval
    of mean(empirical - expected) over those positions), ``optimal_acceptance`` (mean P*, over positions where it is computable;
    ``optimal_positions`` says how many), ``block_efficiency`` (mean tokens emitted per target
    call), ``tokens_per_second`` (new tokens over decoding time, theory excluded) and the time
    split in seconds: drafting (draft forwards, sampling, draft-cache bookkeeping),
    verification (target forward and processing, target-cache bookkeeping), selection (the
    tree walk with the scheme) and theory (expected and optimal acceptance, not part of
    decoding). ``records`` hold every position.
    """

    scheme: str
    target: str
    draft: str
    k: int
    length: int
    target_temperature: float
    target_top_p: float
    draft_temperatures: tuple[float, ...]
    draft_top_p: tuple[float, ...]
    without_replacement: bool
    seed: int
    prompts: int
    positions: int
    empirical_acceptance: float
    expected_acceptance: float
    ci95: tuple[float, float]
    expected_positions: int
    optimal_acceptance: float
    optimal_positions: int
    block_efficiency: float
    blocks: int
    new_tokens: int
    tokens_per_second: float
    seconds_drafting: float
    seconds_verification: float
    seconds_selection: float
    seconds_theory: float
    notes: tuple[str, ...]
    texts: tuple[str, ...] = field(repr=False)
    records: tuple[PositionRecord, ...] = field(repr=False)

    def summary(self) -> dict[str, Any]:
        """Every aggregate field (no records, no texts) as plain Python values; NaN -> None."""
        out = {}
        for f in fields(self):
            if f.name in ("records", "texts"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = [None if isinstance(v, float) and math.isnan(v) else v for v in value]
            elif isinstance(value, float) and math.isnan(value):
                value = None
            out[f.name] = value
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


def _as_target(target: str | LoadedModel, device: str) -> LoadedModel:
    return target if isinstance(target, LoadedModel) else load_model(target, device=device)


def _per_draft(values: Sequence[float] | float, k: int, name: str) -> tuple[float, ...]:
    values = (values,) if isinstance(values, (int, float)) else tuple(values)
    if len(values) == 1:
        return values * k
    if len(values) != k:
        raise ValueError(f"{name}: give one value or k={k} values, got {len(values)}")
    return values


def measure(
    target: str | LoadedModel = "default",
    draft: str | LoadedModel | None = None,
    k: int = 2,
    length: int = 4,
    scheme: Any = "specinfer",
    prompts: Sequence[str] | None = None,
    max_new_tokens: int = 32,
    seed: int = 0,
    target_temperature: float = 1.0,
    draft_temperatures: Sequence[float] | float = (1.5,),
    without_replacement: bool = False,
    progress: bool = True,
    *,
    target_top_p: float = 1.0,
    draft_top_p: Sequence[float] | float = (1.0,),
    keep_distributions: bool = False,
    device: str = "auto",
) -> Results:
    """Run multi-draft speculative sampling and compare empirical with theoretical acceptance.

    Parameters
    ----------
    target : str or LoadedModel
        ``"default"`` (bundled SmolLM2-135M-Instruct), a directory, a .gguf file, a hub id, or
        a loaded model.
    draft : str, LoadedModel or None
        The draft model (same tokenizer); None drafts with the target itself at the draft
        temperatures (the paper's setting); :func:`~multidraft.decoding.early_exit` gives a
        shallow draft sharing the target's weights.
    k, length : int
        Number of drafts K and tokens per draft L (>= 1).
    scheme : str or Scheme
        A name in the schemes registry (``multidraft.schemes.get_scheme``) or a scheme object.
    prompts : sequence of str, optional
        Non-empty; default :data:`DEFAULT_PROMPTS`.
    max_new_tokens : int
        New tokens per prompt (>= 1).
    seed : int
        Seeds the torch generator (drafting) and the numpy generator (selection).
    target_temperature, target_top_p : float
        Target processing; p is recorded after it.
    draft_temperatures, draft_top_p : float or sequence
        One value for all drafts or K values (non-identical drafts: Independent law).
    without_replacement : bool
        Draw the K first tokens without replacement (needs one draft temperature and top-p).
    progress : bool
        tqdm progress bar on stderr.
    keep_distributions : bool
        Keep p and q_i in each record (memory: 8 V bytes per distribution).
    device : str
        Device for models given by name (``auto``: cuda, mps, cpu).

    Returns
    -------
    Results

    Raises
    ------
    ValueError
        k, length or max_new_tokens < 1, an empty prompt list, bad temperatures, an unknown
        scheme or one that does not support the drafts' law, an incompatible draft.
    OSError
        A model that cannot be found locally nor downloaded.
    """
    k = check_k(k)
    length = check_count(length, "length")
    max_new_tokens = check_count(max_new_tokens, "max_new_tokens")
    prompts = DEFAULT_PROMPTS if prompts is None else tuple(prompts)
    if len(prompts) == 0:
        raise ValueError("prompts: the prompt list is empty; give at least one prompt (or None for the defaults)")
    temperatures = _per_draft(draft_temperatures, k, "draft_temperatures")
    top_ps = _per_draft(draft_top_p, k, "draft_top_p")
    check_processing(target_temperature, target_top_p, "target")
    for t, mass in zip(temperatures, top_ps):
        check_processing(t, mass, "draft")
    _check_without_replacement(list(zip(temperatures, top_ps)), without_replacement)
    resolved = _resolve_scheme(scheme)
    _check_scheme_laws(resolved, k, without_replacement, len(set(zip(temperatures, top_ps))) > 1)

    target_model = _as_target(target, device)
    draft_model = None if draft is None else _as_target(draft, device)
    specs = [DraftSpec(draft_model, t, mass) for t, mass in zip(temperatures, top_ps)]
    _check_specs(target_model, specs, without_replacement)
    rng = np.random.default_rng(seed)
    generator = torch.Generator(device=target_model.device).manual_seed(seed)

    records: list[PositionRecord] = []
    blocks: list[BlockOutcome] = []
    texts: list[str] = []
    theory_seconds = 0.0
    gaps: set[str] = set()
    time_split = np.zeros(3)
    new_tokens = 0
    from tqdm.auto import tqdm

    bar = tqdm(total=len(prompts) * max_new_tokens, disable=not progress, file=sys.stderr, unit="tok", desc="measure")
    for index, prompt in enumerate(prompts):
        ids = encode_prompt(target_model.tokenizer, prompt)

        def on_block(outcome: BlockOutcome, index: int = index) -> None:
            nonlocal theory_seconds
            start = time.perf_counter()
            block = len(blocks)
            blocks.append(outcome)
            for step in outcome.steps:
                records.append(_record(index, block, step, resolved, keep_distributions, gaps))
            theory_seconds += time.perf_counter() - start
            bar.update(min(len(outcome.tokens), bar.total - bar.n))

        generation = speculative_generate(
            target_model,
            specs,
            ids,
            length=length,
            scheme=resolved,
            max_new_tokens=max_new_tokens,
            rng=rng,
            generator=generator,
            target_temperature=target_temperature,
            target_top_p=target_top_p,
            without_replacement=without_replacement,
            on_block=on_block,
        )
        bar.update((index + 1) * max_new_tokens - bar.n)
        new_tokens += len(generation.tokens)
        time_split += (generation.seconds_drafting, generation.seconds_verification, generation.seconds_selection)
        texts.append(target_model.tokenizer.decode(list(generation.tokens)))
    bar.close()
    return _aggregate(
        records, blocks, texts, new_tokens, time_split, theory_seconds, sorted(gaps),
        scheme=getattr(resolved, "name", type(resolved).__name__),
        target=target_model.name,
        draft=(draft_model.name if draft_model is not None else f"{target_model.name} (self)"),
        k=k, length=length, target_temperature=float(target_temperature), target_top_p=float(target_top_p),
        draft_temperatures=tuple(float(t) for t in temperatures), draft_top_p=tuple(float(m) for m in top_ps),
        without_replacement=bool(without_replacement), seed=seed, prompts=len(prompts),
    )  # fmt: skip


def _record(prompt: int, block: int, step: NodeStep, scheme: Any, keep: bool, gaps: set[str]) -> PositionRecord:
    """The record of one node; when the scheme has no exact acceptance for the node (e.g. no
    closed form and too many draft tuples to enumerate), ``expected`` is NaN and the reason
    goes to ``gaps``."""
    try:
        expected = float(node_scheme(scheme, step.law).acceptance(step.target, step.law))
    except ValueError as error:
        expected = float("nan")
        gaps.add(str(error).splitlines()[0])
    return PositionRecord(
        prompt=prompt,
        block=block,
        depth=step.depth,
        k_live=len(step.live),
        law=step.law.name,
        draft_tokens=step.draft_tokens,
        token=step.token,
        accepted=step.accepted,
        expected=expected,
        optimal=node_optimal_acceptance(step.target, step.law),
        target=step.target.copy() if keep else None,
        drafts=step.drafts.copy() if keep else None,
    )


def _aggregate(
    records: list[PositionRecord],
    blocks: list[BlockOutcome],
    texts: list[str],
    new_tokens: int,
    time_split: np.ndarray,
    theory_seconds: float,
    gaps: list[str],
    **config: Any,
) -> Results:
    accepted = np.array([r.accepted for r in records], dtype=np.float64)
    expected = np.array([r.expected for r in records], dtype=np.float64)
    optimal = np.array([r.optimal for r in records], dtype=np.float64)
    finite = np.isfinite(expected)
    difference = accepted[finite] - expected[finite]
    if difference.size >= 2:
        half = 1.96 * difference.std(ddof=1) / math.sqrt(difference.size)
        ci95 = (float(difference.mean() - half), float(difference.mean() + half))
    else:
        ci95 = (float("nan"), float("nan"))
    notes = []
    if (~finite).any():
        notes.append(
            f"expected acceptance unavailable at {int((~finite).sum())} of {len(records)} positions "
            f"({'; '.join(gaps)}); expected_acceptance and ci95 cover the other {int(finite.sum())}, "
            "empirical_acceptance covers all"
        )
    missing = int((~np.isfinite(optimal)).sum())
    if missing:
        notes.append(
            f"optimal acceptance not computed at {missing} positions: non-identical drafts (Independent law) "
            f"with a joint support above {SUPPORT_LIMIT} tokens have no exact method here"
        )
    decoding = float(time_split.sum())
    return Results(
        positions=len(records),
        empirical_acceptance=float(accepted.mean()) if len(records) else float("nan"),
        expected_acceptance=_mean(expected),
        ci95=ci95,
        expected_positions=int(finite.sum()),
        optimal_acceptance=_mean(optimal),
        optimal_positions=int(np.isfinite(optimal).sum()),
        block_efficiency=float(np.mean([b.accepted + 1 for b in blocks])) if blocks else float("nan"),
        blocks=len(blocks),
        new_tokens=new_tokens,
        tokens_per_second=new_tokens / decoding if decoding > 0 else float("nan"),
        seconds_drafting=float(time_split[0]),
        seconds_verification=float(time_split[1]),
        seconds_selection=float(time_split[2]),
        seconds_theory=theory_seconds,
        notes=tuple(notes),
        texts=tuple(texts),
        records=tuple(records),
        **config,
    )
