"""Report section "Real models: block level": tree verifiers on the same real draft trees.

For each setting of a grid -- K draft sequences × length L × draft temperature -- one
measurement (:func:`multidraft.decoding.measure`) drafts trees on the model and drives the
generation with token-level SpecInfer. At every block, the exact expected number of accepted
tokens given the drafted tree, ``E[τ | tree]``, of every verifier -- token-level SpecInfer, the
token-level optimal verifier, traversal verification, selective block verification and, for one
draft, block verification -- is computed from the target and draft distributions on the tree
(:meth:`multidraft.trees.TreeVerifier.law`; Rao–Blackwell). The verifiers are therefore compared
on the same trees, block by block (:class:`multidraft.decoding.PairedScore`): the gain of a
verifier is the mean of ``E_V[τ | tree] − E_SpecInfer[τ | tree]`` with a 95% interval from its
spread over blocks, far narrower than comparing realised lengths of separate runs.

Checks the section states: the driver's realised accepted length against its expectation (the
95% martingale interval of ``τ − E[τ | tree]`` should contain 0); at K = 1, block, traversal and
selective verification must agree on every tree (traversal equals block verification on a chain,
Weng et al. Theorem 3.4; selective reduces to block verification) and the token-level optimal
verifier must equal token-level SpecInfer (one draft: both are speculative sampling), so the
largest per-block difference among them is reported and must be rounding.

The prompts are taken in turn from each task of the bundled prompt set
(:func:`multidraft.decoding.prompts.bundled_prompts`); a second table gives, per task, the
driver's block efficiency and every verifier's gain pooled over the blocks of every setting.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.report.config import ReportConfig
from multidraft.report.figures import TEXT_SIZE, TITLE_SIZE, png_bytes, pyplot, temperature_text
from multidraft.report.render import Figure, Paragraph, Section, Table
from multidraft.report.section import BuildContext, ReportProgress, SectionResult, progress_bar

__all__ = ["RealBlockGrid", "RealBlockSection", "real_block_section", "real_block_figure", "applies", "units", "build"]

#: The driving verifier: the token walk with SpecInfer at every node (the baseline of the gains).
REFERENCE = "token:specinfer"
#: Verifiers scored on every block beside the driver, for every K; ``block`` is added at K = 1.
SCORED = ("token:optimal", "traversal", "selective")
#: Verifiers that coincide on every tree at K = 1 (the section's check), in pairs.
SINGLE_DRAFT_EQUAL = (("block", "traversal"), ("block", "selective"), (REFERENCE, "token:optimal"))

_LABELS = {
    REFERENCE: "SpecInfer (token)",
    "token:optimal": "optimal (token)",
    "traversal": "traversal",
    "selective": "selective block",
    "block": "block (K = 1)",
}


@dataclass(frozen=True)
class RealBlockGrid:
    """The settings of the section: every K × L × draft temperature, each a measurement of
    ``prompts`` bundled prompts taken in turn from each task × ``max_new_tokens`` new tokens
    with the model drafting for itself (or the report's draft model).

    The default (12 settings of 5 prompts, one per task, × 26 tokens, some 40–60 blocks each)
    keeps the section to a few minutes on two CPU cores; the paired gains rest on every block
    of a setting.
    """

    ks: tuple[int, ...] = (1, 2, 4)
    lengths: tuple[int, ...] = (2, 4)
    temperatures: tuple[float, ...] = (0.6, 1.6)
    prompts: int = 5
    max_new_tokens: int = 26

    def settings(self) -> list[tuple[int, int, float]]:
        """``(K, L, T)`` in table order: temperature, then K, then L."""
        return [(k, length, t) for t in self.temperatures for k in self.ks for length in self.lengths]


@dataclass(frozen=True)
class RealBlockSection:
    """The rendered section, its reproducible numbers and its timings."""

    section: Section
    data: dict
    timings: dict


def _scored(k: int) -> tuple[str, ...]:
    return (*SCORED, "block") if k == 1 else SCORED


def _setting_data(k: int, length: int, temperature: float, result) -> dict:
    """One setting's numbers: the driver's calibration, every verifier's paired score, and at
    K = 1 the largest per-block difference between verifiers that must coincide."""
    driver = result.verifiers[0]
    names = list(result.config.verifier_names)
    table = np.array([record.expected for record in result.block_records], dtype=np.float64)
    data = {
        "k": k,
        "length": length,
        "draft_temperature": temperature,
        "blocks": driver.blocks,
        "new_tokens": driver.new_tokens,
        "realised_block_efficiency": driver.block_efficiency,
        "expected_block_efficiency": driver.expected_block_efficiency,
        "calibration_ci95": list(driver.ci95),
        "verifiers": {score.verifier: score.summary() for score in result.paired},
    }
    if k == 1 and len(table):
        deviations = [np.nanmax(np.abs(table[:, names.index(a)] - table[:, names.index(b)])) for a, b in SINGLE_DRAFT_EQUAL]
        data["single_draft_max_difference"] = float(max(deviations))
    return data


def _task_data(result) -> dict:
    """Per task: the blocks, the driver's realised and expected block efficiency, and every
    scored verifier's mean gain ``E_V[τ | tree] − E_SpecInfer[τ | tree]`` over them."""
    names = result.config.verifier_names
    table = np.array([record.expected for record in result.block_records], dtype=np.float64).reshape(-1, len(names))
    tasks = result.config.tasks
    out = {}
    for summary in result.by_task():
        rows = np.array([tasks[record.prompt] == summary.task for record in result.block_records], dtype=bool)
        gains = {name: _finite_mean(table[rows, i] - table[rows, 0]) for i, name in enumerate(names[1:], 1)}
        out[summary.task] = {
            "blocks": summary.blocks,
            "realised_block_efficiency": summary.block_efficiency,
            "expected_block_efficiency": summary.expected_block_efficiency,
            "gains": gains,
        }
    return out


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def _task_table(measured: Sequence[dict]) -> Table:
    """A row per task: blocks, the driver's realised / expected block efficiency and each
    verifier's mean gain over token-level SpecInfer, pooled (weighted by blocks) over every
    setting where the verifier was scored."""
    rows = []
    for task in measured[0]["tasks"]:
        parts = [setting["tasks"][task] for setting in measured if task in setting["tasks"]]
        weights = np.array([part["blocks"] for part in parts], dtype=np.float64)

        def pooled(values, weights=weights):
            return float(np.dot(values, weights) / weights.sum()) if weights.sum() else float("nan")

        cells = []
        for name in (*SCORED, "block"):
            scored = [(part["gains"][name], part["blocks"]) for part in parts if name in part["gains"]]
            cells.append(f"{pooled(*map(np.array, zip(*scored))):+.3f}" if scored else "—")
        rows.append(
            (
                task, str(int(weights.sum())),
                f"{pooled([p['realised_block_efficiency'] for p in parts]):.3f} / {pooled([p['expected_block_efficiency'] for p in parts]):.3f}",
                *cells,
            )
        )  # fmt: skip
    return Table(("task", "blocks", "SpecInfer (token): realised / expected", *(_LABELS[n] for n in (*SCORED, "block"))), tuple(rows))


def real_block_figure(settings: Sequence[dict], temperatures: Sequence[float]):
    """Gain of each verifier over token-level SpecInfer (expected accepted tokens per block,
    paired 95% intervals), one panel per draft temperature, one group per (K, L)."""
    plt = pyplot()
    names = [*SCORED, "block"]
    figure, axes = plt.subplots(
        1, len(temperatures), figsize=(4.2 * len(temperatures) + 0.6, 3.6), sharey=True, layout="constrained", squeeze=False
    )
    for axis, temperature in zip(axes[0], temperatures):
        rows = [s for s in settings if s["draft_temperature"] == temperature]
        x = np.arange(len(rows))
        width = 0.8 / len(names)
        for index, name in enumerate(names):
            offset = (index - (len(names) - 1) / 2) * width
            points = [(i, row["verifiers"][name]) for i, row in enumerate(rows) if name in row["verifiers"]]
            if not points:
                continue
            centre = np.array([score["difference"] for _, score in points])
            low = np.array([score["ci95"][0] for _, score in points])
            high = np.array([score["ci95"][1] for _, score in points])
            axis.errorbar(
                x[[i for i, _ in points]] + offset, centre, yerr=[centre - low, high - centre], fmt="o", markersize=4,
                capsize=2, label=_LABELS[name],
            )  # fmt: skip
        axis.axhline(0.0, color="black", linewidth=0.8)
        axis.set_xticks(x, [f"K={row['k']} L={row['length']}" for row in rows], rotation=30, ha="right", fontsize=TEXT_SIZE - 1)
        axis.tick_params(axis="y", labelsize=TEXT_SIZE)
        axis.set_title(f"draft temperature {temperature_text(temperature)}", fontsize=TITLE_SIZE)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("E[accepted] − SpecInfer (token), per block", fontsize=TEXT_SIZE)
    axes[0][-1].legend(fontsize=TEXT_SIZE - 1)
    return figure


def _label(setting: tuple[int, int, float]) -> str:
    k, length, temperature = setting
    return f"real models, block level: K={k} L={length} T={temperature_text(temperature)}"


def real_block_section(
    config: ReportConfig, progress: bool | ReportProgress = False, grid: RealBlockGrid = RealBlockGrid()
) -> RealBlockSection:
    """Measure every setting of ``grid`` on ``config.target`` (drafting with ``config.draft``,
    or with the target itself at the draft temperature) and build the section.

    Setting i is seeded with ``config.seed + i``; torch runs on
    :func:`multidraft.decoding.models.default_threads` CPU threads, restored afterwards.
    """
    from multidraft.decoding import Sampling, load_model, measure  # noqa: PLC0415
    from multidraft.decoding.models import cpu_threads  # noqa: PLC0415
    from multidraft.decoding.prompts import bundled_prompts  # noqa: PLC0415

    settings = grid.settings()
    prompts = bundled_prompts().round_robin(grid.prompts)
    measured, seconds = [], []
    with cpu_threads(), progress_bar(progress, 1 + len(settings)) as bar:
        bar.stage(f"real models, block level: loading {config.target}")
        target = load_model(config.target, progress=False)
        draft = None if config.draft is None else load_model(config.draft, progress=False)
        bar.advance()
        for index, (k, length, temperature) in enumerate(bar.track(settings, _label)):
            start = time.perf_counter()
            result = measure(
                target, draft, k=k, length=length, scheme="specinfer", prompts=prompts,
                max_new_tokens=grid.max_new_tokens, seed=config.seed + index, draft_sampling=Sampling(temperature),
                baseline=False, progress=False, verifiers=(REFERENCE,), scored=_scored(k),
            )  # fmt: skip
            measured.append(_setting_data(k, length, temperature, result) | {"tasks": _task_data(result)})
            seconds.append(time.perf_counter() - start)
    names = f"{target.name} drafting for itself" if draft is None else f"target {target.name}, draft {draft.name}"
    section = _render(measured, grid, names)
    data = {"grid": {key: list(value) if isinstance(value, tuple) else value for key, value in vars(grid).items()}}
    data["settings"] = measured
    return RealBlockSection(section, data, {"settings_seconds": seconds, "seconds": float(sum(seconds))})


def _gain(score: dict) -> str:
    low, high = score["ci95"]
    return f"{score['expected_block_efficiency']:.3f} ({score['difference']:+.3f} [{low:+.3f}, {high:+.3f}])"


def _render(measured: Sequence[dict], grid: RealBlockGrid, names: str) -> Section:
    headers = ("K", "L", "draft T", "blocks", "SpecInfer (token): realised / expected", *(_LABELS[n] for n in (*SCORED, "block")))
    rows = []
    for setting in measured:
        low, high = setting["calibration_ci95"]
        scores = setting["verifiers"]
        rows.append(
            (
                str(setting["k"]), str(setting["length"]), temperature_text(setting['draft_temperature']), str(setting["blocks"]),
                f"{setting['realised_block_efficiency']:.3f} / {setting['expected_block_efficiency']:.3f} "
                f"[{low:+.3f}, {high:+.3f}]",
                *(_gain(scores[name]) if name in scores else "—" for name in (*SCORED, "block")),
            )
        )  # fmt: skip
    covered = sum(s["calibration_ci95"][0] <= 0 <= s["calibration_ci95"][1] for s in measured)
    single = [s["single_draft_max_difference"] for s in measured if "single_draft_max_difference" in s]
    blocks = [s["blocks"] for s in measured]
    text = (
        f"{names}; target temperature 1.0; {grid.prompts} bundled prompts taken in turn from each task × "
        f"{grid.max_new_tokens} new tokens per setting, "
        f"{min(blocks)}–{max(blocks)} blocks each. Block efficiency = 1 + accepted tokens per block. Token-level "
        "SpecInfer drives the generation; at every block every verifier's exact expected accepted length given the "
        "drafted tree is computed from the distributions on the tree (Rao–Blackwell), so all verifiers are scored "
        "on the same trees. Each verifier's cell: its expected block efficiency, and in brackets its mean gain over "
        "token-level SpecInfer per block with a 95% interval from the spread over blocks (blocks of one prompt "
        "share their context, so the interval is approximate). These are sampled real trees, not exact "
        "enumeration: the small-model section above has exact numbers and the block optimum."
    )
    checks = (
        f"Checks: SpecInfer's realised accepted length against its expectation -- the 95% interval of realised − "
        f"expected (in square brackets) contains 0 in {covered} of {len(measured)} settings (about 1 in 20 may miss "
        "by chance)"
        + (
            f"; at K = 1, block, traversal and selective verification agree on every tree and the token-level "
            f"optimal verifier equals token-level SpecInfer, up to {max(single):.1e} per block."
            if single
            else "."
        )
    )
    figure = Figure(
        "real_block_level",
        png_bytes(real_block_figure(measured, grid.temperatures)),
        "Real models, block level: expected accepted tokens per block gained over token-level SpecInfer on the same "
        "drafted trees (95% intervals), by K, L and draft temperature",
    )
    by_task = Paragraph(
        "By task: the blocks of every setting split by the task of their prompt; SpecInfer's realised / expected block "
        "efficiency and each verifier's mean gain over it per block (the numbers in brackets above), pooled over the "
        "settings weighted by their blocks (block verification over the K = 1 settings only)."
    )
    blocks = (Paragraph(text), Table(headers, tuple(rows)), figure, Paragraph(checks))
    if measured and measured[0]["tasks"]:
        blocks += (by_task, _task_table(measured))
    return Section("Real models: block level", blocks)


def applies(config: ReportConfig) -> bool:
    """Whether the report has this section: only with a model (``--model`` or ``--target``)."""
    return config.target is not None


def units(config: ReportConfig) -> int:
    """Steps this section reports to the progress bar: loading, then one per setting."""
    return 1 + len(RealBlockGrid().settings())


def build(context: BuildContext) -> SectionResult:
    """Measurements, table, figure and text of the real-model block-level section."""
    real = real_block_section(context.config, progress=context.progress)
    return SectionResult("real_block_level", real.section, real.data, {"real_block_level": real.timings})
