"""Build the acceptance-gap report: compute every section, render, write.

:func:`build_report` runs the sections available in this build (each needs the layer it
reports on: the theory core always, :mod:`multidraft.schemes` for the baselines,
:mod:`multidraft.lp` for the truncated LP, :mod:`multidraft.decoding` for real models) and
returns a :class:`Report` holding the document and the JSON results; :func:`write_report`
writes ``report.md``, ``report.html``, ``figures/*.png`` and ``results.json``.

Reproducibility: every number except wall-clock timings is a deterministic function of the
:class:`ReportConfig` (its ``seed`` drives the one ``numpy.random.Generator`` used for the
synthetic positions and the real-model sampling); timings and versions live under
``results["timings"]`` and ``results["environment"]`` only.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from multidraft.report import figures as figs
from multidraft.report.render import (
    Document,
    Figure,
    Paragraph,
    Section,
    Table,
    prepare_output,
    write_report_files,
)
from multidraft.report.synthetic import (
    GAP_COLUMNS,
    GapRow,
    FamilyCurves,
    GapTable,
    PositionSet,
    TruncationSweep,
    family_curves,
    gap_table,
    optional_module,
    truncation_sweep,
    zipf_positions,
)
from multidraft.theory import IID, optimal_acceptance_batch

__all__ = ["ReportConfig", "Report", "build_report", "write_report"]


@dataclass(frozen=True)
class ReportConfig:
    """Everything that determines the report's numbers.

    Attributes
    ----------
    seed : int
        Seed of the ``numpy.random.Generator`` for the synthetic positions (and of the
        real-model measurement).
    n : int
        Vocabulary size of the synthetic positions (49152, a SmolLM2-sized vocabulary).
    positions : int
        Number of synthetic positions (Zipf-like targets) the gap table averages over.
    ks, temperatures, pairs : sequences
        Numbers of drafts, draft temperatures (target at 1.0) and non-identical temperature
        pairs of the gap table.
    truncation_s : int
        Tokens kept by the truncated LP in the gap table.
    s_values : tuple[int, ...]
        Truncation sizes of the truncated-LP sweep.
    sweep_temperature, speed_temperature : float
        Draft temperatures of the truncated-LP sweep and of the speed-up section.
    cost_ratios : tuple[float, ...]
        Given draft/target latency ratios c for the predicted speed-up.
    family_points : int
        Points along the Figure-2 family.
    target, draft : str or None
        Model specs for the real-model section (``target="default"`` and ``draft=None`` for
        the bundled SmolLM2 with itself as temperature-shifted draft); None skips it.
    """

    seed: int = 0
    n: int = 49152
    positions: int = 3
    ks: tuple[int, ...] = (2, 4, 8)
    temperatures: tuple[float, ...] = (0.5, 0.8, 1.2, 1.6, 2.0)
    pairs: tuple[tuple[float, float], ...] = ((0.5, 1.2), (0.8, 1.6), (1.2, 2.0), (0.5, 2.0), (1.6, 2.0))
    truncation_s: int = 5
    s_values: tuple[int, ...] = (1, 2, 3, 5, 8, 10, 15, 20, 30)
    sweep_temperature: float = 0.8
    speed_temperature: float = 0.8
    cost_ratios: tuple[float, ...] = (0.05, 0.2)
    family_points: int = 121
    target: str | None = None
    draft: str | None = None

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ValueError(f"n: needs a vocabulary of at least 2 tokens, got {self.n}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks: needs numbers of drafts >= 1, got {self.ks}")
        if any(t <= 0 for t in self.temperatures) or any(t <= 0 for pair in self.pairs for t in pair):
            raise ValueError("temperatures: draft temperatures must be > 0")
        if any(not 0 <= c for c in self.cost_ratios):
            raise ValueError(f"cost_ratios: must be >= 0, got {self.cost_ratios}")
        if self.draft is not None and self.target is None:
            raise ValueError("draft: a draft model needs a target model (--target)")


@dataclass(frozen=True)
class Report:
    """A built report: the document to render and the JSON-ready results."""

    document: Document
    results: dict = field(repr=False)
    seconds: float


def _fmt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _cell(value: float | None, optimal: float) -> str:
    if value is None:
        return "—"
    return f"{value:.4f} ({100 * value / optimal:.1f}%)"


# ----------------------------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------------------------


def _family_section(curves: FamilyCurves) -> tuple[Section, dict]:
    interval = curves.interval
    names = ", ".join(figs.SCHEME_LABELS.get(n, n) for n in curves.schemes)
    names = names or "no baseline scheme (multidraft.schemes not in this build)"
    text = (
        f"Targets on three tokens, {curves.family.label}, K = {curves.k} iid drafts; optimal acceptance "
        "P* = min_T [p(T) + 1 − q(T)^K] (min-cut form of the optimal-transport LP; Khisti et al., "
        f"ICLR 2025, Theorems 2–3) by the sorted prefix scan, against {names} and a single draft. "
    )
    if interval is not None:
        low, high = float(interval[0]), float(interval[1])
        inside = (curves.t >= low - 1e-12) & (curves.t <= high + 1e-12)
        agreement = (
            "exactly the grid points inside that interval"
            if np.array_equal(inside, curves.unit)
            else "which does NOT match the interval: the two routes disagree"
        )
        text += (
            f"Theorem 2 (p(T) ≥ q(T)^K for every T) holds exactly for t ∈ [{interval[0]}, {interval[1]}] "
            f"(shaded); the scan finds P* = 1 at {int(curves.unit.sum())} of {curves.t.size} grid points, "
            f"{agreement}."
        )
    rows = []
    for t in (0.0, 1 / 9, 1 / 6, 1 / 3, 5 / 9, 2 / 3):
        i = int(np.argmin(np.abs(curves.t - t)))
        row = [f"{curves.t[i]:.4f}", _fmt(curves.optimal[i])]
        row += [_fmt(values[i]) for values in curves.schemes.values()]
        row.append(_fmt(curves.single[i]))
        rows.append(tuple(row))
    headers = ("t", "optimal") + tuple(figs.SCHEME_LABELS.get(n, n) for n in curves.schemes) + ("single draft",)
    figure = Figure(
        "figure2",
        figs.png_bytes(figs.family_figure(curves)),
        "Optimal acceptance against baselines over a one-parameter family of targets (Figure 2 of Khisti et al.)",
    )
    section = Section(
        "Optimal acceptance on three tokens (Figure 2)",
        (Paragraph(text), figure, Table(headers, tuple(rows), "Acceptance at selected t (nearest grid point)")),
    )
    data = {
        "family": curves.family.label,
        "k": curves.k,
        "t": curves.t.tolist(),
        "optimal": curves.optimal.tolist(),
        "single": curves.single.tolist(),
        "schemes": {name: values.tolist() for name, values in curves.schemes.items()},
        "unit_interval": None if interval is None else [str(interval[0]), str(interval[1])],
    }
    return section, data


def _notes(rows: Sequence[GapRow]) -> list[Paragraph]:
    """One note per empty column of a table (the first row's reason)."""
    notes: dict[str, str] = {}
    for row in rows:
        for column, note in row.notes.items():
            notes.setdefault(column, note)
    if not notes:
        return []
    return [Paragraph("—: " + "; ".join(f"{column}: {note}" for column, note in notes.items()) + ".")]


def _gap_section(table: GapTable) -> tuple[Section, dict]:
    blocks: list = [
        Paragraph(
            f"{len(table.exponents)} synthetic positions on n = {table.n} tokens: Zipf-like targets "
            f"p_(r) ∝ r^(−s) with exponents s = {', '.join(f'{e:.3f}' for e in table.exponents)} (drawn with "
            "the report's seed), target temperature 1.0, drafts q = softmax(log p / T). Each cell is the mean "
            "exact acceptance over the positions and, in brackets, its fraction of the mean optimum. "
            f"Truncated LP: s = {table.truncation_s} tokens (K = 2; the multi-stage pairwise combination for "
            "K > 2), with the published rank key p − q² and with the ratio key (p/q decreasing). SpecInfer is recursive "
            "rejection sampling (its without-replacement form under the wor law). "
            "Single draft: Σ min(p, q) with one draft, for reference."
        )
    ]
    headers = ("K", "draft T", "optimal") + GAP_COLUMNS
    for law, title in (("iid", "Drafts iid"), ("wor", "Drafts without replacement")):
        rows = [r for r in table.rows if r.law == law]
        if rows:
            body = tuple(
                (str(r.k), f"{r.draft_temperatures[0]:g}", _fmt(r.optimal))
                + tuple(_cell(r.values[c], r.optimal) for c in GAP_COLUMNS)
                for r in rows
            )
            blocks.append(Table(headers, body, title))
            blocks += _notes(rows)
    pairs = [r for r in table.rows if r.law == "independent"]
    if pairs:
        blocks.append(
            Paragraph(
                "Non-identical pairs: two independent drafts at different temperatures (K = 2, as in Figure 4 "
                "of Khisti et al.). No large-vocabulary optimum is known in closed form for this law; the "
                "optimal column is a certified upper bound (the smallest cut p(T) + 1 − q1(T) q2(T) over "
                "score-ordered prefixes, exact on random small instances in the tests), so the fractions are "
                "lower bounds on the true ones. Single draft uses the first temperature."
            )
        )
        body = tuple(
            ("2", " & ".join(f"{t:g}" for t in r.draft_temperatures), "≤ " + _fmt(r.optimal))
            + tuple(_cell(r.values[c], r.optimal) for c in GAP_COLUMNS)
            for r in pairs
        )
        blocks.append(Table(headers, body, "Non-identical draft pairs"))
        blocks += _notes(pairs)
    caption = (
        "Fraction of the optimal acceptance per scheme against draft temperature "
        "(solid: iid, dotted: without replacement)"
    )
    blocks.append(Figure("gap", figs.png_bytes(figs.gap_figure(table)), caption))
    data = {
        "n": table.n,
        "exponents": list(table.exponents),
        "target_temperature": table.target_temperature,
        "truncation_s": table.truncation_s,
        "scheme_names": table.scheme_names,
        "rows": [
            {
                "law": r.law,
                "k": r.k,
                "draft_temperatures": list(r.draft_temperatures),
                "optimal": r.optimal,
                "optimal_is_upper_bound": r.optimal_is_bound,
                "values": r.values,
                "fractions": {c: r.fraction(c) for c in r.values},
                "notes": r.notes,
            }
            for r in table.rows
        ],
    }
    return Section("Acceptance gap on large vocabularies", tuple(blocks)), data


def _truncation_section(sweep: TruncationSweep) -> tuple[Section, dict, dict]:
    keys = tuple(sweep.acceptance)
    headers = ("s",) + tuple(f"acceptance ({k})" for k in keys) + tuple(f"ms/position ({k})" for k in keys)
    rows = tuple(
        (str(s),)
        + tuple(_cell(sweep.acceptance[k][j], sweep.optimal) for k in keys)
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
    figure = Figure("truncated_lp", figs.png_bytes(figs.truncation_figure(sweep)), caption)
    data = {
        "n": sweep.n,
        "draft_temperature": sweep.draft_temperature,
        "s_values": list(sweep.s_values),
        "optimal": sweep.optimal,
        "acceptance": {k: list(v) for k, v in sweep.acceptance.items()},
    }
    timings = {k: list(v) for k, v in sweep.seconds.items()}
    section = Section("Truncated LP: acceptance and time against s", (Paragraph(text), figure, Table(headers, rows)))
    return section, data, timings


def _acceptance_by_k(positions: PositionSet, temperature: float, k_max: int) -> dict[str, list[float]]:
    """Mean acceptance a_j for j = 1..k_max iid drafts: optimum and each available baseline."""
    targets = positions.targets
    drafts = positions.drafts(temperature)
    out = {"optimal": [float(np.mean(optimal_acceptance_batch(targets, drafts, j))) for j in range(1, k_max + 1)]}
    registry = optional_module("multidraft.schemes")
    if registry is not None:
        for name in ("spectr", "specinfer"):
            scheme = registry.get_scheme(name)
            out[name] = [
                float(np.mean([float(scheme.acceptance(p, IID(q, j))) for p, q in zip(targets, drafts)]))
                for j in range(1, k_max + 1)
            ]
    return out


def _speed_section(acceptance: dict[str, list[float]], config: ReportConfig) -> tuple[Section, dict]:
    from multidraft.theory.speed import LatencyModel, best_configuration  # noqa: PLC0415

    k_max = len(acceptance["optimal"])
    ks = tuple(range(1, k_max + 1))
    scenarios = [(f"given c = {c:g}", LatencyModel.constant(c), LatencyModel.constant(1.0)) for c in config.cost_ratios]
    rows, curves, data = [], {}, []
    for label, draft_latency, target_latency in scenarios:
        for name, values in acceptance.items():
            curve = best_configuration(values, draft_latency, target_latency, ks=ks, lengths=range(1, 17))
            per_k = curve.speedup.max(axis=1)
            scheme = figs.SCHEME_LABELS.get(name, name)
            curves[f"{scheme}, {label}"] = per_k
            tokens = curve.block_efficiency[ks.index(curve.best_k), curve.best_length - 1]
            rows.append(
                (label, scheme, str(curve.best_k), str(curve.best_length), f"{curve.best_speedup:.3f}", f"{tokens:.3f}")
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
        f"Per-token acceptance a_j with j = 1..{k_max} iid drafts (draft temperature {config.speed_temperature:g}, "
        "mean over the synthetic positions) fed to the i.i.d. tree model of multidraft.theory.speed (sibling "
        "drafts assumed distinct, survival ρ = 0; iid drafts can repeat a token, so more of them stay live and the numbers below are lower bounds) and the throughput model of Yan et al. (2024): "
        "tokens per iteration / (L·t_draft(K, 1) + t_target(K, L + 1)). 'given c' uses constant latencies with "
        "draft/target cost ratio c (the memory-bound idealisation of Leviathan et al. 2023); the speed-up is "
        "relative to plain decoding with the target, best draft length L ≤ 16 per K."
    )
    text += " The real-model section (with --model) predicts speed-ups from latencies measured on this machine."
    headers = ("latencies", "scheme", "best K", "best L", "predicted speed-up", "tokens per iteration")
    png = figs.png_bytes(figs.speed_figure(ks, curves, "Predicted speed-up, best L per K"))
    figure = Figure("speedup", png, "Predicted speed-up over plain decoding against the number of drafts")
    section = Section("Predicted speed-up", (Paragraph(text), Table(headers, tuple(rows)), figure))
    return section, {"acceptance_by_k": acceptance, "temperature": config.speed_temperature, "configurations": data}


# ----------------------------------------------------------------------------------------------
# orchestration
# ----------------------------------------------------------------------------------------------


def _environment() -> dict:
    import numpy  # noqa: PLC0415
    import scipy  # noqa: PLC0415

    from multidraft import __version__  # noqa: PLC0415

    return {
        "multidraft": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
        "cpus": os.cpu_count(),
    }


def build_report(config: ReportConfig = ReportConfig(), *, progress: bool = False) -> Report:
    """Compute every available section for ``config`` and assemble the report.

    Sections: Figure-2 curves (theory; baselines with :mod:`multidraft.schemes`), the gap
    table, the truncated-LP sweep (:mod:`multidraft.lp`), the predicted speed-up
    (:mod:`multidraft.theory.speed`) and, when ``config.target`` is set, the real-model
    section (:mod:`multidraft.decoding`). A layer missing from this build drops its section
    and the report says so. ``progress`` shows progress bars on stderr.
    """
    start = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    sections: list[Section] = []
    results: dict = {"config": _config_json(config), "sections": {}, "timings": {}}
    missing: list[str] = []

    real = None
    if config.target is not None:  # first, so that a bad model fails before the long synthetic part
        from multidraft.report.real import real_model_section  # noqa: PLC0415

        real = real_model_section(config, progress=progress)

    curves = family_curves(k=2, points=config.family_points)
    section, data = _family_section(curves)
    sections.append(section)
    results["sections"]["figure2"] = data
    if not curves.schemes:
        missing.append("baseline schemes (multidraft.schemes)")

    positions = zipf_positions(config.n, config.positions, rng)
    table = gap_table(positions, config.ks, config.temperatures, config.pairs, s=config.truncation_s, progress=progress)
    section, data = _gap_section(table)
    sections.append(section)
    results["sections"]["gap_table"] = data

    if optional_module("multidraft.lp") is not None:
        sweep = truncation_sweep(positions, config.sweep_temperature, config.s_values, progress=progress)
        section, data, timings = _truncation_section(sweep)
        sections.append(section)
        results["sections"]["truncated_lp"] = data
        results["timings"]["truncated_lp_seconds_per_position"] = timings
    else:
        missing.append("truncated-LP sweep (multidraft.lp)")

    acceptance = _acceptance_by_k(positions, config.speed_temperature, max(config.ks))
    section, data = _speed_section(acceptance, config)
    sections.append(section)
    results["sections"]["speedup"] = data
    if real is not None:
        sections.append(real.section)
        results["sections"]["real_models"] = real.data
        results["timings"]["real_models"] = real.timings

    seconds = time.perf_counter() - start
    results["timings"]["wall_seconds"] = seconds
    results["environment"] = _environment()
    overview = [
        Paragraph(
            "Acceptance-gap report of multi-draft speculative sampling: how close published token-level "
            "selection schemes come to the optimal acceptance (Khisti et al., ICLR 2025), on a small exact "
            "example, on large-vocabulary distributions, for the truncated LP, and in predicted speed-up"
            + (
                ", with measurements on real models."
                if real is not None
                else ". Run with --model default for real-model measurements."
            )
        ),
        Paragraph(
            f"Built in **{seconds:.1f} s** on this machine ({os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}); "
            f"seed {config.seed}. The same seed gives the same numbers; only timings vary between runs. "
            "results.json holds every number in the tables and figures."
        ),
    ]
    if missing:
        overview.append(Paragraph("Not in this build: " + "; ".join(missing) + "."))
    sections.insert(0, Section("Overview", tuple(overview)))
    title = "Multi-draft speculative sampling: acceptance-gap report"
    return Report(Document(title, tuple(sections)), results, seconds)


def _config_json(config: ReportConfig) -> dict:
    data = asdict(config)
    return {key: list(value) if isinstance(value, tuple) else value for key, value in data.items()}


def write_report(report: Report, out: str | os.PathLike, force: bool = False) -> dict[str, Path]:
    """Write ``report`` into ``out`` (see :func:`multidraft.report.render.prepare_output`)."""
    return write_report_files(report.document, report.results, prepare_output(out, force))
