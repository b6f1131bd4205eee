"""The budget answer checked on trees drafted by a real model (issue 31, item 3, real half).

:mod:`multidraft.report.budget_real` chooses shapes from a positional model (measured â_i,
Sequoia's DP). Here the chosen shapes are drafted by the model and every verifier is scored on
every drafted tree by its exact conditional expectation ``E[τ | tree]``
(:func:`multidraft.decoding.measurement.measure_shard`, one run driven by the first verifier,
the others scored on the same trees). A *unit* is one prompt continued with one seed round
(prompt i of round r draws from :func:`~multidraft.decoding.config.prompt_seeds` ``(r, i)``);
every shape runs the same units.

**Estimator.** For run s (a shape) and verifier v, with ``S_c`` the sum of ``E_v[τ | tree]``
over the blocks of cluster c (a prompt: all its rounds) and ``B_c`` its blocks,

    E[τ + 1] = 1 + Σ_c S_c / Σ_c B_c,

the tokens per target call of that verifier on that shape (a ratio estimator: blocks, not
prompts, are weighted equally). Blocks of one prompt are dependent, so every interval is a
**cluster bootstrap over prompts** (prompts drawn with replacement, percentile 95%); a gain of
(s, v) over the reference (chains, ``token:specinfer``) uses the same draws for both, so it is
paired by prompt and seed round -- the two shapes see the same prompts and seeds, not the same
trees.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from multidraft.report.budget_real import best_chains, shape_parents
from multidraft.theory.laws import check_count
from multidraft.trees.budget import positional_value, sequoia_tree
from multidraft.trees.shape import TreeShape

__all__ = [
    "BLOCK_VERIFIERS", "WALKS", "COMMITTED", "budget_shapes", "run_units", "clustered_answer", "blocks_table", "blocks_text",
    "committed", "token_optimal_caveat",
]  # fmt: skip

#: The verifiers scored on every drafted tree: the driving one first (lossless on iid trees).
BLOCK_VERIFIERS = ("token:specinfer", "token:optimal", "selective", "traversal")
#: The reference of the gains: SpecInfer chains verified by ``token:specinfer``.
REFERENCE = ("chains", "token:specinfer")
#: The positional walks whose DP shapes are candidates (both draft iid trees).
WALKS = ("token:specinfer", "token:optimal")
#: The committed result of ``benchmarks/bench_budget_real.py`` (present in a repository checkout).
COMMITTED = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "budget_real_blocks.json"


def budget_shapes(acceptance: Mapping[str, Sequence[float]], budget: int) -> dict:
    """The two shapes of ``budget`` nodes to draft, from positional acceptances â per walk of
    :data:`WALKS`: ``"dp"``, the static shape of Sequoia's DP for the walk whose DP value is
    largest (:func:`~multidraft.trees.sequoia_tree`), and ``"chains"``, the best SpecInfer
    chains ⟨K, 1, …, 1⟩ under ``token:specinfer``'s â
    (:func:`~multidraft.report.budget_real.best_chains`). Returns ``dp_walk``, ``shapes``
    (label -> parent array) and ``predicted`` (label -> walk -> ``1 + positional_value``)."""
    missing = [walk for walk in WALKS if walk not in acceptance]
    if missing:
        raise ValueError(f"acceptance: expected positional acceptances of {', '.join(WALKS)}; missing {', '.join(missing)}")
    means = {walk: np.clip(np.asarray(acceptance[walk], dtype=float), 0.0, 1.0) for walk in WALKS}
    trees = {walk: sequoia_tree(means[walk], budget) for walk in WALKS}
    best = max(WALKS, key=lambda walk: trees[walk].block_efficiency)
    _, chains = best_chains(means["token:specinfer"], budget, budget)
    shapes = {"dp": list(trees[best].parents), "chains": shape_parents(chains)}
    predicted = {
        label: {walk: 1 + positional_value(means[walk], TreeShape.static(parents)) for walk in WALKS} for label, parents in shapes.items()
    }
    return {"dp_walk": best, "shapes": shapes, "predicted": predicted}


def run_units(
    target,
    draft,
    shape,
    prompts,
    units: Sequence[tuple[int, int]],
    *,
    target_temperature: float,
    draft_temperature: float,
    max_new_tokens: int,
    verifiers: Sequence[str] = BLOCK_VERIFIERS,
    on_unit: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Draft ``shape`` (a :class:`~multidraft.trees.TreeShape`) on every unit ``(round, prompt
    index)`` of ``prompts`` (a :class:`~multidraft.decoding.prompts.PromptSet`) and score
    ``verifiers`` on every block (module docstring). ``draft`` None: the target drafts for
    itself at ``draft_temperature``. Returns one dict per unit -- ``round``, ``prompt``,
    ``task``, ``tokens``, ``seconds`` (process time), ``accepted`` (τ of the driving verifier
    per block) and ``expected`` (per verifier, ``E[τ | tree]`` per block, None where not
    computable) -- and passes each to ``on_unit`` as it is done."""
    from multidraft.decoding import DraftSpec, MeasureConfig, Sampling  # noqa: PLC0415
    from multidraft.decoding.measurement import measure_shard  # noqa: PLC0415

    verifiers = tuple(verifiers)
    if not verifiers:
        raise ValueError("verifiers: expected at least one verifier name, got none")
    configs: dict[int, MeasureConfig] = {}
    out = []
    for round_, index in units:
        if not 0 <= index < len(prompts.prompts):
            raise ValueError(f"units: prompt index {index} outside 0..{len(prompts.prompts) - 1}")
        if round_ not in configs:
            configs[round_] = MeasureConfig(
                prompts=prompts, max_new_tokens=max_new_tokens, seed=round_, target_sampling=Sampling(target_temperature),
                draft_sampling=(Sampling(draft_temperature),), shape=shape, device=str(target.device), baseline=False,
                verifiers=verifiers[:1], scored=verifiers[1:],
            )  # fmt: skip
        config = configs[round_]
        began = time.process_time()
        shard = measure_shard(config, target, [DraftSpec(draft, config.draft_sampling[0])], [index], progress=False)
        tally = shard.tallies[0][index]
        records = tally.block_records
        unit = {
            "round": round_,
            "prompt": index,
            "task": prompts.tasks[index],
            "tokens": tally.new_tokens,
            "seconds": time.process_time() - began,
            "accepted": [r.accepted for r in records],
            "expected": {
                name: [None if value != value else round(value, 9) for value in (r.expected[j] for r in records)]
                for j, name in enumerate(config.verifier_names)
            },
        }
        out.append(unit)
        if on_unit is not None:
            on_unit(unit)
    return out


def _sums(units: Sequence[dict], keys: Sequence[tuple[int, int]], clusters: Sequence[int], column: Callable[[dict], list]) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster (prompt), the sum of ``column(unit)`` (one value per block) and the blocks
    counted, over the units ``keys``; a missing value (None) counts for neither."""
    by_key = {(u["round"], u["prompt"]): u for u in units}
    position = {c: i for i, c in enumerate(clusters)}
    sums, blocks = np.zeros(len(clusters)), np.zeros(len(clusters))
    for key in keys:
        values = [v for v in column(by_key[key]) if v is not None]
        sums[position[key[1]]] += sum(values)
        blocks[position[key[1]]] += len(values)
    return sums, blocks


def _expected(verifier: str) -> Callable[[dict], list]:
    return lambda unit: unit["expected"][verifier]


def _surprise(unit: dict) -> list:
    """τ − E[τ | tree] of the driving verifier (the first of ``expected``) per block."""
    driver = unit["expected"][next(iter(unit["expected"]))]
    return [None if e is None else a - e for a, e in zip(unit["accepted"], driver)]


def clustered_answer(runs: dict[str, Sequence[dict]], *, resamples: int = 2000, seed: int = 0) -> dict:
    """Per run (shape label -> units of :func:`run_units`) and verifier: blocks, E[τ + 1] with a
    95% cluster-bootstrap interval, and the gain over :data:`REFERENCE` (the ``"chains"`` run's
    ``token:specinfer``) in tokens and percent with its paired interval (module docstring). Only
    the units every run has are used, so all runs see the same prompts and seeds."""
    resamples = check_count(resamples, "resamples", meaning="bootstrap draws")
    if REFERENCE[0] not in runs:
        raise ValueError(f"runs: the reference run {REFERENCE[0]!r} is missing; got {sorted(runs)}")
    keys = sorted(set.intersection(*({(u["round"], u["prompt"]) for u in units} for units in runs.values())))
    if not keys:
        raise ValueError("runs: no unit (round, prompt) is common to every run")
    clusters = sorted({prompt for _, prompt in keys})
    rng = np.random.default_rng(seed)
    weights = np.stack([np.bincount(rng.integers(0, len(clusters), len(clusters)), minlength=len(clusters)) for _ in range(resamples)])
    ref_sums, ref_blocks = _sums(runs[REFERENCE[0]], keys, clusters, _expected(REFERENCE[1]))
    ref_value, ref_draws = 1 + ref_sums.sum() / ref_blocks.sum(), 1 + (weights @ ref_sums) / (weights @ ref_blocks)
    out = {"units": len(keys), "prompts": len(clusters), "rounds": len({r for r, _ in keys}), "runs": {}}
    for label, units in runs.items():
        by_key = {(u["round"], u["prompt"]): u for u in units}
        entry = {
            "blocks": sum(len(by_key[k]["accepted"]) for k in keys),
            "tokens": sum(by_key[k]["tokens"] for k in keys),
            "seconds": sum(by_key[k]["seconds"] for k in keys),
            "driver": next(iter(units[0]["expected"])),
            **_surprise_entry(*_sums(units, keys, clusters, _surprise), weights),
            "verifiers": {},
        }
        for verifier in units[0]["expected"]:
            sums, blocks = _sums(units, keys, clusters, _expected(verifier))
            if blocks.sum() == 0:
                continue
            value, draws = 1 + sums.sum() / blocks.sum(), 1 + (weights @ sums) / np.maximum(weights @ blocks, 1)
            entry["verifiers"][verifier] = {
                "blocks": int(blocks.sum()),
                "block_efficiency": float(value),
                "ci95": _percentiles(draws),
                "gain": float(value - ref_value),
                "gain_percent": float(100 * (value - ref_value) / ref_value),
                "gain_ci95": _percentiles(draws - ref_draws),
                "gain_percent_ci95": _percentiles(100 * (draws - ref_draws) / ref_draws),
            }
        out["runs"][label] = entry
    return out


def _surprise_entry(sums: np.ndarray, blocks: np.ndarray, weights: np.ndarray) -> dict:
    """The driving verifier's mean of τ − E[τ | tree] with its cluster-bootstrap interval: a
    second route to E[τ + 1] (realised, not computed), which should contain 0."""
    return {"surprise": float(sums.sum() / max(blocks.sum(), 1)), "surprise_ci95": _percentiles((weights @ sums) / np.maximum(weights @ blocks, 1))}


def _percentiles(values: np.ndarray) -> list[float]:
    low, high = np.percentile(values, [2.5, 97.5])
    return [float(low), float(high)]


def blocks_table(answer: dict, predictions: dict | None = None) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Headers and rows of :func:`clustered_answer`: per run and verifier (best first), blocks,
    E[τ + 1] [95%], the gain over the reference [95%] in tokens and percent, and the positional
    model's prediction where ``predictions[run][verifier]`` gives one."""
    headers = ("shape", "verifier", "blocks", "E[tau+1] [95% CI]", "gain over chains/token:specinfer [95% CI]", "positional model")
    rows = []
    for label, entry in answer["runs"].items():
        ranked = sorted(entry["verifiers"].items(), key=lambda item: -item[1]["block_efficiency"])
        for name, value in ranked:
            low, high = value["ci95"]
            glow, ghigh = value["gain_ci95"]
            plow, phigh = value["gain_percent_ci95"]
            predicted = (predictions or {}).get(label, {}).get(name)
            rows.append((
                label, name, str(value["blocks"]), f"{value['block_efficiency']:.3f} [{low:.3f}, {high:.3f}]",
                f"{_signed(value['gain'])} [{_signed(glow)}, {_signed(ghigh)}] ({_signed(value['gain_percent'], 1)}% "
                f"[{_signed(plow, 1)}, {_signed(phigh, 1)}])",
                "" if predicted is None else f"{predicted:.3f}",
            ))  # fmt: skip
    return headers, rows


def _signed(value: float, digits: int = 3) -> str:
    """``+0.123``; a value that rounds to zero prints as ``+0.000``, never ``-0.000``."""
    return f"{value if round(value, digits) != 0 else 0.0:+.{digits}f}"


def blocks_text(answer: dict, predictions: dict | None = None) -> str:
    """:func:`blocks_table` in aligned columns under one line saying what was averaged."""
    lines = [
        f"{answer['units']} units ({answer['prompts']} prompts x {answer['rounds']} seed rounds), every shape on the same "
        "units; 95% intervals: cluster bootstrap over prompts, gains paired by prompt and round"
    ]
    headers, rows = blocks_table(answer, predictions)
    lines += [
        f"{label}: realised tau - E[tau | tree] of {run['driver']} {_signed(run['surprise'])} "
        f"[{_signed(run['surprise_ci95'][0])}, {_signed(run['surprise_ci95'][1])}] (should contain 0)"
        for label, run in answer["runs"].items()
    ]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [headers, *rows]]
    return "\n".join(lines)


def live_check(
    model: str,
    acceptance: Mapping[str, Sequence[float]],
    *,
    draft: str | None = None,
    budget: int = 16,
    prompts: int = 3,
    max_new_tokens: int = 32,
    target_temperature: float = 0.6,
    draft_temperature: float = 1.0,
    seed: int = 0,
) -> dict:
    """A short run of the check, for the report: the :func:`budget_shapes` of ``acceptance``
    drafted by ``model`` (or ``draft``) on ``prompts`` bundled prompts (in turn from each task,
    seed round ``seed``), scored and clustered (:func:`clustered_answer`). Returns the shapes,
    the answer and the process time it took."""
    from multidraft.decoding import bundled_prompts, load_model  # noqa: PLC0415
    from multidraft.decoding.models import cpu_threads  # noqa: PLC0415

    began = time.process_time()
    plan = budget_shapes(acceptance, budget)
    chosen = bundled_prompts().round_robin(check_count(prompts, "prompts", meaning="bundled prompts"))
    units = [(seed, index) for index in range(len(chosen.prompts))]
    with cpu_threads():
        target = load_model(model, progress=False)
        drafter = None if draft is None else load_model(draft, progress=False)
        runs = {
            label: run_units(
                target, drafter, TreeShape.static(parents), chosen, units, max_new_tokens=max_new_tokens,
                target_temperature=target_temperature, draft_temperature=draft_temperature,
            )  # fmt: skip
            for label, parents in plan["shapes"].items()
        }
    return {**plan, "budget": budget, "answer": clustered_answer(runs, seed=seed), "seconds": time.process_time() - began}


def token_optimal_caveat(result: dict) -> str:
    """One line on how far the positional answer for ``token:optimal`` can be trusted, for
    :func:`~multidraft.report.budget_real.real_budget`'s ``result``.

    The positional model (Sequoia's assumption, a_i per child position) is exact for the
    SpecInfer walk's chains but only an approximation for the optimal verifier, whose acceptance
    depends on the whole drafted tuple (on the bundled model's self-draft at N = 16 it predicted
    +5% over SpecInfer chains where the drafted trees measured -5.6% [-10.4, -0.6]:
    ``benchmarks/results/budget_real_blocks.json``). Without ``result["drafted_trees"]`` (a
    :func:`live_check`) the line says so and points to ``--drafted``; with it, the line gives
    token:optimal's prediction and measured E[τ + 1] on the drafted DP shape, its gain over
    chains + token:specinfer, and whether the measured interval holds the prediction."""
    drafted = result.get("drafted_trees")
    if drafted is None:
        return (
            "caveat: token:optimal's row is the positional model's approximation (its acceptance depends on the whole "
            "drafted tuple, not on a child's position) and can rank it wrongly; measure it on drafted trees with --drafted P"
        )
    value = drafted["answer"]["runs"]["dp"]["verifiers"]["token:optimal"]
    predicted = drafted["predicted"]["dp"]["token:optimal"]
    low, high = value["ci95"]
    plow, phigh = value["gain_percent_ci95"]
    verdict = "inside" if low <= predicted <= high else "outside"
    return (
        f"caveat: token:optimal's row is the positional model's approximation; on the drafted trees (N = {drafted['budget']}, "
        f"DP shape) it predicts E[tau+1] {predicted:.3f}, measured {value['block_efficiency']:.3f} [{low:.3f}, {high:.3f}] "
        f"({verdict} the interval), gain over chains/token:specinfer {_signed(value['gain_percent'], 1)}% "
        f"[{_signed(plow, 1)}, {_signed(phigh, 1)}]: trust the drafted value"
    )


def committed(path: Path = COMMITTED) -> dict | None:
    """The stored result of ``benchmarks/bench_budget_real.py`` (per draft: provenance, plan,
    answer), or None where the file is absent (an installed package has no ``benchmarks/``)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None
