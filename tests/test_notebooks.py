"""Execute every notebook in notebooks/ with nbclient; each must run in <= 3 minutes.

Outputs are not committed: the notebooks are stored cleared and executed in memory here.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
#: The per-notebook budget of the issue (seconds).
BUDGET = 180


def test_every_expected_notebook_is_there():
    assert [p.name for p in NOTEBOOKS] == [
        "01_theorems.ipynb",
        "02_truncated_lp.ipynb",
        "03_double_description.ipynb",
        "04_real_models.ipynb",
        "05_speed.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, "a notebook without code"
    assert all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_within_budget(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=BUDGET, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    errors = [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert seconds <= BUDGET, f"{path.name} took {seconds:.0f} s (budget {BUDGET} s)"
