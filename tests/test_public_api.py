"""The public face: every name in every ``__all__`` imports, and light modules stay light."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

SUBPACKAGES = [
    "multidraft",
    "multidraft.theory",
    "multidraft.theory.laws",
    "multidraft.theory.optimum",
    "multidraft.theory.verifier",
    "multidraft.lp",
    "multidraft.schemes",
    "multidraft.trees",
    "multidraft.decoding",
    "multidraft.report",
]


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_exported_name_exists(name):
    module = importlib.import_module(name)
    assert module.__all__, f"{name} exports nothing"
    missing = [item for item in module.__all__ if not hasattr(module, item)]
    assert missing == []
    assert len(set(module.__all__)) == len(module.__all__)


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("multidraft.theory", ("cvxpy", "torch", "cdd", "sympy", "transformers")),
        ("multidraft.schemes", ("cvxpy", "torch", "transformers")),
        ("multidraft.trees", ("cvxpy", "torch", "transformers")),
        ("multidraft.cli", ("numpy", "cvxpy", "torch", "transformers")),
    ],
)
def test_light_imports(module, forbidden):
    """Importing these modules must not pull heavy dependencies (checked in a fresh process)."""
    code = f"import sys, {module}; print(' '.join(m for m in {forbidden!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []
