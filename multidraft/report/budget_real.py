"""Which tree and which verifier for a node budget on a real model: positional acceptance
measured from the model's (p, q) rows, Sequoia's DP per verifier, intervals and predicted
speed-up (issue 31, items 2 and 3).

**Estimator.** Prompts are continued by sampling from the target (temperature T_p); at every
generated position the target p = softmax(z / T_p) and the draft q (the same logits at T_q for
a self-draft, or the draft model's) give, exactly and without drafting anything, each walk's
positional acceptance ``a_i(p, q)`` (:func:`multidraft.trees.budget.positional_acceptance`:
the probability that the i-th drafted child is the accepted one). The estimate is the mean over
positions, ``â_i = (1/M) Σ_t a_i(p_t, q_t)`` -- Rao–Blackwellised: a position's contribution is
its exact expectation, not one sampled draft. Positions of one prompt are dependent, so every
interval is a **cluster bootstrap over prompts** (``resamples`` draws of the prompts with
replacement, percentile 95%): for E[τ + 1] of the chosen shape and for its gain over SpecInfer
chains (the same resampled â for both, so the gain's interval is paired).

**Answer.** Per budget N and verifier, :func:`~multidraft.trees.sequoia_tree` on â gives the
shape and its E[τ + 1] under the positional model. The baseline, *SpecInfer chains*, is the best
⟨K, 1, …, 1⟩ (K sequences of length L sharing only the root, K·L ≤ N) with ``token:specinfer``.
With latencies t(b, m) measured on this machine, the predicted speed-up over autoregressive
decoding is (Yan et al. 2024, Eq. 1, with one draft forward per depth of the tree)

    speed-up = E[τ + 1] · t_target(1, 1) / ( Σ_d t_draft(w_d, 1) + t_target(1, N + 1) ),

w_d the nodes at depth d (the batch of the d-th draft forward), N + 1 tokens verified in one
target call with a tree attention mask.

The chosen shapes drafted by the model and scored per block by each verifier's exact
E[τ | tree] are :mod:`multidraft.report.budget_blocks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.theory.laws import check_count
from multidraft.trees.budget import POSITIONAL_SCHEMES, level_widths, positional_acceptance, positional_value, sequoia_tree
from multidraft.trees.shape import TreeShape

__all__ = [
    "BUDGETS",
    "REAL_VERIFIERS",
    "PositionalSample",
    "collect_positional",
    "budget_answer",
    "best_chains",
    "shape_parents",
    "tree_speedup",
    "real_budget",
    "answer_table",
    "answer_text",
]

#: The node budgets of issue 31.
BUDGETS = (4, 8, 16, 32, 64)
#: The walks scored on a real model by default (keys of
#: :data:`multidraft.trees.budget.POSITIONAL_SCHEMES`); ``"token:optimal (wor)"`` is left out by
#: default: its optimal acceptance without replacement costs ~0.6 s a position at V = 49152.
REAL_VERIFIERS = ("token:specinfer", "token:optimal", "top-k walk")
#: The baseline walk.
REFERENCE = "token:specinfer"


@dataclass(frozen=True)
class PositionalSample:
    """Per prompt, the sums of every walk's per-position positional acceptance.

    Attributes
    ----------
    verifiers : tuple of str
        The walks (keys of POSITIONAL_SCHEMES).
    sums : numpy.ndarray [prompts, verifiers, width]
        Σ over the prompt's positions of ``a_i(p_t, q_t)``.
    counts : numpy.ndarray [prompts]
        Positions per prompt.
    """

    verifiers: tuple[str, ...]
    sums: np.ndarray
    counts: np.ndarray

    @property
    def positions(self) -> int:
        """All positions."""
        return int(self.counts.sum())

    def mean(self, weights: np.ndarray | None = None) -> np.ndarray:
        """â [verifiers, width], the prompts weighted by ``weights`` (multiplicities of a
        bootstrap draw; default all once)."""
        w = np.ones(len(self.counts)) if weights is None else weights
        return np.tensordot(w, self.sums, axes=1) / float(w @ self.counts)


def collect_positional(
    target,
    prompts: Sequence[str],
    *,
    target_temperature: float,
    draft_temperature: float,
    max_new_tokens: int,
    width: int = 8,
    seed: int = 0,
    draft=None,
    verifiers: Sequence[str] = REAL_VERIFIERS,
    progress=None,
) -> PositionalSample:
    """Sample each prompt's continuation from the target (``max_new_tokens``, seed ``seed + i``
    for prompt i), then read p and q at every generated position from one forward over the
    whole sequence and accumulate :func:`positional_acceptance` of every walk (module
    docstring). Memory O(V + prompts · width): rows are used one prompt at a time.

    ``target``, ``draft``: :class:`~multidraft.decoding.LoadedModel` (``draft=None``: the
    target's own logits at ``draft_temperature``)."""
    import torch  # noqa: PLC0415

    from multidraft.decoding import Sampling, encode_prompt, process_logits, sample_autoregressive  # noqa: PLC0415
    from multidraft.decoding.models import forward_with_cache  # noqa: PLC0415

    for name in verifiers:
        if name not in POSITIONAL_SCHEMES:
            raise ValueError(f"verifiers: unknown {name!r}; choose from {', '.join(POSITIONAL_SCHEMES)}")
    sums = np.zeros((len(prompts), len(verifiers), width))
    counts = np.zeros(len(prompts))
    for index, text in enumerate(prompts):
        ids = encode_prompt(target.tokenizer, text)
        generator = torch.Generator(device="cpu").manual_seed(seed + index)
        tokens = sample_autoregressive(
            target, ids, max_new_tokens=max_new_tokens, generator=generator, sampling=Sampling(target_temperature)
        )
        sequence = torch.tensor([ids + list(tokens)], device=target.device)
        with torch.inference_mode():
            logits = forward_with_cache(target.model, sequence, use_cache=False).logits[0, len(ids) - 1 : -1]
            draft_logits = logits if draft is None else forward_with_cache(draft.model, sequence.to(draft.device), use_cache=False).logits[0, len(ids) - 1 : -1]
        p = process_logits(logits, target_temperature, 1.0).cpu().numpy()
        q = process_logits(draft_logits, draft_temperature, 1.0).cpu().numpy()
        for j, name in enumerate(verifiers):
            sums[index, j] = positional_acceptance(p, q, width, verifier=name).sum(axis=0)
        counts[index] = len(tokens)
        if progress is not None:
            progress()
    return PositionalSample(tuple(verifiers), sums, counts)


def tree_speedup(block_efficiency: float, parents: Sequence[int], draft_latency, target_latency) -> float:
    """``E[τ + 1] · t_target(1, 1) / (Σ_d t_draft(w_d, 1) + t_target(1, N + 1))`` (module
    docstring; Yan et al. 2024, Eq. 1), ``draft_latency`` and ``target_latency``
    :class:`~multidraft.theory.LatencyModel`."""
    widths = level_widths(list(parents))
    seconds = sum(draft_latency(w, 1) for w in widths) + target_latency(1, len(parents))
    return block_efficiency * target_latency(1, 1) / seconds


def best_chains(a: np.ndarray, budget: int, max_depth: int) -> tuple[float, TreeShape]:
    """``max_{K·L ≤ N, L ≤ D} E[τ](⟨K, 1, …, 1⟩)`` under the positional model ``a``
    (:func:`~multidraft.trees.budget.positional_value`): the best SpecInfer configuration, K
    sequences of length L sharing only the root, and its E[τ] (ties: fewer sequences)."""
    shapes = [TreeShape.expansion([k] + [1] * (length - 1)) for k in range(1, budget + 1) for length in range(1, min(max_depth, budget // k) + 1)]
    values = [positional_value(a, shape) for shape in shapes]
    best = int(np.argmax(values))  # the first of the best: fewer sequences
    return values[best], shapes[best]


def budget_answer(
    sample: PositionalSample,
    budgets: Sequence[int] = BUDGETS,
    *,
    max_depth: int | None = None,
    latencies: tuple | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> list[dict]:
    """Per budget N and walk: the DP's shape on â, its E[τ + 1] with a 95% cluster-bootstrap
    interval, the gain over SpecInfer chains in tokens and percent with its paired interval, and
    the predicted speed-up where ``latencies = (draft, target)`` are given (module docstring)."""
    resamples = check_count(resamples, "resamples", meaning="bootstrap draws")
    rng = np.random.default_rng(seed)
    prompts = len(sample.counts)
    weights = np.stack([np.bincount(rng.integers(0, prompts, prompts), minlength=prompts) for _ in range(resamples)])
    means = sample.mean()
    draws = np.stack([sample.mean(w.astype(float)) for w in weights])  # [resamples, verifiers, width]
    reference = sample.verifiers.index(REFERENCE)
    rows = []
    for budget in budgets:
        depth = budget if max_depth is None else max_depth
        chains_value, chains_shape = best_chains(means[reference], budget, depth)
        chains_draws = np.array([positional_value(d[reference], chains_shape) for d in draws])
        chains = {
            "shape": repr(chains_shape),
            "level_widths": level_widths(shape_parents(chains_shape)),
            "block_efficiency": chains_value + 1.0,
            "ci95": _percentiles(chains_draws + 1.0),
        }
        if latencies is not None:
            chains["speedup"] = tree_speedup(chains_value + 1.0, shape_parents(chains_shape), *latencies)
        row = {"budget": budget, "chains": chains, "verifiers": {}}
        for j, name in enumerate(sample.verifiers):
            tree = sequoia_tree(np.clip(means[j], 0.0, 1.0), budget, max_depth=depth)
            values = np.array([positional_value(d[j], tree.shape()) for d in draws])
            entry = {
                **tree.as_dict(),
                "ci95": _percentiles(values + 1.0),
                "gain": tree.expected_accepted - chains_value,
                "gain_percent": 100.0 * (tree.expected_accepted - chains_value) / (chains_value + 1.0),
                "gain_ci95": _percentiles(values - chains_draws),
            }
            if latencies is not None:
                entry["speedup"] = tree_speedup(tree.block_efficiency, tree.parents, *latencies)
            row["verifiers"][name] = entry
        rows.append(row)
    return rows


def shape_parents(shape: TreeShape) -> list[int]:
    """The parent array of a static ``shape``: ``parents[j]`` the slot whose children list
    holds j, ``-1`` for the root (the inverse of :meth:`TreeShape.static`)."""
    parents = [-1] * len(shape.slots)
    for slot, children in enumerate(shape.slots):
        for child in children:
            parents[child] = slot
    return parents


def _percentiles(values: np.ndarray) -> list[float]:
    low, high = np.percentile(values, [2.5, 97.5])
    return [float(low), float(high)]


#: The latency grids: draft forwards of one token over the nodes of a depth, target calls of
#: one sequence over N + 1 tokens (bilinear in between).
DRAFT_GRID = {"batch_sizes": (1, 4, 16, 64), "token_counts": (1, 2)}
TARGET_GRID = {"batch_sizes": (1, 2), "token_counts": (1, 9, 33, 65)}


def real_budget(
    model: str = "default",
    *,
    draft: str | None = None,
    target_temperature: float = 0.6,
    draft_temperature: float = 1.0,
    prompts: int = 5,
    max_new_tokens: int = 32,
    budgets: Sequence[int] = BUDGETS,
    width: int = 8,
    max_depth: int | None = None,
    seed: int = 0,
    verifiers: Sequence[str] = REAL_VERIFIERS,
    latency: bool = True,
    resamples: int = 1000,
    progress=None,
) -> dict:
    """The whole real-model answer: load ``model`` (it drafts for itself at
    ``draft_temperature``, or ``draft`` does, a model sharing its tokenizer), collect ``prompts`` bundled prompts (in turn from each task) ×
    ``max_new_tokens`` positions (:func:`collect_positional`), measure latencies
    (:func:`~multidraft.decoding.profiling.profile_latency`, :data:`DRAFT_GRID`,
    :data:`TARGET_GRID`) unless ``latency=False``, and answer every budget
    (:func:`budget_answer`). Returns a JSON-ready dict; ``degenerate`` is True when the draft is
    the target (same model, same temperature: every walk accepts every drafted token)."""
    from multidraft.decoding import bundled_prompts, load_model  # noqa: PLC0415
    from multidraft.decoding.models import cpu_threads  # noqa: PLC0415
    from multidraft.decoding.profiling import profile_latency  # noqa: PLC0415

    for value, name in ((target_temperature, "target_temperature"), (draft_temperature, "draft_temperature")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < np.inf:
            raise ValueError(f"{name}: expected a finite temperature > 0, got {value!r}")
    check_count(max_new_tokens, "max_new_tokens", meaning="positions per prompt")
    check_count(width, "width", meaning="children per node")
    budgets = [check_count(b, "budget", meaning="drafted nodes") for b in budgets]
    if max(budgets) > 64:
        raise ValueError(f"budget: at most 64 nodes (the latency grid's largest verify call), got {max(budgets)}")
    chosen = bundled_prompts().round_robin(prompts).prompts
    with cpu_threads():
        target = load_model(model, progress=False)
        drafter = None if draft is None else load_model(draft, progress=False)
        sample = collect_positional(
            target, chosen, draft=drafter, target_temperature=target_temperature, draft_temperature=draft_temperature,
            max_new_tokens=max_new_tokens, width=width, seed=seed, verifiers=verifiers, progress=progress,
        )  # fmt: skip
        latencies = None
        if latency:
            options = {"context": 64, "repeats": 3, "warmup": 1, "seed": seed}
            draft_profile = profile_latency(target if drafter is None else drafter, **DRAFT_GRID, **options)
            target_profile = profile_latency(target, **TARGET_GRID, **options)
            latencies = (draft_profile.latency, target_profile.latency)
    means = sample.mean()
    return {
        "model": target.name,
        "draft": None if drafter is None else drafter.name,
        "target_temperature": float(target_temperature),
        "draft_temperature": float(draft_temperature),
        "degenerate": bool(drafter is None and target_temperature == draft_temperature),
        "prompts": len(chosen),
        "positions": sample.positions,
        "width": width,
        "positional_acceptance": {name: means[j].tolist() for j, name in enumerate(sample.verifiers)},
        "latency_ms": None
        if latencies is None
        else {"draft_t(1,1)": 1e3 * latencies[0](1, 1), "target_t(1,1)": 1e3 * latencies[1](1, 1), "target_t(1,65)": 1e3 * latencies[1](1, 65)},
        "budgets": budget_answer(sample, budgets, max_depth=max_depth, latencies=latencies, resamples=resamples, seed=seed),
    }


def answer_table(result: dict) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Headers and rows of :func:`real_budget`'s answer: per budget, every walk (best first),
    then SpecInfer chains; E[τ + 1] with its interval, the gain over chains, the speed-up."""
    speed = result["latency_ms"] is not None
    headers = ("N", "verifier", "E[tau+1]", "95% CI", "gain over chains [95% CI]", *(("speed-up",) if speed else ()), "nodes per depth")
    rows = []
    for row in result["budgets"]:
        ranked = sorted(row["verifiers"].items(), key=lambda item: -item[1]["block_efficiency"])
        for name, entry in [*ranked, ("SpecInfer chains", row["chains"])]:
            low, high = entry["ci95"]
            gain = ""
            if "gain" in entry:
                glow, ghigh = entry["gain_ci95"]
                gain = f"{_signed(entry['gain'])} ({_signed(entry['gain_percent'], 1)}%) [{_signed(glow)}, {_signed(ghigh)}]"
            speedup = (f"{entry['speedup']:.3f}x",) if speed else ()
            rows.append((str(row["budget"]), name, f"{entry['block_efficiency']:.3f}", f"[{low:.3f}, {high:.3f}]", gain, *speedup, str(entry["level_widths"])))
    return headers, rows


def _signed(value: float, digits: int = 3) -> str:
    """``+0.123``; a value that rounds to zero prints as ``+0.000``, never ``-0.000``."""
    return f"{value if round(value, digits) != 0 else 0.0:+.{digits}f}"


def answer_text(result: dict) -> str:
    """The answer as plain text (``multidraft budget``): a header line, a note when the draft
    is the target, and :func:`answer_table` in aligned columns."""
    lines = [
        (f"{result['model']} drafting for itself" if result.get("draft") is None else f"{result['draft']} drafting for {result['model']}")
        + f": target T = {result['target_temperature']:g}, draft T = {result['draft_temperature']:g}; "
        f"{result['positions']} positions of {result['prompts']} prompts; "
        "95% intervals: cluster bootstrap over prompts"
    ]
    if result["degenerate"]:
        lines.append("note: the draft is the target (same model, same temperature): every walk that samples its drafts accepts every drafted token")
    headers, rows = answer_table(result)
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [headers, *rows]]
    return "\n".join(lines)
