"""The acceptance gap over random small instances: each scheme's acceptance divided by the
optimum (like Table 3 of Khisti et al., ICLR 2025: Optimal / IS / SpecTr / SpecInfer), the
experiment behind ``benchmarks/bench_gap_table.py``.

Not to be confused with the report's gap table (:mod:`multidraft.report.gap_table`: Zipf-like
positions on a large vocabulary against draft temperature).

For each instance family (``dirichlet``, ``zipf``, ``temperature``) and K, draw pairs (p, q),
take the iid law of K drafts from q, and record ``ratio = acceptance(scheme) / P*`` with P* from
:func:`multidraft.theory.optimal_acceptance` (min-cut; independent of every scheme). The table
reports min and mean of the ratio per (family, K, scheme).

Acceptance here is the scheme's :meth:`~multidraft.schemes.Scheme.acceptance`, ``P(Y ∈ set(X))``,
except for the importance-weighted schemes (``is-lp``, ``truncated-lp``, ``multistage``), where
it is ``Σ_y min(p(y), r(y))`` (the chance that the *selected* draft is accepted, the quantity
the paper reports, and a lower bound on ``P(Y ∈ set(X))``), so large K stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from multidraft.theory.laws import IID, dirichlet, softmax, zipf
from multidraft.theory.optimum import optimal_acceptance

__all__ = ["FAMILIES", "DEFAULT_SCHEMES", "InstanceGapRow", "InstanceGapTable", "instance_gap_table", "draw_pair"]

#: Instance families of :func:`instance_gap_table`.
FAMILIES = ("dirichlet", "zipf", "temperature")
#: Default schemes (registry names), in the column order of the paper's table.
DEFAULT_SCHEMES = ("optimal", "is-lp", "multistage", "truncated-lp", "spectr", "specinfer")
_IMPORTANCE = ("is-lp", "truncated-lp", "multistage")


@dataclass(frozen=True)
class InstanceGapRow:
    """Acceptance / optimum of one scheme over the instances of one (family, K) cell.

    ``instances`` counts the instances the scheme applies to; ``min_ratio``/``mean_ratio`` are
    over those; ``mean_acceptance`` and ``mean_optimum`` are the raw means.
    """

    family: str
    k: int
    scheme: str
    instances: int
    min_ratio: float
    mean_ratio: float
    mean_acceptance: float
    mean_optimum: float


@dataclass(frozen=True)
class InstanceGapTable:
    """All rows plus the settings that produced them."""

    rows: tuple[InstanceGapRow, ...]
    n: int
    instances: int
    seed: int
    schemes: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "instances": self.instances,
            "seed": self.seed,
            "schemes": list(self.schemes),
            "rows": [asdict(row) for row in self.rows],
        }

    def format(self) -> str:
        """A plain-text table: one line per (family, K), ``min / mean`` per scheme."""
        header = f"{'family':<12}{'K':>3}" + "".join(f"{name:>22}" for name in self.schemes)
        lines = [header, "-" * len(header)]
        cells = {(r.family, r.k, r.scheme): r for r in self.rows}
        for family, k in dict.fromkeys((r.family, r.k) for r in self.rows):
            line = f"{family:<12}{k:>3}"
            for name in self.schemes:
                row = cells.get((family, k, name))
                line += f"{'-':>22}" if row is None else f"{row.min_ratio:>11.4f} / {row.mean_ratio:<8.4f}"
            lines.append(line)
        return "\n".join(lines)


def draw_pair(family: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One (target, draft) pair of a family.

    * ``dirichlet``: p, q ~ Dirichlet(0.5) independently;
    * ``zipf``: p Zipf(1.1) over a random token order; q Zipf with exponent U[0.8, 1.6] over the
      same order with ~n/5 random transpositions (a related but misranked draft);
    * ``temperature``: logits z ~ N(0, 2²), p = softmax(z), q = softmax(z / T), T ~ U[0.5, 2].
    """
    if family == "dirichlet":
        return dirichlet(n, 0.5, rng), dirichlet(n, 0.5, rng)
    if family == "zipf":
        order = rng.permutation(n)
        p = zipf(n, 1.1)[np.argsort(order)]
        q_order = order.copy()
        for _ in range(max(1, n // 5)):
            i, j = rng.integers(0, n, size=2)
            q_order[[i, j]] = q_order[[j, i]]
        q = zipf(n, float(rng.uniform(0.8, 1.6)))[np.argsort(q_order)]
        return p, q
    if family == "temperature":
        z = 2.0 * rng.standard_normal(n)
        return softmax(z), softmax(z, temperature=float(rng.uniform(0.5, 2.0)))
    raise ValueError(f"family: unknown family {family!r}; choose one of {', '.join(FAMILIES)}")


def _acceptance(scheme, target: np.ndarray, law: IID) -> float:
    if scheme.name in _IMPORTANCE:
        return scheme.selected_acceptance(target, law)
    return float(scheme.acceptance(target, law))


def instance_gap_table(
    schemes: Sequence[str] = DEFAULT_SCHEMES,
    ks: Sequence[int] = (2, 3, 4, 8),
    families: Sequence[str] = FAMILIES,
    *,
    n: int = 10,
    instances: int = 20,
    seed: int = 0,
    options: dict[str, dict] | None = None,
) -> InstanceGapTable:
    """``acceptance(scheme) / P*`` (min and mean) over random iid instances per (family, K).

    Parameters
    ----------
    schemes : registry names; a scheme is skipped for a K it does not support (``truncated-lp``:
        K = 2; ``multistage``: K >= 2); ``is-lp`` is run for K = 2 only (the pair LP; for K > 2
        its tuple LP grows as n^K and ``multistage`` stands in).
    ks, families : the grid; families from :data:`FAMILIES`.
    n : vocabulary size; instances : pairs per (family, K); seed : for ``numpy.random.default_rng``.
    options : per-scheme constructor options, e.g. ``{"truncated-lp": {"s": 5}}``.

    Returns
    -------
    InstanceGapTable
        One :class:`InstanceGapRow` per (family, K, applicable scheme); ``.format()`` prints it.

    Examples
    --------
    >>> table = instance_gap_table(["optimal", "specinfer"], ks=[2], families=["dirichlet"], n=6, instances=3)
    >>> [(row.scheme, row.instances, row.min_ratio <= row.mean_ratio <= 1.0) for row in table.rows]
    [('optimal', 3, True), ('specinfer', 3, True)]
    >>> table.rows[0].min_ratio
    1.0
    """
    from multidraft.schemes import get_scheme

    options = options or {}
    built = {name: get_scheme(name, **options.get(name, {})) for name in schemes}
    for family in families:
        if family not in FAMILIES:
            raise ValueError(f"family: unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    if n < 2 or instances < 1:
        raise ValueError(f"n and instances: need n >= 2 and instances >= 1, got n={n}, instances={instances}")
    rng = np.random.default_rng(seed)
    rows: list[InstanceGapRow] = []
    for family in families:
        for k in ks:
            pairs = [draw_pair(family, n, rng) for _ in range(instances)]
            laws = [IID(q, k) for _, q in pairs]
            optima = np.array([optimal_acceptance(p, law).value for (p, _), law in zip(pairs, laws)])
            for name, scheme in built.items():
                if not scheme.supports(laws[0]) or (name == "is-lp" and k > 2):
                    continue
                values = np.array([_acceptance(scheme, p, law) for (p, _), law in zip(pairs, laws)])
                ratios = values / optima
                rows.append(
                    InstanceGapRow(family, int(k), name, len(values), float(ratios.min()), float(ratios.mean()),
                           float(values.mean()), float(optima.mean()))
                )
    return InstanceGapTable(tuple(rows), n, instances, seed, tuple(schemes))
