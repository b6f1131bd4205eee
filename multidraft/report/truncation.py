"""Report section "Truncated LP: acceptance and time against s".

The truncated importance LP of Khisti et al. (ICLR 2025, Section 4) keeps the top s tokens
under a rank key, fixes the selection outside them and solves an s²-variable LP; this section
sweeps s for two rank keys on the synthetic positions and reports the mean acceptance (non-
decreasing in s, bounded by P*) and the median solve time per position.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import png_bytes, pyplot, readable_log_axis
from multidraft.report.positions import PositionSet
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, ReportProgress, SectionResult, cell, progress_bar
from multidraft.theory import IID, optimal_acceptance_batch

__all__ = ["RANK_KEYS", "TruncationSweep", "truncation_sweep", "truncation_figure", "units", "build"]

#: Rank keys swept by the section (:func:`multidraft.lp.truncated_selection`).
RANK_KEYS = ("published", "ratio")


@dataclass(frozen=True)
class TruncationSweep:
    """The truncated importance LP (K = 2, iid) for several truncation sizes s.

    ``acceptance[key][j]`` is the mean acceptance over positions with ``s_values[j]`` tokens
    and rank key ``key``; ``seconds[key][j]`` the median solve time per position (wall clock,
    machine-dependent -- kept apart from the reproducible numbers); ``optimal`` the mean P*.
    """

    n: int
    draft_temperature: float
    s_values: tuple[int, ...]
    optimal: float
    acceptance: dict[str, tuple[float, ...]]
    seconds: dict[str, tuple[float, ...]]


def truncation_sweep(
    positions: PositionSet,
    draft_temperature: float = 1.6,
    s_values: Sequence[int] = (1, 2, 3, 5, 8, 10, 15, 20, 30),
    rank_keys: Sequence[str] = RANK_KEYS,
    repeats: int = 3,
    progress: bool | ReportProgress = False,
    clock: Callable[[], float] = time.perf_counter,
) -> TruncationSweep:
    """Truncated LP acceptance ``Σ_y min(p(y), r_s(y))`` and solve time against ``s``.

    For every s and rank key: :func:`multidraft.lp.truncated_selection` on each position (one
    warm-up call, then the median of ``repeats`` timed calls). The acceptance is
    non-decreasing in s towards the full pair LP and is bounded by P* (Khisti et al., ICLR
    2025, Section 4). ``progress``: a bar on stderr (or the report's bar).
    """
    from multidraft.lp import truncated_selection  # noqa: PLC0415 -- the LP layer, loaded when used

    if repeats < 1:
        raise ValueError(f"repeats: needs at least one timed repeat, got {repeats}")
    targets = positions.targets
    drafts = positions.drafts(draft_temperature)
    optimal = float(np.mean(optimal_acceptance_batch(targets, drafts, 2, "iid")))
    grid = [(key, s) for key in rank_keys for s in s_values]
    with progress_bar(progress, len(grid)) as bar:
        results: dict[tuple[str, int], tuple[float, float]] = {}
        for key, s in bar.track(grid, lambda item: f"truncated LP: rank key {item[0]}, s={item[1]}"):
            values, times = [], []
            for p, q in zip(targets, drafts):
                values.append(float(truncated_selection(p, IID(q, 2), s=s, rank_key=key).acceptance))
                samples = []
                for _ in range(repeats):
                    start = clock()
                    truncated_selection(p, IID(q, 2), s=s, rank_key=key)
                    samples.append(clock() - start)
                times.append(float(np.median(samples)))
            results[key, s] = (float(np.mean(values)), float(np.median(times)))
    return TruncationSweep(
        n=targets.shape[1],
        draft_temperature=float(draft_temperature),
        s_values=tuple(int(s) for s in s_values),
        optimal=optimal,
        acceptance={key: tuple(results[key, s][0] for s in s_values) for key in rank_keys},
        seconds={key: tuple(results[key, s][1] for s in s_values) for key in rank_keys},
    )


def truncation_figure(sweep: TruncationSweep):
    """Truncated LP: acceptance (left) and solve time per position (right) against s."""
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6), layout="constrained")
    for key in sweep.acceptance:
        left.plot(sweep.s_values, sweep.acceptance[key], marker="o", label=f"rank key: {key}")
        right.plot(sweep.s_values, np.array(sweep.seconds[key]) * 1e3, marker="o", label=f"rank key: {key}")
    left.axhline(sweep.optimal, color="black", linewidth=1.5, label="optimal")
    left.set_xlabel("s (tokens kept)")
    left.set_ylabel("mean acceptance")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    right.set_xlabel("s (tokens kept)")
    right.set_ylabel("median time per position [ms]")
    right.set_yscale("log")
    readable_log_axis(right)
    right.grid(alpha=0.3, which="both")
    figure.suptitle(
        f"Truncated LP, K = 2 iid, n = {sweep.n}, draft temperature {sweep.draft_temperature:g}", fontsize=10
    )
    return figure


def units(config: ReportConfig) -> int:
    """Steps this section reports to the progress bar: one per (rank key, s)."""
    return len(RANK_KEYS) * len(config.s_values)


def build(context: BuildContext) -> SectionResult:
    """Sweep, figure, table and text of the truncated-LP section."""
    config = context.config
    sweep = truncation_sweep(context.positions, config.sweep_temperature, config.s_values, progress=context.progress)
    keys = tuple(sweep.acceptance)
    headers = ("s",) + tuple(f"acceptance ({k})" for k in keys) + tuple(f"ms/position ({k})" for k in keys)
    rows = tuple(
        (str(s),)
        + tuple(cell(sweep.acceptance[k][j], sweep.optimal) for k in keys)
        + tuple(f"{1e3 * sweep.seconds[k][j]:.2f}" for k in keys)
        for j, s in enumerate(sweep.s_values)
    )
    text = (
        f"The truncated importance LP (Khisti et al., Section 4) keeps the top s tokens under a rank key "
        "(published: p − q², decreasing; ratio: p/q, decreasing, i.e. under-drafted tokens first), fixes the selection outside them and solves "
        f"an s²-variable LP. K = 2 iid, draft temperature {sweep.draft_temperature:g}, n = {sweep.n}, mean over the "
        f"positions; optimal acceptance {sweep.optimal:.4f}. Times are the median wall time per position on "
        "this machine (one warm-up call excluded) and vary between runs; acceptances do not."
    )
    caption = "Truncated LP: acceptance and time per position against s"
    figure = Figure("truncated_lp", png_bytes(truncation_figure(sweep)), caption)
    data = {
        "n": sweep.n,
        "draft_temperature": sweep.draft_temperature,
        "s_values": list(sweep.s_values),
        "optimal": sweep.optimal,
        "acceptance": {k: list(v) for k, v in sweep.acceptance.items()},
    }
    timings = {"truncated_lp_seconds_per_position": {k: list(v) for k, v in sweep.seconds.items()}}
    section = Section("Truncated LP: acceptance and time against s", (Paragraph(text), figure, Table(headers, rows)))
    return SectionResult("truncated_lp", section, data, timings)
