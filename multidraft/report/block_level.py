"""Report section "Block level: tree verifiers against the block-level optimum".

On small sequence models (next-token tables up to depth L over n tokens, drawn from the
report's seed, plus Sun et al.'s example), the exact expected number of accepted tokens
E[τ] of token-level SpecInfer (RRS without replacement for trees drafted without
replacement), the token-level optimal verifier, traversal verification and selective block
verification, against the certified block-level optimum O: the largest E[τ] of any lossless
verifier that sees every table (:func:`multidraft.trees.block_optimum`). The **gap closed** by
a verifier V is ``(E_V - E_B) / (O - E_B)`` with B the SpecInfer baseline
(:class:`multidraft.trees.BlockGapRow`).

Every number is exact enumeration over all draft trees and the verifier's randomness
(:func:`multidraft.trees.evaluate`), which also re-proves block losslessness; the largest
deviation from the target's joint law is reported. This is a handful of small instances
chosen to keep the report fast; ``benchmarks/bench_block_gap.py`` computes the 48-instance
table (n <= 4, L <= 3, K <= 3) into ``benchmarks/results/block_gap.json``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import TEXT_SIZE, TITLE_SIZE, png_bytes, pyplot, temperature_text
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, ReportProgress, SectionResult, progress_bar

__all__ = ["BLOCK_VERIFIERS", "BLOCK_INSTANCES", "BlockLevelTable", "block_level_table", "units", "build"]

#: Verifiers of the table, the SpecInfer baseline first (``token:rrs-wor`` on wor trees).
BLOCK_VERIFIERS = ("token:specinfer", "token:optimal", "traversal", "selective")
#: The instances: (family, n, L), each with K = 2 drafted iid and without replacement.
BLOCK_INSTANCES = (
    ("sun", 2, 2),
    ("dirichlet", 3, 2),
    ("temperature 1.5", 3, 2),
    ("temperature 2.5", 3, 2),
    ("dirichlet", 2, 3),
)
#: Drafts per tree in the table.
BLOCK_K = 2

_LABELS = {
    "token:specinfer": "SpecInfer (token)",
    "token:rrs-wor": "SpecInfer (token)",
    "token:optimal": "optimal (token)",
    "traversal": "traversal",
    "selective": "selective block",
}


@dataclass(frozen=True)
class BlockLevelTable:
    """The block-level gap on small exact instances.

    ``rows`` are :class:`multidraft.trees.BlockGapRow` (exact E[τ] per verifier, the block
    optimum and its certified upper bound, the losslessness deviations); ``single_path`` is the
    check of Sun et al.'s optimality theorem on the first random instance: block verification's
    E[τ] and the block optimum at K = 1 (equal up to the LP's tolerance), on the instance
    ``single_path_instance``.
    """

    rows: tuple
    single_path: tuple[float, float]
    single_path_instance: str

    @property
    def max_deviation(self) -> float:
        """The largest deviation from the target's joint law over every evaluation."""
        return max(float(d) for row in self.rows for d in row.deviations.values())

    def as_dict(self) -> dict:
        """JSON-ready rows and checks."""
        return {
            "k": BLOCK_K,
            "rows": [row.as_dict() for row in self.rows],
            "max_deviation": self.max_deviation,
            "single_path": {
                "instance": self.single_path_instance,
                "block_verification": self.single_path[0],
                "block_optimum": self.single_path[1],
            },
        }


def _models(seed: int) -> Iterator[tuple[str, object]]:
    """(label, sequence model) of :data:`BLOCK_INSTANCES`, random tables from ``seed``."""
    from multidraft.trees import SequenceModel, sun_example  # noqa: PLC0415 -- the trees layer, loaded when used

    rng = np.random.default_rng(seed)
    for family, n, length in BLOCK_INSTANCES:
        if family == "sun":
            yield f"Sun et al.'s example (n={n}, L={length})", sun_example()
        elif family == "dirichlet":
            yield f"Dirichlet(1) n={n} L={length}", SequenceModel.random(n, length, rng)
        else:
            temperature = float(family.split()[1])
            yield (
                f"temperature {temperature_text(temperature)} n={n} L={length}",
                SequenceModel.temperature(n, length, rng, temperature=temperature),
            )


def block_level_table(seed: int, *, progress: bool | ReportProgress = False) -> BlockLevelTable:
    """Exact E[τ] of :data:`BLOCK_VERIFIERS` and the block optimum on :data:`BLOCK_INSTANCES`
    (K = 2, iid and without replacement), plus the K = 1 check of block verification against
    the optimum on the first random instance."""
    from multidraft.trees import block_gap, block_optimum, evaluate, get_verifier  # noqa: PLC0415

    models = list(_models(seed))
    rows = []
    with progress_bar(progress, units_of_table()) as bar:
        for label, model in models:
            for without_replacement in (False, True):
                bar.stage(f"block level: {label}, {'wor' if without_replacement else 'iid'}")
                row = block_gap(
                    model, BLOCK_K, without_replacement=without_replacement, verifiers=BLOCK_VERIFIERS, instance=label
                )
                rows.append(row)
                bar.advance()
        bar.stage("block level: K = 1 check")
        label, model = models[1]
        single = float(evaluate(get_verifier("block"), model, 1).expected_accepted)
        optimum = block_optimum(model, 1, progress=False).value
        bar.advance()
    return BlockLevelTable(tuple(rows), (single, optimum), label)


def units_of_table() -> int:
    """Steps of :func:`block_level_table`: one per row and one for the K = 1 check."""
    return 2 * len(BLOCK_INSTANCES) + 1


def units(config: ReportConfig) -> int:
    """Steps this section reports to the progress bar."""
    return units_of_table()


def _cell(row, name: str) -> str:
    value = float(row.expected[name]) + 1.0  # block efficiency E[τ + 1], as the text says
    closed = row.closed(name)
    if name == row.baseline or math.isnan(closed):
        return f"{value:.4f}"
    return f"{value:.4f} ({int(round(100 * closed))}%)"


def block_level_figure(rows: Sequence) -> object:
    """Gap closed by each verifier (0: SpecInfer, 1: the block optimum) on every instance.

    Every bar carries its value (``0%`` included, with a marker on the zero line), so that a
    verifier that closes none of the gap is not mistaken for one without data; a value that
    cannot be computed (NaN) is labelled ``n/a``."""
    plt = pyplot()
    names = BLOCK_VERIFIERS[1:]
    labels = [f"{row.instance}, {'wor' if row.without_replacement else 'iid'}" for row in rows]
    figure, axis = plt.subplots(figsize=(9.0, 0.95 * len(rows) + 1.6), layout="constrained")
    height = 0.8 / len(names)
    positions = np.arange(len(rows))
    for index, name in enumerate(names):
        values = np.array([row.closed(name) for row in rows], dtype=float)
        centres = positions + (index - (len(names) - 1) / 2) * height
        bars = axis.barh(centres, np.nan_to_num(values), height, label=_LABELS[name])
        colour = bars.patches[0].get_facecolor() if bars.patches else None
        for centre, value in zip(centres, values):
            if np.isnan(value):
                axis.text(0.01, centre, "n/a", va="center", ha="left", fontsize=TEXT_SIZE - 1, color="dimgray")
                continue
            if abs(value) < 0.005:  # a zero-length bar: a marker on the zero line keeps it visible
                axis.plot([0.0], [centre], marker="D", markersize=5, color=colour, linestyle="none")
                value = 0.0  # printed 0%, never -0%
            shift = 0.015 if value >= 0 else -0.015
            axis.text(value + shift, centre, f"{value:.0%}", va="center", ha="left" if value >= 0 else "right", fontsize=TEXT_SIZE - 1)
    axis.set_yticks(positions, labels, fontsize=TEXT_SIZE)
    axis.tick_params(axis="x", labelsize=TEXT_SIZE)
    axis.invert_yaxis()
    axis.axvline(0.0, color="black", linewidth=1.0)
    axis.axvline(1.0, color="black", linewidth=1.0, linestyle="--")
    low = min(0.0, *(row.closed(name) for row in rows for name in names if not math.isnan(row.closed(name))))
    axis.set_xlim(low - 0.12 if low < 0 else -0.05, 1.15)  # room for the labels beside the bars
    axis.set_xlabel("gap closed: (E[τ] − E[τ] SpecInfer) / (block optimum − E[τ] SpecInfer)", fontsize=TEXT_SIZE)
    axis.grid(axis="x", alpha=0.3)
    figure.legend(*axis.get_legend_handles_labels(), fontsize=TEXT_SIZE, loc="outside lower center", ncols=len(names))
    axis.set_title(f"Block level, K = {BLOCK_K}: share of the gap to the block-level optimum", fontsize=TITLE_SIZE)
    return figure


def build(context: BuildContext) -> SectionResult:
    """Table, figure and text of the block-level section."""
    table = block_level_table(context.config.seed, progress=context.progress)
    headers = ("instance", "drafting", *(f"{_LABELS[name]}: E[τ + 1]" for name in BLOCK_VERIFIERS), "block optimum: E[τ + 1]")
    rows = []
    for row in table.rows:
        names = [row.baseline, *BLOCK_VERIFIERS[1:]]
        drafting = "without replacement" if row.without_replacement else "iid"
        rows.append((row.instance, drafting, *(_cell(row, name) for name in names), f"{row.optimum + 1.0:.4f}"))
    single, optimum = table.single_path
    text = (
        "Exact block efficiency E[τ + 1] (tokens per target call: the E[τ] accepted draft tokens plus the one the "
        f"target adds) with K = {BLOCK_K} draft "
        "sequences, on small sequence models: next-token tables of a target and a draft after every prefix up to "
        "depth L (Sun et al.'s example: target (1/3, 2/3), draft (2/3, 1/3) at every step; random Dirichlet(1) "
        "tables and temperature pairs -- draft = target at temperature 1.5 or 2.5 -- drawn with the report's "
        "seed). Each number enumerates every draft tree and the verifier's own randomness; it is not a sample "
        "and not a real model. In brackets: the share of the gap between token-level SpecInfer (RRS without "
        "replacement on trees drafted without replacement) and the block-level optimum that the verifier closes. "
        "The block optimum is the largest E[τ] any lossless verifier can reach, even one that sees every table: "
        "an LP certified against an independent dual bound (multidraft.trees.block_optimum)."
    )
    negative = [
        f"{_LABELS[name]} on {row.instance} ({'wor' if row.without_replacement else 'iid'}, {100 * row.closed(name):.0f}%)"
        for row in table.rows
        for name in BLOCK_VERIFIERS[1:]
        if row.closed(name) < -0.005
    ]
    negative_text = ""
    if negative:
        negative_text = (
            "A negative share means the verifier accepts fewer tokens than the SpecInfer baseline on that instance: "
            + "; ".join(negative)
            + ". No verifier that sees only the tree dominates token-level SpecInfer on every model (each is lossless "
            "by a different rule), so a verifier can fall below it where its rule fits the tables worse."
        )
    checks = (
        f"Checks: every evaluation above re-proves block losslessness (largest deviation from the target's joint "
        f"law of L + 1 tokens: {table.max_deviation:.1e}); at K = 1 on the {table.single_path_instance} instance block "
        f"verification reaches E[τ] = {single:.6f} against the optimum {optimum:.6f} (Sun et al.: block "
        "verification is optimal for one draft). For K ≥ 2 no verifier that sees only the tree reaches the optimum on "
        "every model (docs/block_level.md, §6). "
        "A larger table (48 instances, n ≤ 4, L ≤ 3, K ≤ 3) is computed by benchmarks/bench_block_gap.py; "
        "real-model block efficiency per verifier comes from "
        "`multidraft measure --verifier traversal selective token:optimal`."
    )
    png = png_bytes(block_level_figure(table.rows))
    figure = Figure("block_level", png, "Share of the gap to the block-level optimum closed by each verifier")
    section = Section(
        "Block level: tree verifiers against the block-level optimum",
        (Paragraph(text), Table(headers, tuple(rows)), *((Paragraph(negative_text),) if negative else ()), Paragraph(checks), figure),
    )
    return SectionResult("block_level", section, table.as_dict())
