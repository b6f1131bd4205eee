"""The real-model section of the report: empirical against expected acceptance on a model.

For each scheme, number of drafts K and draft temperature in a small grid,
:func:`multidraft.decoding.measure` runs multi-draft speculative sampling on the model(s) and
records, at every verified position, whether the scheme accepted, its exact acceptance for
the very same distributions (expected) and the optimal acceptance there. The section shows
the empirical acceptance with a 95% Wilson interval, the expected acceptance, the 95%
interval of mean(empirical − expected) (which should contain 0), the optimum on the same
positions, the block efficiency and the speed-up it predicts with latencies measured here
(:func:`multidraft.decoding.profiling.profile_latency`; Yan et al. 2024).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from multidraft.report import figures as figs
from multidraft.report.render import Figure, Paragraph, Section, Table

__all__ = ["RealModelGrid", "RealModelSection", "wilson_interval", "real_model_section"]


@dataclass(frozen=True)
class RealModelGrid:
    """What the real-model section measures: schemes × K × draft temperatures.

    ``wor_schemes`` run with drafts drawn without replacement. Every measurement generates
    ``max_new_tokens`` tokens for each of ``prompts`` default prompts with drafts of ``length``.
    """

    schemes: tuple[str, ...] = ("specinfer", "spectr")
    wor_schemes: tuple[str, ...] = ("rrs-wor",)
    ks: tuple[int, ...] = (2, 4)
    temperatures: tuple[float, ...] = (0.8, 1.6)
    length: int = 3
    prompts: int = 2
    max_new_tokens: int = 12


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


def _settings(grid: RealModelGrid) -> list[tuple[str, bool, int, float]]:
    plain = [(s, False, k, t) for s in grid.schemes for k in grid.ks for t in grid.temperatures]
    wor = [(s, True, k, t) for s in grid.wor_schemes for k in grid.ks for t in grid.temperatures[-1:]]
    return plain + wor


def real_model_section(config, progress: bool = False, grid: RealModelGrid = RealModelGrid()) -> RealModelSection:
    """Measure ``config.target`` (and ``config.draft``) over ``grid`` and build the section.

    Models are loaded once by :func:`multidraft.decoding.load_model` (its errors, e.g. an
    unknown model, propagate unchanged); ``config.draft=None`` drafts with the target itself
    at the draft temperatures (the setting of Khisti et al., Section 5).
    """
    from multidraft.decoding import DEFAULT_PROMPTS, TIMING_FIELDS, Sampling, load_model, measure  # noqa: PLC0415
    from multidraft.decoding.profiling import profile_latency  # noqa: PLC0415
    from multidraft.theory.speed import iteration_seconds  # noqa: PLC0415

    target = load_model(config.target)
    draft = None if config.draft is None else load_model(config.draft)
    prompts = DEFAULT_PROMPTS[: grid.prompts]
    results = []
    settings = _settings(grid)
    for index, (scheme, wor, k, temperature) in enumerate(settings):
        results.append(
            measure(
                target,
                draft,
                k=k,
                length=grid.length,
                scheme=scheme,
                prompts=prompts,
                max_new_tokens=grid.max_new_tokens,
                seed=config.seed + index,
                draft_sampling=Sampling(temperature),
                without_replacement=wor,
                baseline=False,
                progress=progress,
            )
        )
    batches = tuple(sorted({1, *grid.ks}))
    tokens = (1, grid.length + 1)
    grid_options = dict(batch_sizes=batches, token_counts=tokens, repeats=3, warmup=1, seed=config.seed)
    target_profile = profile_latency(target, **grid_options)
    draft_profile = target_profile if draft is None else profile_latency(draft, **grid_options)
    target_latency, draft_latency = target_profile.latency, draft_profile.latency

    rows, data, timings = [], [], []
    labels, empirical, low, high, expected, optimal = [], [], [], [], [], []
    for (scheme, wor, k, temperature), result in zip(settings, results):
        interval = wilson_interval(result.empirical_acceptance * result.positions, result.positions)
        seconds = iteration_seconds(k, grid.length, draft_latency, target_latency)
        speedup = result.block_efficiency * target_latency(1, 1) / seconds
        law = "wor" if wor else "iid"
        rows.append(
            (
                scheme, law, str(k), f"{temperature:g}", str(result.positions),
                f"{result.empirical_acceptance:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]",
                f"{result.expected_acceptance:.3f}",
                f"[{result.ci95[0]:+.3f}, {result.ci95[1]:+.3f}]",
                f"{result.optimal_acceptance:.3f} ({result.optimal_positions})",
                f"{result.block_efficiency:.2f}",
                f"{speedup:.2f}",
            )
        )  # fmt: skip
        summary = result.summary()
        timings.append({key: summary.pop(key) for key in TIMING_FIELDS} | {"predicted_speedup": speedup})
        data.append(summary | {"law": law, "empirical_ci95": list(interval)})
        labels.append(f"{scheme} {law} K={k} T={temperature:g}")
        empirical.append(result.empirical_acceptance)
        low.append(interval[0])
        high.append(interval[1])
        expected.append(result.expected_acceptance)
        optimal.append(result.optimal_acceptance)

    names = f"{target.name} drafting for itself" if draft is None else f"target {target.name}, draft {draft.name}"
    text = (
        f"{names}; target temperature 1.0; {grid.prompts} prompts × {grid.max_new_tokens} new tokens per setting, "
        f"K draft sequences of length {grid.length} verified as a tree. 'empirical' is the fraction of verified "
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
        "scheme", "law", "K", "draft T", "positions", "empirical [95% CI]", "expected", "emp − exp 95% CI",
        "optimal (positions)", "block efficiency", "predicted speed-up",
    )  # fmt: skip
    figure = Figure(
        "real_models",
        figs.png_bytes(figs.real_figure(labels, *(np.array(v) for v in (empirical, low, high, expected, optimal)))),
        "Real models: empirical acceptance (95% interval) against the expected and optimal acceptance "
        "on the same positions",
    )
    notes = sorted({note for result in results for note in result.notes})
    blocks: list = [Paragraph(text), Table(headers, tuple(rows)), figure]
    if notes:
        blocks.append(Paragraph("Notes: " + "; ".join(notes) + "."))
    section = Section("Real models", tuple(blocks))
    latencies = {"target": target_profile.to_dict(), "draft": draft_profile.to_dict()}
    data = {"grid": _grid_json(grid), "measurements": data}
    return RealModelSection(section, data, {"measurements": timings, "latency_profiles": latencies})


def _grid_json(grid: RealModelGrid) -> dict:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in vars(grid).items()}
