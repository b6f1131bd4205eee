"""Report section "Truncated LP: acceptance and time against s".

The truncated importance LP of Khisti et al. (ICLR 2025, Section 4) keeps the top s tokens
under a rank key, fixes the selection outside them and solves an s²-variable LP; this section
sweeps s for two rank keys on the synthetic positions and reports the mean acceptance (non-
decreasing in s, bounded by P*), the share of draft pairs the LP decides and the median solve
time per position. :func:`rank_key_diagnosis` puts both keys beside a single draft and the
optimum at every draft temperature, with and without top-p drafts: the evidence for the
section's explanation of when the published key falls below a single draft.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import TEXT_SIZE, TITLE_SIZE, png_bytes, pyplot, readable_log_axis, temperature_text
from multidraft.report.positions import PositionSet
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, ReportProgress, SectionResult, cell, fmt, progress_bar
from multidraft.theory import IID, optimal_acceptance_batch, top_p

__all__ = [
    "RANK_KEYS",
    "DIAGNOSIS_TOP_P",
    "TruncationSweep",
    "truncation_sweep",
    "KeyDiagnosisRow",
    "rank_key_diagnosis",
    "truncation_figure",
    "units",
    "build",
]

#: Rank keys swept by the section (:func:`multidraft.lp.truncated_selection`).
RANK_KEYS = ("published", "ratio")
#: Nucleus mass of the top-p drafts of :func:`rank_key_diagnosis` (the paper's default top-p).
DIAGNOSIS_TOP_P = 0.95


@dataclass(frozen=True)
class TruncationSweep:
    """The truncated importance LP (K = 2, iid) for several truncation sizes s.

    ``acceptance[key][j]`` is the mean acceptance over positions with ``s_values[j]`` tokens
    and rank key ``key``; ``seconds[key][j]`` the median solve time per position (wall clock,
    machine-dependent -- kept apart from the reproducible numbers); ``optimal`` the mean P*;
    ``lp_pairs[key][j]`` the mean share of draft pairs with both tokens among the kept ones,
    ``q(Ω₁)²``: the pairs the LP decides (the fixed rule decides the rest).
    """

    n: int
    draft_temperature: float
    s_values: tuple[int, ...]
    optimal: float
    acceptance: dict[str, tuple[float, ...]]
    seconds: dict[str, tuple[float, ...]]
    lp_pairs: dict[str, tuple[float, ...]] = field(default_factory=dict)


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
        results: dict[tuple[str, int], tuple[float, float, float]] = {}
        for key, s in bar.track(grid, lambda item: f"truncated LP: rank key {item[0]}, s={item[1]}"):
            values, times, pairs = [], [], []
            for p, q in zip(targets, drafts):
                selection = truncated_selection(p, IID(q, 2), s=s, rank_key=key)
                values.append(float(selection.acceptance))
                pairs.append(float(q[selection.top].sum()) ** 2)
                samples = []
                for _ in range(repeats):
                    start = clock()
                    truncated_selection(p, IID(q, 2), s=s, rank_key=key)
                    samples.append(clock() - start)
                times.append(float(np.median(samples)))
            results[key, s] = (float(np.mean(values)), float(np.median(times)), float(np.mean(pairs)))
    return TruncationSweep(
        n=targets.shape[1],
        draft_temperature=float(draft_temperature),
        s_values=tuple(int(s) for s in s_values),
        optimal=optimal,
        acceptance={key: tuple(results[key, s][0] for s in s_values) for key in rank_keys},
        seconds={key: tuple(results[key, s][1] for s in s_values) for key in rank_keys},
        lp_pairs={key: tuple(results[key, s][2] for s in s_values) for key in rank_keys},
    )


@dataclass(frozen=True)
class KeyDiagnosisRow:
    """Two iid drafts at one draft temperature (target at 1.0), plain or top-p, s tokens kept:
    mean acceptance of a single draft, of the truncated LP under each rank key and the optimum,
    and the mean share of draft pairs the LP decides under each key (``q(Ω₁)²``)."""

    draft_temperature: float
    top_p: float | None
    single: float
    optimal: float
    acceptance: dict[str, float]
    lp_pairs: dict[str, float]

    @property
    def label(self) -> str:
        return temperature_text(self.draft_temperature) + ("" if self.top_p is None else f", top-p {self.top_p:g}")


def rank_key_diagnosis(
    positions: PositionSet,
    temperatures: Sequence[float],
    s: int = 5,
    top_p_mass: float = DIAGNOSIS_TOP_P,
    rank_keys: Sequence[str] = RANK_KEYS,
    progress: bool | ReportProgress = False,
) -> tuple[KeyDiagnosisRow, ...]:
    """The truncated LP (K = 2 iid, ``s`` tokens) under each rank key beside ``Σ min(p, q)`` and
    P*, for every draft temperature with full drafts and with top-p drafts (``top_p_mass``).

    Where a key falls below the single draft, the rows say whether the draft is sharper than
    the target (temperature below 1) and how many draft pairs the LP itself decided. One
    progress step per temperature.
    """
    from multidraft.lp import truncated_selection  # noqa: PLC0415 -- the LP layer, loaded when used

    targets = positions.targets
    rows: list[KeyDiagnosisRow] = []
    with progress_bar(progress, len(temperatures)) as bar:
        for temperature in bar.track(temperatures, lambda t: f"truncated LP: rank keys at draft T={temperature_text(t)}"):
            full = positions.drafts(temperature)
            for mass, drafts in ((None, full), (top_p_mass, top_p(full, top_p_mass))):
                acceptance, pairs = {}, {}
                for key in rank_keys:
                    selections = [truncated_selection(p, IID(q, 2), s=s, rank_key=key) for p, q in zip(targets, drafts)]
                    acceptance[key] = float(np.mean([sel.acceptance for sel in selections]))
                    pairs[key] = float(np.mean([q[sel.top].sum() ** 2 for q, sel in zip(drafts, selections)]))
                rows.append(
                    KeyDiagnosisRow(
                        draft_temperature=float(temperature),
                        top_p=mass,
                        single=float(np.mean(np.minimum(targets, drafts).sum(axis=1))),
                        optimal=float(np.mean(optimal_acceptance_batch(targets, drafts, 2, "iid"))),
                        acceptance=acceptance,
                        lp_pairs=pairs,
                    )
                )
    return tuple(rows)


def truncation_figure(sweep: TruncationSweep):
    """Truncated LP: acceptance (left) and solve time per position (right) against s."""
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6), layout="constrained")
    for key in sweep.acceptance:
        left.plot(sweep.s_values, sweep.acceptance[key], marker="o", label=f"rank key: {key}")
        right.plot(sweep.s_values, np.array(sweep.seconds[key]) * 1e3, marker="o", label=f"rank key: {key}")
    left.axhline(sweep.optimal, color="black", linewidth=1.5, label="optimal")
    left.set_xlabel("s (tokens kept)", fontsize=TEXT_SIZE)
    left.set_ylabel("mean acceptance", fontsize=TEXT_SIZE)
    left.grid(alpha=0.3)
    left.legend(fontsize=TEXT_SIZE)
    right.set_xlabel("s (tokens kept)", fontsize=TEXT_SIZE)
    right.set_ylabel("median time per position [ms]", fontsize=TEXT_SIZE)
    right.set_yscale("log")
    readable_log_axis(right)
    right.grid(alpha=0.3, which="both")
    for axis in (left, right):
        axis.tick_params(which="both", labelsize=TEXT_SIZE)
    figure.suptitle(
        f"Truncated LP, K = 2 iid, n = {sweep.n}, draft temperature {temperature_text(sweep.draft_temperature)}",
        fontsize=TITLE_SIZE,
    )
    return figure


def units(config: ReportConfig) -> int:
    """Steps this section reports to the progress bar: one per (rank key, s), one per draft
    temperature of the rank-key diagnosis."""
    return len(RANK_KEYS) * len(config.s_values) + len(config.temperatures)


def _percent(value: float) -> str:
    return f"{100 * value:.3g}%"


def _explanation(sweep: TruncationSweep, rows: Sequence[KeyDiagnosisRow], s: int) -> tuple[str, ...]:
    """Why the published key can fall below a single draft, and why the ratio key is flat in s:
    the analysis in words, one paragraph per point (the method, the published key, the ratio
    key, K > 2), every number in it computed from ``sweep`` and ``rows``."""
    below = [row for row in rows if row.acceptance["published"] < row.single]
    hot = [row for row in rows if row.top_p is None and row.draft_temperature > 1]
    at_sweep = next((row for row in rows if row.top_p is None and row.draft_temperature == sweep.draft_temperature), None)
    method = (
        "**Why the published key can score below a single draft: the method, not a defect of the key.** "
        "Outside the s kept tokens Ω₁ each draft pair takes its better-ranked token (the paper's fixed rule); the "
        "LP only decides the pairs with both tokens in Ω₁ (column 'LP pairs': q(Ω₁)² for two iid drafts)"
    )
    if at_sweep is not None:
        method += (
            f", on these positions {_percent(at_sweep.lp_pairs['published'])} of the pairs under the published key "
            f"at draft temperature {temperature_text(at_sweep.draft_temperature)}, s = {s}"
        )
    method += (
        ". Tokens no draft can produce (outside a top-p or top-k draft) rank last under either key, as in the "
        "paper, which sorts only the tokens left after top-p. With top-k = 5 drafts (the setting of the paper's "
        "Table 2) s = 5 keeps every drafted token and the truncated LP is the full importance LP."
    )
    published = (
        "**The published key** p − q₁q₂ is the target mass that the pair (k, k) does not already deliver (the "
        "paper writes p for the draft and q for the target; what makes the key fall is the fixed rule on a heavy "
        "tail, not the letters). It ranks tokens roughly by target mass, so the fixed rule hands a pair to its "
        "more likely token and the selected token's law r comes out sharper than the draft. Where the draft is "
        "flatter than the target (draft temperature above 1; the paper's Figure 4 likewise varies the target "
        "temperature from 0.2 to 1.0 with drafts at 1.0, and its authors found too little room below 1) that "
        "moves r towards p"
    )
    if hot:
        shares = [row.acceptance["published"] / row.optimal for row in hot]
        published += f": the published key reaches {_percent(min(shares))}–{_percent(max(shares))} of the optimum here"
    published += ". Where the draft is sharper than the target it moves r away from p"
    if below:
        full = [temperature_text(row.draft_temperature) for row in below if row.top_p is None]
        nucleus = [temperature_text(row.draft_temperature) for row in below if row.top_p is not None]
        where = []
        if full:
            where.append(f"draft temperature {', '.join(full)}")
        if nucleus:
            where.append(f"draft temperature {', '.join(nucleus)} with top-p {DIAGNOSIS_TOP_P:g} drafts")
        published += ", and the published key falls below the single draft at " + " and at ".join(where)
        if all(row.draft_temperature < 1 for row in below):
            published += " (all below 1)"
        if nucleus:
            published += "; top-p does not help here, since the nucleus of a heavy-tailed distribution keeps far more than s tokens"
    paragraphs = [method, published + "."]
    flat = max(sweep.acceptance["ratio"]) - min(sweep.acceptance["ratio"]) if "ratio" in sweep.acceptance else None
    if flat is not None:
        paragraphs.append(
            "**The ratio key** p/q̄ ranks under-drafted tokens first (the order of the min-cut argument). At draft "
            "temperature below 1 those are the rarest tokens: its Ω₁ holds almost no draft mass (LP pairs at most "
            f"{max(sweep.lp_pairs['ratio']):.2g} in the sweep) and its acceptance is the fixed rule's alone, which "
            f"is why it moves by only {flat:.1g} over s = {sweep.s_values[0]}–{sweep.s_values[-1]}; above 1 both "
            "keys rank the head first and agree."
        )
    paragraphs.append(
        "**For K > 2** (the multi-stage rows of the gap table) the stages compound: the law kept after one stage is "
        "already about as sharp as the target's head, so every later stage is in the losing case."
    )
    return tuple(paragraphs)


def build(context: BuildContext) -> SectionResult:
    """Sweep, diagnosis, figure, tables and text of the truncated-LP section."""
    config = context.config
    sweep = truncation_sweep(context.positions, config.sweep_temperature, config.s_values, progress=context.progress)
    diagnosis = rank_key_diagnosis(context.positions, config.temperatures, config.truncation_s, progress=context.progress)
    keys = tuple(sweep.acceptance)
    headers = (
        ("s",)
        + tuple(f"acceptance ({k})" for k in keys)
        + tuple(f"LP pairs ({k})" for k in keys)
        + tuple(f"ms/position ({k})" for k in keys)
    )
    rows = tuple(
        (str(s),)
        + tuple(cell(sweep.acceptance[k][j], sweep.optimal) for k in keys)
        + tuple(f"{sweep.lp_pairs[k][j]:.2g}" for k in keys)
        + tuple(f"{1e3 * sweep.seconds[k][j]:.2f}" for k in keys)
        for j, s in enumerate(sweep.s_values)
    )
    text = (
        f"The truncated importance LP (Khisti et al., Section 4) keeps the top s tokens under a rank key "
        "(published: p − q², decreasing; ratio: p/q, decreasing, i.e. under-drafted tokens first), fixes the selection outside them and solves "
        f"an s²-variable LP. K = 2 iid, draft temperature {temperature_text(sweep.draft_temperature)}, n = {sweep.n}, mean over the "
        f"positions; optimal acceptance {sweep.optimal:.4f}. 'LP pairs' is the share of draft pairs with both tokens "
        "kept, the only ones the LP decides. Times are the median wall time per position on "
        "this machine (one warm-up call excluded) and vary between runs; acceptances do not."
    )
    caption = "Truncated LP: acceptance and time per position against s"
    figure = Figure("truncated_lp", png_bytes(truncation_figure(sweep)), caption)
    diagnosis_headers = ("draft T", "single draft", "optimal") + tuple(
        f"{name} ({k})" for k in keys for name in ("truncated LP", "LP pairs")
    )
    diagnosis_rows = tuple(
        (row.label, fmt(row.single), fmt(row.optimal))
        + tuple(value for k in keys for value in (cell(row.acceptance[k], row.optimal), f"{row.lp_pairs[k]:.2g}"))
        for row in diagnosis
    )
    diagnosis_caption = (
        f"Rank keys against a single draft, K = 2 iid, s = {config.truncation_s}, target temperature 1.0 "
        f"(top-p {DIAGNOSIS_TOP_P:g}: both drafts from the nucleus of q)"
    )
    data = {
        "n": sweep.n,
        "draft_temperature": sweep.draft_temperature,
        "s_values": list(sweep.s_values),
        "optimal": sweep.optimal,
        "acceptance": {k: list(v) for k, v in sweep.acceptance.items()},
        "lp_pairs": {k: list(v) for k, v in sweep.lp_pairs.items()},
        "rank_key_diagnosis": {
            "s": config.truncation_s,
            "top_p": DIAGNOSIS_TOP_P,
            "rows": [
                {
                    "draft_temperature": row.draft_temperature,
                    "top_p": row.top_p,
                    "single": row.single,
                    "optimal": row.optimal,
                    "acceptance": row.acceptance,
                    "lp_pairs": row.lp_pairs,
                }
                for row in diagnosis
            ],
        },
    }
    timings = {"truncated_lp_seconds_per_position": {k: list(v) for k, v in sweep.seconds.items()}}
    blocks = (
        Paragraph(text),
        figure,
        Table(headers, rows),
        Table(diagnosis_headers, diagnosis_rows, diagnosis_caption),
        *(Paragraph(text) for text in _explanation(sweep, diagnosis, config.truncation_s)),
    )
    section = Section("Truncated LP: acceptance and time against s", blocks)
    return SectionResult("truncated_lp", section, data, timings)
