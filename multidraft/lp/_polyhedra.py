"""Exact double-description enumeration with pycddlib (``cdd.gmp``), shared by :mod:`.cones`.

A polyhedron given by inequalities ``b_i + A_i z >= 0`` is handed to cddlib in rational
arithmetic; its generators come back split into vertices, extreme rays and a basis of the
lineality space (the rows cddlib lists in ``lin_set``). Entries are
:class:`fractions.Fraction` throughout: no float ever enters or leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Generators:
    """V-representation ``P = conv(vertices) + cone(rays) + span(lineality)`` of a polyhedron.

    Every vector has the dimension of the polyhedron's space; entries are Fractions.
    """

    vertices: tuple[tuple[Fraction, ...], ...]
    rays: tuple[tuple[Fraction, ...], ...]
    lineality: tuple[tuple[Fraction, ...], ...]


def _import_cdd():
    try:
        import cdd
        import cdd.gmp
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise ImportError(
            "the double description method needs pycddlib >= 3.0 with GMP support: "
            "pip install 'multidraft[cones]'"
        ) from error
    return cdd, cdd.gmp


def enumerate_generators(rows: Sequence[Sequence[int | Fraction]]) -> Generators:
    """Vertices, extreme rays and lineality basis of ``{z : b_i + A_i z >= 0 for all i}``.

    ``rows[i] = (b_i, A_i...)`` in cddlib's H-representation layout. cddlib's double
    description output for an H-representation is minimal (no redundant generator), so the
    rays returned are extreme modulo the lineality space.
    """
    cdd, gmp = _import_cdd()
    matrix = gmp.matrix_from_array([[Fraction(x) for x in row] for row in rows], rep_type=cdd.RepType.INEQUALITY)
    output = gmp.copy_generators(gmp.polyhedron_from_matrix(matrix))
    vertices, rays, lineality = [], [], []
    for index, row in enumerate(output.array):
        vector = tuple(Fraction(x) for x in row[1:])
        if index in output.lin_set:
            lineality.append(vector)
        elif row[0] == 1:
            vertices.append(vector)
        else:
            rays.append(vector)
    return Generators(tuple(vertices), tuple(rays), tuple(lineality))
