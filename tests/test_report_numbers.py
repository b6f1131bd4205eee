"""The acceptance-gap report's numbers against independent routes: Figure 2's exact Theorem-2
interval against the optimum computed point by point, the per-position gap table (LP, enumeration
and the optimal verifier's own law), and the gap over random small instances."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from multidraft.report import (
    FIGURE2_FAMILY,
    TargetFamily,
    family_curves,
    position_gap_table,
    unit_interval,
    zipf_positions,
)
from multidraft.report.gap_table import VERIFIER_COLUMN
from multidraft.theory import IID, Independent, optimal_acceptance, unit_acceptance
from multidraft.theory.verifier import optimal_selection_rule

# ---------------------------------------------------------------------------------------------
# Figure 2: the exact Theorem-2 interval against the optimum computed point by point
# ---------------------------------------------------------------------------------------------


def test_figure2_interval_is_one_ninth_to_five_ninths():
    # Hand derivation: q uniform, K = 2, so p(T) >= (|T|/3)^2: singletons give t >= 1/9 and
    # 2/3 - t >= 1/9; pairs give 1/3 + t >= 4/9 and 1 - t >= 4/9.
    assert unit_interval(FIGURE2_FAMILY, 2) == (Fraction(1, 9), Fraction(5, 9))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_unit_interval_matches_exact_unit_acceptance_at_its_ends(k):
    interval = unit_interval(FIGURE2_FAMILY, k)
    law = IID([str(q) for q in FIGURE2_FAMILY.draft], k)
    if interval is None:
        assert k == 1  # K = 1 needs p = q, which this family never reaches except t = 1/3
        return
    low, high = interval
    eps = Fraction(1, 10**6)
    for t, expected in ((low, True), (high, True), ((low + high) / 2, True), (low - eps, False), (high + eps, False)):
        if not FIGURE2_FAMILY.lower <= t <= FIGURE2_FAMILY.upper:
            continue
        target = [str(v) for v in FIGURE2_FAMILY.exact_target(t)]
        assert unit_acceptance(target, law, exact=True).holds is expected, (k, t)


def test_unit_interval_single_draft_is_the_single_point_p_equals_q():
    assert unit_interval(FIGURE2_FAMILY, 1) == (Fraction(1, 3), Fraction(1, 3))


def test_family_curves_agree_with_the_subset_method_and_the_interval():
    curves = family_curves(points=25, schemes=())
    law = IID(np.full(3, 1 / 3), 2)
    subsets = np.array([optimal_acceptance(FIGURE2_FAMILY.target(t), law, method="subsets").value for t in curves.t])
    assert curves.optimal.shape == curves.t.shape == (25,)
    np.testing.assert_allclose(curves.optimal, subsets, atol=1e-12)
    low, high = (float(v) for v in curves.interval)
    np.testing.assert_array_equal(curves.unit, (curves.t >= low - 1e-12) & (curves.t <= high + 1e-12))
    np.testing.assert_allclose(curves.single, [np.minimum(FIGURE2_FAMILY.target(t), 1 / 3).sum() for t in curves.t])


def test_family_curves_baselines_lie_below_the_optimum():
    curves = family_curves(points=13)
    assert set(curves.schemes) == {"spectr", "specinfer"}
    for name, values in curves.schemes.items():
        assert values.shape == curves.optimal.shape
        assert np.all(values <= curves.optimal + 1e-9), name
        assert np.all(values >= curves.single - 1e-9), name  # K = 2 never does worse than one draft


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(direction=(Fraction(1), Fraction(0), Fraction(0))), "sum to zero"),
        (dict(lower=Fraction(1), upper=Fraction(1)), "empty parameter range"),
        (dict(draft=(Fraction(1),)), "same length"),
    ],
    ids=["direction-not-zero-sum", "empty-range", "length-mismatch"],
)
def test_target_family_rejects_bad_definitions(kwargs, message):
    fields = dict(
        base=FIGURE2_FAMILY.base,
        direction=FIGURE2_FAMILY.direction,
        lower=FIGURE2_FAMILY.lower,
        upper=FIGURE2_FAMILY.upper,
        draft=FIGURE2_FAMILY.draft,
        label="x",
    )
    with pytest.raises(ValueError, match=message):
        TargetFamily(**(fields | kwargs))


def test_family_curves_rejects_too_few_points():
    with pytest.raises(ValueError, match="points: needs at least 2"):
        family_curves(points=1)


# ---------------------------------------------------------------------------------------------
# Gap table
# ---------------------------------------------------------------------------------------------


def test_positions_are_reproducible_and_drafts_are_tempered_targets():
    a = zipf_positions(300, 3, np.random.default_rng(11))
    b = zipf_positions(300, 3, np.random.default_rng(11))
    np.testing.assert_array_equal(a.targets, b.targets)
    tempered = a.targets ** (1 / 1.6)
    np.testing.assert_allclose(a.drafts(1.6), tempered / tempered.sum(axis=1, keepdims=True), rtol=1e-10)
    assert not np.array_equal(a.targets, zipf_positions(300, 3, np.random.default_rng(12)).targets)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(positions=0), "positions: needs at least one"),
        (dict(exponent_range=(0.0, 1.0)), "exponent_range"),
    ],
)
def test_positions_reject_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        zipf_positions(**({"n": 10, "positions": 2, "rng": np.random.default_rng(0)} | kwargs))


def test_gap_table_rows_and_bounds():
    positions = zipf_positions(40, 2, np.random.default_rng(0))
    table = position_gap_table(positions, ks=(2, 3), temperatures=(0.8, 1.6), pairs=((0.8, 1.6),), s=3)
    assert [(r.law, r.k, r.draft_temperatures) for r in table.rows] == [
        ("iid", 2, (0.8,)), ("iid", 2, (1.6,)), ("iid", 3, (0.8,)), ("iid", 3, (1.6,)),
        ("wor", 2, (0.8,)), ("wor", 2, (1.6,)), ("wor", 3, (0.8,)), ("wor", 3, (1.6,)),
        ("independent", 2, (0.8, 1.6)),
    ]  # fmt: skip
    for row in table.rows:
        for column, value in row.values.items():
            if value is not None:
                assert value <= row.optimal + 1e-9, (row, column)
                assert row.fraction(column) == pytest.approx(value / row.optimal)
    # single draft: Σ min(p, q) recomputed here
    q = positions.drafts(0.8)
    single = np.mean(np.minimum(positions.targets, q).sum(axis=1))
    np.testing.assert_allclose(table.rows[0].values["single draft"], single)
    # the optimum of the table is the theory's, position by position
    expected = np.mean([optimal_acceptance(p, IID(d, 3)).value for p, d in zip(positions.targets, q)])
    np.testing.assert_allclose(table.rows[2].optimal, expected, rtol=1e-12)
    # the optimal verifier achieves the optimum for iid drafts, at most it without replacement
    # and for two independent drafts (the path curtain, docs/nonidentical_verifier.md)
    for row in table.rows:
        achieved = row.values[VERIFIER_COLUMN]
        if row.law == "iid":
            assert achieved == pytest.approx(row.optimal, abs=1e-10)
        elif row.law == "wor":
            assert row.values["single draft"] - 1e-12 <= achieved <= row.optimal + 1e-12
        else:  # the rule's own law, recomputed by enumerating every draft pair (rule_checks)
            from rule_checks import enumerated_law

            laws = [Independent([a, b]) for a, b in zip(positions.drafts(0.8), positions.drafts(1.6))]
            own = [np.minimum(p, enumerated_law(optimal_selection_rule(p, law), law)).sum() for p, law in zip(positions.targets, laws)]
            assert achieved == pytest.approx(float(np.mean(own)), abs=1e-12)
            assert achieved <= row.optimal + 1e-12
    # the non-identical optimum is exact: the transport LP over the pairs agrees, position by position
    pytest.importorskip("cvxpy")
    from multidraft.lp import transport_lp

    first, second = positions.drafts(0.8), positions.drafts(1.6)
    lp = np.mean([transport_lp(p, Independent([a, b])).acceptance for p, a, b in zip(positions.targets, first, second)])
    np.testing.assert_allclose(table.rows[-1].optimal, lp, atol=1e-7)


def test_gap_table_rejects_unknown_law_and_bad_s():
    positions = zipf_positions(20, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="laws: unknown law 'greedy'"):
        position_gap_table(positions, laws=("greedy",))
    with pytest.raises(ValueError, match="s: the truncated LP needs s >= 1"):
        position_gap_table(positions, s=0)



# ----------------------------------------------------------------------------------------------
# The gap over random small instances (behind benchmarks/bench_gap_table.py).


def test_instance_gap_ratios_are_bounded_and_optimal_is_one():
    from multidraft.report import instance_gap_table

    table = instance_gap_table(["optimal", "spectr", "specinfer", "truncated-lp"], ks=[2, 3], n=6, instances=4, seed=1)
    families = {row.family for row in table.rows}
    assert families == {"dirichlet", "zipf", "temperature"}
    for row in table.rows:
        assert row.instances == 4
        assert 0 < row.min_ratio <= row.mean_ratio <= 1 + 1e-9
        if row.scheme == "optimal":
            assert row.min_ratio == pytest.approx(1.0, abs=1e-12)
        if row.scheme == "spectr":
            assert row.min_ratio >= 1 - 1 / math.e
    # truncated-lp applies to every K.
    assert {row.k for row in table.rows if row.scheme == "truncated-lp"} == {2, 3}
    assert "dirichlet" in table.format() and table.to_dict()["rows"][0]["scheme"] == "optimal"


def test_instance_gap_bad_arguments():
    from multidraft.report.instance_gap import draw_pair, instance_gap_table

    with pytest.raises(ValueError, match="family: unknown family 'gauss'"):
        instance_gap_table(["optimal"], families=["gauss"])
    with pytest.raises(ValueError, match="unknown family"):
        draw_pair("gauss", 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="need n >= 2"):
        instance_gap_table(["optimal"], n=1)
    with pytest.raises(ValueError, match="unknown name"):
        instance_gap_table(["best"])
