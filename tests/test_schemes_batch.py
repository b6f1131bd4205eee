"""The batched torch forms (``select_batch``) used by decoding: the same statistical checks as
the numpy samplers (one call on B = 30,000 identical rows), a wrong variant the check catches,
SpecTr's batched ρ against the float64 bisection, float32 inputs, and bad inputs.

Levels: the Bonferroni correction shared with ``tests/test_schemes_statistical.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from multidraft.schemes import SCHEMES, get_scheme  # noqa: E402
from multidraft.schemes.specinfer import _rrs_batch  # noqa: E402
from multidraft.schemes.spectr import _batch_rho, _RowSums, spectr_rho  # noqa: E402

def _statistical_module():
    """The sibling test module with the shared instances and levels, loaded by path (works
    whether or not ``tests`` is a package)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_schemes_statistical", Path(__file__).with_name("test_schemes_statistical.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_shared = _statistical_module()
ALPHA, BATCH_CASES, INSTANCES, N = _shared.ALPHA, _shared.BATCH_CASES, _shared.INSTANCES, _shared.N
assert_acceptance_in_interval, frequency_pvalue, seed_of = (
    _shared.assert_acceptance_in_interval,
    _shared.frequency_pvalue,
    _shared.seed_of,
)

#: truncated-lp's batch form splits each row's inner tuples on its own; fewer rows keep the test fast.
ROWS = {"truncated-lp": 1_500}


def batch_inputs(case: str, rows: int, seed: int, dtype=torch.float64):
    """``target [B, n]``, ``drafts [B, K, n]``, ``tokens [B, K]`` for B identical positions."""
    target, law = INSTANCES[case]
    rng = np.random.default_rng(seed)
    tokens = law.sample(rng, rows)
    drafts = torch.tensor(law.marginals(), dtype=dtype).repeat(rows, 1, 1)
    return torch.tensor(target, dtype=dtype).repeat(rows, 1), drafts, torch.tensor(tokens, dtype=torch.long)


@pytest.mark.statistical
@pytest.mark.parametrize("name, case", BATCH_CASES, ids=[f"{n}-{c}" for n, c in BATCH_CASES])
def test_select_batch_matches_target_and_exact_acceptance(name, case):
    scheme = get_scheme(name)
    rows = ROWS.get(name, N)
    target, drafts, tokens = batch_inputs(case, rows, seed_of("batch", name, case))
    generator = torch.Generator().manual_seed(seed_of("torch", name, case))
    output, accepted = scheme.select_batch(target, drafts, tokens, generator)
    assert output.shape == accepted.shape == (rows,)
    assert output.dtype == torch.long and accepted.dtype == torch.bool
    np.testing.assert_array_equal(accepted.numpy(), (tokens == output[:, None]).any(dim=1).numpy())
    p, law = INSTANCES[case]
    assert frequency_pvalue(output.numpy(), p) > ALPHA
    assert_acceptance_in_interval(accepted.numpy(), scheme.acceptance(p, law))


@pytest.mark.statistical
@pytest.mark.parametrize("case", ["iid-k2", "independent-k3"])
def test_truncated_batch_with_drafts_outside_the_kept_tokens(case):
    """s = 2 < n: tuples with a token outside Ω₁ follow the ranked rule, r at an outside token
    comes from a masked sum and the residual from rejection sampling; output law and
    acceptance must still match the exact (enumerated) values."""
    scheme = get_scheme("truncated-lp", s=2)
    rows = 8_000
    target, drafts, tokens = batch_inputs(case, rows, seed_of("batch-truncated", case))
    output, accepted = scheme.select_batch(target, drafts, tokens, torch.Generator().manual_seed(seed_of("truncated", case)))
    p, law = INSTANCES[case]
    assert frequency_pvalue(output.numpy(), p) > ALPHA
    assert_acceptance_in_interval(accepted.numpy(), scheme.acceptance(p, law))


@pytest.mark.statistical
def test_batch_rrs_without_renormalisation_is_caught():
    """WRONG: drafts drawn without replacement verified as if drawn with replacement."""
    target, drafts, tokens = batch_inputs("peaked-wor-k2", N, seed_of("batch-wrong"))
    output, _ = _rrs_batch(target, drafts, tokens, torch.Generator().manual_seed(1), 2, without_replacement=False)
    p, _ = INSTANCES["peaked-wor-k2"]
    assert frequency_pvalue(output.numpy(), p) < ALPHA


def test_batch_rho_matches_bisection():
    rng = np.random.default_rng(7)
    for k in (2, 3, 4, 8):
        p = rng.dirichlet(np.ones(50) * 0.5, size=16)
        q = rng.dirichlet(np.ones(50) * 0.5, size=16)
        rho, beta = _batch_rho(_RowSums(torch.tensor(p), torch.tensor(q)), k)
        expected = np.array([spectr_rho(a, b, k) for a, b in zip(p, q)])
        np.testing.assert_allclose(rho.numpy(), expected, rtol=1e-9)
        np.testing.assert_allclose(beta.numpy(), np.minimum(q, p / rho.numpy()[:, None]).sum(axis=1), rtol=1e-12)
        # Each returned ρ is valid: the residual is non-negative.
        beta = beta.numpy()
        assert np.all(1 - (1 - beta) ** k <= rho.numpy() * beta * (1 + 1e-12))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_row_sums_match_numpy_on_every_path(dtype):
    """``h = Σ min(ρq, p)`` and ``h' = Σ_{ρq < p} q``: the compiled pass (float32/float64 on a
    CPU, rows read in place, here from a strided view as ``drafts[:, 0]``) and the tensor form
    (bfloat16) against numpy on the same rounded rows. At ρ = 2 the first 1000 entries tie
    exactly (q = p/2); a twin that counts the ties in the slope is caught."""
    rng = np.random.default_rng(11)
    p = torch.tensor(rng.dirichlet(np.ones(3000) * 0.3, size=12)).to(dtype)
    q = torch.tensor(rng.dirichlet(np.ones(3000) * 0.3, size=(12, 2))).to(dtype)[:, 0]  # strided rows
    q[:, :1000] = p[:, :1000] / 2
    sums = _RowSums(p, q)
    assert sums.compiled == (dtype != torch.bfloat16)
    rows = torch.tensor([3, 0, 11, 3])
    rho = torch.tensor([2.0, 1.0, 2.7, 1.25], dtype=torch.float64)
    h, slope = sums(rows, rho, slope=True)
    p_rows, q_rows = p[rows].double().numpy(), q[rows].double().numpy()
    if sums.compiled:  # float64 arithmetic
        scaled = rho.numpy()[:, None] * q_rows
    else:  # arithmetic in the input dtype
        scaled = (q[rows] * rho.to(dtype)[:, None]).double().numpy()
    tolerance = 1e-12 if sums.compiled else 1e-2
    np.testing.assert_allclose(h.numpy(), np.minimum(scaled, p_rows).sum(axis=1), rtol=tolerance)
    np.testing.assert_allclose(slope.numpy(), np.where(scaled < p_rows, q_rows, 0).sum(axis=1), rtol=tolerance)
    wrong = np.where(scaled <= p_rows, q_rows, 0).sum(axis=1)  # WRONG: counts the ties
    assert np.abs(slope.numpy() - wrong)[0] > 10 * tolerance * wrong[0]
    h_all, no_slope = sums(None, torch.full((12,), 2.0, dtype=torch.float64))
    assert no_slope is None
    np.testing.assert_allclose(h_all.numpy(), np.minimum(2 * q.double().numpy(), p.double().numpy()).sum(axis=1), rtol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_residual_sampling_leaves_the_callers_rows_alone(dtype):
    """The residual draw ``max(p − min(ρq, p)·scale, 0)`` on the compiled (float64) and the
    tensor (bfloat16) path: the rows handed in are unchanged afterwards, whether the draw runs on
    every row or on a :meth:`subset`, and the drawn tokens lie where the residual has mass."""
    rng = np.random.default_rng(5)
    p = torch.tensor(rng.dirichlet(np.ones(200) * 0.5, size=6)).to(dtype)
    q = torch.tensor(rng.dirichlet(np.ones(200) * 0.5, size=6)).to(dtype)
    p_before, q_before = p.clone(), q.clone()
    rho, scale = torch.full((6,), 1.5, dtype=torch.float64), torch.ones(6, dtype=torch.float64)
    sums = _RowSums(p, q)
    for sampler, rows in ((sums, torch.arange(6)), (sums.subset(torch.tensor([4, 1])), torch.tensor([4, 1]))):
        tokens = sampler.sample_residual(rho[: len(rows)], scale[: len(rows)], torch.Generator().manual_seed(0))
        residual = (p_before[rows].double() - torch.minimum(1.5 * q_before[rows].double(), p_before[rows].double()))
        assert bool((residual.gather(1, tokens[:, None]) > 0).all())
    assert torch.equal(p, p_before) and torch.equal(q, q_before)


@pytest.mark.parametrize("name", [n for n, cls in SCHEMES.items() if cls.has_batch_form() and n != "truncated-lp"])
def test_float32_batch_runs_and_never_emits_zero_probability_tokens(name):
    rng = np.random.default_rng(8)
    n, rows = 300, 64
    k = 1 if name == "single" else 3
    p = rng.dirichlet(np.ones(n) * 0.2, size=rows)
    p[:, : n // 2] = 0.0
    p /= p.sum(axis=1, keepdims=True)
    q = rng.dirichlet(np.ones(n) * 0.2, size=rows)
    tokens = np.stack([rng.choice(n, size=k, replace=False, p=row) for row in q])
    target = torch.tensor(p, dtype=torch.float32)
    drafts = torch.tensor(q, dtype=torch.float32)[:, None, :].repeat(1, k, 1)
    output, _ = get_scheme(name).select_batch(target, drafts, torch.tensor(tokens), torch.Generator().manual_seed(0))
    assert bool((target.gather(1, output[:, None]) > 0).all())


_GOOD = dict(target=torch.full((2, 3), 1 / 3), drafts=torch.full((2, 2, 3), 1 / 3), tokens=torch.tensor([[0, 1], [1, 2]]))


def _bad(**changes):
    return {**_GOOD, **changes}


@pytest.mark.parametrize(
    "name, inputs, message",
    [
        ("specinfer", _bad(tokens=torch.tensor([[0, 3], [1, 2]])), r"must lie in \[0, 3\)"),
        ("specinfer", _bad(tokens=torch.tensor([[0, 1], [1, 2]], dtype=torch.int32)), "torch.long"),
        ("specinfer", _bad(tokens=torch.tensor([[0, 1]])), r"expected a long tensor \[B=2, K=2\]"),
        ("specinfer", _bad(drafts=torch.full((2, 2, 4), 0.25)), r"expected a tensor \[B=2, K, n=3\]"),
        ("specinfer", _bad(target=torch.full((3,), 1 / 3)), r"target: expected a tensor \[B, n\]"),
        ("specinfer", _bad(drafts=torch.tensor([[[0.5, 0.5, 0.0]] * 2] * 2), tokens=torch.tensor([[0, 2], [0, 1]])), "probability zero"),
        ("single", _GOOD, "needs K=1"),
        ("rrs-wor", _bad(tokens=torch.tensor([[0, 0], [1, 2]])), "distinct"),
        ("spectr", _bad(drafts=torch.tensor([[[0.5, 0.5, 0.0]] * 2] * 2)), "probability zero"),
        ("truncated-lp", _bad(drafts=torch.tensor([[[0.5, 0.5, 0.0]] * 2] * 2), tokens=torch.tensor([[0, 2], [0, 1]])), "probability zero"),
    ],
    ids=["token-range", "token-dtype", "token-shape", "draft-shape", "target-shape", "zero-draft-prob",
         "single-k", "wor-repeat", "spectr-zero-prob", "truncated-zero-prob"],
)
def test_batch_bad_inputs(name, inputs, message):
    with pytest.raises(ValueError, match=message):
        get_scheme(name).select_batch(inputs["target"], inputs["drafts"], inputs["tokens"], torch.Generator())


# Regressions from the review: disjoint supports (β = 0 in SpecTr), invalid targets and a
# missing generator must give a clear error or the right answer, never an out-of-range token.


def test_spectr_disjoint_supports_emits_the_target():
    from multidraft.schemes import get_scheme
    from multidraft.theory import IID

    scheme = get_scheme("spectr")
    law = IID([0.0, 0.5, 0.5], 2)
    assert scheme.acceptance([1.0, 0.0, 0.0], law) == 0.0
    np.testing.assert_allclose(scheme.output_distribution([1.0, 0.0, 0.0], law), [1.0, 0.0, 0.0], atol=1e-15)
    target = torch.tensor([[1.0, 0.0, 0.0]] * 4, dtype=torch.float64)
    drafts = torch.tensor([[[0.0, 0.5, 0.5]] * 2] * 4, dtype=torch.float64)
    tokens = torch.tensor([[1, 2]] * 4)
    output, accepted = scheme.select_batch(target, drafts, tokens, torch.Generator().manual_seed(0))
    assert output.tolist() == [0, 0, 0, 0] and not accepted.any()


@pytest.mark.parametrize(
    "target, generator, message",
    [
        pytest.param([[0.5, float("nan"), 0.5]], True, "finite", id="nan-target"),
        pytest.param([[0.5, 0.25, 0.0]], True, "sum to 1", id="target-sum"),
        pytest.param([[0.5, 0.25, 0.25]], False, "torch.Generator", id="no-generator"),
    ],
)
def test_batch_input_errors(target, generator, message):
    from multidraft.schemes import get_scheme

    drafts = torch.tensor([[[0.2, 0.3, 0.5]] * 2], dtype=torch.float64)
    tokens = torch.tensor([[1, 2]])
    rng = torch.Generator().manual_seed(0) if generator else None
    for name in ("specinfer", "spectr"):
        with pytest.raises(ValueError, match=message):
            get_scheme(name).select_batch(torch.tensor(target, dtype=torch.float64), drafts, tokens, rng)
