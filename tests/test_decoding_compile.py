"""The compiled decoding path (``compile=True``): a static KV cache and forwards compiled by
``torch.compile``, on every torch device present.

The fast tests trace with dynamo's ``eager`` backend (``MULTIDRAFT_COMPILE_BACKEND``): the whole
forward must be one graph (``fullgraph``), the static-cache bookkeeping must reproduce the
eager dynamic cache exactly, and the warm-up must compile every shape a generation uses. One
slow test generates real code with inductor (CUDA graphs on CUDA).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from test_decoding import generators, tiny_model  # noqa: E402

from multidraft.decoding import (  # noqa: E402
    DraftSpec,
    ModelState,
    Sampling,
    early_exit,
    measure,
    sample_autoregressive,
    speculative_generate,
)
from multidraft.decoding.profiling import profile_latency  # noqa: E402
from multidraft.decoding.state import COMPILE_BACKEND_ENV  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # torch's own warnings while compiling (the suite turns warnings into errors): dynamo reads
    # tensors' .grad while tracing; inductor touches the deprecated torch.jit.script_method
    pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]


@pytest.fixture
def traced(monkeypatch):
    """Compile with dynamo's eager backend: full tracing, no code generation."""
    monkeypatch.setenv(COMPILE_BACKEND_ENV, "eager")


@pytest.fixture(scope="module")
def target(device):
    return tiny_model(0, device=device)


def test_static_state_matches_uncached_forward(target, device, traced):
    """Two rows fed different tokens, the second kept: every later forward must see exactly
    the kept row's prefix (its new entries copied into the other row)."""
    state = ModelState(target, [0, 1, 2, 3], rows=2, compile=True, capacity=12, role="test")
    assert state.compiled and state.length == 3
    with torch.inference_mode():
        cached = state.forward(torch.tensor([[3, 4, 5], [3, 5, 4]], device=device))
        full = target.model(torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 5, 4]], device=device)).logits[:, 3:]
        torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
        state.commit(1, 5, [4], shared=3)
        assert state.length == 5 and state.pending == [4]
        again = state.forward(state.pending_rows(2))[:, -1]
        reference = target.model(torch.tensor([[0, 1, 2, 3, 5, 4]], device=device)).logits[0, -1]
        torch.testing.assert_close(again, reference.expand(2, -1), atol=1e-5, rtol=1e-5)


def test_static_state_refuses_overflow(target, device, traced):
    state = ModelState(target, [0, 1], rows=1, compile=True, capacity=4, role="test")
    with pytest.raises(ValueError, match="exceed the static cache"):
        state.forward(torch.zeros((1, state.kv.capacity), dtype=torch.long, device=device))


@pytest.mark.parametrize("draft_kind", ["self", "early-exit"])
def test_compiled_greedy_target_reproduces_greedy_decoding(target, device, draft_kind, traced):
    """The exact test of the cache bookkeeping (as in test_decoding), on the static cache:
    acceptances, rejections and two pending tokens after a fully accepted block."""
    model = None if draft_kind == "self" else early_exit(target, 1)
    prompt, greedy = [0, 3, 1], Sampling(0.0)
    reference = sample_autoregressive(
        target, prompt, max_new_tokens=14, generator=torch.Generator(device=device).manual_seed(0), sampling=greedy
    )
    compiled_reference = sample_autoregressive(
        target, prompt, max_new_tokens=14, generator=torch.Generator(device=device).manual_seed(0), sampling=greedy,
        compile=True,
    )  # fmt: skip
    assert compiled_reference == reference
    out = speculative_generate(
        target, [DraftSpec(model, Sampling(1.3))] * 2, prompt, length=3, scheme="specinfer", max_new_tokens=14,
        target_sampling=greedy, compile=True, **generators(device, 0),
    )  # fmt: skip
    assert out.compiled and out.compile_error is None
    assert out.tokens == reference and len(out.blocks) >= 4
    assert any(block.accepted == 3 for block in out.blocks)  # a fully accepted block: two pending tokens


def test_compiled_sampling_follows_the_eager_law_exactly(target, device, traced):
    """Same seed, same numbers: compiled and eager speculative sampling draw the same tokens
    (the static cache changes where keys live, not what the model computes)."""
    specs = [DraftSpec(None, Sampling(1.5))] * 3
    runs = [
        speculative_generate(
            target, specs, [1, 2], length=2, scheme="spectr", max_new_tokens=20, compile=compile,
            **generators(device, 4),
        ).tokens
        for compile in (False, True)
    ]  # fmt: skip
    assert runs[0] == runs[1]


def test_measure_compiles_every_shape_before_timing(target, device, traced):
    """After the warm-up no generation compiles anything (the timed phases see no compilation),
    and the measurement is the same as the eager one."""
    from torch._dynamo.utils import counters

    kwargs = dict(k=2, length=3, prompts=["a b", "c"], max_new_tokens=12, progress=False, seed=5,
                  draft_sampling=Sampling(1.2), device=str(device))  # fmt: skip
    compiled = measure(target, compile=True, **kwargs)
    frames = counters["stats"]["unique_graphs"]
    again = measure(target, compile=True, **kwargs)
    assert counters["stats"]["unique_graphs"] == frames
    eager = measure(target, **kwargs)
    assert compiled.compiled and not eager.compiled and compiled.seconds_warmup > 0
    assert compiled.texts == eager.texts == again.texts
    ours, theirs = compiled.to_dataframe(), eager.to_dataframe()
    exact = ["prompt", "block", "depth", "k_live", "law", "draft_tokens", "token", "accepted"]
    assert ours[exact].equals(theirs[exact])
    # float32 attention over a masked static cache rounds differently from the dynamic cache
    np.testing.assert_allclose(ours[["expected", "optimal"]], theirs[["expected", "optimal"]], atol=1e-5)
    assert compiled.summary()["compile"] is True and np.isfinite(compiled.speedup)


def test_failed_compilation_falls_back_to_eager(target, device, monkeypatch):
    """A backend that cannot compile (as inductor without a C compiler): one warning, the
    static cache runs eagerly, the numbers are unchanged and a note says what happened."""
    from torch._dynamo import register_backend

    @register_backend(name="multidraft_test_broken")
    def broken(graph, example_inputs):
        raise RuntimeError("no compiler here")

    monkeypatch.setenv(COMPILE_BACKEND_ENV, "multidraft_test_broken")
    kwargs = dict(prompts=["a"], max_new_tokens=6, progress=False, baseline=False, device=str(device))
    with pytest.warns(RuntimeWarning, match="no compiler here"):
        results = measure(target, compile=True, **kwargs)
    assert not results.compiled
    assert any("torch.compile failed" in note and "no compiler here" in note for note in results.notes)
    assert results.texts == measure(target, **kwargs).texts


def test_profile_compiled_forward(target, traced):
    profile = profile_latency(target, batch_sizes=(1, 2), token_counts=(1, 3), context=4, repeats=2, warmup=1, compile=True)
    assert profile.compiled and profile.seconds.shape == (2, 2) and (profile.seconds > 0).all()
    assert "compiled forward call" in profile.table()
    with pytest.raises(ValueError, match="warmup: must be an integer >= 1"):
        profile_latency(target, warmup=0, compile=True)


@pytest.mark.slow
def test_inductor_compiled_generation(target, device, monkeypatch):
    """Real code generation (inductor; CUDA graphs on CUDA): the greedy continuation again.
    One draft of one token keeps it to two compiled shapes ([1, 1] and [1, 2])."""
    monkeypatch.delenv(COMPILE_BACKEND_ENV, raising=False)
    prompt, greedy = [0, 3, 1], Sampling(0.0)
    reference = sample_autoregressive(
        target, prompt, max_new_tokens=10, generator=torch.Generator(device=device).manual_seed(0), sampling=greedy
    )
    out = speculative_generate(
        target, [DraftSpec(None, Sampling(1.3))], prompt, length=1, scheme="specinfer", max_new_tokens=10,
        target_sampling=greedy, compile=True, **generators(device, 0),
    )  # fmt: skip
    assert out.compiled, out.compile_error
    assert out.tokens == reference
