"""Model loading (directories, GGUF conversion cache, hub ids without network, devices, quiet
loading), the ``multidraft measure`` command (file descriptors captured: what a user sees),
and the integration run on the bundled SmolLM2-135M-Instruct."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from test_decoding import tiny_model  # noqa: E402

from multidraft.cli import main  # noqa: E402
from multidraft.decoding import Sampling, default_model_path, load_model, measure, resolve_device  # noqa: E402
from multidraft.decoding.models import conversion_key  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    loaded = tiny_model(0)
    loaded.model.save_pretrained(path)
    loaded.tokenizer.save_pretrained(path)
    return path


# ---------------------------------------------------------------------------------------------
# Loading


def test_load_directory_round_trip(tiny_dir):
    loaded = load_model(str(tiny_dir), device="cpu")
    reference = tiny_model(0)
    ids = torch.tensor([[0, 1, 2]])
    with torch.inference_mode():
        torch.testing.assert_close(loaded.model(ids).logits, reference.model(ids).logits)
    assert loaded.device == torch.device("cpu") and loaded.vocab_size == 6
    assert not loaded.model.training


def test_load_with_device_map_passes_through_accelerate(tiny_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    seen = {}
    original = AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    loaded = load_model(str(tiny_dir), device_map="auto")
    assert seen["device_map"] == "auto"
    assert loaded.device == loaded.model.get_input_embeddings().weight.device


def test_unknown_hub_id_without_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="could not be found locally .* and could not be downloaded"):
        load_model("no-such-org/no-such-model-xyz")


BAD_LOAD = [
    ("missing-path", "./no/such/dir", OSError, "no such file or directory"),
    ("missing-gguf", "missing.gguf", OSError, "no such file or directory"),
    ("empty", "", ValueError, "spec: expected a model name"),
]


@pytest.mark.parametrize("spec, error, message", [c[1:] for c in BAD_LOAD], ids=[c[0] for c in BAD_LOAD])
def test_load_bad_spec(spec, error, message):
    with pytest.raises(error, match=message):
        load_model(spec)


def test_load_plain_file_is_rejected(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"0")
    with pytest.raises(ValueError, match="is a file but not a .gguf file"):
        load_model(str(path))


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in {"cuda", "mps", "cpu"}
    with pytest.raises(ValueError, match="device: not a torch device"):
        resolve_device("nonsense")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_missing_cuda_is_one_clear_error(tiny_dir):
    for device in ("cuda", "cuda:0", torch.device("cuda")):
        with pytest.raises(ValueError, match="^CUDA requested but torch reports no CUDA device$"):
            resolve_device(device)
    with pytest.raises(ValueError, match="^CUDA requested but torch reports no CUDA device$"):
        load_model(str(tiny_dir), device="cuda")


def test_quiet_loading_prints_nothing(tiny_dir, capfd):
    """transformers' loading bar (on file descriptor 2) never shows, whatever ``progress`` says
    (issue 20: it stood beside the caller's own bar), nor does the measurement's bar when stderr
    is not a terminal (with ``progress``, one line per prompt instead: issue 32); transformers'
    and the hub's own settings are left as they were."""
    from huggingface_hub import utils as hub_utils
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hub_before = hub_utils.are_progress_bars_disabled()
    for progress in (False, True):
        load_model(str(tiny_dir), device="cpu", progress=progress)
        measure(str(tiny_dir), prompts=["a"], max_new_tokens=2, device="cpu", progress=progress)
    captured = capfd.readouterr()
    assert captured.out == "" and [line.split(": ")[:2] for line in captured.err.splitlines()] == [
        ["measure", "token:specinfer prompt 1 of 1"]
    ], captured.err
    assert hf_logging.is_progress_bar_enabled() and hub_utils.are_progress_bars_disabled() == hub_before
    AutoModelForCausalLM.from_pretrained(tiny_dir)  # the twin: transformers itself draws the bar here
    assert "Loading weights" in capfd.readouterr().err


def test_conversion_key_names_the_converting_libraries(tmp_path):
    from importlib import metadata

    path = tmp_path / "model.Q4.gguf"
    path.write_bytes(b"1234")
    key = conversion_key(path)
    assert key.startswith("model.Q4-4-")
    assert f"transformers{metadata.version('transformers')}" in key and "gguf" in key


def test_default_model_path_is_the_bundled_gguf():
    path = default_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_measure_json(tiny_dir, capfd):
    status = main(
        ["measure", "--target", str(tiny_dir), "--k", "2", "--length", "2", "--max-new-tokens", "6",
         "--prompt", "a b", "--prompt", "c", "--draft-temperature", "1.0", "2.0", "--json", "--threads", "1"]
    )  # fmt: skip
    captured = capfd.readouterr()
    assert status == 0
    summary = json.loads(captured.out)
    for key in ("empirical_acceptance", "expected_acceptance", "optimal_acceptance", "ci95", "positions",
                "block_efficiency", "tokens_per_second", "autoregressive_tokens_per_second", "speedup"):  # fmt: skip
        assert key in summary
    assert len(summary["ci95"]) == 2
    assert summary["draft_temperatures"] == [1.0, 2.0] and summary["new_tokens"] == 12
    assert summary["speedup"] > 0 and summary["compile"] is False
    # no progress bar: stderr is not a terminal here (README); a line per prompt instead (issue 32)
    assert [line.split(": ")[1] for line in captured.err.splitlines()] == ["token:specinfer prompt 1 of 2", "token:specinfer prompt 2 of 2"]


def test_cli_measure_table(tiny_dir, capfd):
    status = main(["measure", "--model", str(tiny_dir), "--early-exit", "1", "--max-new-tokens", "4", "--prompt", "a"])
    out = capfd.readouterr().out
    assert status == 0
    assert "[:1 layers]" in out.splitlines()[0]
    assert "empirical acceptance" in out and "optimal acceptance" in out and "speed-up" in out


BAD_CLI = [
    ("k", ["--k", "0"], "k: the number of drafts must be an integer >= 1"),
    ("length", ["--length", "0"], "length: must be an integer >= 1"),
    ("max-new-tokens", ["--max-new-tokens", "0"], "max_new_tokens: must be an integer >= 1"),
    ("scheme", ["--scheme", "nope"], "scheme: unknown name 'nope'"),
    ("threads", ["--threads", "0"], "threads: must be >= 1"),
    ("draft-temperature", ["--draft-temperature", "-1"], "draft temperature: must be a finite number >= 0"),
    ("draft-temperatures", ["--k", "3", "--draft-temperature", "1", "2"], "--draft-temperature: give one value or k=3"),
    ("target-top-p", ["--target-top-p", "0"], r"target top_p: must lie in (0, 1]"),
    ("early-exit", ["--early-exit", "0"], "early-exit: must be >= 1 layers"),
    ("seed", ["--seed", "-1"], "seed: expected an integer in [0, 2**63 - 1)"),
    ("device", ["--device", "nonsense"], "device: not a torch device"),
]
if not torch.cuda.is_available():
    BAD_CLI.append(("cuda", ["--device", "cuda"], "CUDA requested but torch reports no CUDA device"))


@pytest.mark.parametrize("extra, message", [c[1:] for c in BAD_CLI], ids=[c[0] for c in BAD_CLI])
def test_cli_measure_bad_input_before_loading(capfd, extra, message):
    """Exit 2 with one line on stderr and nothing else: the model (a path that does not
    exist) is never loaded, so no loading bar and no loading error come first."""
    status = main(["measure", "--target", "./no/such/model", "--prompt", "a", *extra])
    captured = capfd.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("multidraft measure: error: ") and message in captured.err


def test_cli_measure_unknown_model(capfd, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status = main(["measure", "--target", "no-such-org/no-such-model-xyz"])
    assert status == 2
    assert "could not be downloaded" in capfd.readouterr().err


# ---------------------------------------------------------------------------------------------
# The bundled SmolLM2-135M-Instruct


@pytest.fixture(scope="module")
def smollm():
    return load_model("default", device="cpu")


@pytest.mark.slow
def test_bundled_model_cache_and_weights(smollm):
    """GGUF -> safetensors cache -> fast reload, and the cached embedding equals an
    independent de-quantisation of the GGUF tensor by the gguf library."""
    gguf = pytest.importorskip("gguf")
    from multidraft.decoding.models import default_cache_dir

    cached = default_cache_dir() / conversion_key(default_model_path())
    assert (cached / "model.safetensors").is_file(), "the conversion cache holds no safetensors"
    start = time.perf_counter()
    again = load_model("default", device="cpu")
    seconds = time.perf_counter() - start
    assert seconds < 10, f"reload from the cache took {seconds:.1f} s"
    assert again.vocab_size == 49152 and again.model.config.num_hidden_layers == 30
    reader = gguf.GGUFReader(str(default_model_path()))
    tensor = next(t for t in reader.tensors if t.name == "token_embd.weight")
    rows = gguf.quants.dequantize(tensor.data[:64], tensor.tensor_type)  # first 64 tokens
    np.testing.assert_allclose(again.model.get_input_embeddings().weight[:64].detach().numpy(), rows, rtol=0, atol=1e-6)
    assert again.tokenizer.get_vocab() == smollm.tokenizer.get_vocab()


@pytest.mark.slow
def test_bundled_model_measurement_matches_theory(smollm):
    """K = 2, L = 4, draft temperature 1.5 against target 1.0, 32 new tokens on 4 prompts:
    the empirical acceptance lies in the interval of the expected one, and P* >= expected at
    every position."""
    results = measure(
        smollm, None, k=2, length=4, scheme="specinfer", max_new_tokens=32, seed=0,
        target_sampling=Sampling(1.0), draft_sampling=Sampling(1.5), baseline=False, progress=False,
    )  # fmt: skip
    frame = results.to_dataframe()
    assert len(results.config.prompts) == 4 and results.positions == len(frame) >= 32
    assert (frame["law"] == "iid").all() and results.optimal_positions == results.positions
    assert np.isfinite(frame["expected"]).all()
    low, high = results.ci95
    assert low <= 0 <= high, (results.empirical_acceptance, results.expected_acceptance, results.ci95)
    assert (frame["optimal"] >= frame["expected"] - 1e-9).all()
    assert 0 < results.expected_acceptance <= results.optimal_acceptance <= 1
    assert 1 <= results.block_efficiency <= 5


@pytest.mark.slow
def test_bundled_model_ends_sequences_where_the_gguf_says(smollm):
    """The end-of-sequence id comes from the GGUF's own metadata (read independently with the
    gguf library), not from the converted tokenizer, which transformers 5.17 set to
    ``<|im_start|>`` (id 1) while the file says ``<|im_end|>`` (id 2)."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(default_model_path()))
    field = reader.fields["tokenizer.ggml.eos_token_id"]
    declared = int(field.parts[field.data[0]][0])
    assert smollm.eos_token_ids == {declared}
    assert smollm.tokenizer.convert_ids_to_tokens(declared) == "<|im_end|>"
