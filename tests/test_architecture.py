"""The shape of the package (DESIGN.md, "The house"): imports point one way, no module grows past
600 lines, and theory/ is in rooms.

The import graph is read from the source with ``ast``: a node per module of ``multidraft/``
(a package is its ``__init__``), an arrow for every ``import`` of another module of the package,
at module level *and* inside functions (a deferred import is still a dependency, merely a late
one). ``from package import name`` points at the submodule ``package.name`` when there is one,
else at the package. The implicit import of a module's parent packages is not an arrow.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "multidraft"
MAX_LINES = 600
#: The top-level packages, each importing only those before it (DESIGN.md).
LAYERS = ["theory", "lp", "schemes", "trees", "decoding", "report", "cli"]
#: The rooms of theory/, each importing only those before it.
ROOMS = ["laws", "optimum", "verifier"]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PACKAGE) -> nx.DiGraph:
    """Modules of the package under ``root`` and the arrows of their imports (module docstring)."""
    files = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in files else known(source) for alias in node.names
                ]
            graph.add_edges_from((name, target) for target in targets if target and target != name)
    return graph


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph()


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The reader's twin: a toy package with one circle per kind of arrow, each one found."""
    root = tmp_path / "toy"
    (root / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from toy.a import f\n",
        "a.py": "def f():\n    from toy import b  # deferred\n",
        "b.py": "import toy.a\n",
        "sub/__init__.py": "",
        "sub/c.py": "from . import d\n",
        "sub/d.py": "from .c import g\n",
        "e.py": "import os\nfrom toy.sub import c\nfrom toy import f\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    found = import_graph(root)
    assert sorted(map(sorted, (c for c in nx.strongly_connected_components(found) if len(c) > 1))) == [
        ["toy.a", "toy.b"],
        ["toy.sub.c", "toy.sub.d"],
    ]
    assert set(found.successors("toy")) == {"toy.a"} and set(found.successors("toy.e")) == {"toy", "toy.sub.c"}


def test_no_import_circle(graph):
    """No two modules import each other, directly or around a loop."""
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_packages_import_one_way(graph):
    """theory <- lp <- schemes <- trees <- decoding <- report <- cli: no arrow points right."""

    def layer(module: str) -> int | None:
        parts = module.split(".")
        return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None

    backwards = sorted(
        (source, target)
        for source, target in graph.edges
        if layer(source) is not None and layer(target) is not None and layer(target) > layer(source)
    )
    assert backwards == []


def test_theory_rooms_import_one_way(graph):
    """laws <- optimum <- verifier inside theory/, and no room imports the theory package's face
    or the model of speed (``theory/speed.py``, ``theory/_block_efficiency.py``)."""

    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "theory" else None

    wrong = sorted(
        (source, target)
        for source, target in graph.edges
        if room(source) in ROOMS
        and (
            target == "multidraft.theory"
            or (room(target) in ROOMS and ROOMS.index(room(target)) > ROOMS.index(room(source)))
            or room(target) in ("speed", "_block_efficiency")
        )
    )
    assert wrong == []


def test_no_module_reaches_the_line_limit():
    long = {str(path.relative_to(PACKAGE)): n for path in PACKAGE.rglob("*.py") if (n := len(path.read_text().splitlines())) >= MAX_LINES}
    assert long == {}


def test_theory_is_in_rooms():
    rooms = sorted(path.parent.name for path in (PACKAGE / "theory").glob("*/__init__.py") if not path.parent.name.startswith("_"))
    assert len(rooms) >= 3 and set(ROOMS) <= set(rooms)


#: Module paths from before theory's rooms, their new home, and the names they must still give.
DEPRECATED = {
    "multidraft.theory.distributions": ("multidraft.theory.laws", ["as_distribution", "check_count", "MASS_FLOOR", "zipf"]),
    "multidraft.theory.limits": ("multidraft.theory.laws", ["ProblemTooLargeError", "SizeEstimate", "check_size", "MAX_VARIABLES"]),
    "multidraft.theory.optimal": ("multidraft.theory.optimum", ["optimal_acceptance", "OptimalAcceptance", "cut_value", "BATCH_LAWS"]),
    "multidraft.theory.support": ("multidraft.theory.verifier", ["OutsideTarget", "TargetSplit", "draw_levels", "BLOCK"]),
}


@pytest.mark.parametrize("old", sorted(DEPRECATED))
def test_old_module_paths_warn_and_give_the_same_objects(old, monkeypatch):
    """The aliases kept for one release: importing one warns, names its new home, and its names
    are the very objects of the new home. Nothing else in the suite imports them."""
    new, names = DEPRECATED[old]
    monkeypatch.delitem(sys.modules, old, raising=False)
    theory = importlib.import_module("multidraft.theory")
    monkeypatch.delattr(theory, old.rpartition(".")[2], raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated.*import from {new} instead"):
        alias = importlib.import_module(old)
    home = importlib.import_module(new)
    assert alias.__all__ and all(getattr(alias, name) is getattr(home, name) for name in [*alias.__all__, *names])
    monkeypatch.delitem(sys.modules, old)  # the next import warns again
    monkeypatch.delattr(theory, old.rpartition(".")[2], raising=False)


def test_the_suite_imports_no_deprecated_path():
    """In-repo code, tests, benchmarks, notebooks and docs use the new paths (this file aside)."""
    root = PACKAGE.parent
    here = Path(__file__).resolve()
    paths = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "notebooks").glob("*.ipynb")]
    for folder in ("multidraft", "tests", "benchmarks", "scripts"):
        paths += [p for p in (root / folder).rglob("*.py") if p != here and "_deprecated" not in p.parts]
    found = sorted(
        f"{path.relative_to(root)}: {old}"
        for path in paths
        if path.exists()
        for old in DEPRECATED
        if re.search(re.escape(old) + r"(?![\w])", path.read_text())  # not e.g. optimal_acceptance
    )
    assert found == []


def test_importing_theory_warns_of_nothing():
    """The deprecated folder on theory's ``__path__`` is searched only for the old names:
    importing theory, its rooms and speed warns of nothing (in a fresh interpreter)."""
    code = (
        "import warnings; warnings.simplefilter('error'); "
        "import multidraft.theory, multidraft.theory.laws, multidraft.theory.optimum, multidraft.theory.verifier, "
        "multidraft.theory.speed"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
