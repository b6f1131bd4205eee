"""Report section "Acceptance gap on large vocabularies": each scheme's acceptance against the
optimum on Zipf-like decoding positions, per number of drafts K and draft temperature.

For iid drafts and drafts without replacement (K in ``config.ks`` × draft temperatures) and for
non-identical draft pairs, the optimum ``P*`` next to the acceptance the optimal verifier
achieves (:func:`multidraft.theory.verifier.optimal_selection_rule`), the truncated importance
LP (two rank keys; multi-stage for K > 2), SpecTr, SpecInfer and a single draft, each the mean
exact acceptance over the positions of :mod:`multidraft.report.positions`. The scheme columns
are data (:data:`SCHEME_COLUMNS`: registry names and options); every other registered scheme
that runs at any vocabulary size for a row's law, and is not optimal (the optimum is a column
already), gets a column of its own, labelled by its registry name.

Not to be confused with :mod:`multidraft.report.instance_gap` (ratios over random small
instances, like Table 3 of Khisti et al.).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import TEXT_SIZE, TITLE_SIZE, png_bytes, pyplot, temperature_text
from multidraft.report.positions import PositionSet
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, ReportProgress, SectionResult, cell, fmt, progress_bar
from multidraft.theory import IID, Independent, WithoutReplacement, optimal_acceptance, optimal_acceptance_batch
from multidraft.theory.laws import law_for
from multidraft.theory.optimum import BATCH_LAWS
from multidraft.theory.verifier import has_verifier, optimal_selection_rule

__all__ = [
    "GAP_COLUMNS",
    "SchemeColumn",
    "SCHEME_COLUMNS",
    "PositionGapRow",
    "PositionGapTable",
    "position_gap_table",
    "gap_figure",
    "units",
    "build",
]

@dataclass(frozen=True)
class SchemeColumn:
    """A column of registered schemes: ``schemes`` are registry names, the first that applies
    to a row's law runs (with ``options``, plus ``s`` where it takes one); ``selected``: the
    selected draft's acceptance ``Σ min(p, r)`` rather than ``P(Y ∈ set(X))``; ``note``: why the
    column is empty for a law none of them supports."""

    label: str
    schemes: tuple[str, ...]
    options: Mapping[str, object] = field(default_factory=dict)
    selected: bool = False
    note: str | None = None


_IMPORTANCE_NOTE = "the importance LP is built for independent drafts, not drafts without replacement"
#: The scheme columns, in display order: the truncated importance LP (K = 2; its multi-stage
#: combination for K > 2; two rank keys), SpecTr and SpecInfer (recursive rejection sampling;
#: its without-replacement form under the wor law).
SCHEME_COLUMNS = (
    SchemeColumn("truncated LP", ("multistage",), {"rank_key": "published"}, selected=True, note=_IMPORTANCE_NOTE),
    SchemeColumn("truncated LP, ratio key", ("multistage",), {"rank_key": "ratio"}, selected=True, note=_IMPORTANCE_NOTE),
    SchemeColumn("SpecTr", ("spectr",)),
    SchemeColumn("SpecInfer", ("specinfer", "rrs-wor")),
)
#: The acceptance the optimal verifier achieves (``Σ min(p, r)`` of its rule's law r).
VERIFIER_COLUMN = "optimal verifier (achieved)"
#: The single-draft acceptance ``Σ min(p, q)`` (first draft temperature).
SINGLE_COLUMN = "single draft"
#: Columns of the gap table besides the optimum, in display order (the built-in ones; see
#: :func:`gap_columns` for the columns of schemes registered later).
GAP_COLUMNS = (VERIFIER_COLUMN, *(column.label for column in SCHEME_COLUMNS), SINGLE_COLUMN)

#: Laws of the temperature rows: those with a batched optimum (iid, wor).
_LAWS = BATCH_LAWS
#: Law of the non-identical pairs.
_PAIR_LAW = Independent.name

#: 95% half-width of a column's mean when it is an estimate (rrs-wor, K > 2, large n).
ESTIMATE_HALF_WIDTH = 1e-3
#: Whether the table computes that estimate: minutes of CPU per cell at n = 49152 (about 0.4 ms
#: per rejection path, ~10^5 paths per cell), too slow for the default report, so off by default.
ESTIMATES_IN_TABLE = False
#: Notes of estimated columns start with this (the cells are marked "≈").
ESTIMATE_NOTE = "estimate"
#: How the figure names the laws of the temperature rows.
_LAW_TITLES = {IID.name: "iid drafts", WithoutReplacement.name: "without replacement"}

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


def _registered_columns(laws: Sequence[str], ks: Sequence[int]) -> tuple[SchemeColumn, ...]:
    """A column for every registered scheme no column names that is not optimal and runs at any
    vocabulary size for one of ``laws`` with one of ``ks`` drafts (labelled by its name)."""
    from multidraft.schemes import SCHEMES  # noqa: PLC0415 -- the schemes layer, loaded when used
    from multidraft.theory.laws import law_class

    named = {name for column in SCHEME_COLUMNS for name in column.schemes}
    classes = [law_class(kind) for kind in laws]
    return tuple(
        SchemeColumn(name, (name,))
        for name, cls in SCHEMES.items()
        if name not in named
        and not cls.capabilities.optimal
        and any(issubclass(law, cls.capabilities.any_vocabulary) and cls.supports_law(law, k) for law in classes for k in ks)
    )


def gap_columns(laws: Sequence[str] = (*_LAWS, _PAIR_LAW), ks: Sequence[int] = (2, 4, 8)) -> tuple[str, ...]:
    """The gap table's columns besides the optimum, in display order: :data:`GAP_COLUMNS` with
    the columns of registered schemes (:func:`_registered_columns`) before ``single draft``."""
    extra = tuple(column.label for column in _registered_columns(laws, ks))
    return GAP_COLUMNS[:-1] + extra + GAP_COLUMNS[-1:]


def _verifier_value(laws: Sequence, targets: np.ndarray) -> tuple[float | None, str | None, str | None]:
    """Mean ``Σ min(p, r)`` of the optimal verifier's rule over the positions."""
    if not has_verifier(laws[0]):
        return None, None, (
            "the optimal verifier samples iid drafts, drafts without replacement and two independent drafts; "
            "for more independent drafts the optimum is a number only"
        )
    values = [optimal_selection_rule(p, law).acceptance for p, law in zip(targets, laws)]
    return float(np.mean(values)), "theory.verifier.optimal_selection_rule", None


def _column_value(
    column: SchemeColumn, s: int, laws: Sequence, targets: np.ndarray
) -> tuple[float | None, str | None, str | None]:
    """Mean exact acceptance of a column over the positions: (value, scheme, note).

    A column none of whose schemes applies to the law, or a scheme without an exact method at
    this vocabulary size (its ``ValueError`` says why), gives ``None`` and the reason as the note.
    """
    from multidraft.schemes import SCHEMES, get_scheme  # noqa: PLC0415 -- the schemes layer, loaded when used

    law = laws[0]
    name = next((name for name in column.schemes if SCHEMES[name]().supports(law)), None)
    if name is None:
        return None, None, column.note or f"{' / '.join(column.schemes)} does not support the {law.name} law"
    options = dict(column.options)
    if "s" in inspect.signature(SCHEMES[name]).parameters:
        options["s"] = s
    scheme = get_scheme(name, **options)
    described = f"{name}({', '.join(f'{key}={value!r}' for key, value in options.items())})" if options else name
    try:
        plans = [scheme.prepare(p, law) for p, law in zip(targets, laws)]
        values = [plan.selected_acceptance if column.selected else float(plan.acceptance) for plan in plans]
    except ValueError as error:
        if ESTIMATES_IN_TABLE and hasattr(scheme, "estimate_acceptance"):  # rrs-wor, K > 2
            rng = np.random.default_rng(0)
            width = ESTIMATE_HALF_WIDTH * np.sqrt(len(laws))  # per position, so the mean's is <= 1e-3
            estimates = [scheme.estimate_acceptance(p, law, rng, half_width=width) for p, law in zip(targets, laws)]
            half = float(np.sqrt(sum(e.half_width**2 for e in estimates))) / len(estimates)
            paths = sum(e.paths for e in estimates)
            return float(np.mean([e.value for e in estimates])), f"{described}.estimate_acceptance", (
                f"{ESTIMATE_NOTE} (≈): unbiased Rao-Blackwellised rejection paths, {paths} paths, "
                f"95% interval ±{half:.1e} on the mean"
            )
        # The error's own advice (if any, after ";") concerns the optimum, not this scheme: drop it.
        reason = str(error).splitlines()[0].split("; ")[0]
        estimate = (
            "; an unbiased estimate with its 95% interval: RRSWithoutReplacement.estimate_acceptance"
            if hasattr(scheme, "estimate_acceptance") else ""
        )  # fmt: skip
        return None, name, f"{name} has no exact acceptance at n={targets.shape[1]} ({reason}){estimate}"
    return float(np.mean(values)), described, None


def _row_values(
    s: int, law_objects: Sequence, targets: np.ndarray, names: dict[str, str], columns: Sequence[SchemeColumn]
) -> tuple[dict[str, float | None], dict[str, str]]:
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    kind, k = law_objects[0].name, law_objects[0].k
    cells = [(VERIFIER_COLUMN, _verifier_value(law_objects, targets))]
    cells += [(column.label, _column_value(column, s, law_objects, targets)) for column in columns]
    for label, (value, name, note) in cells:
        values[label] = value
        if note is not None:
            notes[label] = note
        if value is not None:
            names[f"{label} ({kind}, K={k})"] = str(name)
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
    J-curtain/front-back rule's, a lower bound; with ``ESTIMATES_IN_TABLE`` SpecInfer's at K > 2
    and a large vocabulary is an unbiased estimate, marked ≈). ``progress``: a bar on stderr (or the report's bar).
    References: Khisti et al. ICLR 2025 (Theorems 1-3, Section 4); Sun et al. 2023 (SpecTr);
    Miao et al. 2024 (SpecInfer); Jeon et al. 2024.
    """
    if s < 1:
        raise ValueError(f"s: the truncated LP needs s >= 1, got {s}")
    for law in laws:
        if law not in _LAWS:
            raise ValueError(f"laws: unknown law {law!r}; choose from {', '.join(_LAWS)}")
    columns = SCHEME_COLUMNS + _registered_columns((*laws, _PAIR_LAW), (*ks, 2))
    with progress_bar(progress, _steps(ks, temperatures, pairs, laws)) as bar:
        targets = positions.targets
        settings = [(law, k, t) for law in laws for k in ks for t in temperatures]
        rows: list[PositionGapRow] = []
        names: dict[str, str] = {}
        for law, k, temperature in bar.track(settings, lambda item: f"gap table: {item[0]} K={item[1]} T={temperature_text(item[2])}"):
            drafts = positions.drafts(temperature)
            optimal = float(np.mean(optimal_acceptance_batch(targets, drafts, k, law)))
            law_objects = [law_for(law, [q], k) for q in drafts]
            values, notes = _row_values(s, law_objects, targets, names, columns)
            values[SINGLE_COLUMN] = float(np.mean(np.minimum(targets, drafts).sum(axis=1)))
            rows.append(PositionGapRow(law, k, (float(temperature),), optimal, values, notes))
        for pair in bar.track(pairs, lambda item: f"gap table: pair T={temperature_text(item[0])} & {temperature_text(item[1])}"):
            first, second = positions.drafts(pair[0]), positions.drafts(pair[1])
            law_objects = [law_for(_PAIR_LAW, [a, b]) for a, b in zip(first, second)]
            optimal = float(np.mean([optimal_acceptance(p, law).value for p, law in zip(targets, law_objects)]))
            values, notes = _row_values(s, law_objects, targets, names, columns)
            values[SINGLE_COLUMN] = float(np.mean(np.minimum(targets, first).sum(axis=1)))
            rows.append(PositionGapRow(_PAIR_LAW, 2, tuple(float(t) for t in pair), optimal, values, notes))
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
    ks = sorted({row.k for row in table.rows if row.law in _LAWS})
    laws = [law for law in _LAWS if any(row.law == law for row in table.rows)]
    figure, axes = plt.subplots(
        len(laws), len(ks), figsize=(3.6 * len(ks) + 0.6, 3.0 * len(laws) + 1.4), sharex=True, sharey=True,
        squeeze=False, layout="constrained",
    )  # fmt: skip
    for line, law in zip(axes, laws):
        for axis, k in zip(line, ks):
            rows = [r for r in table.rows if r.law == law and r.k == k]
            temperatures = [r.draft_temperatures[0] for r in rows]
            for column in rows[0].values if rows else ():
                fractions = [r.fraction(column) for r in rows]
                if all(f is None for f in fractions):
                    continue  # no exact value for this law at this vocabulary (see the table's note)
                values = [np.nan if f is None else f for f in fractions]
                axis.plot(temperatures, values, label=column, **_STYLES.get(column, dict(marker="v")))
            axis.axhline(1.0, color="black", linewidth=1.0)
            axis.set_title(f"{_LAW_TITLES.get(law, law)}, K = {k}", fontsize=TITLE_SIZE)
            axis.grid(alpha=0.3)
            axis.tick_params(labelsize=TEXT_SIZE)
            if temperatures:  # ticks at the temperatures computed, printed as the tables print them
                axis.set_xticks(temperatures, [temperature_text(t) for t in temperatures])
        line[0].set_ylabel("fraction of the optimum", fontsize=TEXT_SIZE)
    for axis in axes[-1]:
        axis.set_xlabel("draft temperature (target 1.0)", fontsize=TEXT_SIZE)
    handles: dict = {}
    for axis in axes.flat:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    # below the panels, in rows of three: the panels keep the width and the entries stay legible
    figure.legend(handles.values(), handles.keys(), fontsize=TEXT_SIZE, loc="outside lower center", ncols=min(3, len(handles) or 1))
    figure.suptitle(f"Acceptance gap to the optimum, Zipf-like targets, n = {table.n}", fontsize=TITLE_SIZE + 1)
    return figure


def units(config: ReportConfig) -> int:
    """Steps this section reports to the progress bar: one per table row."""
    return _steps(config.ks, config.temperatures, config.pairs, _LAWS)


def _marked(row: PositionGapRow, column: str) -> str:
    """"≈ " for a cell that is an estimate (its note says so), else nothing."""
    return "≈ " if row.notes.get(column, "").startswith(ESTIMATE_NOTE) else ""


def _notes(rows: Sequence[PositionGapRow]) -> list[Paragraph]:
    """One note for the empty cells of a table: each reason once, with the columns it empties
    and the K where it does when that is not every row."""
    every_k = sorted({row.k for row in rows})
    first: dict[str, str] = {}  # column -> its first row's reason (later rows differ only in K)
    empty: dict[str, set[int]] = {}  # column -> the K of its empty cells
    estimated: dict[str, str] = {}  # column -> its estimate's note (cells marked ≈)
    for row in rows:
        for column, note in row.notes.items():
            if note.startswith(ESTIMATE_NOTE):
                estimated.setdefault(column, note)
                continue
            first.setdefault(column, note)
            empty.setdefault(column, set()).add(row.k)
    reasons: dict[str, dict] = {}  # reason -> column -> K values with an empty cell
    for column, note in first.items():
        reasons.setdefault(note, {})[column] = empty[column]
    blocks = []
    if estimated:
        blocks.append(Paragraph("≈: " + "; ".join(f"**{column}**: {note}" for column, note in estimated.items()) + "."))
    if not reasons:
        return blocks
    parts = []
    for reason, columns in reasons.items():
        named = " and ".join(
            f"**{column}**" + ("" if sorted(ks) == every_k else f" (K = {', '.join(map(str, sorted(ks)))})")
            for column, ks in columns.items()
        )
        parts.append(f"{named}: {reason}")
    return [Paragraph("—: " + "; ".join(parts) + ".")] + blocks


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
            "replacement: the J-curtain on U and the front/back rule on T*, lossless, a lower bound on P* that "
            "reaches it on these positions; docs/optimal_verifier.md). "
            f"Truncated LP: s = {table.truncation_s} tokens (K = 2; the multi-stage pairwise combination for "
            "K > 2), with the published rank key p − q² and with the ratio key (p/q decreasing). SpecInfer is recursive "
            "rejection sampling (its without-replacement form under the wor law). "
            "Single draft: Σ min(p, q) with one draft, for reference."
        )
    ]
    columns = tuple(table.rows[0].values) if table.rows else GAP_COLUMNS
    headers = ("K", "draft T", "optimal") + columns
    titles = {IID.name: "Drafts iid", WithoutReplacement.name: "Drafts without replacement"}
    for law in _LAWS:
        rows = [r for r in table.rows if r.law == law]
        if rows:
            body = tuple(
                (str(r.k), temperature_text(r.draft_temperatures[0]), fmt(r.optimal))
                + tuple(_marked(r, c) + cell(r.values[c], r.optimal) for c in columns)
                for r in rows
            )
            blocks.append(Table(headers, body, titles.get(law, f"Drafts {law}")))
            blocks += _notes(rows)
    pairs = [r for r in table.rows if r.law == _PAIR_LAW]
    if pairs:
        blocks.append(
            Paragraph(
                "Non-identical pairs: two independent drafts at different temperatures (K = 2, as in Figure 4 "
                "of Khisti et al.). The optimal column is exact: the threshold-set search over the plane of "
                "draft/target ratios (docs/independent_optimum.md), checked against all subsets and the "
                "transport LP in the tests. The optimal verifier's column is the path curtain's own exact "
                "acceptance (docs/nonidentical_verifier.md): lossless, a lower bound on P*, reached on some pairs "
                "and not others. Single draft uses the first temperature."
            )
        )
        body = tuple(
            ("2", " & ".join(temperature_text(t) for t in r.draft_temperatures), fmt(r.optimal))
            + tuple(cell(r.values[c], r.optimal) for c in columns)
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
