"""A third route to the optimum: the max-flow network of theory.md solved by networkx.

source → draft tuple x (capacity D(x)) → token y ∈ set(x) (unbounded) → sink (capacity p(y)).
Max-flow = min-cut = P*, so networkx's flow value must equal the closed-form optimum.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from strategies import as_float, exact_distributions, instances

from multidraft.theory import IID, Greedy, Independent, WithoutReplacement, optimal_acceptance


def max_flow(target: np.ndarray, law) -> float:
    graph = nx.DiGraph()
    tuples, probs = law.enumerate()
    for row, (tup, prob) in enumerate(zip(tuples.tolist(), probs.tolist())):
        graph.add_edge("source", ("x", row), capacity=prob)
        for token in set(tup):
            graph.add_edge(("x", row), ("y", token))  # no capacity attribute: unbounded
    for token, mass in enumerate(target.tolist()):
        graph.add_edge(("y", token), "sink", capacity=mass)
    return nx.maximum_flow_value(graph, "source", "sink")


@given(instances(max_n=5), st.data())
def test_max_flow_equals_min_cut_for_every_law(instance, data):
    n, k, target, draft = instance
    p, q = as_float(target), as_float(draft)
    laws = [IID(q, k), WithoutReplacement(q, k), Independent([q] + [as_float(data.draw(exact_distributions(n)))] * (k - 1))]
    if np.sort(q)[::-1][k - 1 :].sum() > 0:
        laws.append(Greedy(q, k))
    for law in laws:
        np.testing.assert_allclose(max_flow(p, law), optimal_acceptance(p, law).value, atol=1e-9)


def test_max_flow_catches_a_wrong_network():
    """Teeth: dropping the edge to the second draft's token must change the flow."""
    p, law = np.array([0.9, 0.1]), IID([0.5, 0.5], 2)  # P* = 0.85 (T = {1}); one draft: 0.6
    assert abs(max_flow(p, law) - optimal_acceptance(p, law).value) < 1e-12
    wrong = IID([0.5, 0.5], 1)  # a network built from one draft instead of two
    assert abs(max_flow(p, wrong) - optimal_acceptance(p, law).value) > 0.1
