"""Empirical multi-draft acceptance on real models, with the theory's numbers beside it.

For every verified position (tree node) the measurement keeps what happened -- the live
drafts, the chosen token, accepted or not -- and what the theory says for the very same
distributions: the scheme's exact acceptance ``E[acc]``, read off the node's plan (the plan that
selected, :attr:`~multidraft.schemes.Plan.acceptance`), and the optimal acceptance ``P* = min_T [p(T) + 1 - P_D(set(X) ⊆ T)]`` (Khisti et al., ICLR 2025,
Theorem 3 and Remark 2; :func:`multidraft.theory.optimal_acceptance`). The interval of
empirical minus expected acceptance is described in :mod:`multidraft.decoding.results`.

For every block it keeps the accepted length τ beside every verifier's exact expected accepted
length on the very same drafted tree, ``E[τ | tree]`` (:meth:`multidraft.trees.TreeVerifier.law`,
Rao-Blackwell: it needs only the distributions on the tree), and the driving verifier's
``Var[τ | tree]``. With several verifiers (``verifiers``), each drives its own run on the same
prompts and seeds, and every one is scored on every block of every run.

Seeds are per prompt (:func:`~multidraft.decoding.config.prompt_seeds`): each prompt is measured
on its own (:class:`Shard` holds one tally per prompt) and the per-prompt tallies are joined in
prompt order (:func:`merge_shards`), so the prompts can be split over processes
(:mod:`multidraft.decoding.sharding`) without changing a number.

The same run times plain autoregressive sampling of each prompt right after its speculative
generation by the first verifier (so both see the same machine load) and reports the speed-up
``tokens_per_second / autoregressive_tokens_per_second``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from multidraft.decoding.config import DEFAULT_PROMPTS, MeasureConfig, prompt_seeds
from multidraft.decoding.drafting import DraftSpec, Sampling
from multidraft.decoding.generation import check_specs, clock, sample_autoregressive, speculative_generate, warm_up
from multidraft.decoding.models import LoadedModel, load_model
from multidraft.decoding.prompts import PromptSet
from multidraft.decoding.results import BlockRecord, PositionRecord, Results
from multidraft.decoding.tally import Tally, aggregate, merge_tallies
from multidraft.decoding.verification import BlockOutcome, NodeStep, spec_groups
from multidraft.theory.laws import DraftLaw, WithoutReplacement
from multidraft.theory.optimum import optimal_acceptance
from multidraft.theory.optimum._wor_race import optimal_cut
from multidraft.theory.verifier._wor_rule import WithoutReplacementRule

__all__ = [
    "DEFAULT_PROMPTS",
    "encode_prompt",
    "node_optimal_acceptance",
    "measure",
    "run_measurement",
    "Shard",
    "measure_shard",
    "merge_shards",
    "degenerate",
    "DEGENERATE",
]

#: Why a position can lack its optimum: the exact threshold search (non-identical drafts) stops
#: at a search limit rather than return an unsettled number.
MISSING_OPTIMAL = "the threshold search for non-identical drafts hit its search limit (RuntimeError)"


#: The note of a run whose draft is the target (:func:`degenerate`).
DEGENERATE = (
    "degenerate: the draft is the target (same model and sampling), so every lossless verifier accepts a whole "
    "path to a leaf; on chains and expansions the differences between verifiers are rounding"
)


def degenerate(config: MeasureConfig, target: LoadedModel, specs: Sequence[DraftSpec]) -> bool:
    """Whether every draft is the target itself with the target's sampling, drafting at random
    (iid or without replacement; a top-k tree is no sample of q): then q = p at every node and
    every lossless verifier accepts the whole tree's drafted path, whatever the verifier."""
    random = config.shape is None or config.shape.law != "top-k"
    return random and all((spec.model is None or spec.model is target) and spec.sampling == config.target_sampling for spec in specs)


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


def node_optimal_acceptance(target: np.ndarray, law: DraftLaw, plan: object = None) -> float:
    """Optimal acceptance ``P* = min_T [p(T) + 1 - P_D(set(X) ⊆ T)]`` at one node, exactly,
    by :func:`~multidraft.theory.optimal_acceptance` for every law: the O(n log n) sorted scan
    for iid drafts, the threshold search for non-identical (independent) drafts, at any
    vocabulary size; for drafts without replacement the pruned exact scan (the optimal verifier's
    cut, :func:`~multidraft.theory.optimum._wor_race.optimal_cut`: the race only at the
    prefixes its bounds cannot exclude, not at every prefix; K > 2), or the cut already found by
    the node's ``plan`` when that plan fitted the optimal verifier's rule for ``(target, law)``.
    The same number as the full scan to 1e-12 (issue 34; ``benchmarks/bench_verifier_wor.py``
    times both).
    """
    if isinstance(law, WithoutReplacement):
        fitted = vars(plan).get("rule") if hasattr(plan, "__dict__") else None  # a cached fit, never a new one
        if isinstance(fitted, WithoutReplacementRule) and getattr(plan, "law", None) is law:
            return float(fitted.optimum)
        if law.k > 2:  # K = 2: the full scan's closed form is faster than the pruned race
            return float(optimal_cut(law.check_target(target), law.draft, law.k).value)
    return float(optimal_acceptance(target, law).value)


def measure(
    target: str | LoadedModel = "default",
    draft: str | LoadedModel | None = None,
    *,
    k: int = 2,
    length: int = 4,
    scheme: Any = "specinfer",
    prompts: Sequence[str] | PromptSet | None = None,
    max_new_tokens: int = 32,
    seed: int = 0,
    target_sampling: Sampling = Sampling(),
    draft_sampling: Sampling | Sequence[Sampling] = Sampling(1.5),
    without_replacement: bool = False,
    device: str = "auto",
    device_map: str | dict | None = None,
    compile: bool = False,
    baseline: bool = True,
    keep_distributions: bool = False,
    progress: bool = True,
    verifiers: Sequence[Any] = ("token",),
    scored: Sequence[Any] = (),
    shape: Any = None,
) -> Results:
    """Run multi-draft speculative sampling and compare empirical with theoretical acceptance.

    Every argument is checked (a :class:`MeasureConfig` is built) before any model loads.

    Parameters
    ----------
    target : str or LoadedModel
        ``"default"`` (bundled SmolLM2-135M-Instruct), a directory, a .gguf file, a hub id, or
        a loaded model.
    draft : str, LoadedModel or None
        The draft model (same tokenizer); None drafts with the target itself at the draft
        sampling (the paper's setting); :func:`~multidraft.decoding.early_exit` gives a
        shallow draft sharing the target's weights.
    k, length : int
        Number of drafts K and tokens per draft L (>= 1).
    scheme : str or Scheme
        A name in the schemes registry (``multidraft.schemes.get_scheme``) or a scheme object:
        the scheme of the token walk (the verifier ``"token"``).
    prompts : sequence of str or PromptSet, optional
        Non-empty; default :data:`DEFAULT_PROMPTS`. A
        :class:`~multidraft.decoding.prompts.PromptSet` (:func:`~multidraft.decoding.read_prompts`,
        :func:`~multidraft.decoding.dataset_prompts`, :func:`~multidraft.decoding.bundled_prompts`)
        brings task tags, which give :meth:`Results.by_task`.
    max_new_tokens : int
        New tokens per prompt (>= 1).
    seed : int
        Seeds drafting, selection and the baseline, per prompt: prompt i uses
        :func:`~multidraft.decoding.config.prompt_seeds` ``(seed, i)``, so its numbers do not
        depend on the other prompts (nor on how a sharded run splits them).
    target_sampling : Sampling
        Target processing; p is recorded after it.
    draft_sampling : Sampling or sequence of Sampling
        One for all drafts or K (non-identical drafts: Independent law).
    without_replacement : bool
        Draw the K first tokens without replacement (needs one draft sampling).
    device : str
        Device for models given by name (``auto``: cuda, mps, cpu).
    device_map : str or dict, optional
        For models given by name: an accelerate device map (``"auto"`` spreads a model larger
        than one device over the GPUs, then the CPU), passed to
        :func:`~multidraft.decoding.load_model`; replaces ``device`` (leave it ``"auto"``).
    compile : bool
        Static KV caches and compiled forwards (CUDA graphs on CUDA); compilation happens in
        an untimed warm-up (``seconds_warmup``).
    baseline : bool
        Also time autoregressive sampling of every prompt (``speedup``).
    keep_distributions : bool
        Keep p and q_i in each record (memory: 8 V bytes per distribution).
    progress : bool
        This run's progress bar on stderr, drawn only when stderr is a terminal (and the hub's
        download bars when a model is downloaded; transformers' loading bar is always off).
    verifiers : sequence of str or TreeVerifier
        Tree verifiers (:func:`multidraft.trees.get_verifier` names, ``"token"`` for the token
        walk with ``scheme``), each driving its own run on the same prompts and seeds, all
        scored on every block (:attr:`Results.verifiers`, :attr:`Results.paired`); the first
        gives the top-level fields.
    scored : sequence of str or TreeVerifier
        Further verifiers scored on every block (:attr:`Results.paired`) without driving a run.
    shape : TreeShape, optional
        Draft a tree of this shape each block (:class:`~multidraft.decoding.config.MeasureConfig`'s
        ``shape``): every verifier is then scored by its exact ``E[τ | tree]`` on the block's
        :class:`~multidraft.trees.ShapedTree`; no token-level position records are kept.

    Returns
    -------
    Results

    Raises
    ------
    ValueError
        k, length or max_new_tokens < 1, an empty prompt list, a bad sampling, an unknown
        scheme or one that does not support the drafts' law, a device torch does not report,
        an incompatible draft, a verifier that does not take the drafts.
    OSError
        A model that cannot be found locally nor downloaded.
    """
    config = MeasureConfig(
        k=k, length=length, scheme=scheme, prompts=prompts, max_new_tokens=max_new_tokens, seed=seed,
        target_sampling=target_sampling, draft_sampling=draft_sampling, without_replacement=without_replacement,
        device=device, compile=compile, baseline=baseline, verifiers=verifiers, scored=scored, shape=shape,
    )  # fmt: skip
    if device_map is not None and device != "auto":
        raise ValueError(f"device_map: give a device map or a device, not both (device={device!r})")
    target_model = _as_model(target, config.device, device_map, progress)
    draft_model = None if draft is None else _as_model(draft, config.device, device_map, progress)
    specs = [DraftSpec(draft_model, sampling) for sampling in config.draft_sampling]
    check_specs(target_model, specs, config.without_replacement)
    return run_measurement(config, target_model, specs, keep_distributions=keep_distributions, progress=progress)


def _as_model(model: str | LoadedModel, device: str, device_map: str | dict | None, progress: bool) -> LoadedModel:
    if isinstance(model, LoadedModel):
        return model
    return load_model(model, device=device, device_map=device_map, progress=progress)


def run_measurement(
    config: MeasureConfig,
    target: LoadedModel,
    specs: Sequence[DraftSpec],
    *,
    keep_distributions: bool = False,
    progress: bool = True,
) -> Results:
    """:func:`measure` on loaded models: ``specs`` are the K drafts (checked by the caller).
    Each verifier of ``config.verifiers`` drives one run over every prompt, prompt i with the
    seeds :func:`~multidraft.decoding.config.prompt_seeds` ``(config.seed, i)``."""
    shard = measure_shard(config, target, specs, range(len(config.prompts)), keep_distributions=keep_distributions, progress=progress)
    return merge_shards(config, target, specs, [shard])


@dataclass
class Shard:
    """What one process measured: for each verifier of the run, one :class:`Tally` per prompt
    it ran, keyed by the prompt's index in ``config.prompts`` (block numbers count from 0 in
    each prompt); ``warmup`` its compilation seconds."""

    tallies: list[dict[int, Tally]]
    warmup: float = 0.0


def measure_shard(
    config: MeasureConfig,
    target: LoadedModel,
    specs: Sequence[DraftSpec],
    indices: Sequence[int],
    *,
    keep_distributions: bool = False,
    progress: bool = True,
    label: str = "",
) -> Shard:
    """Run the prompts ``indices`` of ``config.prompts`` with every verifier: a progress bar on
    stderr when it is a terminal, else (with ``progress``) one line per prompt there, prefixed
    ``measure{label}:``."""
    from tqdm.auto import tqdm

    device = target.device
    indices = list(indices)
    prompts = {index: encode_prompt(target.tokenizer, config.prompts[index]) for index in indices}
    shard = Shard([{} for _ in config.verifiers])
    if config.compile and prompts:
        start = time.perf_counter()
        capacity = max(len(ids) for ids in prompts.values()) + config.max_new_tokens + config.length + 2
        warm_up(target, specs, length=config.length, capacity=capacity, autoregressive=config.baseline)
        shard.warmup = time.perf_counter() - start
    per_run = len(indices) * config.max_new_tokens
    lines = progress and not sys.stderr.isatty()  # a pipe or a log: a line per prompt instead of a bar
    # disable=None: tqdm draws only when stderr is a terminal (a pipe or a log gets no bar lines)
    bar = tqdm(total=per_run * len(config.verifiers), disable=None if progress else True, file=sys.stderr, unit="tok", desc="measure")
    with bar:
        for run, verifier in enumerate(config.verifiers):
            for position, index in enumerate(indices):
                drafting, selection, baseline = prompt_seeds(config.seed, index)
                randomness = (
                    torch.Generator(device=device).manual_seed(drafting),
                    np.random.default_rng(selection),
                    torch.Generator(device=device).manual_seed(baseline),
                )
                start = run * per_run + position * config.max_new_tokens
                tally = shard.tallies[run][index] = Tally(verifier=verifier.name)
                began = time.perf_counter()
                _measure_prompt(
                    index, prompts[index], config, verifier, target, specs, randomness, tally, keep_distributions, bar, start, run == 0
                )
                bar.update(start + config.max_new_tokens - bar.n)  # a prompt that ended early: skip its rest
                if lines:
                    done, todo = run * len(indices) + position + 1, len(indices) * len(config.verifiers)
                    print(
                        f"measure{label}: {verifier.name} prompt {index + 1} of {len(config.prompts)}: {tally.new_tokens} tokens "
                        f"in {time.perf_counter() - began:.1f} s ({done}/{todo} here)",
                        file=sys.stderr, flush=True,
                    )  # fmt: skip
    return shard


def merge_shards(config: MeasureConfig, target: LoadedModel, specs: Sequence[DraftSpec], shards: Sequence[Shard]) -> Results:
    """The :class:`Results` of ``shards`` that together ran every prompt once: each verifier's
    per-prompt tallies are joined in prompt order (:func:`~multidraft.decoding.tally.merge_tallies`,
    block numbers running over the prompts), so the records do not depend on how the prompts
    were split; times and warm-up are summed over the shards."""
    draft = specs[0].model
    tallies = []
    for run, verifier in enumerate(config.verifiers):
        parts = {index: tally for shard in shards for index, tally in shard.tallies[run].items()}
        if sorted(parts) != list(range(len(config.prompts))):
            raise ValueError(f"shards: expected every prompt 0..{len(config.prompts) - 1} once, got {sorted(parts)}")
        tallies.append(merge_tallies([parts[index] for index in sorted(parts)], verifier.name))
    tallies[0].seconds["warmup"] = sum(shard.warmup for shard in shards)
    if degenerate(config, target, specs):
        tallies[0].notes.add(DEGENERATE)
    return aggregate(
        tallies,
        config,
        target=target.name,
        draft=draft.name if draft is not None else f"{target.name} (self)",
        device=str(target.device),
        missing_optimal=MISSING_OPTIMAL,
    )


def _measure_prompt(
    index: int,
    ids: list[int],
    config: MeasureConfig,
    verifier: Any,
    target: LoadedModel,
    specs: Sequence[DraftSpec],
    randomness: tuple[torch.Generator, np.random.Generator, torch.Generator],
    tally: Tally,
    keep: bool,
    bar: Any,
    start: int,
    first: bool,
) -> None:
    """One prompt driven by ``verifier``: speculative generation with a record per block (and,
    for the ``first`` verifier, a theory record per position and the autoregressive baseline
    of as many tokens); everything accumulates in ``tally``. The bar counts this prompt's
    tokens from ``start`` up to its ``max_new_tokens`` share (a last block can emit more than
    are kept), so it never runs past the prompt's end nor backwards."""
    generator, rng, baseline_generator = randomness
    end = start + config.max_new_tokens
    groups = spec_groups(specs)

    def on_block(outcome: BlockOutcome) -> None:
        began = time.perf_counter()
        block = len(tally.blocks)
        if first:
            for step in outcome.steps:
                tally.records.append(_record(index, block, step, keep, tally.gaps))
        tally.block_records.append(_score_block(index, block, verifier, outcome, config, groups, tally.block_gaps))
        # The steps (device views, host plans) and distributions are consumed: keep the counts.
        tally.blocks.append(dataclasses.replace(outcome, steps=(), target=None, drafts=None, shaped=None))
        tally.seconds["theory"] += time.perf_counter() - began
        bar.update(max(0, min(len(outcome.tokens), end - bar.n)))

    generation = speculative_generate(
        target, specs, ids, length=config.length, scheme=config.scheme, max_new_tokens=config.max_new_tokens,
        generator=generator, rng=rng, target_sampling=config.target_sampling,
        without_replacement=config.without_replacement, compile=config.compile, on_block=on_block, verifier=verifier,
        shape=config.shape,
    )  # fmt: skip
    tally.new_tokens += len(generation.tokens)
    tally.seconds["drafting"] += generation.seconds_drafting
    tally.seconds["verification"] += generation.seconds_verification
    tally.seconds["selection"] += generation.seconds_selection
    tally.compiled = tally.compiled and generation.compiled
    if generation.compile_error:
        tally.notes.add(f"compile=True but torch.compile failed ({generation.compile_error}); forwards ran eagerly")
    tally.texts.append(target.tokenizer.decode(list(generation.tokens)))
    if config.baseline and first:
        began = clock(target.device)
        produced = sample_autoregressive(
            target, ids, max_new_tokens=config.max_new_tokens, generator=baseline_generator,
            sampling=config.target_sampling, compile=config.compile,
        )  # fmt: skip
        tally.seconds["autoregressive"] += clock(target.device) - began
        tally.autoregressive_tokens += len(produced)


def _score_block(
    prompt: int, block: int, driver: Any, outcome: BlockOutcome, config: MeasureConfig, groups: tuple[int, ...], gaps: set[str]
) -> BlockRecord:
    """The block's record: τ of ``driver`` and every verifier's ``E[τ | tree]`` on the block's
    tree (NaN, with the reason in ``gaps``, where a verifier cannot compute it), with the
    driver's ``Var[τ | tree]``."""
    tree = outcome.tree(groups, config.without_replacement)
    expected, variance = [], float("nan")
    for verifier in config.scoring:
        try:
            law = verifier.law(tree, next_token=False)
        except ValueError as error:  # a refusal (size guard) is a gap; running out of memory is not
            expected.append(float("nan"))
            gaps.add(f"{verifier.name}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
            continue
        expected.append(float(law.expected_accepted))
        if verifier is driver:
            variance = float(law.variance_accepted)
    return BlockRecord(driver.name, prompt, block, outcome.accepted, tuple(expected), variance)


def _record(prompt: int, block: int, step: NodeStep, keep: bool, gaps: set[str]) -> PositionRecord:
    """The record of one node, computed on the host from the node's plan (the one that
    selected, or for a batched selection one prepared now); when the scheme has no exact
    acceptance for the node (e.g. no closed form and too many draft tuples to enumerate),
    ``expected`` is NaN and the reason goes to ``gaps``."""
    plan = None
    try:
        plan = step.host_plan()
        if plan is not None:
            target, law = plan.target, plan.law
            expected = float(plan.acceptance)
        else:  # a scheme object without plans
            target, law = step.host()[0], step.law()
            expected = float(step.scheme.acceptance(target, law))
    except ValueError as error:
        target, law = step.host()[0], step.law()
        expected = float("nan")
        gaps.add(str(error).splitlines()[0])
    try:
        optimal = node_optimal_acceptance(target, law, plan)
    except RuntimeError:
        optimal = float("nan")
    if keep:
        kept_target, kept_drafts = step.host()
    return PositionRecord(
        prompt=prompt,
        block=block,
        depth=step.depth,
        k_live=len(step.live),
        draft_support=int(np.count_nonzero(law.support)),
        law=step.law_name,
        draft_tokens=step.draft_tokens,
        token=step.token,
        accepted=step.accepted,
        expected=expected,
        optimal=optimal,
        target=kept_target if keep else None,
        drafts=kept_drafts if keep else None,
    )
