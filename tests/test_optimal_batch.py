"""The optimal verifier's batched form on sparse drafts (multidraft.schemes._optimal_batch).

The device route (compact rows gathered by torch, one transfer) is run here on CPU tensors: its
compact rows must equal the host route's, and both routes' outputs must follow the target,
including the tokens no draft proposes (a twin whose draws outside the support are stuck on
one token is caught). Rows with equal distributions share one fit.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from multidraft.schemes import _optimal_batch, get_scheme  # noqa: E402
from multidraft.schemes._optimal_batch import device_rows, host_rows, run_rows  # noqa: E402
from multidraft.theory import IID, optimal_acceptance, softmax, top_k, zipf  # noqa: E402


def sparse_rows(batch: int, n: int, keeps: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = np.stack([zipf(n, 1.1, rng=rng) for _ in range(batch)])
    q = np.stack([top_k(softmax(np.log(row) + rng.normal(size=n) * 0.5, 1.3), keeps[b % len(keeps)]) for b, row in enumerate(p)])
    return p, q


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_device_rows_equal_host_rows(dtype):
    """Same supports, p and q there and outside masses; rows wider than the width come dense."""
    p, q = sparse_rows(8, 3000, [1, 5, 64, 3000, 200], seed=0)
    target, draft = torch.tensor(p, dtype=dtype), torch.tensor(q, dtype=dtype)
    host = host_rows(target.double().numpy(), draft.double().numpy())
    for a, b in zip(host, host_rows(target.numpy(), draft.numpy())):  # rows read in float64 one at a time
        assert all(np.array_equal(x, y) for x, y in ((a.support, b.support), (a.ps, b.ps), (a.qs, b.qs))) and a.outside == b.outside
    tokens, uniforms = torch.randint(0, 3000, (8, 3)), torch.rand((8, 6), dtype=torch.float64)
    device, device_tokens, device_uniforms = device_rows(target, draft, tokens, uniforms, width=100)
    np.testing.assert_array_equal(device_tokens, tokens.numpy())  # the packet's tail, exactly
    np.testing.assert_array_equal(device_uniforms, uniforms.numpy())
    for row, (a, b) in enumerate(zip(host, device)):
        np.testing.assert_array_equal(a.support, b.support)
        np.testing.assert_allclose(b.ps, a.ps, rtol=1e-14, atol=0)
        np.testing.assert_allclose(b.qs, a.qs, rtol=1e-14, atol=0)
        assert b.outside == pytest.approx(a.outside, abs=1e-14)  # a cumsum's end against a sum
        if len(b.support) <= 100:
            assert b.target is None and (b.outside_draw < 0) == (b.outside == 0)
            if b.outside_draw >= 0:
                assert draft[row, b.outside_draw] == 0 and target[row, b.outside_draw] > 0
        else:
            assert b.target is not None


def _outputs(route: str, p: np.ndarray, q: np.ndarray, k: int, rows: int, seed: int, stuck: bool = False) -> np.ndarray:
    """Outputs of ``rows`` identical positions through the host or the device route."""
    rng = np.random.default_rng(seed)
    law = IID(q, k)
    tokens = law.sample(rng, rows)
    target = torch.tensor(p).repeat(rows, 1)
    draft = torch.tensor(q).repeat(rows, 1)
    uniforms = torch.rand((rows, k + 3), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if route == "host":
        compact = host_rows(target.numpy(), draft.numpy())
    else:
        compact, _, _ = device_rows(target, draft, torch.as_tensor(tokens), uniforms)
        if stuck:  # WRONG: every draw outside the support is the same token
            for row in compact:
                row.outside_draw = int(np.flatnonzero(q == 0)[0])
    return run_rows(compact, tokens, uniforms.numpy(), len(p), k)


@pytest.mark.statistical
@pytest.mark.parametrize("route", ["host", "device"])
def test_routes_output_the_target(route):
    """N = 30,000 identical rows (n = 400, top-8 draft, K = 3: about a third of the target lies
    outside the support): output frequencies match p over 40 bins, and the acceptance rate
    P(output ∈ drafts) is at least P*; the stuck twin fails."""
    from scipy import stats

    p, q = sparse_rows(1, 400, [8], seed=3)
    p, q = p[0], q[0]
    k, rows = 3, 30_000
    order = np.argsort(-p)
    bins = np.empty(len(p), dtype=np.int64)
    bins[order[:30]] = np.arange(30)
    bins[order[30:]] = 30 + np.arange(len(p) - 30) * 10 // (len(p) - 30)
    expected = np.bincount(bins, p) * rows
    output = _outputs(route, p, q, k, rows, seed=11)
    assert stats.chisquare(np.bincount(bins, np.bincount(output, minlength=len(p))), expected).pvalue > 1e-3
    if route == "device":
        stuck = _outputs(route, p, q, k, rows, seed=11, stuck=True)
        assert stats.chisquare(np.bincount(bins, np.bincount(stuck, minlength=len(p))), expected).pvalue < 1e-6


def test_select_batch_on_sparse_rows_accepts_at_the_optimum():
    """The public select_batch on 4,000 rows of one top-20 position at n = 49152: the rate of
    accepted drafts is P* (within 4.5 standard errors)."""
    p, q = sparse_rows(1, 49152, [20], seed=4)
    p, q, k, rows = p[0], q[0], 4, 4000
    law = IID(q, k)
    tokens = torch.tensor(law.sample(np.random.default_rng(1), rows))
    drafts = torch.tensor(q)[None, None, :].expand(rows, k, len(q))
    output, accepted = get_scheme("optimal").select_batch(torch.tensor(p).expand(rows, -1), drafts, tokens, torch.Generator().manual_seed(2))
    optimum = optimal_acceptance(p, law).value
    assert abs(accepted.double().mean().item() - optimum) < 4.5 * np.sqrt(optimum * (1 - optimum) / rows) + 1e-9
    assert bool((torch.tensor(p)[output] > 0).all())


def test_select_batch_device_route_equals_the_host_route(monkeypatch):
    """The public select_batch with the device route forced on CPU tensors (supports gathered
    by torch, one packet with the tokens and uniforms): the same outputs as the host route
    under the same generator seed, on rows of mixed supports (one wider than the gathered
    width, so it comes dense), returned on the input device."""
    p, q = sparse_rows(6, 3000, [1, 7, 64, 3000, 200, 1500], seed=6)
    target, draft = torch.tensor(p, dtype=torch.float32), torch.tensor(q, dtype=torch.float32)
    rows = 600
    index = np.arange(rows) % len(p)
    tokens = torch.multinomial(draft[index], 3, replacement=True, generator=torch.Generator().manual_seed(0))
    drafts = draft[index][:, None, :].expand(-1, 3, -1)
    host = get_scheme("optimal").select_batch(target[index], drafts, tokens, torch.Generator().manual_seed(9))
    monkeypatch.setattr(_optimal_batch, "on_host", lambda tensor: False)
    monkeypatch.setattr(_optimal_batch, "DEVICE_WIDTH", 1000)
    device = get_scheme("optimal").select_batch(target[index], drafts, tokens, torch.Generator().manual_seed(9))
    assert device[0].device == target.device and device[0].dtype == torch.long
    assert torch.equal(device[0], host[0]) and torch.equal(device[1], host[1])
    assert not bool(host[1].all()) and bool(host[1].any())  # both accepted and rejected rows


def test_equal_rows_share_one_fit(monkeypatch):
    calls = []
    fit = _optimal_batch.fit_support_rule

    def counting(*args, **kwargs):
        calls.append(1)
        return fit(*args, **kwargs)

    monkeypatch.setattr(_optimal_batch, "fit_support_rule", counting)
    p, q = sparse_rows(3, 2000, [10, 2000, 30], seed=5)
    index = [0, 1, 0, 2, 1, 1, 0]
    target, draft = torch.tensor(p[index]), torch.tensor(q[index])
    tokens = torch.stack([torch.multinomial(row, 2, replacement=True, generator=torch.Generator().manual_seed(0)) for row in draft])
    get_scheme("optimal").select_batch(target, draft[:, None, :].expand(-1, 2, -1), tokens, torch.Generator().manual_seed(1))
    assert len(calls) == 3


def test_threaded_fits_equal_sequential_fits(monkeypatch):
    """Distinct rows with supports wider than ``_THREADED_SUPPORT`` are fitted in threads: the
    outputs equal those of the same rows fitted one after another (same uniforms), and the
    threaded route really ran (every fit outside the calling thread)."""
    import threading

    p, q = sparse_rows(3, 6000, [6000, 5000, 4500], seed=8)
    index = np.arange(30) % 3
    rows = host_rows(p[index], q[index])
    rng = np.random.default_rng(3)
    tokens = np.stack([rng.choice(6000, size=2, p=q[b] / q[b].sum()) for b in index])
    uniforms = rng.random((30, 5))
    threads = set()
    fit = _optimal_batch.fit_support_rule

    def recording(*args, **kwargs):
        threads.add(threading.get_ident())
        return fit(*args, **kwargs)

    monkeypatch.setattr(_optimal_batch, "fit_support_rule", recording)
    threaded = run_rows(rows, tokens, uniforms, 6000, 2)
    assert threads and threading.get_ident() not in threads
    monkeypatch.setattr(_optimal_batch, "_THREADED_SUPPORT", 10**9)
    np.testing.assert_array_equal(run_rows(rows, tokens, uniforms, 6000, 2), threaded)
