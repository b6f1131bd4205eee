"""Decoding on tiny random Llama models built here (no download), on every torch device
present: processing, drafting, exact one-hot verification on the device, losslessness of
speculative sampling (chi-square, with a broken twin that must fail), end of sequence, the
measurement's bookkeeping, its speed-up and its bad inputs (refused before any model loads)."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

pytest.importorskip("transformers")

from multidraft.decoding import (  # noqa: E402
    Drafts,
    DraftSpec,
    LoadedModel,
    MeasureConfig,
    ModelState,
    Sampling,
    check_compatible,
    early_exit,
    measure,
    node_law,
    node_optimal_acceptance,
    process_logits,
    sample_autoregressive,
    sample_without_replacement,
    speculative_generate,
    walk_tree,
)
from multidraft.schemes import Selection, get_scheme  # noqa: E402
from multidraft.theory import IID, Independent, WithoutReplacement, cut_value, optimal_acceptance, softmax, top_p  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ("a", "b", "c", "d", "e", "f")
#: The LP-based schemes need cvxpy (the ``lp`` extra): skipped, not failed, without it.
needs_lp = pytest.mark.skipif(importlib.util.find_spec("cvxpy") is None, reason="needs cvxpy (the lp extra)")


def tiny_model(seed: int, words=WORDS, layers: int = 2, scale: float = 0.5, device="cpu") -> LoadedModel:
    """A 2-layer Llama with a word-level tokenizer and no end-of-sequence token; weights drawn
    from an explicit generator, then moved to ``device``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    config = LlamaConfig(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = LlamaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            parameter.copy_(noise * scale if parameter.ndim > 1 else 1.0 + 0.1 * noise)
    device = torch.device(device)
    return LoadedModel(model.to(device), tokenizer, f"tiny-{seed}", device)


@pytest.fixture(scope="module")
def target(device):
    return tiny_model(0, device=device)


@pytest.fixture(scope="module")
def draft(device):
    return tiny_model(1, device=device)


def generators(device, seed: int) -> dict:
    """The randomness of a generation: a torch generator on the device and a numpy one."""
    return {"generator": torch.Generator(device=device).manual_seed(seed), "rng": np.random.default_rng(seed)}


# ---------------------------------------------------------------------------------------------
# Processing and sampling primitives


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0, 2.0])
@pytest.mark.parametrize("mass", [0.3, 0.9, 1.0])
def test_process_logits_matches_theory_softmax_and_top_p(temperature, mass):
    logits = np.random.default_rng(3).normal(size=(4, 50)) * 2
    expected = softmax(logits, temperature)
    if mass < 1:
        expected = top_p(expected, mass)
    got = process_logits(torch.tensor(logits), temperature, mass).numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_process_logits_per_row_processing():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    temperatures = torch.tensor([[0.5], [1.0], [2.0]], dtype=torch.float64)
    masses = torch.tensor([[1.0], [0.5], [0.8]], dtype=torch.float64)
    rows = process_logits(logits, temperatures, masses)
    for i in range(3):
        single = process_logits(logits[i], float(temperatures[i]), float(masses[i]))
        torch.testing.assert_close(rows[i], single)


def test_sample_without_replacement_law(device):
    """Gumbel-top-2 against the exact law of two draws without replacement (chi-square)."""
    q = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64, device=device)
    law = WithoutReplacement(q.cpu().numpy(), 2)
    tuples, probs = law.enumerate()
    index = {tuple(t): i for i, t in enumerate(tuples.tolist())}
    generator = torch.Generator(device=device).manual_seed(5)
    counts = np.zeros(len(tuples))
    for _ in range(4000):
        counts[index[tuple(sample_without_replacement(q, 2, generator).tolist())]] += 1
    assert stats.chisquare(counts, probs * counts.sum()).pvalue > 1e-3


def test_sampling_bundle():
    assert Sampling() == Sampling(1, 1) and Sampling(1.5).temperature == 1.5
    assert isinstance(Sampling(2).temperature, float)
    assert DraftSpec(None, Sampling(1.5)).key == DraftSpec(None, Sampling(1.5)).key


BAD_SAMPLING = [
    ("negative-temperature", dict(temperature=-1.0), "temperature: must be a finite number >= 0"),
    ("nan-temperature", dict(temperature=float("nan")), "temperature: must be a finite number >= 0"),
    ("infinite-temperature", dict(temperature=float("inf")), "temperature: must be a finite number >= 0"),
    ("string-temperature", dict(temperature="1"), "temperature: must be a finite number >= 0"),
    ("bool-temperature", dict(temperature=True), "temperature: must be a finite number >= 0"),
    ("zero-top-p", dict(top_p=0.0), r"top_p: must lie in \(0, 1\]"),
    ("large-top-p", dict(top_p=1.5), r"top_p: must lie in \(0, 1\]"),
]


@pytest.mark.parametrize("kwargs, message", [c[1:] for c in BAD_SAMPLING], ids=[c[0] for c in BAD_SAMPLING])
def test_sampling_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**kwargs)


def test_draft_spec_needs_a_sampling():
    with pytest.raises(ValueError, match="sampling: expected a Sampling, got float"):
        DraftSpec(None, 1.5)


# ---------------------------------------------------------------------------------------------
# Exact verification with one-hot targets, on the device


def one_hot(n: int, token: int) -> torch.Tensor:
    out = torch.zeros(n, dtype=torch.float64)
    out[token] = 1.0
    return out


def onehot_block(tokens: list[list[int]], targets: list[list[int]], device, n: int = 5) -> tuple[torch.Tensor, Drafts]:
    """Drafts ``tokens [K, L]`` with uniform q; target one-hot at ``targets[k][i]``."""
    x = torch.tensor(tokens, device=device)
    q = torch.full((*x.shape, n), 1.0 / n, dtype=torch.float64, device=device)
    p = torch.stack([torch.stack([one_hot(n, t) for t in row]) for row in targets]).to(device)
    return p, Drafts(x, q)


SPECS = [DraftSpec(None, Sampling())] * 2


@pytest.mark.parametrize(
    "scheme", ["specinfer", "spectr", "optimal", pytest.param("multistage", marks=needs_lp)]  # optimal: the iid verifier
)
def test_walk_tree_one_hot_rejects_at_depth_three(scheme, device):
    # Row 0: 1 2 3 ; row 1: 1 4 0. The target wants 1, then 4, then 2 (after 1 4).
    p, drafts = onehot_block([[1, 2, 3], [1, 4, 0]], [[1, 4, 0, 0], [1, 4, 2, 0]], device)
    out = walk_tree(p, drafts, SPECS, get_scheme(scheme), **generators(device, 0))
    assert out.tokens == (1, 4, 2)
    assert out.accepted == 2 and out.row == 1
    assert [s.accepted for s in out.steps] == [True, True, False]
    assert [s.live for s in out.steps] == [(0, 1), (0, 1), (1,)]
    assert [len(s.live) for s in out.steps] == [2, 2, 1]
    assert all(s.target.device.type == device.type for s in out.steps)


def test_walk_tree_one_hot_bonus_token(device):
    p, drafts = onehot_block([[3, 3], [2, 0]], [[3, 3, 4], [3, 3, 4]], device)
    out = walk_tree(p, drafts, SPECS, get_scheme("specinfer"), **generators(device, 1))
    assert out.tokens == (3, 3, 4)
    assert out.accepted == 2 and out.row == 0
    assert [s.live for s in out.steps] == [(0, 1), (0,)]


def test_walk_tree_one_hot_immediate_rejection(device):
    p, drafts = onehot_block([[0, 1], [2, 3]], [[4, 0, 0], [4, 0, 0]], device)
    out = walk_tree(p, drafts, SPECS, get_scheme("specinfer"), **generators(device, 2))
    assert out.tokens == (4,) and out.accepted == 0 and len(out.steps) == 1


class BatchedOnly:
    """SpecInfer's batched form behind a scheme that has no numpy ``select``: decoding must
    reach it through ``select_batch`` alone, as it will the optimal verifier to come."""

    name = "batched-only"
    batch_capable = True
    scheme = get_scheme("specinfer")

    def __init__(self):
        self.calls = []

    def supports(self, law):
        return self.scheme.supports(law)

    def select(self, target, law, drafts, rng):
        raise AssertionError("a scheme with select_batch must be run on the device")

    def select_batch(self, target, drafts, tokens, generator):
        self.calls.append((target.shape, drafts.shape, tokens.shape, target.device.type))
        return self.scheme.select_batch(target, drafts, tokens, generator)

    def acceptance(self, target, law):
        return self.scheme.acceptance(target, law)


class HostOnly:
    """SpecInfer's numpy form only (no batched form): the fallback, node by node on the host."""

    name = "host-only"
    scheme = get_scheme("specinfer")

    def __init__(self):
        self.laws = []

    def select(self, target, law, drafts, rng):
        assert isinstance(target, np.ndarray) and target.dtype == np.float64
        self.laws.append((law.name, law.k))
        return self.scheme.select(target, law, drafts, rng)

    def acceptance(self, target, law):
        return self.scheme.acceptance(target, law)


def test_batched_schemes_select_on_the_device_and_others_on_the_host(device):
    p, drafts = onehot_block([[1, 2, 3], [1, 4, 0]], [[1, 4, 0, 0], [1, 4, 2, 0]], device)
    batched = BatchedOnly()
    assert walk_tree(p, drafts, SPECS, batched, **generators(device, 0)).tokens == (1, 4, 2)
    assert batched.calls == [((1, 5), (1, 2, 5), (1, 2), device.type)] * 2 + [((1, 5), (1, 1, 5), (1, 1), device.type)]
    host = HostOnly()
    assert walk_tree(p, drafts, SPECS, host, **generators(device, 0)).tokens == (1, 4, 2)
    assert host.laws == [("iid", 2), ("iid", 2), ("iid", 1)]


def test_node_law_kinds():
    q = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    same, other = (1, Sampling()), (1, Sampling(2.0))
    assert isinstance(node_law(q, [same] * 2, False), IID)
    assert isinstance(node_law(q, [same, other], False), Independent)
    assert isinstance(node_law(q, [same] * 2, True), WithoutReplacement)
    assert node_law(q[:1], [same], False).k == 1


def test_broken_scheme_report_is_caught(device):
    class Liar:
        name = "liar"

        def select(self, target, law, drafts, rng):
            return Selection(int(drafts[0]), False, None)

    p, drafts = onehot_block([[1, 2], [1, 4]], [[1, 4, 0], [1, 4, 0]], device)
    with pytest.raises(RuntimeError, match="reported accepted=False"):
        walk_tree(p, drafts, SPECS, Liar(), **generators(device, 0))


@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_node_optimum_without_replacement_is_the_full_scan_issue_34(k):
    """Drafts without replacement: the pruned scan (K > 2) and the cut of a fitted plan give the
    full sorted scan's P* to 1e-12 (issue 34, item 5b); an unfitted plan is not fitted for it."""
    from multidraft.theory import zipf

    rng = np.random.default_rng(k)
    for _ in range(40):
        p, q = rng.dirichlet(np.full(7, 0.4), size=2)
        q = np.maximum(q, 1e-3) / np.maximum(q, 1e-3).sum()
        law = WithoutReplacement(q, min(k, 6))
        np.testing.assert_allclose(node_optimal_acceptance(p, law), optimal_acceptance(p, law).value, rtol=0, atol=1e-12)
    p = zipf(4096, exponent=1.1, rng=np.random.default_rng(0))
    for temperature in (0.5, 1.6):
        law = WithoutReplacement(softmax(np.log(p), temperature=temperature), k)
        full = optimal_acceptance(p, law).value
        plan = get_scheme("optimal").prepare(p, law)
        np.testing.assert_allclose(node_optimal_acceptance(plan.target, law, plan), full, rtol=0, atol=1e-12)
        assert "rule" not in vars(plan)  # nothing fitted for the optimum alone
        plan.acceptance
        assert "rule" in vars(plan)
        np.testing.assert_allclose(node_optimal_acceptance(plan.target, law, plan), full, rtol=0, atol=1e-12)
        assert node_optimal_acceptance(plan.target, law, plan) == plan.rule.optimum


def test_node_optimal_acceptance_is_the_theory_optimum_for_every_law():
    """Every law through :func:`optimal_acceptance` (no NaN path): the sorted scan for iid and
    without replacement, the exact threshold search for non-identical drafts at any joint
    support -- each checked against all subsets (small n) or the zero-padded instance."""
    rng = np.random.default_rng(4)
    p, q1, q2 = rng.dirichlet(np.ones(6), size=3)
    for law in (IID(q1, 2), WithoutReplacement(q1, 3), Independent([q1, q2])):
        np.testing.assert_allclose(
            node_optimal_acceptance(p, law), optimal_acceptance(p, law, method="subsets").value, rtol=1e-12
        )
    # Zeros outside a joint support of 6 tokens drop out of the cut.
    law = Independent([q1, q2])
    padded = [np.concatenate([v, np.zeros(30)]) for v in (p, q1, q2)]
    np.testing.assert_allclose(
        node_optimal_acceptance(padded[0], Independent(padded[1:])), node_optimal_acceptance(p, law), rtol=1e-12
    )
    # A joint support far beyond the subsets' reach (the old NaN path) has its exact optimum.
    wide = rng.dirichlet(np.ones(4000), size=3)
    law = Independent(list(wide[1:]))
    value = node_optimal_acceptance(wide[0], law)
    assert math.isfinite(value)
    # An upper bound from every cut (the value is a minimum) and a lower bound from one draft.
    for tokens in (np.flatnonzero(wide[0] > wide[1]), np.arange(2000), np.flatnonzero(wide[0] < wide[2])):
        assert value <= cut_value(wide[0], law, tokens) + 1e-12
    assert np.minimum(wide[0], wide[1]).sum() - 1e-12 <= value


# ---------------------------------------------------------------------------------------------
# Models: early exit and compatibility


def test_early_exit_shares_weights_and_matches_manual_truncation(target, device):
    shallow = early_exit(target, 1)
    assert shallow.model.model.layers[0] is target.model.model.layers[0]
    assert len(target.model.model.layers) == 2 and len(shallow.model.model.layers) == 1
    assert target.model.config.num_hidden_layers == 2
    ids = torch.tensor([[0, 3, 2]], device=device)
    with torch.inference_mode():
        hidden = target.model(ids, output_hidden_states=True).hidden_states[1]
        manual = target.model.lm_head(target.model.model.norm(hidden))
        torch.testing.assert_close(shallow.model(ids).logits, manual)
        assert not torch.allclose(target.model(ids).logits, manual)


@pytest.mark.parametrize("layers", [0, 3, 1.5, True])
def test_early_exit_bad_layers(target, layers):
    with pytest.raises(ValueError, match="layers: expected an integer in 1..2"):
        early_exit(target, layers)


def test_incompatible_vocabulary_is_rejected(target, device):
    other = tiny_model(2, words=("a", "b", "c", "d", "e", "g"), device=device)
    with pytest.raises(ValueError, match="tokenizer differs"):
        check_compatible(target, other)
    wider = tiny_model(2, words=WORDS + ("g",), device=device)
    with pytest.raises(ValueError, match="vocabulary size 7 differs from the target's 6"):
        measure(target, wider, prompts=["a"], max_new_tokens=2, progress=False)


# ---------------------------------------------------------------------------------------------
# KV-cache bookkeeping: exact tests with greedy (one-hot) targets


@pytest.mark.parametrize("draft_kind", ["self", "other", "early-exit"])
def test_greedy_target_reproduces_greedy_decoding(target, draft, draft_kind, device):
    """With target temperature 0, p is one-hot, so any lossless verifier must emit the
    target's greedy continuation: an exact test of drafting, caching and committing across
    blocks with acceptances and rejections."""
    model = {"self": None, "other": draft, "early-exit": early_exit(target, 1)}[draft_kind]
    prompt = [0, 3, 1]
    greedy = Sampling(0.0)
    reference = sample_autoregressive(
        target, prompt, max_new_tokens=14, generator=torch.Generator(device=device).manual_seed(0), sampling=greedy
    )
    specs = [DraftSpec(model, Sampling(1.3))] * 2
    out = speculative_generate(
        target, specs, prompt, length=3, scheme="specinfer", max_new_tokens=14, target_sampling=greedy,
        **generators(device, 0),
    )  # fmt: skip
    assert out.tokens == reference
    assert len(out.blocks) >= 4


def test_model_state_matches_uncached_forward(target, device):
    state = ModelState(target, [0, 1, 2, 3])
    with torch.inference_mode():
        cached = state.forward(torch.tensor([[3, 4, 5], [3, 5, 4]], device=device))
        full = target.model(torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 5, 4]], device=device)).logits[:, 3:]
    assert state.pending == [3]
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
    state.commit(1, 5, [4])
    assert state.length == 5 and state.pending == [4]
    with torch.inference_mode():
        torch.testing.assert_close(
            state.forward(torch.tensor([[4]], device=device))[0, -1],
            target.model(torch.tensor([[0, 1, 2, 3, 5, 4]], device=device)).logits[0, -1],
            atol=1e-5,
            rtol=1e-5,
        )


# ---------------------------------------------------------------------------------------------
# End of sequence


def eos_model(device) -> LoadedModel:
    """A tiny model whose generation config ends sequences at token 2 ("c") while its
    tokenizer names token 1 ("b"): the disagreement transformers 5.17 produced for SmolLM2."""
    loaded = tiny_model(0, device=device)
    loaded.model.generation_config.eos_token_id = 2
    loaded.tokenizer.eos_token = "b"
    assert loaded.tokenizer.eos_token_id == 1
    return LoadedModel(loaded.model, loaded.tokenizer, "tiny-eos", device)


def test_end_of_sequence_comes_from_the_generation_config(device):
    """Generation stops at the generation config's end of sequence (2), never at the
    tokenizer's (1): with the tokenizer's id, runs would stop at "b" and run past "c"."""
    loaded = eos_model(device)
    assert loaded.eos_token_ids == {2}
    stops = {1: 0, 2: 0}
    for seed in range(12):
        tokens = sample_autoregressive(
            loaded, [0, 3], max_new_tokens=40, generator=torch.Generator(device=device).manual_seed(seed),
            sampling=Sampling(2.0),
        )  # fmt: skip
        assert 2 not in tokens[:-1]
        stops[tokens[-1]] = stops.get(tokens[-1], 0) + 1
        out = speculative_generate(
            loaded, [DraftSpec(None, Sampling(2.0))] * 2, [0, 3], length=3, scheme="specinfer",
            max_new_tokens=40, target_sampling=Sampling(2.0), **generators(device, seed),
        )  # fmt: skip
        assert 2 not in out.tokens[:-1] and (out.tokens[-1] == 2 or len(out.tokens) == 40)
    assert stops[2] >= 6  # most runs end at the true end of sequence ...
    results = measure(loaded, prompts=["a d"], max_new_tokens=40, draft_sampling=Sampling(2.0),
                      target_sampling=Sampling(2.0), progress=False)  # fmt: skip
    assert results.new_tokens < 40 and results.autoregressive_tokens <= 40


def test_end_of_sequence_fallbacks(device):
    loaded = tiny_model(0, device=device)
    assert loaded.eos_token_ids == frozenset()  # no generation config, config nor tokenizer id
    loaded.model.config.eos_token_id = [4, 5]
    assert LoadedModel(loaded.model, loaded.tokenizer, "x", device).eos_token_ids == {4, 5}
    assert LoadedModel(loaded.model, loaded.tokenizer, "x", device, eos_token_ids=[3]).eos_token_ids == {3}
    loaded.model.config.eos_token_id = None


# ---------------------------------------------------------------------------------------------
# Losslessness: the law of the first two generated tokens


def two_token_law(model: LoadedModel, prompt: list[int]) -> np.ndarray:
    """Exact autoregressive law of the first two tokens, ``[n * n]``, without any cache."""
    n = model.vocab_size
    with torch.inference_mode():
        first = torch.softmax(model.model(torch.tensor([prompt], device=model.device)).logits[0, -1].double(), -1)
        contexts = torch.tensor([prompt + [t] for t in range(n)], device=model.device)
        second = torch.softmax(model.model(contexts).logits[:, -1].double(), -1)
    return (first[:, None] * second).reshape(-1).cpu().numpy()


class ResidualFromTarget:
    """A deliberately broken verifier: single-draft test of the first live draft, but on
    rejection it samples from p instead of the residual norm((p - q)_+)."""

    name = "broken"
    supported_laws = ("iid", "independent")

    def select(self, target, law, drafts, rng):
        q = law.marginal(0)
        token = int(drafts[0])
        if rng.random() < min(1.0, target[token] / q[token]):
            return Selection(token, True, 0)
        out = int(rng.choice(len(target), p=target))
        return Selection(out, out in set(drafts.tolist()), None)

    def acceptance(self, target, law):
        return float("nan")


def first_two_counts(target, specs, scheme, samples: int, seed: int) -> np.ndarray:
    n = target.vocab_size
    randomness = generators(target.device, seed)
    counts = np.zeros(n * n)
    for _ in range(samples):
        out = speculative_generate(target, specs, [2], length=2, scheme=scheme, max_new_tokens=2, **randomness)
        counts[out.tokens[0] * n + out.tokens[1]] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, law: np.ndarray) -> float:
    """Pearson chi-square goodness of fit, cells with expected count < 5 pooled."""
    expected = law * counts.sum()
    small = expected < 5
    observed = np.append(counts[~small], counts[small].sum())
    expected = np.append(expected[~small], expected[small].sum())
    keep = expected > 0
    return float(stats.chisquare(observed[keep], expected[keep]).pvalue)


@pytest.mark.statistical
@pytest.mark.parametrize(
    "scheme, temperatures",
    [("specinfer", (1.0, 2.0)), ("spectr", (1.4, 1.4))],
    ids=["specinfer-independent", "spectr-iid"],
)
def test_speculative_sampling_is_lossless(target, draft, scheme, temperatures):
    law = two_token_law(target, [2])
    specs = [DraftSpec(draft, Sampling(t)) for t in temperatures]
    counts = first_two_counts(target, specs, scheme, samples=500, seed=11)
    assert counts.sum() == 500
    assert chi_square_pvalue(counts, law) > 1e-3


@pytest.mark.statistical
def test_broken_verifier_fails_the_losslessness_test(target, draft):
    """The twin of the test above: the same chi-square rejects a biased verifier."""
    law = two_token_law(target, [2])
    specs = [DraftSpec(draft, Sampling(1.0)), DraftSpec(draft, Sampling(2.0))]
    counts = first_two_counts(target, specs, ResidualFromTarget(), samples=500, seed=11)
    assert chi_square_pvalue(counts, law) < 1e-3


# ---------------------------------------------------------------------------------------------
# Measurement


def test_measure_bookkeeping(target, draft):
    results = measure(
        target, draft, k=2, length=3, prompts=["a b", "c"], max_new_tokens=12, progress=False,
        draft_sampling=Sampling(1.2), keep_distributions=True,
    )  # fmt: skip
    frame = results.to_dataframe()
    assert len(frame) == results.positions == len(results.records)
    assert results.new_tokens == 24 and results.autoregressive_tokens == 24
    np.testing.assert_allclose(results.empirical_acceptance, frame["accepted"].mean())
    np.testing.assert_allclose(results.expected_acceptance, frame["expected"].mean())
    np.testing.assert_allclose(results.block_efficiency, (frame["accepted"].sum() + results.blocks) / results.blocks)
    assert (frame["optimal"] >= frame["expected"] - 1e-9).all()
    for record in results.records:
        law = IID(record.drafts[0], record.k_live, normalize=True)
        np.testing.assert_allclose(record.expected, get_scheme("specinfer").acceptance(record.target, law), rtol=1e-9)
        np.testing.assert_allclose(record.optimal, optimal_acceptance(record.target, law, method="subsets").value, rtol=1e-9)
        assert record.accepted == (record.token in record.draft_tokens)
    low, high = results.ci95
    difference = frame["accepted"] - frame["expected"]
    half = 1.96 * math.sqrt((frame["expected"] * (1 - frame["expected"])).sum()) / len(frame)
    np.testing.assert_allclose([low, high], [difference.mean() - half, difference.mean() + half])
    np.testing.assert_allclose(results.speedup, results.tokens_per_second / results.autoregressive_tokens_per_second)
    summary = json.loads(results.to_json())
    assert summary["seconds_selection"] > 0 and summary["seconds_autoregressive"] > 0
    assert summary["draft_temperatures"] == [1.2, 1.2] and summary["prompts"] == 2 and summary["compiled"] is False


def test_measure_records_the_draft_support(target, draft):
    """Every record counts the tokens its live drafts could propose; under top-p drafts fewer
    than the vocabulary, under plain sampling all of it (softmax never underflows here)."""
    for top, scheme in ((0.7, "optimal"), (1.0, "specinfer")):
        results = measure(
            target, draft, k=3, length=2, prompts=["a b"], max_new_tokens=6, progress=False, scheme=scheme,
            draft_sampling=Sampling(1.2, top_p=top), keep_distributions=True,
        )  # fmt: skip
        supports = [int((record.drafts > 0).any(axis=0).sum()) for record in results.records]
        assert [record.draft_support for record in results.records] == supports
        vocabulary = results.records[0].drafts.shape[1]
        assert max(supports) < vocabulary if top < 1 else min(supports) == vocabulary
        assert results.draft_support == pytest.approx(np.mean(supports))
        assert json.loads(results.to_json())["draft_support"] == pytest.approx(np.mean(supports))


#: Every key the JSON summary had before the configuration moved into ``Results.config``.
SUMMARY_KEYS = (
    "scheme", "target", "draft", "k", "length", "target_temperature", "target_top_p", "draft_temperatures",
    "draft_top_p", "without_replacement", "seed", "prompts", "positions", "empirical_acceptance",
    "expected_acceptance", "ci95", "expected_positions", "optimal_acceptance", "optimal_positions",
    "block_efficiency", "blocks", "new_tokens", "tokens_per_second", "seconds_drafting", "seconds_verification",
    "seconds_selection", "seconds_theory", "notes",
)  # fmt: skip


def test_summary_keeps_every_key_and_gains_the_speed_ones(target):
    results = measure(target, prompts=["a"], max_new_tokens=3, baseline=False, progress=False)
    summary = results.summary()
    assert set(SUMMARY_KEYS) <= set(summary)
    for key in ("autoregressive_tokens_per_second", "speedup", "max_new_tokens", "device", "compile", "compiled"):
        assert key in summary
    assert summary["speedup"] is None and summary["autoregressive_tokens_per_second"] is None  # no baseline
    assert isinstance(results.config, MeasureConfig) and results.config.k == 2
    with pytest.raises(AttributeError):
        results.config.k = 3  # frozen


def test_measure_is_reproducible(target, draft):
    kwargs = dict(k=2, length=2, prompts=["a"], max_new_tokens=8, progress=False, seed=3)
    first, second = measure(target, draft, **kwargs), measure(target, draft, **kwargs)
    assert first.texts == second.texts
    assert first.to_dataframe().equals(second.to_dataframe())


def test_measure_without_replacement(target):
    results = measure(
        target, early_exit(target, 1), k=3, length=2, scheme="rrs-wor", prompts=["a b"], max_new_tokens=10,
        without_replacement=True, progress=False,
    )  # fmt: skip
    first = [r for r in results.records if r.depth == 1]
    assert all(len(set(r.draft_tokens)) == 3 and r.law == "wor" for r in first)
    assert all(r.k_live == 1 for r in results.records if r.depth > 1)


def test_measure_independent_drafts_optimum_on_small_vocabulary(target):
    results = measure(
        target, None, k=2, length=2, prompts=["a"], max_new_tokens=6, progress=False,
        draft_sampling=(Sampling(1.0), Sampling(2.0)),
    )  # fmt: skip
    independent = [r for r in results.records if r.law == "independent"]
    assert independent and all(np.isfinite(r.optimal) for r in independent)
    for record in independent:
        assert record.optimal >= record.expected - 1e-9


BAD_MEASURE = [
    ("k-zero", dict(k=0), "k: the number of drafts must be an integer >= 1, got 0"),
    ("k-float", dict(k=1.5), "k: the number of drafts must be an integer >= 1, got 1.5"),
    ("length-zero", dict(length=0), "length: must be an integer >= 1, got 0"),
    ("max-new-tokens-zero", dict(max_new_tokens=0), "max_new_tokens: must be an integer >= 1, got 0"),
    ("empty-prompts", dict(prompts=[]), "prompts: the prompt list is empty"),
    ("blank-prompt", dict(prompts=["  "]), "prompts: every prompt must be a non-empty string"),
    ("one-string-prompt", dict(prompts="a b"), "prompts: expected a sequence of strings, got one string"),
    ("seed-negative", dict(seed=-1), r"seed: expected an integer in \[0, 2\*\*63 - 1\)"),
    ("seed-float", dict(seed=0.5), "seed: expected an integer"),
    ("samplings", dict(k=3, draft_sampling=(Sampling(1.0), Sampling(2.0))), "draft_sampling: give one Sampling or k=3"),
    ("draft-sampling-float", dict(draft_sampling=1.5), "draft_sampling: expected a Sampling"),
    ("target-sampling-float", dict(target_sampling=1.0), "target_sampling: expected a Sampling, got float"),
    ("wor-mixed", dict(without_replacement=True, draft_sampling=(Sampling(1.0), Sampling(2.0))), "without_replacement"),
    ("wor-greedy-draft", dict(without_replacement=True, scheme="rrs-wor", draft_sampling=Sampling(0.0)), "at least K tokens"),
    ("wor-top-p", dict(without_replacement=True, scheme="rrs-wor", draft_sampling=Sampling(1.0, 0.3)), "at least K tokens"),
    ("wor-flag", dict(without_replacement=1), "without_replacement: expected True or False"),
    ("compile-flag", dict(compile="yes"), "compile: expected True or False"),
    ("baseline-flag", dict(baseline=None), "baseline: expected True or False"),
    ("scheme-unknown", dict(scheme="nope"), "scheme: unknown name 'nope'"),
    ("scheme-law", dict(scheme="spectr", draft_sampling=(Sampling(1.0), Sampling(2.0))), "supports the laws"),
    ("scheme-object", dict(scheme=42), "scheme: expected a scheme name"),
    ("scheme-k", dict(scheme="single"), "does not apply to these drafts"),
    ("device-name", dict(device="nonsense"), "device: not a torch device"),
    ("device-type", dict(device=3), "device: expected a device name"),
]
if not torch.cuda.is_available():
    BAD_MEASURE.append(("device-cuda", dict(device="cuda"), "^CUDA requested but torch reports no CUDA device$"))


@pytest.mark.parametrize("kwargs, message", [c[1:] for c in BAD_MEASURE], ids=[c[0] for c in BAD_MEASURE])
def test_measure_bad_input_is_refused_before_loading(monkeypatch, kwargs, message):
    """Every bad value raises before a model loads: the target is a name whose loading fails
    the test."""
    import multidraft.decoding.measurement as measurement

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(measurement, "load_model", no_loading)
    kwargs = {"prompts": ["a"], "max_new_tokens": 2, "progress": False} | kwargs
    with pytest.raises(ValueError, match=message):
        measure("default", **kwargs)


def test_public_names_resolve():
    import multidraft.decoding as decoding

    assert len(set(decoding.__all__)) == len(decoding.__all__)
    for name in decoding.__all__:
        assert getattr(decoding, name) is not None, name


def test_measure_reports_positions_without_expected_acceptance(target, draft):
    """A scheme with no exact acceptance at the root (as rrs-wor at a large vocabulary):
    expected_acceptance and ci95 cover the other positions, and a note says so."""
    specinfer = get_scheme("specinfer")

    class RootlessSpecInfer:
        name = "rootless"

        def select(self, p, law, drafts, rng):
            return specinfer.select(p, law, drafts, rng)

        def acceptance(self, p, law):
            if law.k > 1:
                raise ValueError("no closed form here")
            return specinfer.acceptance(p, law)

    results = measure(target, draft, k=2, length=3, scheme=RootlessSpecInfer(), prompts=["a"], max_new_tokens=10, progress=False)
    frame = results.to_dataframe()
    matched = frame[np.isfinite(frame["expected"])]
    assert results.expected_positions == len(matched) == int((frame["k_live"] == 1).sum()) < results.positions
    np.testing.assert_allclose(results.expected_acceptance, matched["expected"].mean())
    assert any("no closed form here" in note and "cover the other" in note for note in results.notes)


@pytest.mark.statistical
@pytest.mark.parametrize(
    "scheme, without_replacement",
    [("specinfer", False), ("spectr", False), ("rrs-wor", True), ("batched-only", False), ("host-only", False)],
)
def test_empirical_acceptance_matches_expected_end_to_end(target, draft, scheme, without_replacement):
    """Calibration through the whole decoding path: per position, acceptance is Bernoulli with
    the scheme's exact acceptance as mean, so Σ(accepted - expected) is a martingale and its mean
    must lie within 4 standard errors of 0. The two wrappers run SpecInfer through its batched
    form only and through its numpy form only. Twin: the same records against a wrongly
    shifted expectation must be rejected, so the test can fail."""
    chosen = {"batched-only": BatchedOnly(), "host-only": HostOnly()}.get(scheme, scheme)
    results = measure(
        target, draft, k=3, length=3, scheme=chosen, prompts=["a b", "c d e", "b a"], max_new_tokens=120,
        draft_sampling=Sampling(1.5), without_replacement=without_replacement, baseline=False, progress=False,
        seed=7,
    )  # fmt: skip
    accepted = np.array([r.accepted for r in results.records], dtype=float)
    expected = np.array([r.expected for r in results.records])
    assert len(accepted) >= 300 and np.isfinite(expected).all()
    standard_error = np.sqrt(np.sum(expected * (1 - expected))) / len(accepted)

    def z(mean_expected: np.ndarray) -> float:
        return abs((accepted - mean_expected).mean()) / standard_error

    assert z(expected) < 4
    assert z(np.clip(expected + 0.2, 0, 1)) > 4  # a miscalibrated expectation is caught


def test_one_plan_per_node_selects_and_records(target, monkeypatch):
    """Decoding prepares one plan per node: on the host path the plan that selects is the one
    the record reads its acceptance from; after a batched selection the record prepares it.
    (Scoring each block's tree, the token verifier's exact law prepares plans of its own for
    every node of the tree: those are left out of the count.)"""
    from registered_scheme import FirstDraft

    import multidraft.decoding.measurement as measurement
    from multidraft.schemes import SpecInfer

    score = measurement._score_block

    def uncounted(*args, **kwargs):
        scheme = args[2].scheme
        before = type(scheme).prepared
        try:
            return score(*args, **kwargs)
        finally:
            type(scheme).prepared = before

    monkeypatch.setattr(measurement, "_score_block", uncounted)

    def counting(cls):
        class Counting(cls):
            prepared = 0

            def prepare(self, *args, **kwargs):
                type(self).prepared += 1
                return super().prepare(*args, **kwargs)

        return Counting()

    for scheme in (counting(FirstDraft), counting(SpecInfer)):  # host path; batched path
        results = measure(
            target, None, k=2, length=3, prompts=["a b"], max_new_tokens=8, progress=False, baseline=False,
            scheme=scheme, keep_distributions=True,
        )  # fmt: skip
        assert type(scheme).prepared == results.positions > 0
        for record in results.records:
            law = IID(record.drafts[0], record.k_live, normalize=True)
            reference = FirstDraft() if isinstance(scheme, FirstDraft) else SpecInfer()
            np.testing.assert_allclose(record.expected, reference.acceptance(record.target, law), rtol=0, atol=1e-15)
