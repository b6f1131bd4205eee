"""Latency profiling (multidraft.decoding.profiling) on a tiny random Llama built in the test.

Wall-clock numbers are not testable; the bookkeeping is: the grid, the number of calls, the
median of the timed repeats with the warm-up excluded (by a scripted clock), the cache being
restored between calls, and the conversion to the theory's LatencyModel.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from multidraft.decoding.models import CACHE_KEYWORD, forward_with_cache  # noqa: E402
from multidraft.decoding.profiling import LatencyProfile, profile_latency  # noqa: E402
from multidraft.theory.speed import LatencyModel  # noqa: E402


@pytest.fixture(scope="module")
def tiny_llama():
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


class CountingWrapper(torch.nn.Module):
    """Forwards to a model and records the input shape and cache length of every call."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.calls: list[tuple[tuple[int, ...], int]] = []

    def get_input_embeddings(self):
        return self.inner.get_input_embeddings()

    def forward(self, input_ids, use_cache=False, **cache):
        past = cache[CACHE_KEYWORD]  # the one keyword the installed transformers expects
        self.calls.append((tuple(input_ids.shape), 0 if past is None else past.get_seq_length()))
        return forward_with_cache(self.inner, input_ids, past, use_cache=use_cache)


def scripted_clock(durations):
    """A clock read twice per timed call: start, then start + the next scripted duration."""
    readings = itertools.chain.from_iterable((10.0 * i, 10.0 * i + d) for i, d in enumerate(durations))
    return lambda: next(readings)


def test_profile_grid_shapes_and_latency_model(tiny_llama):
    profile = profile_latency(tiny_llama, batch_sizes=(1, 3), token_counts=(1, 4), context=6, repeats=2, warmup=1)
    assert isinstance(profile, LatencyProfile)
    assert profile.seconds.shape == profile.spread.shape == (2, 2)
    assert (profile.seconds > 0).all() and (profile.spread >= 0).all()
    assert profile.device == "cpu" and profile.name == "LlamaForCausalLM"
    model = profile.latency
    assert isinstance(model, LatencyModel)
    np.testing.assert_array_equal(
        [[model(b, m) for m in (1, 4)] for b in (1, 3)], profile.seconds
    )
    assert "batch \\ tokens" in profile.table() and profile.to_dict()["seconds"] == profile.seconds.tolist()


def test_every_timed_call_sees_the_same_cache(tiny_llama):
    wrapper = CountingWrapper(tiny_llama)
    profile_latency(wrapper, batch_sizes=(1, 2), token_counts=(1, 3), context=5, repeats=3, warmup=2)
    prefills = [call for call in wrapper.calls if call[0][1] == 5]
    timed = [call for call in wrapper.calls if call[0][1] != 5]
    assert prefills == [((1, 5), 0), ((2, 5), 0)]
    # per batch size and token count: 2 warm-up + 3 timed calls, all on a cache of 5 tokens
    expected = [((b, m), 5) for b in (1, 2) for m in (1, 3) for _ in range(5)]
    assert timed == expected


def test_median_of_repeats_excludes_warmup(tiny_llama):
    # one grid point per axis pair: 2 x 2 points, each with 1 warm-up (huge) and 3 timed calls
    durations = []
    medians = [[0.2, 0.4], [0.6, 0.8]]
    for row in medians:
        for median in row:
            durations += [99.0, median - 0.1, median + 0.3, median]
    profile = profile_latency(
        tiny_llama, batch_sizes=(1, 2), token_counts=(1, 2), context=3, repeats=3, warmup=1,
        clock=scripted_clock(durations),
    )
    np.testing.assert_allclose(profile.seconds, medians, rtol=1e-12)
    np.testing.assert_allclose(profile.spread, 0.4, rtol=1e-9)


def test_context_zero_runs_without_cache(tiny_llama):
    wrapper = CountingWrapper(tiny_llama)
    profile = profile_latency(wrapper, batch_sizes=(1, 2), token_counts=(2, 3), context=0, repeats=1, warmup=0)
    assert profile.context == 0
    assert wrapper.calls == [((b, m), 0) for b in (1, 2) for m in (2, 3)]


def test_loaded_model_is_unwrapped(tiny_llama):
    from types import SimpleNamespace

    loaded = SimpleNamespace(model=tiny_llama, name="tiny", tokenizer=None)
    profile = profile_latency(loaded, batch_sizes=(1, 2), token_counts=(1, 2), context=2, repeats=1, warmup=0)
    assert profile.name == "tiny"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_sizes": (1,)}, "batch_sizes: expected at least two strictly increasing"),
        ({"batch_sizes": (2, 1)}, "batch_sizes: expected at least two strictly increasing"),
        ({"batch_sizes": (0, 1)}, "batch_sizes: expected positive integers"),
        ({"token_counts": (1, 1.5)}, "token_counts: expected positive integers"),
        ({"context": -1}, "context: must be an integer >= 0, got -1"),
        ({"repeats": 0}, "repeats: must be an integer >= 1, got 0"),
        ({"warmup": -1}, "warmup: must be an integer >= 0, got -1"),
    ],
    ids=["one-batch", "decreasing", "zero-batch", "float-tokens", "negative-context", "no-repeats", "negative-warmup"],
)
def test_bad_arguments(tiny_llama, kwargs, match):
    with pytest.raises(ValueError, match=match):
        profile_latency(tiny_llama, **kwargs)


def test_not_a_model():
    with pytest.raises(ValueError, match="model: expected a LoadedModel or a torch.nn.Module"):
        profile_latency(object())


def test_model_without_cache_needs_context_zero():
    class NoCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(8, 4)

        def get_input_embeddings(self):
            return self.embed

        def forward(self, input_ids, use_cache=False, **cache):
            return transformers.modeling_outputs.CausalLMOutputWithPast(logits=self.embed(input_ids))

    with pytest.raises(ValueError, match="context: the model returns no croppable KV cache"):
        profile_latency(NoCache(), context=4)
    assert profile_latency(NoCache(), context=0, repeats=1, warmup=0).seconds.shape == (3, 4)


def test_profile_command_prints_the_table(tiny_llama, monkeypatch, capfd):
    import json

    from multidraft.cli import main
    from multidraft.decoding import models

    loaded = models.LoadedModel(tiny_llama, None, "tiny", torch.device("cpu"))
    monkeypatch.setattr(models, "load_model", lambda spec, device="auto": loaded)
    argv = ["profile", "--batch-sizes", "1,2", "--token-counts", "1,3", "--context", "4", "--repeats", "1", "--warmup", "0"]
    assert main(argv) == 0
    out = capfd.readouterr().out
    assert out.startswith("tiny on cpu: median ms per forward call") and len(out.strip().splitlines()) == 4
    assert main([*argv, "--json", "--layers", "1"]) == 0
    result = json.loads(capfd.readouterr().out)
    assert result["name"] == "tiny[:1 layers]" and np.array(result["seconds"]).shape == (2, 2)
    assert result["compiled"] is False


BAD_PROFILE = [
    ("batch-sizes", ["--batch-sizes", "1,1"], "batch_sizes: expected at least two strictly increasing"),
    ("token-counts", ["--token-counts", "0,1"], "token_counts: expected positive integers"),
    ("context", ["--context", "-1"], "context: must be an integer >= 0"),
    ("repeats", ["--repeats", "0"], "repeats: must be an integer >= 1"),
    ("warmup", ["--warmup", "-1"], "warmup: must be an integer >= 0"),
    ("compile-warmup", ["--compile", "--warmup", "0"], "warmup: must be an integer >= 1"),
    ("layers", ["--layers", "0"], "layers: must be >= 1"),
    ("seed", ["--seed", "-2"], "seed: must be >= 0"),
    ("device", ["--device", "nonsense"], "device: not a torch device"),
]
if not torch.cuda.is_available():
    BAD_PROFILE.append(("cuda", ["--device", "cuda"], "CUDA requested but torch reports no CUDA device"))


@pytest.mark.parametrize("extra, message", [c[1:] for c in BAD_PROFILE], ids=[c[0] for c in BAD_PROFILE])
def test_profile_command_refuses_bad_values_before_loading(monkeypatch, capfd, extra, message):
    from multidraft.cli import main
    from multidraft.decoding import models

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(models, "load_model", no_loading)
    assert main(["profile", *extra]) == 2
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("multidraft profile: error: ") and message in captured.err


def test_the_cache_keyword_is_the_one_the_installed_models_take(tiny_llama):
    """The keyword decided once from the installed release (CACHE_KEYWORD) is a parameter of the
    model's own forward (checked by signature, independently of the version number), and a
    cached forward under it raises no deprecation warning (warnings are errors here)."""
    import inspect

    assert CACHE_KEYWORD in inspect.signature(type(tiny_llama).forward).parameters
    output = forward_with_cache(tiny_llama, torch.zeros((1, 3), dtype=torch.long))
    assert getattr(output, CACHE_KEYWORD).get_seq_length() == 3
