"""What a verifier that sees only the tree can reach: a joint LP over several sequence models.

A verifier is **tree-only** if its law of (accepted node, next token) given a draft tree T is a
function of T and the distributions on T alone -- the target after every node of T (the last
included) and the draft distribution every token of T was drawn from -- as block verification,
traversal and every token walk are. The block-level optimum (:func:`~multidraft.trees.block_optimum`)
may use the whole tables. Whether a tree-only verifier can reach it is decided by comparing
models: if M_1 and M_2 carry the same distributions on a tree T, a tree-only verifier treats T
identically in both. So

    max over tree-only V of Σ_m E_m[τ](V)  <=  J := max Σ_m E_m[τ]  over lossless ρ_m
                                                  with ρ_1(T, ·, ·) = ρ_2(T, ·, ·) on shared trees,

an LP; if J < Σ_m (block optimum of M_m), no tree-only verifier reaches the optimum of every
model: on one of them it falls short by at least (Σ_m optimum_m - J) / (number of models).

The LP keeps the next token per tree (it is part of what a tree-only verifier must repeat):
variables ρ_m(T, s, z) and β_m(s) = P(accepted node extends s), with losslessness

    Σ_T ρ_m(T, s, z) + β_m(sz) = P_m(z | s) β_m(s)     for every drafted s and token z

(β(ε) = 1; β_m(sz) = 0 when sz is not drafted or longer than L), which is the tail form with
the next-token law made explicit (docs/block_level.md). Certified like the block optimum (safe
dual bound, in Fractions for exact models).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from multidraft.trees.model import SequenceModel
from multidraft.trees.optimum import _class_bound, _prefixes, _Program, _solve, block_optimum, tree_classes
from multidraft.trees.shape import TreeShape
from multidraft.trees.shaped import as_shape, shape_tree_count

__all__ = ["TreeOnlyBound", "tree_only_bound", "tree_data"]


@dataclass(frozen=True)
class TreeOnlyBound:
    """The joint LP's answer.

    Attributes
    ----------
    value : float
        J, the largest Σ_m E_m[τ] of verifiers that treat shared trees alike (primal).
    upper_bound : float or Fraction
        Its safe dual bound: no tree-only verifier exceeds it (a Fraction for exact models).
    optima : tuple of float
        Each model's block-level optimum (primal value).
    optima_upper : tuple of float or Fraction
        Their safe dual bounds.
    shared : int
        Tree classes whose distributions coincide in all models (treated alike).
    variables, constraints : int
    seconds : float
    """

    value: float
    upper_bound: float | Fraction
    optima: tuple[float, ...]
    optima_upper: tuple[float | Fraction, ...]
    shared: int
    variables: int
    constraints: int
    seconds: float

    @property
    def loss(self) -> float:
        """``Σ_m optimum_m - upper_bound``: a lower bound (up to the optima's primal tolerance,
        1e-7 each) of the total shortfall of every tree-only verifier."""
        return float(sum(self.optima)) - float(self.upper_bound)


def tree_data(model: SequenceModel, paths: Sequence[tuple[int, ...]]) -> tuple:
    """What a tree-only verifier sees of the tree with these draft sequences: the target after
    every node and the draft distribution after every internal node, exactly as stored."""
    out = []
    for s in _prefixes(tuple(paths)):
        target = tuple(model.target_at(s).tolist())
        draft = tuple(model.draft_at(s).tolist()) if len(s) < model.length else None
        out.append((s, target, draft))
    return tuple(out)


def _model_program(program: _Program, model: SequenceModel, classes: dict, weight: int) -> dict:
    """Append one model's variables and constraints; return its ρ columns by (T, s, z)."""
    n = model.n
    columns: dict[tuple, int] = {}
    for key, prob in classes.items():
        row = len(program.b_eq)
        for s in _prefixes(key):
            for z in range(n):
                columns[(key, s, z)] = len(program.objective)
                program.objective.append(weight * len(s))
                program.upper.append(prob)
                program.equalities.append((row, columns[(key, s, z)], 1))
        program.b_eq.append(prob)  # Σ_{s, z} ρ(T, s, z) = P(T)
    strings = sorted({s for key in classes for s in _prefixes(key) if s}, key=lambda s: (len(s), s))
    beta = {}
    for s in strings:
        beta[s] = len(program.objective)
        program.objective.append(0)
        program.upper.append(1)
    by_emission: dict[tuple, list[int]] = {}
    for (key, s, z), column in columns.items():
        by_emission.setdefault((s, z), []).append(column)
    for (s, z), emitted in sorted(by_emission.items()):
        row = len(program.b_eq)
        program.equalities.extend((row, column, 1) for column in emitted)
        if s + (z,) in beta:
            program.equalities.append((row, beta[s + (z,)], 1))
        conditional = model.target_at(s)[z]
        if s:
            program.equalities.append((row, beta[s], -conditional))
            program.b_eq.append(0)
        else:
            program.b_eq.append(conditional)
    return columns


def tree_only_bound(
    models: Sequence[SequenceModel],
    k: TreeShape | int,
    *,
    without_replacement: bool = False,
    solver: str = "HIGHS",
    max_variables: int | None = None,
    verbose: bool | None = None,
    progress: bool = False,
) -> TreeOnlyBound:
    """The joint LP of the module docstring for ``models`` (same n and L), with each model's
    block optimum for comparison. ``k``: K chains (``without_replacement`` at the root), or any
    :class:`~multidraft.trees.TreeShape` (tree classes: the drafted prefix sets).

    Raises
    ------
    ValueError
        Fewer than two models, or models of different sizes.
    ProblemTooLargeError, SolverError
        As :func:`~multidraft.trees.block_optimum`.
    """
    from multidraft.lp._solve import MAX_VARIABLES, check_solver, lp_size

    start = time.perf_counter()
    models = list(models)
    if len(models) < 2 or not all(isinstance(m, SequenceModel) for m in models):
        raise ValueError("models: expected at least two SequenceModels")
    if len({(m.n, m.length) for m in models}) != 1:
        raise ValueError("models: every model needs the same n and L")
    solver = check_solver(solver)
    n, length = models[0].n, models[0].length
    limit = MAX_VARIABLES if max_variables is None else max_variables
    shape = as_shape(k, models[0], without_replacement)
    if shape.family == "chains":
        trees = sum(_class_bound(m, shape.k, shape.law == "without-replacement") for m in models)
    else:
        trees = sum(shape_tree_count(m, shape) for m in models)
    bound = trees * (1 + shape.node_count) * n
    what = f"tree-only LP ({len(models)} models, n={n}, {shape!r})"
    lp_size(what, bound, bound, "use a smaller n, L or k", max_variables=limit)

    program = _Program([], [])
    classes = [tree_classes(m, shape) for m in models]
    columns = [_model_program(program, m, c, 1) for m, c in zip(models, classes)]
    common = set(classes[0]).intersection(*classes[1:])
    shared = [key for key in common if len({tree_data(m, key) for m in models}) == 1]
    for key in shared:  # the same law of (accepted node, next token) in every model
        for s in _prefixes(key):
            for z in range(n):
                for other in columns[1:]:
                    row = len(program.b_eq)
                    program.equalities += [(row, columns[0][(key, s, z)], 1), (row, other[(key, s, z)], -1)]
                    program.b_eq.append(0)
    variables, constraints = len(program.objective), len(program.b_eq)
    lp_size(what, variables, constraints, "use a smaller n, L or k", max_variables=limit)
    exact = all(m.exact for m in models)
    _, value, upper_bound, _, _ = _solve(program, exact, what, solver, verbose, progress)
    optima = [block_optimum(m, shape, solver=solver, verbose=verbose, progress=progress) for m in models]
    return TreeOnlyBound(
        value, upper_bound, tuple(o.value for o in optima), tuple(o.upper_bound for o in optima), len(shared),
        variables, constraints, time.perf_counter() - start,
    )  # fmt: skip
