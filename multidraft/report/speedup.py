"""Report section "Predicted speed-up": acceptance with 1..K drafts on the synthetic positions,
fed to the i.i.d. tree model and the throughput model of :mod:`multidraft.theory.speed` with
given draft/target cost ratios; the best (K, L) and the speed-up it predicts per scheme."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import SCHEME_LABELS, TEXT_SIZE, TITLE_SIZE, png_bytes, pyplot, speedup_axis, temperature_text
from multidraft.report.positions import PositionSet
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, SectionResult
from multidraft.theory import IID, optimal_acceptance_batch

__all__ = ["SPEED_SCHEMES", "acceptance_by_k", "speed_figure", "units", "build"]

#: Baselines whose predicted speed-up is shown beside the optimum's.
SPEED_SCHEMES = ("spectr", "specinfer")


def acceptance_by_k(positions: PositionSet, temperature: float, k_max: int) -> dict[str, list[float]]:
    """Mean acceptance a_j for j = 1..k_max iid drafts: the optimum and each baseline."""
    from multidraft.schemes import get_scheme  # noqa: PLC0415 -- the schemes layer, loaded when used

    targets = positions.targets
    drafts = positions.drafts(temperature)
    out = {"optimal": [float(np.mean(optimal_acceptance_batch(targets, drafts, j))) for j in range(1, k_max + 1)]}
    for name in SPEED_SCHEMES:
        scheme = get_scheme(name)
        out[name] = [
            float(np.mean([float(scheme.acceptance(p, IID(q, j))) for p, q in zip(targets, drafts)]))
            for j in range(1, k_max + 1)
        ]
    return out


def speed_figure(ks: Sequence[int], speedups: dict[str, np.ndarray], title: str):
    """Predicted speed-up over plain decoding (best draft length per K) against K.

    ``speedups[label]`` holds one value per K in ``ks``.
    """
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7.5, 4.8), layout="constrained")
    for label, values in speedups.items():
        axis.plot(ks, values, marker="o", label=label)
    axis.axhline(1.0, color="black", linewidth=1.0)
    axis.set_xlabel("number of drafts K", fontsize=TEXT_SIZE)
    axis.set_ylabel("predicted speed-up over plain decoding (best L)", fontsize=TEXT_SIZE)
    speedup_axis(axis)
    axis.set_xticks(list(ks))
    axis.tick_params(labelsize=TEXT_SIZE)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=TEXT_SIZE - 1)
    axis.set_title(title, fontsize=TITLE_SIZE)
    return figure


def units(config: ReportConfig) -> int:
    """Steps this section reports to the progress bar."""
    return 1


def build(context: BuildContext) -> SectionResult:
    """Acceptance per K, predicted speed-ups, table, figure and text of the speed-up section."""
    from multidraft.theory.speed import LatencyModel, best_configuration  # noqa: PLC0415

    config = context.config
    context.progress.stage("predicted speed-up: acceptance with 1..K drafts")
    acceptance = acceptance_by_k(context.positions, config.speed_temperature, max(config.ks))
    context.progress.advance()
    k_max = len(acceptance["optimal"])
    ks = tuple(range(1, k_max + 1))
    scenarios = [(f"given c = {c:g}", LatencyModel.constant(c), LatencyModel.constant(1.0)) for c in config.cost_ratios]
    rows, curves, data = [], {}, []
    for label, draft_latency, target_latency in scenarios:
        for name, values in acceptance.items():
            curve = best_configuration(values, draft_latency, target_latency, ks=ks, lengths=range(1, 17))
            per_k = curve.speedup.max(axis=1)
            scheme = SCHEME_LABELS.get(name, name)
            curves[f"{scheme}, {label}"] = per_k
            tokens = curve.block_efficiency[ks.index(curve.best_k), curve.best_length - 1]
            rows.append(
                (label, scheme, str(curve.best_k), str(curve.best_length), f"{curve.best_speedup:.3f}×", f"{tokens:.3f}")
            )
            data.append(
                {
                    "latencies": label,
                    "scheme": name,
                    "best_k": curve.best_k,
                    "best_length": curve.best_length,
                    "best_speedup": curve.best_speedup,
                    "speedup_by_k": per_k.tolist(),
                }
            )
    text = (
        f"Per-token acceptance a_j with j = 1..{k_max} iid drafts (draft temperature {temperature_text(config.speed_temperature)}, "
        "mean over the synthetic positions) fed to the i.i.d. tree model of multidraft.theory.speed (sibling "
        "drafts assumed distinct, survival ρ = 0; iid drafts can repeat a token, so more of them stay live and the numbers below are lower bounds) and the throughput model of Yan et al. (2024): "
        "tokens per iteration / (L·t_draft(K, 1) + t_target(K, L + 1)). 'given c' uses constant latencies with "
        "draft/target cost ratio c (the memory-bound idealisation of Leviathan et al. 2023); the speed-up is "
        "relative to plain decoding with the target, best draft length L ≤ 16 per K."
    )
    text += " The real-model section (with --model) predicts speed-ups from latencies measured on this machine."
    headers = ("latencies", "scheme", "best K", "best L", "predicted speed-up", "tokens per iteration")
    png = png_bytes(speed_figure(ks, curves, "Predicted speed-up, best L per K"))
    figure = Figure("speedup", png, "Predicted speed-up over plain decoding against the number of drafts")
    section = Section("Predicted speed-up", (Paragraph(text), Table(headers, tuple(rows)), figure))
    data = {"acceptance_by_k": acceptance, "temperature": config.speed_temperature, "configurations": data}
    return SectionResult("speedup", section, data)
