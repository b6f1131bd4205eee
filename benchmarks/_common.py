"""Shared plumbing of the benchmark scripts: timing, provenance and the JSON result file."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
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


def measure(
    function: Callable[[], object], repeats: int, before: Callable[[], object] | None = None, cap: float | None = None
) -> Timings:
    """Like :func:`timed` (one warm-up call, then ``repeats`` timed calls) but keeping every wall
    time and the CPU times too; ``before`` (if given) runs untimed before each timed call;
    ``cap`` (if given) stops the timed calls once their CPU times add up to that many seconds
    (at least one call is timed)."""
    result = function()
    wall, cpu = [], []
    for _ in range(repeats):
        if before is not None:
            before()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = function()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        if cap is not None and sum(cpu) >= cap:
            break
    return Timings(wall, cpu, result)


def cpu_ms(function: Callable[[], object], repeats: int, cap: float | None = None) -> float:
    """Median process-CPU milliseconds of ``function()`` over ``repeats`` calls after one
    warm-up call (:func:`measure`, its ``cap`` too)."""
    return 1e3 * measure(function, repeats, cap=cap).cpu_median


def before_and_after_runs(
    script: Path, revision: str, rounds: int, options: list[str], read: Callable[[Path], object] | None = None,
    environment: dict[str, str] | None = None,
) -> tuple[str, list, list]:
    """Run ``script --inner OUT *options`` on the package of ``revision`` (``git archive`` into a
    temporary directory) and on the working tree's, each in a fresh process (with ``environment``
    added to this one's), alternately ``rounds`` times, so that a change of the machine's load
    falls on both sides. Returns (the full commit of ``revision``, the before results, the after
    results), each ``read(OUT)`` (default: OUT's JSON)."""
    read = read or (lambda out: json.loads(out.read_text()))
    here = Path(script).resolve().parent
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True, cwd=here).stdout.strip())
    commit = subprocess.run(["git", "rev-parse", revision], capture_output=True, text=True, check=True, cwd=root).stdout.strip()
    sides: tuple[list, list] = ([], [])
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "archive", commit, "multidraft"], capture_output=True, check=True, cwd=root).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        out = Path(folder) / "run.json"
        for round_ in range(rounds):
            for side, code, name in zip(sides, (folder, str(root)), ("before", "after")):
                print(f"round {round_ + 1}/{rounds}: {name}", file=sys.stderr, flush=True)
                variables = {**os.environ, **(environment or {}), "PYTHONPATH": os.pathsep.join([code, str(here)])}
                subprocess.run([sys.executable, str(Path(script).resolve()), "--inner", str(out), *options], check=True, env=variables, cwd=folder)
                side.append(read(out))
    return commit, sides[0], sides[1]


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
