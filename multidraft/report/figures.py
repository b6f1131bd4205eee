"""What every figure of the report shares (matplotlib, Agg backend, no display needed).

Each section module draws its own figure with :func:`pyplot` and turns it into PNG bytes
with :func:`png_bytes` (deterministic: no timestamp in the metadata), which the renderers save
under ``figures/`` and embed in ``report.html``.
"""

from __future__ import annotations

import io

__all__ = [
    "SCHEME_LABELS",
    "TEXT_SIZE",
    "TITLE_SIZE",
    "pyplot",
    "png_bytes",
    "readable_log_axis",
    "speedup_axis",
    "temperature_text",
]

#: Display names of registry schemes in figures and tables.
SCHEME_LABELS = {"spectr": "SpecTr", "specinfer": "SpecInfer", "rrs-wor": "RRS without replacement"}
#: Font size (points) of every text in a figure (ticks, labels, legends, annotations) and of
#: titles: readable when a wide figure is scaled down to the page.
TEXT_SIZE = 11
TITLE_SIZE = 12


def temperature_text(value: float) -> str:
    """A temperature as the report prints it: with a decimal point always, so that ``2.0``
    stands beside ``0.5`` (never ``2``), and no more digits than it has.

    >>> [temperature_text(t) for t in (2, 0.5, 1.25, 1.0)]
    ['2.0', '0.5', '1.25', '1.0']
    """
    value = float(value)
    return f"{value:.1f}" if round(value, 1) == value else f"{value:g}"


def speedup_axis(axis, which: str = "y") -> None:
    """Label a speed-up axis in multiples: ``1×, 1.5×, 2×``."""
    from matplotlib.ticker import FuncFormatter  # noqa: PLC0415

    getattr(axis, f"{which}axis").set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}×"))


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (imported on first use)."""
    import matplotlib  # noqa: PLC0415 -- the report extra, imported on use

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def png_bytes(figure, dpi: int = 110) -> bytes:
    """Render ``figure`` to PNG bytes (no creation time in the metadata) and close it."""
    plt = pyplot()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None}, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


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
