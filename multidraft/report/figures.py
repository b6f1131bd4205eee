"""Figures of the acceptance-gap report (matplotlib, Agg backend, no display needed).

Each function takes the result object of one report section and returns a matplotlib
``Figure``; :func:`png_bytes` turns it into PNG bytes (deterministic: no timestamp in the
metadata), which the renderers save under ``figures/`` and embed in ``report.html``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np

from multidraft.report.synthetic import GAP_COLUMNS, FamilyCurves, GapTable, TruncationSweep

__all__ = [
    "family_figure",
    "gap_figure",
    "truncation_figure",
    "speed_figure",
    "real_figure",
    "png_bytes",
]

#: Display names of registry schemes in figures and tables.
SCHEME_LABELS = {"spectr": "SpecTr", "specinfer": "SpecInfer", "rrs-wor": "RRS without replacement"}

_STYLES = {
    "optimal": dict(color="black", linewidth=2.0),
    "truncated LP": dict(color="tab:green", marker="s"),
    "truncated LP, ratio key": dict(color="tab:olive", marker="D"),
    "SpecTr": dict(color="tab:blue", marker="o"),
    "SpecInfer": dict(color="tab:orange", marker="^"),
    "single draft": dict(color="tab:gray", marker="x"),
}


def _pyplot():
    import matplotlib  # noqa: PLC0415 -- optional dependency, import on use

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def png_bytes(figure, dpi: int = 110) -> bytes:
    """Render ``figure`` to PNG bytes (no creation time in the metadata) and close it."""
    plt = _pyplot()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None}, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def family_figure(curves: FamilyCurves):
    """Figure 2 of Khisti et al.: acceptance against the family parameter t, P* = 1 shaded."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    if curves.interval is not None:
        low, high = (float(v) for v in curves.interval)
        label = f"Theorem 2: P* = 1 (t ∈ [{curves.interval[0]}, {curves.interval[1]}])"
        axis.axvspan(low, high, color="tab:green", alpha=0.12, label=label)
    axis.plot(curves.t, curves.optimal, color="black", linewidth=2.0, label=f"optimal, K = {curves.k}")
    for name, values in curves.schemes.items():
        axis.plot(curves.t, values, linewidth=1.5, label=f"{SCHEME_LABELS.get(name, name)}, K = {curves.k}")
    axis.plot(curves.t, curves.single, color="tab:gray", linestyle="--", linewidth=1.2, label="single draft (K = 1)")
    axis.set_xlabel("t")
    axis.set_ylabel("acceptance probability")
    axis.set_title(curves.family.label, fontsize=10)
    axis.set_xlim(curves.t[0], curves.t[-1])
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="lower center")
    return figure


def gap_figure(table: GapTable):
    """Fraction of the optimum reached by each scheme against draft temperature, one panel per K."""
    plt = _pyplot()
    ks = sorted({row.k for row in table.rows if row.law != "independent"})
    figure, axes = plt.subplots(
        1, len(ks), figsize=(4.2 * len(ks) + 1.6, 3.6), sharey=True, squeeze=False, layout="constrained"
    )
    for axis, k in zip(axes[0], ks):
        for law, linestyle in (("iid", "-"), ("wor", ":")):
            rows = [r for r in table.rows if r.law == law and r.k == k]
            if not rows:
                continue
            temperatures = [r.draft_temperatures[0] for r in rows]
            for column in GAP_COLUMNS:
                if law == "wor" and column == "single draft":
                    continue  # the same single draft as under iid, only a different denominator
                fractions = [r.fraction(column) for r in rows]
                if all(f is None for f in fractions):
                    continue
                values = [np.nan if f is None else f for f in fractions]
                axis.plot(temperatures, values, linestyle=linestyle, label=f"{column} ({law})", **_STYLES[column])
        axis.axhline(1.0, color="black", linewidth=1.0)
        axis.set_title(f"K = {k}")
        axis.set_xlabel("draft temperature (target 1.0)")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of the optimal acceptance")
    handles: dict = {}
    for axis in axes[0]:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    figure.legend(handles.values(), handles.keys(), fontsize=7, loc="outside right center")
    figure.suptitle(f"Acceptance gap to the optimum, Zipf-like targets, n = {table.n}", fontsize=10)
    return figure


def readable_log_axis(axis) -> None:
    """Label a logarithmic y axis in plain numbers (``0.5, 1, 2, 5``), never ``4×10⁰``.

    Matplotlib labels the minor ticks in scientific notation when the data span less than a
    decade (no major tick to label); here the major ticks get plain labels, and the minor
    ticks too when the axis spans less than a decade (else they stay unlabelled). Call after
    plotting, when the limits are known.
    """
    from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: PLC0415

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    low, high = axis.get_ylim()
    axis.yaxis.set_major_formatter(plain)
    axis.yaxis.set_minor_formatter(plain if high < 10 * low else NullFormatter())


def truncation_figure(sweep: TruncationSweep):
    """Truncated LP: acceptance (left) and solve time per position (right) against s."""
    plt = _pyplot()
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


def speed_figure(ks: Sequence[int], speedups: dict[str, np.ndarray], title: str):
    """Predicted speed-up over plain decoding (best draft length per K) against K.

    ``speedups[label]`` holds one value per K in ``ks``.
    """
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.0, 3.8), layout="constrained")
    for label, values in speedups.items():
        axis.plot(ks, values, marker="o", label=label)
    axis.axhline(1.0, color="black", linewidth=1.0)
    axis.set_xlabel("number of drafts K")
    axis.set_ylabel("predicted speed-up (best L)")
    axis.set_xticks(list(ks))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title(title, fontsize=10)
    return figure


def real_figure(
    labels: Sequence[str],
    empirical: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    expected: np.ndarray,
    optimal: np.ndarray,
):
    """Real-model acceptance per setting: empirical with 95% intervals, expected, optimal."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(max(6.0, 0.7 * len(labels) + 2), 3.8), layout="constrained")
    x = np.arange(len(labels))
    errors = [empirical - low, high - empirical]
    axis.errorbar(x, empirical, yerr=errors, fmt="o", capsize=3, label="empirical (95% CI)")
    axis.plot(x, expected, "x", markersize=8, label="expected (exact, same positions)")
    axis.plot(x, optimal, "_", markersize=14, color="black", label="optimal (same positions)")
    axis.set_xticks(x)
    axis.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel("token-level acceptance")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return figure
