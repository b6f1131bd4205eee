"""Decoding on tiny random Llama models built here (no download): processing, drafting,
exact one-hot verification, losslessness of speculative sampling (chi-square, with a broken
twin that must fail), the measurement's bookkeeping and its bad inputs."""

from __future__ import annotations

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
    ModelState,
    check_compatible,
    early_exit,
    measure,
    node_law,
    node_optimal_acceptance,
    process_logits,
    sample_autoregressive,
    speculative_generate,
    walk_tree,
)
from multidraft.decoding.drafting import sample_without_replacement  # noqa: E402
from multidraft.schemes import Selection, get_scheme  # noqa: E402
from multidraft.theory import IID, Independent, WithoutReplacement, optimal_acceptance, softmax, top_p  # noqa: E402

WORDS = ("a", "b", "c", "d", "e", "f")


def tiny_model(seed: int, words=WORDS, layers: int = 2, scale: float = 0.5) -> LoadedModel:
    """A 2-layer Llama with a word-level tokenizer; weights drawn from an explicit generator."""
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
    )
    model = LlamaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            parameter.copy_(noise * scale if parameter.ndim > 1 else 1.0 + 0.1 * noise)
    return LoadedModel(model, tokenizer, f"tiny-{seed}", torch.device("cpu"))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (and leave the other core to other tests)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def target():
    return tiny_model(0)


@pytest.fixture(scope="module")
def draft():
    return tiny_model(1)


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


def test_sample_without_replacement_law():
    """Gumbel-top-2 against the exact law of two draws without replacement (chi-square)."""
    q = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    law = WithoutReplacement(q.numpy(), 2)
    tuples, probs = law.enumerate()
    index = {tuple(t): i for i, t in enumerate(tuples.tolist())}
    generator = torch.Generator().manual_seed(5)
    counts = np.zeros(len(tuples))
    for _ in range(4000):
        counts[index[tuple(sample_without_replacement(q, 2, generator).tolist())]] += 1
    assert stats.chisquare(counts, probs * counts.sum()).pvalue > 1e-3


# ---------------------------------------------------------------------------------------------
# Exact verification with one-hot targets


def one_hot(n: int, token: int) -> torch.Tensor:
    out = torch.zeros(n, dtype=torch.float64)
    out[token] = 1.0
    return out


def onehot_block(tokens: list[list[int]], targets: list[list[int]], n: int = 5) -> tuple[torch.Tensor, Drafts]:
    """Drafts ``tokens [K, L]`` with uniform q; target one-hot at ``targets[k][i]``."""
    x = torch.tensor(tokens)
    q = torch.full((*x.shape, n), 1.0 / n, dtype=torch.float64)
    p = torch.stack([torch.stack([one_hot(n, t) for t in row]) for row in targets])
    return p, Drafts(x, q)


@pytest.mark.parametrize("scheme", ["specinfer", "spectr", "optimal", "multistage"])
def test_walk_tree_one_hot_rejects_at_depth_three(scheme):
    # Row 0: 1 2 3 ; row 1: 1 4 0. The target wants 1, then 4, then 2 (after 1 4).
    p, drafts = onehot_block([[1, 2, 3], [1, 4, 0]], [[1, 4, 0, 0], [1, 4, 2, 0]])
    specs = [DraftSpec(None, 1.0)] * 2
    out = walk_tree(p, drafts, specs, get_scheme(scheme), np.random.default_rng(0))
    assert out.tokens == (1, 4, 2)
    assert out.accepted == 2 and out.row == 1
    assert [s.accepted for s in out.steps] == [True, True, False]
    assert [s.live for s in out.steps] == [(0, 1), (0, 1), (1,)]
    assert [s.law.k for s in out.steps] == [2, 2, 1]


def test_walk_tree_one_hot_bonus_token():
    p, drafts = onehot_block([[3, 3], [2, 0]], [[3, 3, 4], [3, 3, 4]])
    out = walk_tree(p, drafts, [DraftSpec(None, 1.0)] * 2, get_scheme("specinfer"), np.random.default_rng(1))
    assert out.tokens == (3, 3, 4)
    assert out.accepted == 2 and out.row == 0
    assert [s.live for s in out.steps] == [(0, 1), (0,)]


def test_walk_tree_one_hot_immediate_rejection():
    p, drafts = onehot_block([[0, 1], [2, 3]], [[4, 0, 0], [4, 0, 0]])
    out = walk_tree(p, drafts, [DraftSpec(None, 1.0)] * 2, get_scheme("specinfer"), np.random.default_rng(2))
    assert out.tokens == (4,) and out.accepted == 0 and len(out.steps) == 1


def test_node_law_kinds():
    q = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    assert isinstance(node_law(q, [(1.0, 1.0)] * 2, False), IID)
    assert isinstance(node_law(q, [(1.0, 1.0), (2.0, 1.0)], False), Independent)
    assert isinstance(node_law(q, [(1.0, 1.0)] * 2, True), WithoutReplacement)
    assert node_law(q[:1], [(1.0, 1.0)], False).k == 1


def test_broken_scheme_report_is_caught():
    class Liar:
        name = "liar"

        def select(self, target, law, drafts, rng):
            return Selection(int(drafts[0]), False, None)

    p, drafts = onehot_block([[1, 2], [1, 4]], [[1, 4, 0], [1, 4, 0]])
    with pytest.raises(RuntimeError, match="reported accepted=False"):
        walk_tree(p, drafts, [DraftSpec(None, 1.0)] * 2, Liar(), np.random.default_rng(0))


def test_node_optimal_acceptance_routes():
    rng = np.random.default_rng(4)
    p, q1, q2 = rng.dirichlet(np.ones(6), size=3)
    iid = IID(q1, 2)
    np.testing.assert_allclose(
        node_optimal_acceptance(p, iid), optimal_acceptance(p, iid, method="subsets").value, rtol=1e-12
    )
    law = Independent([q1, q2])
    np.testing.assert_allclose(
        node_optimal_acceptance(p, law), optimal_acceptance(p, law, method="subsets").value, rtol=1e-12
    )
    # Zeros outside a joint support of 4 tokens drop out of the cut.
    padded = [np.concatenate([v, np.zeros(30)]) for v in (p, q1, q2)]
    np.testing.assert_allclose(
        node_optimal_acceptance(padded[0], Independent(padded[1:])), node_optimal_acceptance(p, law), rtol=1e-12
    )
    wide = rng.dirichlet(np.ones(30), size=3)
    assert math.isnan(node_optimal_acceptance(wide[0], Independent(list(wide[1:]))))


# ---------------------------------------------------------------------------------------------
# Models: early exit and compatibility


def test_early_exit_shares_weights_and_matches_manual_truncation(target):
    shallow = early_exit(target, 1)
    assert shallow.model.model.layers[0] is target.model.model.layers[0]
    assert len(target.model.model.layers) == 2 and len(shallow.model.model.layers) == 1
    assert target.model.config.num_hidden_layers == 2
    ids = torch.tensor([[0, 3, 2]])
    with torch.inference_mode():
        hidden = target.model(ids, output_hidden_states=True).hidden_states[1]
        manual = target.model.lm_head(target.model.model.norm(hidden))
        torch.testing.assert_close(shallow.model(ids).logits, manual)
        assert not torch.allclose(target.model(ids).logits, manual)


@pytest.mark.parametrize("layers", [0, 3, 1.5, True])
def test_early_exit_bad_layers(target, layers):
    with pytest.raises(ValueError, match="layers: expected an integer in 1..2"):
        early_exit(target, layers)


def test_incompatible_vocabulary_is_rejected(target):
    other = tiny_model(2, words=("a", "b", "c", "d", "e", "g"))
    with pytest.raises(ValueError, match="tokenizer differs"):
        check_compatible(target, other)
    wider = tiny_model(2, words=WORDS + ("g",))
    with pytest.raises(ValueError, match="vocabulary size 7 differs from the target's 6"):
        measure(target, wider, prompts=["a"], max_new_tokens=2, progress=False)


# ---------------------------------------------------------------------------------------------
# KV-cache bookkeeping: exact tests with greedy (one-hot) targets


@pytest.mark.parametrize("draft_kind", ["self", "other", "early-exit"])
def test_greedy_target_reproduces_greedy_decoding(target, draft, draft_kind):
    """With target temperature 0, p is one-hot, so any lossless verifier must emit the
    target's greedy continuation: an exact test of drafting, caching and committing across
    blocks with acceptances and rejections."""
    model = {"self": None, "other": draft, "early-exit": early_exit(target, 1)}[draft_kind]
    prompt = [0, 3, 1]
    reference = sample_autoregressive(
        target, prompt, max_new_tokens=14, generator=torch.Generator().manual_seed(0), temperature=0.0
    )
    specs = [DraftSpec(model, 1.3), DraftSpec(model, 1.3)]
    out = speculative_generate(
        target, specs, prompt, length=3, scheme="specinfer", max_new_tokens=14,
        rng=np.random.default_rng(0), generator=torch.Generator().manual_seed(0), target_temperature=0.0,
    )  # fmt: skip
    assert out.tokens == reference
    assert len(out.blocks) >= 4


def test_model_state_matches_uncached_forward(target):
    state = ModelState(target, [0, 1, 2, 3])
    with torch.inference_mode():
        cached = state.forward(torch.tensor([[3, 4, 5], [3, 5, 4]]))
        full = target.model(torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 5, 4]])).logits[:, 3:]
    assert state.pending == [3]
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
    state.commit(1, 5, [4])
    assert state.length == 5 and state.pending == [4]
    with torch.inference_mode():
        torch.testing.assert_close(
            state.forward(torch.tensor([[4]]))[0, -1],
            target.model(torch.tensor([[0, 1, 2, 3, 5, 4]])).logits[0, -1],
            atol=1e-5,
            rtol=1e-5,
        )


# ---------------------------------------------------------------------------------------------
# Losslessness: the law of the first two generated tokens


def two_token_law(model: LoadedModel, prompt: list[int]) -> np.ndarray:
    """Exact autoregressive law of the first two tokens, ``[n * n]``, without any cache."""
    n = model.vocab_size
    with torch.inference_mode():
        first = torch.softmax(model.model(torch.tensor([prompt])).logits[0, -1].double(), -1)
        contexts = torch.tensor([prompt + [t] for t in range(n)])
        second = torch.softmax(model.model(contexts).logits[:, -1].double(), -1)
    return (first[:, None] * second).reshape(-1).numpy()


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
    rng, generator = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    counts = np.zeros(n * n)
    for _ in range(samples):
        out = speculative_generate(
            target, specs, [2], length=2, scheme=scheme, max_new_tokens=2, rng=rng, generator=generator
        )
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
    specs = [DraftSpec(draft, t) for t in temperatures]
    counts = first_two_counts(target, specs, scheme, samples=500, seed=11)
    assert counts.sum() == 500
    assert chi_square_pvalue(counts, law) > 1e-3


@pytest.mark.statistical
def test_broken_verifier_fails_the_losslessness_test(target, draft):
    """The twin of the test above: the same chi-square rejects a biased verifier."""
    law = two_token_law(target, [2])
    specs = [DraftSpec(draft, 1.0), DraftSpec(draft, 2.0)]
    counts = first_two_counts(target, specs, ResidualFromTarget(), samples=500, seed=11)
    assert chi_square_pvalue(counts, law) < 1e-3


# ---------------------------------------------------------------------------------------------
# Measurement


def test_measure_bookkeeping(target, draft):
    results = measure(
        target, draft, k=2, length=3, prompts=["a b", "c"], max_new_tokens=12, progress=False,
        draft_temperatures=(1.2,), keep_distributions=True,
    )  # fmt: skip
    frame = results.to_dataframe()
    assert len(frame) == results.positions == len(results.records)
    assert results.new_tokens == 24
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
    half = 1.96 * difference.std(ddof=1) / math.sqrt(len(frame))
    np.testing.assert_allclose([low, high], [difference.mean() - half, difference.mean() + half])
    summary = json.loads(results.to_json())
    for key in ("empirical_acceptance", "expected_acceptance", "optimal_acceptance", "ci95", "positions",
                "block_efficiency", "tokens_per_second"):  # fmt: skip
        assert key in summary
    assert summary["seconds_selection"] > 0


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
        draft_temperatures=(1.0, 2.0), target_top_p=1.0,
    )  # fmt: skip
    independent = [r for r in results.records if r.law == "independent"]
    assert independent and all(np.isfinite(r.optimal) for r in independent)  # n = 6 <= 20


BAD_MEASURE = [
    ("k-zero", dict(k=0), "k: the number of drafts must be an integer >= 1, got 0"),
    ("k-float", dict(k=1.5), "k: the number of drafts must be an integer >= 1, got 1.5"),
    ("length-zero", dict(length=0), "length: must be an integer >= 1, got 0"),
    ("max-new-tokens-zero", dict(max_new_tokens=0), "max_new_tokens: must be an integer >= 1, got 0"),
    ("empty-prompts", dict(prompts=[]), "prompts: the prompt list is empty"),
    ("blank-prompt", dict(prompts=["  "]), "prompts: every prompt must be a non-empty string"),
    ("temperatures", dict(k=3, draft_temperatures=(1.0, 2.0)), "draft_temperatures: give one value or k=3"),
    ("negative-temperature", dict(draft_temperatures=(-1.0,)), "draft temperature: must be a finite number"),
    ("top-p", dict(target_top_p=0.0), r"target top_p: must lie in \(0, 1\]"),
    ("wor-mixed", dict(without_replacement=True, draft_temperatures=(1.0, 2.0)), "without_replacement"),
    ("wor-greedy-draft", dict(without_replacement=True, scheme="rrs-wor", draft_temperatures=(0.0,)), "at least K tokens"),
    ("wor-top-p", dict(without_replacement=True, scheme="rrs-wor", draft_top_p=(0.3,)), "at least K tokens"),
    ("scheme-unknown", dict(scheme="nope"), "scheme: unknown name 'nope'"),
    ("scheme-law", dict(scheme="spectr", draft_temperatures=(1.0, 2.0)), "supports the laws"),
    ("scheme-object", dict(scheme=42), "scheme: expected a scheme name"),
    ("scheme-k", dict(scheme="single"), "does not apply to these drafts"),
]


@pytest.mark.parametrize("kwargs, message", [c[1:] for c in BAD_MEASURE], ids=[c[0] for c in BAD_MEASURE])
def test_measure_bad_input(target, kwargs, message):
    kwargs = {"prompts": ["a"], "max_new_tokens": 2, "progress": False} | kwargs
    with pytest.raises(ValueError, match=message):
        measure(target, **kwargs)


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
    "scheme, without_replacement", [("specinfer", False), ("spectr", False), ("rrs-wor", True)]
)
def test_empirical_acceptance_matches_expected_end_to_end(target, draft, scheme, without_replacement):
    """Calibration through the whole decoding path: per position, acceptance is Bernoulli with
    the scheme's exact acceptance as mean, so Σ(accepted - expected) is a martingale and its mean
    must lie within 4 standard errors of 0. Twin: the same records against a wrongly shifted
    expectation must be rejected, so the test can fail."""
    results = measure(
        target, draft, k=3, length=3, scheme=scheme, prompts=["a b", "c d e", "b a"], max_new_tokens=120,
        draft_temperatures=(1.5,), without_replacement=without_replacement, progress=False, seed=7,
    )  # fmt: skip
    accepted = np.array([r.accepted for r in results.records], dtype=float)
    expected = np.array([r.expected for r in results.records])
    assert len(accepted) >= 300 and np.isfinite(expected).all()
    standard_error = np.sqrt(np.sum(expected * (1 - expected))) / len(accepted)

    def z(mean_expected: np.ndarray) -> float:
        return abs((accepted - mean_expected).mean()) / standard_error

    assert z(expected) < 4
    assert z(np.clip(expected + 0.2, 0, 1)) > 4  # a miscalibrated expectation is caught
