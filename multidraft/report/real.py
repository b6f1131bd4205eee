"""Report section "Real models": empirical against expected acceptance on a model.

For each scheme, number of drafts K, draft temperature and target temperature in a small grid,
:func:`multidraft.decoding.measure` runs multi-draft speculative sampling on the model(s) and
records, at every verified position, whether the scheme accepted, its exact acceptance for
the very same distributions (expected) and the optimal acceptance there. The section shows
the empirical acceptance with a 95% Wilson interval, the expected acceptance, the 95%
interval of mean(empirical − expected) (which should contain 0), the optimum on the same
positions, the block efficiency and the speed-up it predicts with latencies measured here
(:func:`multidraft.decoding.profiling.profile_latency`; Yan et al. 2024). The prompts are
taken in turn from each task of the bundled prompt set (chat, code, math, translation,
summarisation; :func:`multidraft.decoding.prompts.bundled_prompts`), and a second table splits
every row by task.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import TEXT_SIZE, png_bytes, pyplot, temperature_text
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, ReportProgress, SectionResult, progress_bar

__all__ = [
    "RealModelGrid",
    "RealModelSection",
    "wilson_interval",
    "real_model_section",
    "real_figure",
    "applies",
    "units",
    "build",
]


@dataclass(frozen=True)
class RealModelGrid:
    """What the real-model section measures: schemes × K × draft temperatures at the target
    temperature ``target_temperatures[0]``, and ``cool_schemes`` at each further (lower) target
    temperature.

    ``wor_schemes`` run with drafts drawn without replacement, and ``cool_schemes`` at the
    further target temperatures, at the largest K and the highest draft temperature. Every
    measurement generates ``max_new_tokens`` tokens for each of ``prompts`` bundled prompts
    taken in turn from each task (:meth:`~multidraft.decoding.prompts.PromptSet.round_robin`)
    with drafts of ``length``. ``"optimal"`` is the optimal verifier (its rows read "optimal
    verifier (achieved)"): with iid drafts its expected acceptance is P*, without replacement
    the J-curtain/front-back rule's.

    The default is one setting measured well rather than many measured badly: K = 4 drafts at
    temperature 1.6 (where the schemes differ most), seven rows of 5 prompts (one per task) ×
    32 new tokens, two of them at target temperature 0.6, each resting on well over a hundred
    positions (95% intervals about ±0.07); the former 16 rows of 2 × 12 tokens rested on 18–25
    positions each (±0.2) and said nothing.
    """

    schemes: tuple[str, ...] = ("specinfer", "spectr", "optimal")
    wor_schemes: tuple[str, ...] = ("rrs-wor", "optimal")
    ks: tuple[int, ...] = (4,)
    temperatures: tuple[float, ...] = (1.6,)
    target_temperatures: tuple[float, ...] = (1.0, 0.6)
    cool_schemes: tuple[str, ...] = ("specinfer", "optimal")
    length: int = 3
    prompts: int = 5
    max_new_tokens: int = 32


@dataclass(frozen=True)
class RealModelSection:
    """The rendered section, its reproducible numbers and its timings (incl. measured latencies)."""

    section: Section
    data: dict
    timings: dict


def wilson_interval(successes: float, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion: ``(p̂ + z²/2N ± z sqrt(p̂(1-p̂)/N + z²/4N²)) / (1 + z²/N)``.

    (Wilson 1927; Brown, Cai and DasGupta 2001.) Treats positions as independent trials, which
    they are only conditionally on the past; the martingale interval of empirical − expected
    is the rigorous check.

    >>> tuple(round(v, 4) for v in wilson_interval(8, 10))
    (0.4902, 0.9433)
    """
    if trials < 1:
        raise ValueError(f"trials: needs at least one trial, got {trials}")
    phat = successes / trials
    denominator = 1 + z * z / trials
    centre = (phat + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(phat * (1 - phat) / trials + z * z / (4 * trials * trials)) / denominator
    return centre - half, centre + half


def real_figure(
    labels: Sequence[str],
    empirical: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    expected: np.ndarray,
    optimal: np.ndarray,
):
    """Real-model acceptance per setting: empirical with 95% intervals, expected, optimal."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(max(6.0, 0.7 * len(labels) + 2), 3.8), layout="constrained")
    x = np.arange(len(labels))
    errors = [empirical - low, high - empirical]
    axis.errorbar(x, empirical, yerr=errors, fmt="o", capsize=3, label="empirical (95% CI)")
    axis.plot(x, expected, "x", markersize=8, label="expected (exact, same positions)")
    axis.plot(x, optimal, "_", markersize=14, color="black", label="optimal (same positions)")
    axis.set_xticks(x)
    axis.set_xticklabels(labels, rotation=30, ha="right", fontsize=TEXT_SIZE - 1)
    axis.set_ylabel("token-level acceptance", fontsize=TEXT_SIZE)
    axis.tick_params(axis="y", labelsize=TEXT_SIZE)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=TEXT_SIZE - 1)
    return figure


def _settings(grid: RealModelGrid) -> list[tuple[str, bool, int, float, float]]:
    """``(scheme, without replacement, K, draft T, target T)`` of every row, in table order."""
    warm = grid.target_temperatures[0]
    plain = [(s, False, k, t, warm) for s in grid.schemes for k in grid.ks for t in grid.temperatures]
    wor = [(s, True, k, t, warm) for s in grid.wor_schemes for k in grid.ks[-1:] for t in grid.temperatures[-1:]]
    cool = [(s, False, grid.ks[-1], grid.temperatures[-1], t) for t in grid.target_temperatures[1:] for s in grid.cool_schemes]
    return plain + wor + cool


def _measurement_label(setting: tuple[str, bool, int, float, float]) -> str:
    scheme, wor, k, temperature, target_temperature = setting
    return (
        f"real models: {scheme}{' (wor)' if wor else ''} K={k} T={temperature_text(temperature)} "
        f"target T={temperature_text(target_temperature)}"
    )


def _steps(grid: RealModelGrid) -> int:
    """Progress steps: loading the models, each measurement, the two latency profiles."""
    return 1 + len(_settings(grid)) + 2


def real_model_section(
    config: ReportConfig, progress: bool | ReportProgress = False, grid: RealModelGrid = RealModelGrid()
) -> RealModelSection:
    """Measure ``config.target`` (and ``config.draft``) over ``grid`` and build the section.

    Models are loaded once by :func:`multidraft.decoding.load_model` (its errors, e.g. an
    unknown model, propagate unchanged); ``config.draft=None`` drafts with the target itself
    at the draft temperatures (the setting of Khisti et al., Section 5). ``progress``: one bar
    on stderr with a step per measurement (or the report's bar); the measurements themselves
    show none. torch runs on :func:`multidraft.decoding.models.default_threads` CPU threads
    (one on a busy machine), restored afterwards.
    """
    from multidraft.decoding import TIMING_FIELDS, Sampling, load_model, measure  # noqa: PLC0415
    from multidraft.decoding.models import cpu_threads  # noqa: PLC0415
    from multidraft.decoding.profiling import profile_latency  # noqa: PLC0415
    from multidraft.decoding.prompts import bundled_prompts  # noqa: PLC0415
    from multidraft.theory.speed import iteration_seconds  # noqa: PLC0415

    prompts = bundled_prompts().round_robin(grid.prompts)
    settings = _settings(grid)
    with cpu_threads(), progress_bar(progress, _steps(grid)) as bar:
        bar.stage(f"real models: loading {config.target}" + ("" if config.draft is None else f" and {config.draft}"))
        target = load_model(config.target, progress=False)  # the section's own bar says it
        draft = None if config.draft is None else load_model(config.draft, progress=False)
        bar.advance()
        results = [
            measure(
                target,
                draft,
                k=k,
                length=grid.length,
                scheme=scheme,
                prompts=prompts,
                max_new_tokens=grid.max_new_tokens,
                seed=config.seed + index,
                target_sampling=Sampling(target_temperature),
                draft_sampling=Sampling(temperature),
                without_replacement=wor,
                baseline=False,
                progress=False,
            )
            for index, (scheme, wor, k, temperature, target_temperature) in enumerate(bar.track(settings, _measurement_label))
        ]
        options = dict(
            batch_sizes=tuple(sorted({1, *grid.ks})), token_counts=(1, grid.length + 1), repeats=3, warmup=1, seed=config.seed
        )
        bar.stage("real models: latency of the target")
        target_profile = profile_latency(target, **options)
        bar.advance()
        bar.stage("real models: latency of the draft")
        draft_profile = target_profile if draft is None else profile_latency(draft, **options)
        bar.advance()
    target_latency, draft_latency = target_profile.latency, draft_profile.latency

    rows, data, timings = [], [], []
    labels, empirical, low, high, expected, optimal = [], [], [], [], [], []
    for (scheme, wor, k, temperature, target_temperature), result in zip(settings, results):
        interval = wilson_interval(result.empirical_acceptance * result.positions, result.positions)
        seconds = iteration_seconds(k, grid.length, draft_latency, target_latency)
        speedup = result.block_efficiency * target_latency(1, 1) / seconds
        law = "wor" if wor else "iid"
        shown = "optimal verifier (achieved)" if scheme == "optimal" else scheme
        rows.append(
            (
                shown, law, str(k), temperature_text(temperature), temperature_text(target_temperature), str(result.positions),
                f"{result.empirical_acceptance:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]",
                f"{result.expected_acceptance:.3f}",
                f"[{result.ci95[0]:+.3f}, {result.ci95[1]:+.3f}]",
                f"{result.optimal_acceptance:.3f} ({result.optimal_positions})",
                f"{result.block_efficiency:.2f}",
                f"{speedup:.2f}×",
            )
        )  # fmt: skip
        summary = result.summary()
        timings.append({key: summary.pop(key) for key in TIMING_FIELDS} | {"predicted_speedup": speedup})
        data.append(summary | {"law": law, "empirical_ci95": list(interval)})
        cool = "" if target_temperature == grid.target_temperatures[0] else f" target T={temperature_text(target_temperature)}"
        labels.append(f"{shown} {law} K={k} T={temperature_text(temperature)}{cool} ({result.positions} positions)")
        empirical.append(result.empirical_acceptance)
        low.append(interval[0])
        high.append(interval[1])
        expected.append(result.expected_acceptance)
        optimal.append(result.optimal_acceptance)

    names = f"{target.name} drafting for itself" if draft is None else f"target {target.name}, draft {draft.name}"
    counts = [result.positions for result in results]
    widths = [(high[i] - low[i]) / 2 for i in range(len(results))]
    text = (
        f"{names}; target temperature {temperature_text(grid.target_temperatures[0])} (and "
        f"{', '.join(temperature_text(t) for t in grid.target_temperatures[1:]) or 'no other'} in the last rows); "
        f"{grid.prompts} bundled prompts ({', '.join(prompts.task_names)}) × {grid.max_new_tokens} new tokens per setting, "
        f"K draft sequences of length {grid.length} verified as a tree. Each row rests on the positions in its "
        f"'positions' column, {min(counts)}–{max(counts)} here, so its empirical interval is ±{min(widths):.2f} to "
        f"±{max(widths):.2f}; the exact columns ('expected', 'optimal') compare the schemes position by position "
        "and are far more precise than that. 'empirical' is the fraction of verified "
        "positions where the scheme accepted (95% Wilson interval); 'expected' the mean of the scheme's exact "
        "acceptance for the same (p, q) at each position; 'emp − exp' the 95% interval of their mean difference "
        "(a martingale: it should contain 0); 'optimal' the mean optimal acceptance on the same positions "
        "(with the number of positions where it is computable). Block efficiency: tokens emitted per target call. "
        "Predicted speed-up: block efficiency × t_target(1, 1) / (L·t_draft(K, 1) + t_target(K, L + 1)) with "
        f"latencies measured on this machine ({target_profile.device}, {target_profile.threads} threads)"
        + (
            "; drafting with the target itself costs as much as verifying, so no speed-up is expected."
            if draft is None
            else "."
        )
    )
    headers = (
        "scheme", "law", "K", "draft T", "target T", "positions", "empirical [95% CI]", "expected", "emp − exp 95% CI",
        "optimal (positions)", "block efficiency", "predicted speed-up",
    )  # fmt: skip
    figure = Figure(
        "real_models",
        png_bytes(real_figure(labels, *(np.array(v) for v in (empirical, low, high, expected, optimal)))),
        "Real models: empirical acceptance (95% interval) against the expected and optimal acceptance "
        "on the same positions",
    )
    notes = sorted({note for result in results for note in result.notes})
    blocks: list = [Paragraph(text), Table(headers, tuple(rows)), *_task_table(labels, results), figure]
    if notes:
        blocks.append(Paragraph("Notes: " + "; ".join(notes) + "."))
    section = Section("Real models", tuple(blocks))
    latencies = {"target": target_profile.to_dict(), "draft": draft_profile.to_dict()}
    data = {"grid": _grid_json(grid), "measurements": data}
    return RealModelSection(section, data, {"measurements": timings, "latency_profiles": latencies})


def _task_table(labels: Sequence[str], results: Sequence) -> list:
    """Every row of the main table split by task: a paragraph and a table with a row per task
    and a column per setting, each cell ``empirical / expected (positions)``."""
    tasks = [result.by_task() for result in results]
    if not tasks or not tasks[0]:
        return []
    names = [task.task for task in tasks[0]]
    rows = tuple(
        (name, *(f"{t[i].empirical_acceptance:.3f} / {t[i].expected_acceptance:.3f} ({t[i].positions})" for t in tasks))
        for i, name in enumerate(names)
    )
    text = (
        "By task: every setting above (one per column, in the order of the rows above) split over the prompts of each "
        "task; each cell is the empirical / expected acceptance over that task's positions (their number in brackets)."
    )
    return [Paragraph(text), Table(("task", *(label.rsplit(" (", 1)[0] for label in labels)), rows)]


def _grid_json(grid: RealModelGrid) -> dict:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in vars(grid).items()}


def applies(config: ReportConfig) -> bool:
    """Whether the report has this section: only with a model (``--model`` or ``--target``)."""
    return config.target is not None


def units(config: ReportConfig) -> int:
    """Steps this section reports to the progress bar."""
    return _steps(RealModelGrid())


def build(context: BuildContext) -> SectionResult:
    """Measurements, table, figure and text of the real-model section."""
    real = real_model_section(context.config, progress=context.progress)
    return SectionResult("real_models", real.section, real.data, {"real_models": real.timings})
