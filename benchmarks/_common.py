"""Shared plumbing of the benchmark scripts: timing, provenance and the JSON result file."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def timed(function: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time in seconds over ``repeats`` calls after one warm-up call, and the last result."""
    result = function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


@dataclass
class Timings:
    """Wall and process-CPU times (seconds) of the timed calls of :func:`measure`, and the last result."""

    wall: list[float]
    cpu: list[float]
    result: object

    @property
    def median(self) -> float:
        """Median wall time (s)."""
        return float(np.median(self.wall))

    @property
    def cpu_median(self) -> float:
        """Median CPU time (s) of this process: less inflated by other jobs on a shared machine."""
        return float(np.median(self.cpu))


def measure(function: Callable[[], object], repeats: int, before: Callable[[], object] | None = None) -> Timings:
    """Like :func:`timed` (one warm-up call, then ``repeats`` timed calls) but keeping every wall
    time and the CPU times too; ``before`` (if given) runs untimed before each timed call."""
    result = function()
    wall, cpu = [], []
    for _ in range(repeats):
        if before is not None:
            before()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = function()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return Timings(wall, cpu, result)


def provenance() -> dict:
    """Machine, versions, date and commit, recorded next to every benchmark result."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    versions = {}
    for package in ("numpy", "scipy", "cvxpy", "highspy", "torch", "transformers", "pycddlib", "sympy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "machine": platform.machine(),
        "processor": platform.processor(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "versions": versions,
    }


def write_results(name: str, rows: list[dict], **extra: object) -> Path:
    """Write ``{"provenance": ..., "rows": rows, ...}`` to ``benchmarks/results/<name>.json``."""
    return write_json(RESULTS_DIR / f"{name}.json", {"provenance": provenance(), "rows": rows, **extra})


def write_json(path: Path, data: dict) -> Path:
    """Write ``data`` as indented JSON to ``path`` (creating its directory); for scripts with their
    own result layout, which put ``"provenance": provenance()`` in ``data`` themselves."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    return path


def print_table(rows: list[dict], columns: list[str]) -> None:
    """Print ``rows`` as an aligned text table with the given columns."""
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [max(len(column), *(len(r[i]) for r in cells)) for i, column in enumerate(columns)]
    print("  ".join(column.ljust(width) for column, width in zip(columns, widths)))
    for r in cells:
        print("  ".join(value.ljust(width) for value, width in zip(r, widths)))


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
