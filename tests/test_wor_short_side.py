"""Less work where a side of the wor rule falls short (issue 30, item 5; P* < 1 nodes): the U side's
pass stops after U (``upto``), and the T* side's plain front/back pass is skipped where its
uniform tail reaches its own target (``TAIL_GAIN``). Both leave the rule as it was, bit for bit;
each claim is shown to reject a broken twin.
"""

from __future__ import annotations

import numpy as np
import pytest

from multidraft.theory import softmax, zipf
from multidraft.theory.verifier import _wor_rule
from multidraft.theory.verifier._curtain import _workspace
from multidraft.theory.verifier._front_back import front_back_nodes, front_back_pass
from multidraft.theory.verifier._wor_parts import min_sum, pairwise_sum, radix_order
from multidraft.theory.optimum._wor_race import optimal_cut


def _rows(count: int, n: int = 2048):
    """Targets and drafts as the tree benchmark's nodes (Zipf(1.1), a hotter noisier draft), K = 2:
    about one in seven has a T* side short by 1e-7 to 5e-4."""
    rng = np.random.default_rng(0)
    for _ in range(count):
        p = zipf(n, exponent=1.1, rng=rng)
        yield p, softmax((np.log(p) + 0.5 * rng.standard_normal(n)) / 1.2), 2


def _sides(p, q, k):
    """The T* side with its uniform tail and plain front/back, as the rule fits them."""
    cut = optimal_cut(p, q, k, sort=radix_order)
    u_tokens = _wor_rule._u_arrays(p, q, cut, np.zeros(len(p)), np.empty(len(p)))[1]
    with _workspace(len(p)) as work:  # the T* arrays as the fit gathers them, copied out of its workspace
        _, merged_p, merged_q, r_star_t, lead, _, _ = _wor_rule._t_arrays(p, q, cut, float(q[u_tokens].sum()), np.zeros(len(p)), work)
        merged_p, merged_q, r_star_t = merged_p.copy(), merged_q.copy(), r_star_t.copy()
    p_t = merged_p[lead:]
    _, r_t, start = _wor_rule._t_side(merged_p, merged_q, lead, k, r_star_t)
    _, r_plain, _ = _wor_rule._t_side(merged_p, merged_q, lead, k)
    return p_t, r_star_t, r_t, r_plain, start


def test_plain_front_back_gains_at_most_the_tail_gap_and_a_bound_without_it_is_caught(monkeypatch):
    """Plain front/back's acceptance over the tail rule's is at most the tail's gap
    Σ_tail (p - min(p, r)) (the head is the same rule; measured to 1e-15). The twin claim (no
    gain at all) fails once the tail may hold tokens with p up to r* (slack 1.2 instead of 0.9)."""
    checked = 0
    for p, q, k in _rows(60):
        p_t, r_star_t, r_t, r_plain, start = _sides(p, q, k)
        if start == len(p_t):
            continue
        gain = min_sum(p_t, r_plain) - min_sum(p_t, r_t)
        gap = pairwise_sum(p_t[start:]) - min_sum(p_t[start:], r_t[start:])
        assert gain <= gap + 1e-15
        checked += 1
    assert checked >= 30
    monkeypatch.setattr(_wor_rule, "TAIL_SLACK", 1.2)
    gains = [min_sum(p_t, r_plain) - min_sum(p_t, r_t) for p_t, _, r_t, r_plain, start in (_sides(*row) for row in _rows(20)) if start < len(p_t)]
    assert max(gains) > 1e-12  # the twin "plain never gains" is caught


def test_skipping_the_plain_pass_leaves_the_rule_as_it_was(monkeypatch):
    """On rows whose T* side falls short with a tail: the rule equals the one that always runs
    the plain pass (and compares with the margin), bit for bit, and the skip did happen."""
    rows = [row for row in _rows(60)]
    skipped = []
    real = _wor_rule._plain_may_gain
    monkeypatch.setattr(_wor_rule, "_plain_may_gain", lambda *args: skipped.append(not real(*args)) or real(*args))
    fast = [_wor_rule.wor_selection_rule(*row) for row in rows]
    monkeypatch.setattr(_wor_rule, "_plain_may_gain", lambda *args: True)
    slow = [_wor_rule.wor_selection_rule(*row) for row in rows]
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a.selection_law, b.selection_law)
        np.testing.assert_array_equal(a.position, b.position)
        assert (a.tail, a.u_rule, a.shortfall) == (b.tail, b.u_rule, b.shortfall)
    assert sum(skipped) >= 5


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_a_pass_up_to_a_position_is_the_whole_pass_there_and_a_pass_without_the_rest_is_caught(k):
    rng = np.random.default_rng(k)
    caught = 0
    for _ in range(25):
        n = int(rng.integers(k + 2, 600))
        p, q = rng.dirichlet(np.full(n, 0.5)), rng.dirichlet(np.full(n, 0.5))
        boundary = int(rng.integers(1, n))
        upto = int(rng.integers(0, n + 1))
        nodes, weights = front_back_nodes(q, k)
        alpha, r = front_back_pass(p, q, boundary, k, nodes, weights)
        alpha_upto, r_upto = front_back_pass(p, q, boundary, k, nodes, weights, upto=upto)
        np.testing.assert_array_equal(alpha_upto[:upto], alpha[:upto])
        np.testing.assert_array_equal(r_upto[:upto], r[:upto])
        assert not r_upto[upto:].any()
        if 0 < upto < boundary:  # the twin: the U side passed without the tokens behind it
            _, r_alone = front_back_pass(p[:upto], q[:upto], upto, k, nodes, weights)
            caught += not np.array_equal(r_alone, r[:upto])
    assert caught >= 5
