"""Report section "Which tree and which verifier for a budget" (issue 31, item 3).

Default report (no model): on small sequence models -- a Dirichlet(1) pair and a temperature
pair (draft = target at temperature 2), n = 3 tokens, depth L = 4, drawn from the report's seed
-- the best shape of at most N ∈ {4, 8, 16, 32, 64} drafted nodes per shape family × verifier,
every candidate scored exactly (:func:`multidraft.trees.budget_search.budget_search`: SpecInfer
chains ⟨K, 1, …, 1⟩, every expansion schedule, the static shape of Sequoia's DP, EAGLE-2's
dynamic top-k trees; ``token:specinfer`` on iid trees, the top-k walk on top-k trees), a figure
of E[τ + 1] against N per model with one take-away sentence computed from its numbers, and at
N = 4 every verifier on both iid and without-replacement trees
(:func:`~multidraft.trees.budget_search.verifier_table`, exact enumeration).

With a model (``--model``): the bundled model drafting for itself at temperature 1.0 against
its target at 0.6 (:func:`multidraft.report.budget_real.real_budget`): per N the DP's shape per
walk from measured positional acceptance, with cluster-bootstrap intervals, the gain over
SpecInfer chains and the predicted speed-up from latencies measured here; then the check on
trees drafted by the model (:mod:`multidraft.report.budget_blocks`): the DP's N = 16 shape and
the best SpecInfer chains drafted on 3 prompts live, every verifier scored per block, and, for the
bundled model, the committed long runs of ``benchmarks/bench_budget_real.py`` with their
provenance.
"""

from __future__ import annotations

import time

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import TEXT_SIZE, TITLE_SIZE, png_bytes, pyplot
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, ReportProgress, SectionResult

__all__ = ["MODELS", "BUDGETS", "small_model_answer", "budget_figure", "takeaway", "units", "build"]

#: The small models: (label, family, n, L).
MODELS = (("Dirichlet(1), n = 3, L = 4", "dirichlet", 3, 4), ("temperature 2, n = 3, L = 4", "temperature", 3, 4))
#: Node budgets.
BUDGETS = (4, 8, 16, 32, 64)
#: Verifiers of the N = 4 table.
TABLE_VERIFIERS = ("token:specinfer", "token:rrs-wor", "token:optimal", "traversal", "selective")
#: The budget of that table (exact enumeration of every draft tree; N = 8 takes ~40 s a model).
TABLE_BUDGET = 4
#: The real-model setting of the section with ``--model``.
REAL_SETTING = {"target_temperature": 0.6, "draft_temperature": 1.0, "prompts": 10, "max_new_tokens": 48}


def _model(family: str, n: int, length: int, seed: int):
    from multidraft.trees import SequenceModel  # noqa: PLC0415

    rng = np.random.default_rng([seed, 31])
    if family == "dirichlet":
        return SequenceModel.random(n, length, rng)
    return SequenceModel.temperature(n, length, rng, temperature=2.0)


def small_model_answer(seed: int, progress: ReportProgress | None = None) -> dict:
    """Per small model: the best shape per (family, verifier) and budget, and the N = 4 table."""
    from multidraft.trees.budget_search import budget_search, verifier_table  # noqa: PLC0415

    out = {}
    models = MODELS if progress is None else progress.track(MODELS, lambda m: f"budget: {m[0]}")
    for label, family, n, length in models:
        model = _model(family, n, length, seed)
        lines: dict[str, list[dict]] = {}
        for budget in BUDGETS:
            for score in budget_search(model, budget):
                lines.setdefault(f"{score.family} / {score.verifier}", []).append({"budget": budget, **score.as_dict()})
        out[label] = {"lines": lines, "table": verifier_table(model, TABLE_BUDGET, TABLE_VERIFIERS)}
    return out


def takeaway(label: str, lines: dict) -> str:
    """One sentence from the numbers: the best line at the largest budget and its gain over
    SpecInfer chains, and the largest budget at which chains are still within 1% of the best."""
    largest = max(BUDGETS)
    at = {name: next(p for p in points if p["budget"] == largest) for name, points in lines.items()}
    best_name = max(at, key=lambda name: at[name]["block_efficiency"])
    best, chains = at[best_name]["block_efficiency"], at["chains / token:specinfer"]["block_efficiency"]
    close = [
        b for b in BUDGETS
        if max(p["block_efficiency"] for points in lines.values() for p in points if p["budget"] == b)
        <= 1.01 * next(p for p in lines["chains / token:specinfer"] if p["budget"] == b)["block_efficiency"]
    ]  # fmt: skip
    tail = f"chains are within 1% of the best up to N = {max(close)}" if close else "chains trail the best at every budget"
    return (
        f"On {label}, at N = {largest} the best is {best_name} (E[τ + 1] = {best:.3f}, "
        f"{100 * (best - chains) / chains:+.1f}% over SpecInfer chains at {chains:.3f}); {tail}."
    )


def budget_figure(label: str, lines: dict):
    """E[τ + 1] against the node budget N, one line per shape family × verifier."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7.0, 4.2), layout="constrained")
    for name, points in lines.items():
        budgets = [p["budget"] for p in points]
        axis.plot(budgets, [p["block_efficiency"] for p in points], marker="o", linestyle="--" if "top-k" in name else "-", label=name)
    axis.set_xscale("log", base=2)
    axis.set_xticks(list(BUDGETS), [str(b) for b in BUDGETS])
    axis.set_xlabel("node budget N (drafted nodes verified in one target call)", fontsize=TEXT_SIZE)
    axis.set_ylabel("E[τ + 1] (tokens per target call)", fontsize=TEXT_SIZE)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=TEXT_SIZE - 1)
    axis.set_title(f"Best shape per family, exact: {label}", fontsize=TITLE_SIZE)
    return figure


def units(config: ReportConfig) -> int:
    """Steps this section reports: one per small model, two for the real model (positional
    answer, drafted trees)."""
    return len(MODELS) + 2 * (config.target is not None)


def _small_part(answer: dict) -> list:
    parts: list = [
        Paragraph(
            "A practitioner has a budget of N tree nodes that the target verifies in one call. Which tree shape and "
            "which verifier give the most tokens per call? Exact answers on small sequence models (next-token tables "
            "of a target and a draft after every prefix, drawn with the report's seed; not real models). Every "
            "candidate shape of at most N drafted nodes is scored exactly: SpecInfer chains ⟨K, 1, …, 1⟩ (K·L ≤ N), "
            "every expansion schedule ⟨k₁, …, k_D⟩ (k_d ≤ 4, D ≤ 4), the static shape of Sequoia's dynamic programme "
            "(Chen et al. 2024) for the model's averaged positional acceptance, and EAGLE-2's dynamic top-k trees. "
            "Token-level SpecInfer on iid trees is scored by an exact recursion over prefixes (checked against "
            "enumeration of every draft tree in the tests); on top-k trees every token walk reaches the block "
            "optimum of the tree, Σ_s P(s). Block efficiency E[τ + 1] is tokens per target call. A model of "
            "depth 4 over 3 tokens has at most 120 distinct top-k nodes, so top-k lines flatten where the model "
            "runs out of likely prefixes."
        )
    ]
    for label, data in answer.items():
        lines = data["lines"]
        rows = []
        for name, points in lines.items():
            rows.append((name, *(f"{p['block_efficiency']:.3f} ({p['nodes']})" for p in points)))
        parts.append(Table(("family / verifier", *(f"N = {b}" for b in BUDGETS)), tuple(rows), caption=f"{label}: E[τ + 1] (nodes used)"))
        name = "budget_" + label.split(",")[0].split("(")[0].strip().replace(" ", "_").lower()
        parts.append(Figure(name, png_bytes(budget_figure(label, lines)), f"E[τ + 1] against N on {label}"))
        parts.append(Paragraph("**Take-away.** " + takeaway(label, lines)))
        sequoia = lines["sequoia / token:specinfer"]
        error = max(abs(p["predicted_block_efficiency"] - p["block_efficiency"]) for p in sequoia)
        table = data["table"]
        best = max((r for r in table if r["block_efficiency"] is not None), key=lambda r: r["block_efficiency"])
        parts.append(
            Paragraph(
                f"Sequoia's DP predicts its shape's E[τ + 1] to within {error:.3f} here (its positional assumption "
                "holds exactly only when every prefix has the same target and draft). At N = 4, every verifier on "
                f"its best expansion shape, by exact enumeration: the best is {best['verifier']} on "
                f"{best['law']} trees (E[τ + 1] = {best['block_efficiency']:.3f}, shape {best['shape']})."
            )
        )
        parts.append(
            Table(
                ("law", *TABLE_VERIFIERS),
                tuple(
                    (law, *(next(f"{r['block_efficiency']:.3f}" if r["block_efficiency"] is not None else "refused"
                                 for r in table if r["law"] == law and r["verifier"] == v) for v in TABLE_VERIFIERS))
                    for law in dict.fromkeys(r["law"] for r in table)
                ),  # fmt: skip
                caption=f"{label}: E[τ + 1] at N = {TABLE_BUDGET}, best expansion shape per verifier",
            )
        )
    return parts


def _real_part(real: dict) -> list:
    from multidraft.report.budget_real import answer_table  # noqa: PLC0415

    headers, rows = answer_table(real)
    degenerate = " The draft is the target here (same temperature): every walk that samples its drafts accepts every drafted token." if real["degenerate"] else ""
    return [
        Paragraph(
            f"On the real model ({real['model']}, "
            + ("drafting for itself" if real.get("draft") is None else f"drafted for by {real['draft']}")
            + f" at temperature {real['draft_temperature']:g} "
            f"against its target at {real['target_temperature']:g}): positional acceptance measured exactly at "
            f"{real['positions']} positions of {real['prompts']} bundled prompts (Rao–Blackwellised: each position's "
            "exact a_i(p, q), no sampled drafts), Sequoia's DP per walk, 95% intervals by a cluster bootstrap over "
            "prompts, the gain over SpecInfer chains (paired: the same resampled prompts), and the speed-up "
            "predicted from latencies measured here (one draft forward per depth, one target call over N + 1 "
            "tokens). A self-draft costs a full forward per depth, so its predicted speed-up is below 1: the point "
            "is the ranking." + degenerate
        ),
        Table(headers, tuple(rows), caption="Real model: best tree per walk and budget (positional model)"),
        *_latency_note(real),
    ]


def _blocks_part(live: dict, stored: dict | None) -> list:
    """The check on trees drafted by the model: the short live run, then the committed long runs
    of ``benchmarks/bench_budget_real.py`` with their provenance (absent: said so)."""
    from multidraft.report.budget_blocks import blocks_table, token_optimal_caveat  # noqa: PLC0415

    def table(answer: dict, predicted: dict, caption: str) -> list:
        headers, rows = blocks_table(answer, predicted)
        checks = "; ".join(
            f"{label}: {run['surprise']:+.3f} [{run['surprise_ci95'][0]:+.3f}, {run['surprise_ci95'][1]:+.3f}]" for label, run in answer["runs"].items()
        )
        return [
            Table(headers, tuple(rows), caption=caption),
            Paragraph(f"Check (realised against computed): mean τ − E[τ | tree] of the driving verifier, {checks}; each interval should contain 0."),
        ]

    answer = live["answer"]
    parts = [
        Paragraph(
            f"The same answer on trees drafted by the model: the DP's static shape of N = {live['budget']} nodes "
            f"(for {live['dp_walk']}, the walk with the largest DP value) and the best SpecInfer chains, each drafted "
            "block after block on the same prompts and seeds; every verifier is scored on every drafted tree by its "
            "exact E[τ | tree] (token:specinfer drives the run). E[τ + 1] pools the blocks; intervals are a cluster "
            "bootstrap over prompts and the gains over SpecInfer chains with token:specinfer are paired by prompt "
            "and seed. The last column is the positional model's prediction for that shape and walk. A short live "
            f"run ({answer['units']} prompts, {live['seconds']:.0f} s of CPU; indicative only: a bootstrap over so few "
            "prompts gives intervals that are too narrow):"
        ),
        *table(answer, live["predicted"], f"Drafted trees, N = {live['budget']}, live run"),
        Paragraph(token_optimal_caveat({"drafted_trees": live}).replace("caveat: ", "Caveat: ", 1) + "."),
    ]
    if stored is None:
        return [*parts, Paragraph("No committed long run for this model (benchmarks/bench_budget_real.py writes one).")]
    for result in stored.values():
        answer, plan, provenance = result["answer"], result["plan"], result["provenance"]
        seconds = sum(run["seconds"] for run in answer["runs"].values())
        blocks = ", ".join(f"{label} {run['blocks']}" for label, run in answer["runs"].items())
        parts.append(
            Paragraph(
                f"Committed long run, {plan['draft_name']} drafting (target T {plan['target_temperature']:g}, draft T "
                f"{plan['draft_temperature']:g}): {answer['units']} units ({answer['prompts']} prompts × "
                f"{answer['rounds']} seed rounds), blocks {blocks}, {seconds / 60:.0f} min of CPU; commit "
                f"{(provenance['commit'] or 'unknown')[:10]}, {provenance['date']}."
            )
        )
        parts += table(answer, plan["predicted"], f"Drafted trees, N = {plan['budget']}, {plan['draft_name']} (committed run)")
    return parts


def _latency_note(real: dict) -> list:
    """How far the clock can be trusted: a self-draft is the same network timed twice (as the
    draft's and as the target's t(1, 1)); their ratio measures the noise on this machine."""
    latency = real["latency_ms"]
    if latency is None or real.get("draft") is not None:
        return []
    ratio = latency["draft_t(1,1)"] / latency["target_t(1,1)"]
    return [
        Paragraph(
            f"Latencies: the same network timed as the draft gave t(1, 1) = {latency['draft_t(1,1)']:.1f} ms and as "
            f"the target {latency['target_t(1,1)']:.1f} ms (ratio {ratio:.2f}; 1 on a quiet machine), and a verify call "
            f"over 65 tokens {latency['target_t(1,65)']:.1f} ms; the predicted speed-ups carry that uncertainty."
        )
    ]


def build(context: BuildContext) -> SectionResult:
    """Tables, figures and take-aways of the budget section."""
    start = time.perf_counter()
    answer = small_model_answer(context.config.seed, context.progress)
    timings = {"budget_small_seconds": time.perf_counter() - start}
    parts = _small_part(answer)
    data: dict = {"small_models": answer}
    if context.config.target is not None:
        from multidraft.report.budget_real import real_budget  # noqa: PLC0415

        start = time.perf_counter()
        context.progress.stage("budget: real model")
        real = real_budget(context.config.target, draft=context.config.draft, seed=context.config.seed, **REAL_SETTING)
        context.progress.advance()
        timings["budget_real_seconds"] = time.perf_counter() - start
        data["real_model"] = real
        parts += _real_part(real)
        from multidraft.report.budget_blocks import committed, live_check  # noqa: PLC0415

        start = time.perf_counter()
        context.progress.stage("budget: drafted trees")
        live = live_check(context.config.target, real["positional_acceptance"], draft=context.config.draft, seed=context.config.seed)
        context.progress.advance()
        timings["budget_blocks_seconds"] = time.perf_counter() - start
        stored = committed() if context.config.target == "default" and context.config.draft is None else None
        data["drafted_trees"] = {"live": live, "committed": stored}
        parts += _blocks_part(live, stored)
    section = Section("Which tree and which verifier for a budget", tuple(parts))
    return SectionResult("budget", section, data, timings)
