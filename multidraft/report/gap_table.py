"""Report section "Acceptance gap on large vocabularies": each scheme's acceptance against the
optimum on Zipf-like decoding positions, per number of drafts K and draft temperature.

For iid drafts and drafts without replacement (K in ``config.ks`` × draft temperatures) and for
non-identical draft pairs, the optimum ``P*`` next to the acceptance the optimal verifier
achieves (:func:`multidraft.theory.verifier.optimal_selection_rule`), the truncated importance
LP (two rank keys; multi-stage for K > 2), SpecTr, SpecInfer and a single draft, each the mean
exact acceptance over the positions of :mod:`multidraft.report.positions`.

Not to be confused with :mod:`multidraft.report.instance_gap` (ratios over random small
instances, like Table 3 of Khisti et al.).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import png_bytes, pyplot
from multidraft.report.positions import PositionSet
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, ReportProgress, SectionResult, cell, fmt, progress_bar
from multidraft.theory import IID, Independent, WithoutReplacement, optimal_acceptance, optimal_acceptance_batch
from multidraft.theory.verifier import VERIFIER_LAWS, optimal_selection_rule

__all__ = [
    "GAP_COLUMNS",
    "PositionGapRow",
    "PositionGapTable",
    "position_gap_table",
    "gap_figure",
    "units",
    "build",
]

#: The acceptance the optimal verifier achieves (``Σ min(p, r)`` of its rule's law r).
VERIFIER_COLUMN = "optimal verifier (achieved)"
#: Columns of the gap table besides the optimum, in display order.
GAP_COLUMNS = (VERIFIER_COLUMN, "truncated LP", "truncated LP, ratio key", "SpecTr", "SpecInfer", "single draft")

#: Rank key of each truncated-LP column (:func:`multidraft.lp.truncated_lp`).
_RANK_KEYS = {"truncated LP": "published", "truncated LP, ratio key": "ratio"}

#: Laws of the temperature rows.
_LAWS = ("iid", "wor")
#: How the figure names them.
_LAW_TITLES = {"iid": "iid drafts", "wor": "without replacement"}

_STYLES = {
    VERIFIER_COLUMN: dict(color="black", marker="*", linewidth=0.8),
    "truncated LP": dict(color="tab:green", marker="s"),
    "truncated LP, ratio key": dict(color="tab:olive", marker="D"),
    "SpecTr": dict(color="tab:blue", marker="o"),
    "SpecInfer": dict(color="tab:orange", marker="^"),
    "single draft": dict(color="tab:gray", marker="x"),
}


@dataclass(frozen=True)
class PositionGapRow:
    """One row of the gap table: mean acceptance over the positions for one setting.

    ``law`` is ``"iid"``, ``"wor"`` or ``"independent"`` (non-identical pair, one draft per
    temperature in ``draft_temperatures``). ``optimal`` is the mean P* (for independent pairs
    by the exact threshold search). ``values[column]`` is None where the scheme does not apply
    to the law; ``notes`` says why.
    """

    law: str
    k: int
    draft_temperatures: tuple[float, ...]
    optimal: float
    values: dict[str, float | None]
    notes: dict[str, str] = field(default_factory=dict)

    def fraction(self, column: str) -> float | None:
        """``values[column] / optimal``, the share of the optimum the scheme reaches."""
        value = self.values.get(column)
        return None if value is None else value / self.optimal


@dataclass(frozen=True)
class PositionGapTable:
    """The gap table and how it was made (vocabulary, positions, truncation size)."""

    n: int
    exponents: tuple[float, ...]
    target_temperature: float
    truncation_s: int
    scheme_names: dict[str, str]
    rows: tuple[PositionGapRow, ...]


def _scheme_name(column: str, law: str) -> str | None:
    """Registry name of a baseline column for a law (the truncated LP is called directly)."""
    if column == "SpecTr":
        return "spectr"
    if column == "SpecInfer":
        return "rrs-wor" if law == "wor" else "specinfer"
    return None


def _truncated_acceptance(target: np.ndarray, law, s: int, rank_key: str) -> float:
    """Acceptance ``Σ_y min(p(y), r(y))`` of the truncated importance LP (K = 2) or of its
    multi-stage combination (K > 2) for independent drafts (Theorem 1; Section 4)."""
    from multidraft.lp import multistage, truncated_lp  # noqa: PLC0415 -- the LP layer, loaded when used

    drafts = law.marginals()  # the draft distributions of a product law
    if len(drafts) == 2:
        return float(truncated_lp(target, drafts[0], drafts[1], s=s, rank_key=rank_key).acceptance)
    return float(multistage(target, list(drafts), s=s, rank_key=rank_key).acceptance)


def _column_value(
    column: str, law_name: str, s: int, laws: Sequence, targets: np.ndarray
) -> tuple[float | None, str | None, str | None]:
    """Mean exact acceptance of a column over the positions: (value, registry/LP name, note).

    A scheme that does not apply to the law, or has no exact method at this vocabulary size
    (its ``ValueError`` says why), gives ``None`` and the reason as the note.
    """
    from multidraft.schemes import get_scheme  # noqa: PLC0415 -- the schemes layer, loaded when used

    if column == VERIFIER_COLUMN:
        if law_name not in VERIFIER_LAWS:
            return None, None, (
                "the optimal verifier samples iid drafts and drafts without replacement; for independent drafts "
                "the optimum is a number only"
            )
        values = [optimal_selection_rule(p, law).acceptance for p, law in zip(targets, laws)]
        return float(np.mean(values)), "theory.verifier.optimal_selection_rule", None
    if column in _RANK_KEYS:
        if law_name == "wor":
            return None, None, "the importance LP is built for independent drafts, not drafts without replacement"
        key = _RANK_KEYS[column]
        name = "lp.truncated_lp" if laws[0].k == 2 else "lp.multistage"
        values = [_truncated_acceptance(p, law, s, key) for p, law in zip(targets, laws)]
        return float(np.mean(values)), f"{name}(s={s}, rank_key={key!r})", None
    name = _scheme_name(column, law_name)
    scheme = get_scheme(name)
    if not scheme.supports(laws[0]):
        return None, name, f"{name} does not support the {law_name} law"
    try:
        values = [float(scheme.acceptance(p, law)) for p, law in zip(targets, laws)]
    except ValueError as error:
        # The error's own advice (if any, after ";") concerns the optimum, not this scheme: drop it.
        reason = str(error).splitlines()[0].split("; ")[0]
        return None, name, f"{name} has no exact acceptance at n={targets.shape[1]} ({reason})"
    return float(np.mean(values)), name, None


def _row_values(
    law: str, s: int, law_objects: Sequence, targets: np.ndarray, names: dict[str, str]
) -> tuple[dict[str, float | None], dict[str, str]]:
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for column in GAP_COLUMNS[:-1]:
        value, name, note = _column_value(column, law, s, law_objects, targets)
        values[column] = value
        if note is not None:
            notes[column] = note
        if value is not None:
            names[f"{column} ({law}, K={law_objects[0].k})"] = str(name)
    return values, notes


def _steps(ks: Sequence[int], temperatures: Sequence[float], pairs: Sequence, laws: Sequence[str]) -> int:
    return len(laws) * len(ks) * len(temperatures) + len(pairs)


def position_gap_table(
    positions: PositionSet,
    ks: Sequence[int] = (2, 4, 8),
    temperatures: Sequence[float] = (0.5, 0.8, 1.2, 1.6, 2.0),
    pairs: Sequence[tuple[float, float]] = ((0.5, 1.2), (0.8, 1.6), (1.2, 2.0), (0.5, 2.0), (1.6, 2.0)),
    laws: Sequence[str] = _LAWS,
    s: int = 5,
    progress: bool | ReportProgress = False,
) -> PositionGapTable:
    """Acceptance of each scheme against the optimum, averaged over the positions.

    For every law in ``laws``, K in ``ks`` and draft temperature T: the optimum
    ``P* = min_T [p(T) + 1 - P_D(set(X) ⊆ T)]`` by the batched prefix scan, the truncated
    importance LP (K = 2; the multi-stage combination for K > 2) with ``s`` tokens, SpecTr,
    SpecInfer (recursive rejection sampling; its without-replacement form for ``wor``) and
    the single-draft ``Σ min(p, q)``, each the mean over positions. For each temperature pair
    in ``pairs``: two independent non-identical drafts (K = 2), the optimum by the exact
    threshold search (:func:`multidraft.theory.optimal_acceptance`). Beside the optimum, the
    acceptance the optimal verifier achieves (iid: P* to rounding; without replacement: the
    front/back rule's, a lower bound). ``progress``: a bar on stderr (or the report's bar).
    References: Khisti et al. ICLR 2025 (Theorems 1-3, Section 4); Sun et al. 2023 (SpecTr);
    Miao et al. 2024 (SpecInfer); Jeon et al. 2024.
    """
    if s < 1:
        raise ValueError(f"s: the truncated LP needs s >= 1, got {s}")
    for law in laws:
        if law not in _LAWS:
            raise ValueError(f"laws: unknown law {law!r}; choose from iid, wor")
    with progress_bar(progress, _steps(ks, temperatures, pairs, laws)) as bar:
        targets = positions.targets
        settings = [(law, k, t) for law in laws for k in ks for t in temperatures]
        rows: list[PositionGapRow] = []
        names: dict[str, str] = {}
        for law, k, temperature in bar.track(settings, lambda item: f"gap table: {item[0]} K={item[1]} T={item[2]:g}"):
            drafts = positions.drafts(temperature)
            optimal = float(np.mean(optimal_acceptance_batch(targets, drafts, k, law)))
            law_objects = [IID(q, k) if law == "iid" else WithoutReplacement(q, k) for q in drafts]
            values, notes = _row_values(law, s, law_objects, targets, names)
            values["single draft"] = float(np.mean(np.minimum(targets, drafts).sum(axis=1)))
            rows.append(PositionGapRow(law, k, (float(temperature),), optimal, values, notes))
        for pair in bar.track(pairs, lambda item: f"gap table: pair T={item[0]:g} & {item[1]:g}"):
            first, second = positions.drafts(pair[0]), positions.drafts(pair[1])
            law_objects = [Independent([a, b]) for a, b in zip(first, second)]
            optimal = float(np.mean([optimal_acceptance(p, law).value for p, law in zip(targets, law_objects)]))
            values, notes = _row_values("independent", s, law_objects, targets, names)
            values["single draft"] = float(np.mean(np.minimum(targets, first).sum(axis=1)))
            rows.append(PositionGapRow("independent", 2, tuple(float(t) for t in pair), optimal, values, notes))
    return PositionGapTable(
        n=targets.shape[1],
        exponents=tuple(float(e) for e in positions.exponents),
        target_temperature=1.0,
        truncation_s=s,
        scheme_names=names,
        rows=tuple(rows),
    )


def gap_figure(table: PositionGapTable):
    """Fraction of the optimum reached by each scheme against draft temperature: one panel per K,
    one row of panels per law (iid drafts on top, drafts without replacement below), so that
    no law's line hides behind the other's."""
    plt = pyplot()
    ks = sorted({row.k for row in table.rows if row.law != "independent"})
    laws = [law for law in _LAWS if any(row.law == law for row in table.rows)]
    figure, axes = plt.subplots(
        len(laws), len(ks), figsize=(4.2 * len(ks) + 1.6, 3.2 * len(laws) + 0.4), sharex=True, sharey=True,
        squeeze=False, layout="constrained",
    )  # fmt: skip
    for line, law in zip(axes, laws):
        for axis, k in zip(line, ks):
            rows = [r for r in table.rows if r.law == law and r.k == k]
            temperatures = [r.draft_temperatures[0] for r in rows]
            for column in GAP_COLUMNS:
                fractions = [r.fraction(column) for r in rows]
                if all(f is None for f in fractions):
                    continue  # no exact value for this law at this vocabulary (see the table's note)
                values = [np.nan if f is None else f for f in fractions]
                axis.plot(temperatures, values, label=column, **_STYLES[column])
            axis.axhline(1.0, color="black", linewidth=1.0)
            axis.set_title(f"{_LAW_TITLES[law]}, K = {k}", fontsize=9)
            axis.grid(alpha=0.3)
        line[0].set_ylabel("fraction of the optimum")
    for axis in axes[-1]:
        axis.set_xlabel("draft temperature (target 1.0)")
    handles: dict = {}
    for axis in axes.flat:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    figure.legend(handles.values(), handles.keys(), fontsize=7, loc="outside right center")
    figure.suptitle(f"Acceptance gap to the optimum, Zipf-like targets, n = {table.n}", fontsize=10)
    return figure


def units(config: ReportConfig) -> int:
    """Steps this section reports to the progress bar: one per table row."""
    return _steps(config.ks, config.temperatures, config.pairs, _LAWS)


def _notes(rows: Sequence[PositionGapRow]) -> list[Paragraph]:
    """One note for the empty cells of a table: each reason once, with the columns it empties
    and the K where it does when that is not every row."""
    every_k = sorted({row.k for row in rows})
    first: dict[str, str] = {}  # column -> its first row's reason (later rows differ only in K)
    empty: dict[str, set[int]] = {}  # column -> the K of its empty cells
    for row in rows:
        for column, note in row.notes.items():
            first.setdefault(column, note)
            empty.setdefault(column, set()).add(row.k)
    reasons: dict[str, dict] = {}  # reason -> column -> K values with an empty cell
    for column, note in first.items():
        reasons.setdefault(note, {})[column] = empty[column]
    if not reasons:
        return []
    parts = []
    for reason, columns in reasons.items():
        named = " and ".join(
            f"**{column}**" + ("" if sorted(ks) == every_k else f" (K = {', '.join(map(str, sorted(ks)))})")
            for column, ks in columns.items()
        )
        parts.append(f"{named}: {reason}")
    return [Paragraph("—: " + "; ".join(parts) + ".")]


def build(context: BuildContext) -> SectionResult:
    """Table, figure and text of the gap-table section."""
    config = context.config
    table = position_gap_table(
        context.positions, config.ks, config.temperatures, config.pairs, s=config.truncation_s, progress=context.progress
    )
    blocks: list = [
        Paragraph(
            f"{len(table.exponents)} synthetic positions on n = {table.n} tokens: Zipf-like targets "
            f"p_(r) ∝ r^(−s) with exponents s = {', '.join(f'{e:.3f}' for e in table.exponents)} (drawn with "
            "the report's seed), target temperature 1.0, drafts q = softmax(log p / T). Each cell is the mean "
            "exact acceptance over the positions and, in brackets, its fraction of the mean optimum. "
            "Optimal verifier (achieved): Σ min(p, r) for the law r of the sampler that multidraft runs at "
            "this vocabulary (iid: the optimal law realised by random positions, = P* to rounding; without "
            "replacement: the front/back rule, lossless, a lower bound on P*; docs/optimal_verifier.md). "
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
                (str(r.k), f"{r.draft_temperatures[0]:g}", fmt(r.optimal))
                + tuple(cell(r.values[c], r.optimal) for c in GAP_COLUMNS)
                for r in rows
            )
            blocks.append(Table(headers, body, title))
            blocks += _notes(rows)
    pairs = [r for r in table.rows if r.law == "independent"]
    if pairs:
        blocks.append(
            Paragraph(
                "Non-identical pairs: two independent drafts at different temperatures (K = 2, as in Figure 4 "
                "of Khisti et al.). The optimal column is exact: the threshold-set search over the plane of "
                "draft/target ratios (docs/independent_optimum.md), checked against all subsets and the "
                "transport LP in the tests. Single draft uses the first temperature."
            )
        )
        body = tuple(
            ("2", " & ".join(f"{t:g}" for t in r.draft_temperatures), fmt(r.optimal))
            + tuple(cell(r.values[c], r.optimal) for c in GAP_COLUMNS)
            for r in pairs
        )
        blocks.append(Table(headers, body, "Non-identical draft pairs"))
        blocks += _notes(pairs)
    caption = (
        "Fraction of the optimal acceptance per scheme against draft temperature, one panel per K "
        "(top row: iid drafts; bottom row: drafts without replacement, with the schemes that have an exact "
        "value there)"
    )
    blocks.append(Figure("gap", png_bytes(gap_figure(table)), caption))
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
                "values": r.values,
                "fractions": {c: r.fraction(c) for c in r.values},
                "notes": r.notes,
            }
            for r in table.rows
        ],
    }
    return SectionResult("gap_table", Section("Acceptance gap on large vocabularies", tuple(blocks)), data)
