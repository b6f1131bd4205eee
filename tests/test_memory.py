"""Memory of the optimal verifier's paths at a real vocabulary (issue 34): nothing holds an
array of [positions, n] or [pieces, nodes] of the whole layout.

Each test measures the peak with tracemalloc and checks the numbers against a second route:

* the J-curtain's choice law of a draft tuple (``point_win_probabilities``, read from the
  pieces of the tuple's groups only) against the integral over the whole layout's table (the
  route it replaced, kept here as the reference) -- same numbers to 1e-15, a fraction of the
  memory;
* drafting without replacement in blocks against one Gumbel-top-K draw of every row at once
  (identical tuples), and its peak against the [size, n] keys it no longer holds;
* the enumeration's tuple probabilities on the draft's support against the exact Fractions.
"""

from __future__ import annotations

import tracemalloc
from fractions import Fraction

import numpy as np
import pytest

import multidraft.theory.laws._laws as laws
from multidraft.theory import WithoutReplacement, zipf
from multidraft.theory.verifier._wor_curtain import Layout, point_win_probabilities
from multidraft.theory.verifier import optimal_selection_rule


def _peak(call):
    """``(result, peak bytes)`` of ``call()`` under tracemalloc."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _whole_layout_wins(layout: Layout, groups: np.ndarray) -> np.ndarray:
    """The reference: ``∫ g_i Π_{j≠i} (1 - G_j)`` with every group's density and distribution
    function tabulated at Gauss-Legendre nodes between *all* piece ends of the layout."""
    width_j = groups.shape[1]
    edges = np.unique(np.concatenate([[0.0, 1.0], layout.piece_start, layout.piece_end]))
    nodes, weights = np.polynomial.legendre.leggauss(width_j // 2 + 2)
    left, width = edges[:-1, None], np.diff(edges)[:, None]
    t = (left + 0.5 * width * (nodes + 1.0)).ravel()
    dt = (0.5 * width * weights).ravel()
    lengths = layout.piece_end - layout.piece_start
    owner, count = layout.piece_group, len(layout.group_first)
    size = np.maximum(np.bincount(owner, lengths, minlength=count), 1e-300)
    inside = (layout.piece_start[:, None] <= t) & (t < layout.piece_end[:, None])
    covered = np.clip(t - layout.piece_start[:, None], 0.0, lengths[:, None])
    density, below = np.zeros((count, len(t))), np.zeros((count, len(t)))
    np.add.at(density, owner, inside / size[owner][:, None])
    np.add.at(below, owner, covered / size[owner][:, None])
    g, survive = density[groups], 1.0 - below[groups]
    return np.stack([(g[:, i] * np.prod(np.delete(survive, i, axis=1), axis=1)) @ dt for i in range(width_j)], axis=1)


@pytest.fixture(scope="module")
def real_rule():
    """A wor rule whose J-curtain has hundreds of pieces (p Zipf, q = p with log-normal noise:
    the shape of a real model's positions), and rows of three and two U-points' groups (free groups)."""
    rng = np.random.default_rng(0)
    n, k = 16384, 3
    p = rng.permutation(zipf(n, 1.1))
    q = np.exp(np.log(p) + 2.0 * rng.standard_normal(n))
    rule = optimal_selection_rule(p, WithoutReplacement(q / q.sum(), k))
    assert rule.u_rule == "j-curtain" and len(rule.layout.piece_start) > 300
    groups = rule.group[rule.group >= 0]
    free = np.unique(groups[groups != np.bincount(groups).argmax()])  # not the pool
    marks = np.stack([rng.choice(free, size=3, replace=False) for _ in range(6)])
    three = marks.copy()
    three[::2, 2] = three[::2, 0]  # two points of one token's group (a repeat in the stream)
    return rule, three, marks[:, :2]


def test_choice_law_reads_only_the_tuples_groups(real_rule):
    rule, three, two = real_rule
    for groups in (three, two):
        wins, peak = _peak(lambda: point_win_probabilities(rule.layout, groups))
        reference, reference_peak = _peak(lambda: _whole_layout_wins(rule.layout, groups))
        assert wins.shape == reference.shape == groups.shape
        np.testing.assert_allclose(wins, reference, rtol=0, atol=1e-15)
        np.testing.assert_allclose(wins.sum(axis=1), 1.0, rtol=0, atol=1e-10)  # tiny sets near t = 1: absolute positions
        assert peak < reference_peak / 20, f"{peak / 2**20:.1f} MiB vs the whole layout's {reference_peak / 2**20:.1f} MiB"


def test_choice_probabilities_of_a_real_rule_are_memory_light(real_rule):
    """The rule's exact choice law for drafted tuples with U tokens: a probability vector per
    row, well under the whole layout's table (which at n = 49152 took 36 GiB)."""
    rule, _, _ = real_rule
    u = np.flatnonzero((rule.position < rule.boundary) & (rule.draft > 0))
    rng = np.random.default_rng(1)
    tuples = np.stack([rng.choice(u, size=rule.k, replace=False) for _ in range(4)])
    pieces, nodes = len(rule.layout.piece_start), 2 * len(rule.layout.piece_start) * (rule.k // 2 + 2)
    rule.choice_probabilities(tuples[:1])  # loads the compiled kernel (~380 kB of Python objects, once)
    out, peak = _peak(lambda: rule.choice_probabilities(tuples))
    assert out.shape == tuples.shape
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (out >= 0).all()
    assert peak < len(rule.layout.group_first) * nodes * 8 / 20, (peak, pieces)


def test_wor_drafts_in_blocks_are_one_gumbel_draw(monkeypatch):
    """The blocks draw the same Gumbels in the same order as one [size, n] draw."""
    q = zipf(37, 0.8)
    law = WithoutReplacement(q, 4)
    whole = np.random.default_rng(5)
    keys = np.log(q) + whole.gumbel(size=(50, 37))
    expected = np.argsort(-keys, axis=-1, kind="stable")[:, :4]
    monkeypatch.setattr(laws, "SAMPLE_ENTRIES", 37 * 3)  # blocks of 3 rows, the last one short
    np.testing.assert_array_equal(law.sample(np.random.default_rng(5), 50), expected)
    np.testing.assert_array_equal(law.sample(np.random.default_rng(5)), expected[0])
    assert law.sample(np.random.default_rng(5), 0).shape == (0, 4)


def test_wor_drafts_at_a_real_vocabulary_are_memory_light():
    """2,000 tuples at n = 49152: under 200 MiB (one [2000, n] float64 key array is 750 MiB)."""
    law = WithoutReplacement(zipf(49152, 1.0), 4)
    tuples, peak = _peak(lambda: law.sample(np.random.default_rng(0), 2000))
    assert tuples.shape == (2000, 4) and (np.sort(tuples, axis=1)[:, 1:] != np.sort(tuples, axis=1)[:, :-1]).all()
    assert peak < 200 * 2**20, f"{peak / 2**20:.0f} MiB"


def test_wor_enumeration_sums_over_the_support():
    """A draft on 30 of 49152 tokens: its 24,360 ordered tuples' probabilities without a
    [tuples, n] block (9 GiB), equal to the exact Fractions."""
    q = np.zeros(49152)
    q[np.arange(0, 49152, 1638)[:30]] = zipf(30, 1.0)
    law = WithoutReplacement(q, 3)
    (tuples, probs), peak = _peak(law.enumerate)
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"
    exact = [Fraction(float(v)) for v in q]
    for row in (0, 1, 777, len(tuples) - 1):
        value, left = Fraction(1), Fraction(1)
        for token in tuples[row]:
            value, left = value * exact[token] / left, left - exact[token]
        assert probs[row] == pytest.approx(float(value), rel=1e-14)
    assert probs.sum() == pytest.approx(1.0, abs=1e-13)


class _Failing:
    """A block verifier whose exact law raises ``error``."""

    def __init__(self, name: str, error: Exception) -> None:
        self.name, self.error = name, error

    def law(self, tree, next_token):
        raise self.error


def test_measure_records_a_refusal_but_does_not_swallow_running_out_of_memory():
    """A size-guard refusal leaves the block's value NaN with the one-line reason in the notes;
    a MemoryError (once silently a "not computed" gap) stops the run."""
    from types import SimpleNamespace

    from multidraft.decoding import measurement
    from multidraft.theory.laws import ProblemTooLargeError, SizeEstimate

    outcome = SimpleNamespace(tree=lambda groups, without_replacement: None, accepted=2)
    refused = _Failing("refused", ProblemTooLargeError(SizeEstimate("toy law", 10, 0), "max_variables", 5, "use less"))
    gaps: set[str] = set()
    config = SimpleNamespace(scoring=[refused], without_replacement=True)
    record = measurement._score_block(0, 3, refused, outcome, config, (2,), gaps)
    assert (record.block, record.accepted, len(record.expected)) == (3, 2, 1) and np.isnan(record.expected[0])
    assert gaps == {"refused: toy law: about 10 variables exceed the limit max_variables=5; use less"}
    exhausted = _Failing("exhausted", MemoryError("Unable to allocate 36.0 GiB"))
    config = SimpleNamespace(scoring=[exhausted], without_replacement=True)
    with pytest.raises(MemoryError, match="36.0 GiB"):
        measurement._score_block(0, 3, exhausted, outcome, config, (2,), set())


_KERNEL_RUN = """
import json, numpy as np
from numba.core.dispatcher import Dispatcher
from multidraft.schemes import get_scheme
from multidraft.theory import WithoutReplacement, zipf
from multidraft.theory.verifier import fit_curtain_rule, optimal_selection_rule
from multidraft.trees._residual import scaled_residual
from multidraft.theory.verifier._stream_marks import stream_marks
from multidraft.theory.laws._row_scan import running_sum
import multidraft.schemes.rrs_wor, multidraft.trees._residual
import multidraft.theory.verifier._curtain_kernels, multidraft.theory.verifier._front_back, multidraft.theory.verifier._wor_curtain
import multidraft.theory.verifier._curtain_select
import multidraft.theory.optimum._wor_moments, multidraft.theory.optimum._wor_race, multidraft.theory.verifier._wor_tail
import multidraft.theory.optimum._wor_sums, multidraft.theory.verifier._radix, multidraft.theory.verifier._curtain
import multidraft.theory.verifier._stream_marks, multidraft.theory.laws._row_scan
rng = np.random.default_rng(0)
p = rng.permutation(zipf(2000, 1.1))
q = np.exp(np.log(p) + 2.0 * rng.standard_normal(2000))
q /= q.sum()
rule = fit_curtain_rule(p, q, 3)
rule.run(np.array([[int(rule.support[0])] * 3]), np.full((1, 5), 0.5))
rule.positions(np.array([[int(rule.support[0])] * 3]), np.full((1, 3), 0.5))
wor_rule = optimal_selection_rule(p, WithoutReplacement(q, 3))
stream_marks(np.array([[int(np.argmax(wor_rule.position < wor_rule.boundary)), 0, 1]]), np.array([[True, False, True]]), np.full((1, 3), 0.1), np.random.default_rng(0))
running_sum(np.full(4096, 1.0 / 4096))
get_scheme("rrs-wor").estimate_acceptance(p, WithoutReplacement(q, 3), np.random.default_rng(0), batch=64, min_paths=64, max_paths=64)
scaled_residual(p, 2.0, q, 1.0)
stats = {}
for module in (multidraft.schemes.rrs_wor, multidraft.trees._residual, multidraft.theory.verifier._curtain_kernels, multidraft.theory.verifier._curtain_select,
               multidraft.theory.verifier._front_back, multidraft.theory.verifier._wor_curtain, multidraft.theory.optimum._wor_moments,
               multidraft.theory.optimum._wor_race, multidraft.theory.verifier._wor_tail, multidraft.theory.optimum._wor_sums,
               multidraft.theory.verifier._radix, multidraft.theory.verifier._curtain, multidraft.theory.verifier._stream_marks,
               multidraft.theory.laws._row_scan):
    for name, value in vars(module).items():
        if isinstance(value, Dispatcher) and value.signatures:
            stats[module.__name__ + "." + name] = [sum(value.stats.cache_hits.values()), sum(value.stats.cache_misses.values())]
print(json.dumps(stats))
"""


def test_every_compiled_kernel_loads_from_the_disk_cache_in_a_new_process():
    """Item 2: the second process compiles nothing -- every kernel it calls is a cache hit (a
    kernel defined in a closure, as rrs-wor's were, misses in every process)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    runs = [subprocess.run([sys.executable, "-c", _KERNEL_RUN], capture_output=True, text=True, env=env, check=True) for _ in range(2)]
    stats = json.loads(runs[1].stdout.strip().splitlines()[-1])
    called = {"multidraft.schemes.rrs_wor._sample_paths", "multidraft.trees._residual._residual", "multidraft.theory.verifier._curtain_select.select_rows",
              "multidraft.theory.verifier._stream_marks._marks", "multidraft.theory.laws._row_scan._running_sum"}
    assert called <= set(stats)
    assert len(stats) >= 7  # the kernels called from Python; their callees load inside them
    missed = {name: counts for name, counts in stats.items() if counts[1] or not counts[0]}
    assert not missed, f"compiled afresh in a new process: {missed}"
