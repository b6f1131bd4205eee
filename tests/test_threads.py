"""Batched torch paths choose their CPU threads by the idle-core rule (schemes/_threads.py):
one thread where other processes hold the cores, torch's setting where the cores are idle,
restored afterwards. The collapse it prevents (seconds instead of milliseconds) is measured in
benchmarks/bench_threads.py, not here."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from multidraft.schemes import SCHEMES, get_scheme  # noqa: E402
from multidraft.schemes import _threads, _torch  # noqa: E402
from multidraft.trees import _batch  # noqa: E402
from multidraft.trees import get_verifier  # noqa: E402


def _load(monkeypatch, average: float) -> None:
    monkeypatch.setattr(_threads.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (average, average, average))


def _spy_threads(monkeypatch, module, name: str) -> list[int]:
    """The thread count torch has when the batched entry point validates its inputs (every
    one does, first thing, through ``module.name``)."""
    seen: list[int] = []
    check = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return check(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def _inputs(k: int, distinct: bool, batch: int = 4, n: int = 64):
    generator = torch.Generator().manual_seed(0)
    target = torch.softmax(torch.randn(batch, n, generator=generator, dtype=torch.float64), -1)
    draft = torch.softmax(torch.randn(batch, n, generator=generator, dtype=torch.float64), -1)
    tokens = torch.multinomial(draft, k, replacement=not distinct, generator=generator)
    return target, draft[:, None, :].expand(batch, k, n).contiguous(), tokens, generator


BATCHED = [name for name, cls in SCHEMES.items() if cls.has_batch_form()]


@pytest.mark.parametrize("name", BATCHED)
@pytest.mark.parametrize("average, expected", [(1.6, 1), (0.2, 2)], ids=["busy", "idle"])
def test_select_batch_runs_on_the_idle_cores(name, average, expected, monkeypatch):
    scheme = get_scheme(name)
    target, drafts, tokens, generator = _inputs(1 if name == "single" else 2, distinct=name == "rrs-wor")
    with torch.inference_mode():
        before = torch.get_num_threads()
        torch.set_num_threads(2)
        try:
            _load(monkeypatch, average)
            seen = _spy_threads(monkeypatch, _torch, "check_batch")
            scheme.select_batch(target, drafts, tokens, generator)
            assert seen and set(seen) == {expected}
            assert torch.get_num_threads() == 2  # restored
        finally:
            torch.set_num_threads(before)


@pytest.mark.parametrize("average, expected", [(1.6, 1), (0.2, 2)], ids=["busy", "idle"])
def test_verify_batch_runs_on_the_idle_cores(average, expected, monkeypatch):
    generator = torch.Generator().manual_seed(1)
    b, k, length, n = 2, 2, 2, 16
    target = torch.softmax(torch.randn(b, k, length + 1, n, generator=generator, dtype=torch.float64), -1)
    draft = torch.softmax(torch.randn(b, k, length, n, generator=generator, dtype=torch.float64), -1)
    tokens = torch.multinomial(draft.reshape(-1, n), 1, generator=generator).reshape(b, k, length)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _load(monkeypatch, average)
        seen = _spy_threads(monkeypatch, _batch, "check")
        get_verifier("traversal").verify_batch(tokens, target, draft, generator, rng=np.random.default_rng(0))
        assert seen and set(seen) == {expected}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_never_more_threads_than_torch_is_set_to(monkeypatch):
    _load(monkeypatch, 0.0)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _threads.cpu_threads() as count:
            assert count == 1
    finally:
        torch.set_num_threads(before)
