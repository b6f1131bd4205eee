"""What a newcomer met around ``multidraft measure``, ``profile`` and ``speedup`` (issue 20,
item 5): sizes refused up front through the size guard, the thread default, progress bars only
on a terminal and never backwards, no transformers loading bar, and an empty ``.gguf`` named.

Command-line cases run the installed console script in a subprocess (the ``cli`` fixture);
library cases capture what a bar drew on a stderr that says it is a terminal."""

from __future__ import annotations

import io
import re
import sys

import pytest

from multidraft.theory.laws import ProblemTooLargeError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_decoding import tiny_model  # noqa: E402
from test_decoding_models import tiny_dir  # noqa: E402, F401 -- the tiny model saved to a directory

from multidraft.decoding import Sampling, measure  # noqa: E402
from multidraft.decoding.models import cpu_threads, default_threads  # noqa: E402
from multidraft.decoding.profiling import profile_latency, profile_memory  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def one_line_error(result, command: str) -> str:
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"multidraft {command}: error: ")
    return result.stderr


# ---------------------------------------------------------------------------------------------
# Sizes refused up front


def test_speedup_refuses_a_huge_length_search_naming_the_limit(cli):
    """``--max-length 100000000`` ran for minutes (1e7: 153 s, 1 GB); now the size guard refuses
    it before any work (a run of minutes would hit the subprocess timeout)."""
    for flag in ("--max-length", "--length"):
        argv = ["--acceptance", "0.8", "--length", "4", "--cost-ratio", "0.05", flag, "100000000"]
        error = one_line_error(cli("speedup", *argv, timeout=60), "speedup")
        assert "100,000,000 (K, L) points" in error and "exceed the limit MAX_GRID_POINTS=100,000" in error
    fine = cli("speedup", "--acceptance", "0.8", "--length", "4", "--cost-ratio", "0.05", "--max-length", "1000", "--json")
    assert fine.returncode == 0 and fine.json()["best_length"] >= 1  # the twin: a sane search answers


def test_profile_refuses_a_grid_beyond_the_available_memory(cli, tiny_dir):
    """``--batch-sizes 1,100000`` was killed for memory after 53 s; the estimate from the model's
    shapes is checked against what the device has available before anything is allocated."""
    error = one_line_error(cli("profile", "--model", str(tiny_dir), "--batch-sizes", "1,1000000000", timeout=120), "profile")
    assert "exceed the limit max_memory=" in error and "batch 1,000,000,000" in error


def test_profile_memory_estimate_and_refusal_before_any_call():
    loaded = tiny_model(0)
    network = loaded.model
    config = network.config
    # at least the prefill's float32 logits, computed here from the config alone
    assert profile_memory(network, 4, 9, 64) >= 4 * 64 * config.vocab_size * 4
    assert profile_memory(network, 8, 9, 64) > profile_memory(network, 4, 9, 64)
    clock_calls = []

    def clock() -> float:
        clock_calls.append(1)
        return float(len(clock_calls))

    with pytest.raises(ProblemTooLargeError, match="exceed the limit max_memory=1 bytes") as refused:
        profile_latency(loaded, batch_sizes=(1, 2), token_counts=(1, 2), repeats=1, warmup=0, max_memory=1, clock=clock)
    assert refused.value.limit_name == "max_memory" and clock_calls == []  # nothing was timed
    profile_latency(loaded, batch_sizes=(1, 2), token_counts=(1, 2), repeats=1, warmup=0, clock=clock)
    assert clock_calls  # the twin: within the limit it runs


# ---------------------------------------------------------------------------------------------
# Threads


def test_default_threads_is_one_on_a_busy_machine_and_the_idle_cores_otherwise(monkeypatch):
    """On a busy 2-core machine torch's default (2) took 5 min 33 s where 1 thread took 40 s."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr("os.getloadavg", lambda: (1.2, 1.0, 1.0))
    assert default_threads() == 1
    monkeypatch.setattr("os.getloadavg", lambda: (9.0, 9.0, 9.0))
    assert default_threads() == 1  # never below one
    monkeypatch.setattr("os.getloadavg", lambda: (0.1, 0.1, 0.1))
    assert default_threads() == 2  # the twin: an idle machine keeps torch's default
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr("os.getloadavg", lambda: (11.6, 9.0, 9.0))
    assert default_threads() == 4


def test_cpu_threads_sets_and_restores():
    before = torch.get_num_threads()
    with cpu_threads(1) as count:
        assert count == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads: must be an integer >= 1"):
        with cpu_threads(0):
            pass


# ---------------------------------------------------------------------------------------------
# Progress bars and loading


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, so that progress bars are drawn into it."""

    def isatty(self) -> bool:
        return True


def test_measure_bar_never_runs_backwards(monkeypatch):
    """The bar ran backwards (53% -> 52%): the last block of a prompt can emit more tokens than
    the prompt has left, and the count was set back at the prompt's end. Draft = target at the
    same temperature accepts every draft, so each block emits L + 1 = 5 tokens against 3 per
    prompt: exactly that situation, every prompt. Every update of the bar (spied on, since a
    fast bar redraws only now and then) must count forward and end at the total."""
    from tqdm.auto import tqdm

    steps: list[tuple[int, int]] = []
    update = tqdm.update

    def spy(self, n=1):
        steps.append((n, self.n))
        return update(self, n)

    monkeypatch.setattr(tqdm, "update", spy)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    measure(tiny_model(1), None, k=2, length=4, prompts=["a", "b c", "d"], max_new_tokens=3,
            draft_sampling=Sampling(1.0), baseline=False, progress=True)  # fmt: skip
    assert steps and all(n >= 0 for n, _ in steps), steps
    assert sum(n for n, _ in steps) == 9
    counts = [int(n) for n in re.findall(r"measure:.*?\| *(\d+)/9 ", terminal.getvalue())]
    assert counts and counts[-1] == 9 and counts == sorted(counts), terminal.getvalue()


def test_cli_measure_prints_no_bar_and_no_loading_bar_into_a_pipe(cli, tiny_dir):
    """The README says progress bars appear only on a terminal; transformers' "Loading weights"
    bar also stood beside ours. Into a pipe, a line per prompt replaces the bar (issue 32)."""
    result = cli("measure", "--model", str(tiny_dir), "--max-new-tokens", "3", "--prompt", "a", "--no-baseline", "--json")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"measure: token:specinfer prompt 1 of 1: \d+ tokens in [\d.]+ s \(1/1 here\)\n", result.stderr), result.stderr
    assert result.json()["positions"] >= 1


@pytest.mark.parametrize("content", [b"", b"GGUF\x03\x00\x00\x00", b"not a gguf file at all"], ids=["empty", "truncated", "garbage"])
def test_an_unreadable_gguf_file_is_named(cli, tmp_path, content):
    """An empty ``.gguf`` said only "cannot mmap an empty file"."""
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    error = one_line_error(cli("measure", "--model", str(path), "--max-new-tokens", "2"), "measure")
    assert f"model '{path}': {path} " in error
    assert ("empty file (0 bytes)" if not content else "cannot be read as a GGUF model") in error


# ---------------------------------------------------------------------------------------------
# A newcomer's first hour (issue 28, items 3 and 4)


def test_measure_without_replacement_picks_rrs_wor_and_says_so(cli, tiny_dir):
    """``--without-replacement`` with the default scheme was refused with a list of laws; the
    default now is specinfer's counterpart for such drafts, and the output says so."""
    argv = ["--model", str(tiny_dir), "--without-replacement", "--max-new-tokens", "3", "--length", "2", "--prompt", "a", "--no-baseline"]
    text = cli("measure", *argv, timeout=300)
    assert text.returncode == 0, text.stderr
    first = text.stdout.splitlines()[0]
    assert first.startswith("note: scheme rrs-wor (the default specinfer does not apply to drafts without replacement")
    assert ", scheme rrs-wor, K=2, L=2" in text.stdout
    summary = cli("measure", *argv, "--json", timeout=300).json()
    assert summary["scheme"] == "rrs-wor" and summary["without_replacement"] is True
    assert any(note.startswith("scheme rrs-wor") for note in summary["notes"])
    plain = cli("measure", *argv[:1], str(tiny_dir), "--max-new-tokens", "3", "--length", "2", "--prompt", "a", "--no-baseline", "--json")
    assert plain.json()["scheme"] == "specinfer" and plain.json()["notes"] == []  # the twin: with replacement, no note


@pytest.mark.parametrize(
    "flags, scheme, use",
    [(["--without-replacement", "--scheme", "specinfer"], "specinfer", "rrs-wor"), (["--scheme", "rrs-wor"], "rrs-wor", "specinfer")],
    ids=["specinfer-wor", "rrs-wor-iid"],
)
def test_measure_with_a_scheme_that_does_not_fit_names_the_one_to_use(cli, flags, scheme, use):
    """The refusal listed the scheme's laws only; it now names the scheme to use (before any
    model loads: the model named does not exist)."""
    error = one_line_error(cli("measure", "--model", "./no/such/model", *flags, timeout=120), "measure")
    assert f"scheme: '{scheme}' supports the laws" in error and f"; use the scheme '{use}'" in error


def test_measure_cuts_a_length_beyond_max_new_tokens_and_says_so(cli, tiny_dir):
    """``--length 1000 --max-new-tokens 2`` drafted 1000-token blocks to produce 2 tokens (120 s
    without a line of output); the drafts are now cut to the tokens asked for, with a note."""
    argv = ["--model", str(tiny_dir), "--length", "1000", "--max-new-tokens", "2", "--prompt", "a", "--no-baseline"]
    summary = cli("measure", *argv, "--json", timeout=120).json()
    assert summary["length"] == 2 and summary["max_new_tokens"] == 2
    assert "length 2: --length 1000 exceeds --max-new-tokens 2; drafts are cut to 2 tokens" in summary["notes"]
    text = cli("measure", *argv, timeout=120)
    assert text.stdout.startswith("note: length 2: --length 1000 exceeds --max-new-tokens 2"), text.stdout
    kept = cli("measure", *argv[:2], "--length", "2", "--max-new-tokens", "2", "--prompt", "a", "--no-baseline", "--json").json()
    assert kept["length"] == 2 and kept["notes"] == []  # the twin: a length within the budget is kept, silently


def test_measure_prints_no_rows_without_data(cli, tiny_dir):
    """A run without a token verifier opened with six lines of nan/n/a, and a single verifier
    printed an empty "paired on the same ... blocks" header; rows without data are left out."""
    argv = ["--model", str(tiny_dir), "--k", "2", "--length", "2", "--max-new-tokens", "4", "--prompt", "a", "--no-baseline"]
    alone = cli("measure", *argv, "--verifier", "traversal", timeout=300)
    assert alone.returncode == 0, alone.stderr
    for absent in ("nan", "n/a", "paired on the same", "empirical acceptance", "optimal acceptance", "autoregressive", "scheme"):
        assert absent not in alone.stdout, (absent, alone.stdout)
    assert "block efficiency" in alone.stdout and "  traversal  " in alone.stdout
    both = cli("measure", *argv, "--verifier", "token", "traversal", timeout=300)  # the twin: the rows with data stay
    assert both.returncode == 0, both.stderr
    for present in ("empirical acceptance", "optimal acceptance", "paired on the same", "scheme specinfer"):
        assert present in both.stdout, (present, both.stdout)
    assert "nan" not in both.stdout and "n/a" not in both.stdout
