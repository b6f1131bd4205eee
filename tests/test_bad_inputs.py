"""Every kind of bad input, tried: what the command line and the Python API give back
(issue 15, items 3 and 8; STYLE.md, "A table of bad inputs").

Each command-line case runs the installed console script in a fresh process and must end
with exit status 2, exactly one line on stderr (``multidraft COMMAND: error: ...`` naming the
argument), nothing on stdout and no traceback. Each API case must raise the stated exception
type with the stated words. The cases for ``measure`` and ``profile`` point at a model that
does not exist, so they pass only when the argument is checked before any model is loaded.

``docs/bad-inputs.md`` is generated from these cases and what they actually print;
:func:`test_docs_table_is_current` fails when it is stale. Regenerate it with::

    MULTIDRAFT_WRITE_DOCS=1 python3 -m pytest tests/test_bad_inputs.py -k docs -p no:cacheprovider
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs" / "bad-inputs.md"

#: Tokens of the command line that name a model that does not exist.
NO_MODEL = ("--model", "no-such-model")


def _choose_with_a_random_state() -> None:
    """The rule without replacement's draw (its J-curtain marks, a compiled kernel that takes a
    Generator) given numpy's legacy RandomState."""
    from multidraft.theory import WithoutReplacement, zipf
    from multidraft.theory.verifier import optimal_selection_rule

    law = WithoutReplacement(np.full(30, 1 / 30), 3)
    rule = optimal_selection_rule(zipf(30, exponent=1.1, rng=np.random.default_rng(0)), law)
    rule.choose(law.sample(np.random.default_rng(1), 4), np.random.RandomState(0))


@dataclass(frozen=True)
class CliCase:
    """``multidraft ARGV`` must fail with one line containing ``words``."""

    kind: str
    argv: tuple[str, ...]
    words: str

    def param(self):
        return pytest.param(self, id=self.kind.replace(" ", "-"))


@dataclass(frozen=True)
class ApiCase:
    """``call()`` must raise ``error`` with ``words`` in its message."""

    kind: str
    shown: str
    call: Callable[[], object] = field(repr=False)
    error: type[BaseException]
    words: str

    def param(self):
        return pytest.param(self, id=self.kind.replace(" ", "-"))


PAIR = ("--target", "0.5,0.5", "--draft", "0.5,0.5")
TENTHS = ",".join(["1/10"] * 10)

CLI_CASES = [
    # acceptance
    CliCase("probabilities that do not sum to one", ("acceptance", "--target", "0.5,0.6", "--draft", "0.5,0.5", "--k", "2"), "target: entries sum to 1 + 0.1"),
    CliCase("an entry that is not a number", ("acceptance", "--target", "0.5,x", "--draft", "0.5,0.5", "--k", "2"), "target: cannot parse entry 1 'x'"),
    CliCase("a NaN entry", ("acceptance", "--target", "nan,0.5", "--draft", "0.5,0.5", "--k", "2"), "target: cannot parse entry 0 'nan'"),
    CliCase("a negative probability", ("acceptance", "--target", "1.5,-0.5", "--draft", "0.5,0.5", "--k", "2"), "target: contains negative entries"),
    CliCase("target and draft of different lengths", ("acceptance", "--target", "0.5,0.5", "--draft", "0.2,0.3,0.5", "--k", "2"), "does not match"),
    CliCase("no drafts (K = 0)", ("acceptance", *PAIR, "--k", "0"), "k: the number of drafts must be an integer >= 1, got 0"),
    CliCase("K that is not an integer", ("acceptance", *PAIR, "--k", "two"), "argument --k: invalid int value: 'two'"),
    CliCase("exact mode with decimal inputs", ("acceptance", *PAIR, "--k", "2", "--exact"), "exact mode needs"),
    CliCase("an unknown scheme", ("acceptance", *PAIR, "--k", "2", "--scheme", "nope"), "scheme: unknown name 'nope'"),
    CliCase("a scheme that does not apply to the law", ("acceptance", *PAIR, "--k", "2", "--law", "wor", "--scheme", "spectr"), "scheme 'spectr' supports"),
    CliCase("more drafts without replacement than tokens", ("acceptance", *PAIR, "--k", "3", "--law", "wor"), "without replacement needs k <= n"),
    CliCase("a target without a draft", ("acceptance", "--target", "0.5,0.5"), "give both --target and --draft"),
    CliCase("a truncation size no requested scheme takes", ("acceptance", "--s", "3"), "--s: only truncated-lp and multistage take it"),
    # lp
    CliCase("an unknown draft law", ("lp", *PAIR, "--k", "2", "--law", "zipf"), "argument --law: invalid choice: 'zipf'"),
    CliCase("one draft without K", ("lp", *PAIR), "k: a single --draft needs --k"),
    CliCase("a law given with repeated drafts", ("lp", *PAIR, "--draft", "0.1,0.9", "--law", "wor"), "repeated --draft means independent drafts"),
    CliCase("an LP too large to build", ("lp", "--target", TENTHS, "--draft", TENTHS, "--k", "10"), "exceed the limit max_variables=500,000"),
    CliCase("a solver that is not installed", ("lp", *PAIR, "--k", "2", "--solver", "NOPE"), "solver: 'NOPE' is not an installed cvxpy solver"),
    CliCase("a solver that cannot reach the certificate", ("lp", *PAIR, "--k", "2", "--solver", "OSQP"), "solver: 'OSQP' is not offered for the certified LPs"),
    # cones
    CliCase("an empty vocabulary", ("cones", "--n", "0", "--k", "2"), "n: the vocabulary size must be an integer >= 1, got 0"),
    CliCase("a cone too large to enumerate", ("cones", "--n", "9", "--k", "3"), "exceed the limit max_variables=60"),
    CliCase("two output formats at once", ("cones", "--n", "2", "--k", "2", "--json", "--latex"), "argument --latex: not allowed with argument --json"),
    CliCase("a required option missing", ("cones", "--n", "3"), "the following arguments are required: --k"),
    # speedup
    CliCase("an acceptance above one", ("speedup", "--acceptance", "1.2", "--length", "4", "--cost-ratio", "0.1"), "acceptance: values must lie in [0, 1]"),
    CliCase("a draft length of zero", ("speedup", "--acceptance", "0.5", "--length", "0", "--cost-ratio", "0.1"), "length: must be an integer >= 1"),
    CliCase("a negative cost ratio", ("speedup", "--acceptance", "0.5", "--length", "2", "--cost-ratio", "-1"), "cost_ratio: must be a finite number >= 0"),
    CliCase("an acceptance list with a word", ("speedup", "--acceptance", "0.5,x", "--length", "2", "--cost-ratio", "0.1"), "expected a number or comma-separated numbers a1,a2,... in [0, 1], got '0.5,x'"),
    CliCase("fewer acceptances than drafts", ("speedup", "--acceptance", "0.5,0.6", "--k", "3", "--length", "2", "--cost-ratio", "0.1"), "acceptance: --k 3 needs 3 values"),
    CliCase("a draft length search far beyond any useful one", ("speedup", "--acceptance", "0.8", "--length", "4", "--cost-ratio", "0.05", "--max-length", "100000000"), "exceed the limit MAX_GRID_POINTS=100,000"),
    # budget
    CliCase("positional acceptances summing past one", ("budget", "--acceptance", "0.7,0.5"), "acceptance: the a_i are probabilities of disjoint events"),
    CliCase("a node budget beyond the latency grid", ("budget", "--acceptance", "0.5", "--budget", "65"), "budget: every N must lie in 1..64"),
    CliCase("neither a model nor acceptances", ("budget",), "one of the arguments --model --acceptance is required"),
    CliCase("a depth limit of zero", ("budget", "--acceptance", "0.5", "--max-depth", "0"), "max-depth: must be >= 1"),
    # measure (no model may be loaded before these are refused)
    CliCase("no drafts for a measurement", ("measure", *NO_MODEL, "--k", "0"), "k:"),
    CliCase("an empty draft sequence", ("measure", *NO_MODEL, "--length", "0"), "length:"),
    CliCase("a negative number of new tokens", ("measure", *NO_MODEL, "--max-new-tokens", "-1"), "max_new_tokens"),
    CliCase("a negative draft temperature", ("measure", *NO_MODEL, "--draft-temperature", "-1"), "temperature"),
    CliCase("an unknown scheme for a measurement", ("measure", *NO_MODEL, "--scheme", "nope"), "scheme: unknown name 'nope'"),
    CliCase("zero CPU threads", ("measure", *NO_MODEL, "--threads", "0"), "threads: must be >= 1, got 0"),
    CliCase("CUDA requested on a machine without it", ("measure", *NO_MODEL, "--device", "cuda"), "CUDA requested but torch reports no CUDA device"),
    CliCase("an empty .gguf file", ("measure", "--model", "empty.gguf"), "empty.gguf is an empty file (0 bytes)"),
    # profile
    CliCase("batch sizes that do not increase", ("profile", *NO_MODEL, "--batch-sizes", "2,1"), "batch_sizes: expected at least two strictly increasing"),
    CliCase("no timed repeats", ("profile", *NO_MODEL, "--repeats", "0"), "repeats:"),
    CliCase("a batch size that is not an integer", ("profile", *NO_MODEL, "--batch-sizes", "1,x"), "expected comma-separated integers, got '1,x'"),
    CliCase("CUDA requested for profiling without it", ("profile", *NO_MODEL, "--device", "cuda"), "CUDA requested but torch reports no CUDA device"),
    CliCase("a batch too large for the memory (needs the model's shapes)", ("profile", "--model", "default", "--batch-sizes", "1,100000"), "exceed the limit max_memory="),
    # report
    CliCase("an output directory that is not empty", ("report", "--out", "full"), "exists and is not empty; pass --force"),
    CliCase("an output path under a file", ("report", "--out", "blocker/report"), "--out: cannot write to"),
    CliCase("a draft model without a target", ("report", "--out", "out-draft", "--draft", "x"), "--draft: a draft model needs --target"),
    CliCase("one model and a target at once", ("report", "--model", "default", "--target", "x", "--draft", "y"), "argument --target: not allowed with argument --model"),
    CliCase("a model that does not exist", ("report", "--out", "out-model", *NO_MODEL), "model 'no-such-model': could not be found locally"),
    CliCase("a seed that is not an integer", ("report", "--seed", "abc"), "argument --seed: invalid int value: 'abc'"),
    CliCase("a negative seed", ("report", "--out", "out-seed", "--seed", "-1"), "seed: expected an integer in [0, 2**62)"),
    CliCase("an empty output path", ("report", "--out", ""), "--out: the path is empty"),
]


def _api_cases() -> list[ApiCase]:
    from multidraft.lp import ProblemTooLargeError, transport_lp, truncated_lp
    from multidraft.schemes import get_scheme
    from multidraft.theory import (
        IID,
        Independent,
        WithoutReplacement,
        as_distribution,
        dirichlet,
        optimal_acceptance,
        softmax,
        top_k,
        top_p,
        zipf,
    )
    from multidraft.theory import unit_acceptance
    from multidraft.theory.speed import tree_block_efficiency

    def complex_tensor():
        import torch

        return as_distribution(torch.tensor([0.5, 0.5], dtype=torch.complex64), "target")

    return [
        ApiCase("a list where a draft law is expected", "optimal_acceptance([0.5, 0.5], [0.5, 0.5])", lambda: optimal_acceptance([0.5, 0.5], [0.5, 0.5]), TypeError, "law: expected a draft law"),
        ApiCase("a NaN probability", "as_distribution([float('nan'), 1.0], 'target')", lambda: as_distribution([np.nan, 1.0], "target"), ValueError, "target: contains NaN entries"),
        ApiCase("an infinite probability", "as_distribution([np.inf, 0.0], 'draft')", lambda: as_distribution([np.inf, 0.0], "draft"), ValueError, "draft: contains infinite entries"),
        ApiCase("probabilities in a 2-D array", "as_distribution([[0.5, 0.5]], 'target')", lambda: as_distribution([[0.5, 0.5]], "target"), ValueError, "expected a 1-D array"),
        ApiCase("an empty distribution", "as_distribution([], 'target')", lambda: as_distribution([], "target"), ValueError, "the vocabulary is empty"),
        ApiCase("a number of drafts that is not an integer", "IID([0.5, 0.5], k=2.5)", lambda: IID([0.5, 0.5], k=2.5), ValueError, "k: the number of drafts must be an integer"),
        ApiCase("independent drafts of different lengths", "Independent([[0.5, 0.5], [1/3, 1/3, 1/3]])", lambda: Independent([[0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]]), ValueError, "need the same length"),
        ApiCase("more drafts without replacement than draftable tokens", "WithoutReplacement([0.5, 0.5, 0], k=3)", lambda: WithoutReplacement([0.5, 0.5, 0.0], k=3), ValueError, "without replacement"),
        ApiCase("an unknown method", "optimal_acceptance(p, IID(q, 2), method='fast')", lambda: optimal_acceptance([0.5, 0.5], IID([0.5, 0.5], 2), method="fast"), ValueError, "method: unknown method 'fast'"),
        ApiCase("a method the law does not support", "optimal_acceptance(p, Independent([q, q]), method='sorted')", lambda: optimal_acceptance([0.5, 0.5], Independent([[0.5, 0.5]] * 2), method="sorted"), ValueError, "method='threshold'"),
        ApiCase("exact mode with floats", "optimal_acceptance([0.5, 0.5], IID([0.5, 0.5], 2), exact=True)", lambda: optimal_acceptance([0.5, 0.5], IID([0.5, 0.5], 2), exact=True), ValueError, "exact"),
        ApiCase("an LP too large to build", "transport_lp(p, IID(q, 3)) with n = 200", lambda: transport_lp(np.full(200, 1 / 200), IID(np.full(200, 1 / 200), 3)), ProblemTooLargeError, "exceed the limit max_variables=500,000"),
        ApiCase("a truncated LP too large to build", "truncated_lp(p, q, s=20000) with n = 49152", lambda: truncated_lp(np.full(49152, 1 / 49152), np.full(49152, 1 / 49152), s=20000), ProblemTooLargeError, "use s <= 563"),
        ApiCase("no tokens kept by the truncated LP", "truncated_lp(p, q, s=0)", lambda: truncated_lp([0.5, 0.5], [0.5, 0.5], s=0), ValueError, "s: the number of tokens kept must be an integer >= 1"),
        ApiCase("a solver that is not installed", "transport_lp(p, law, solver='NOPE')", lambda: transport_lp([0.5, 0.5], IID([0.5, 0.5], 2), solver="NOPE"), ValueError, "solver: 'NOPE' is not an installed cvxpy solver"),
        ApiCase("a solver that cannot reach the certificate", "transport_lp(p, law, solver='SCS')", lambda: transport_lp([0.5, 0.5], IID([0.5, 0.5], 2), solver="SCS"), ValueError, "solver: 'SCS' is not offered for the certified LPs"),
        ApiCase("an unknown scheme name", "get_scheme('rrs')", lambda: get_scheme("rrs"), ValueError, "scheme: unknown name 'rrs'"),
        ApiCase("a scheme option it does not take", "get_scheme('specinfer', s=3)", lambda: get_scheme("specinfer", s=3), ValueError, "unknown options"),
        ApiCase("NaN logits", "softmax([0.0, float('nan')])", lambda: softmax([0.0, np.nan]), ValueError, "logits: contain NaN"),
        ApiCase("a negative temperature", "softmax([0.0, 1.0], temperature=-1)", lambda: softmax([0.0, 1.0], temperature=-1), ValueError, "temperature: must be a finite number >= 0, got -1"),
        ApiCase("NaN as a temperature", "softmax([0.0, 1.0], temperature=float('nan'))", lambda: softmax([0.0, 1.0], temperature=np.nan), ValueError, "temperature: must be a finite number >= 0, got nan"),
        ApiCase("logits that are -inf everywhere", "softmax([float('-inf')] * 2)", lambda: softmax([-np.inf] * 2), ValueError, "logits: a row is -inf everywhere"),
        ApiCase("top-k with k = 0", "top_k([0.5, 0.5], 0)", lambda: top_k([0.5, 0.5], 0), ValueError, "k: the number of tokens top-k keeps must be an integer >= 1, got 0"),
        ApiCase("a nucleus mass of zero", "top_p([0.5, 0.5], 0)", lambda: top_p([0.5, 0.5], 0), ValueError, "mass: must be a finite number in (0, 1]"),
        ApiCase("a NaN Zipf exponent", "zipf(10, float('nan'))", lambda: zipf(10, np.nan), ValueError, "exponent: must be a finite number > 0, got nan"),
        ApiCase("a vocabulary size that is not an integer", "zipf(10.5)", lambda: zipf(10.5), ValueError, "n: the vocabulary size must be an integer >= 1, got 10.5"),
        ApiCase("a seed where a generator is expected", "dirichlet(5, 0.5, rng=0)", lambda: dirichlet(5, 0.5, rng=0), TypeError, "rng: expected a numpy.random.Generator"),
        ApiCase("a Dirichlet concentration of zero", "dirichlet(5, 0.0, np.random.default_rng(0))", lambda: dirichlet(5, 0.0, np.random.default_rng(0)), ValueError, "alpha: must be a finite number > 0, got 0.0"),
        ApiCase("an acceptance above one in the speed model", "tree_block_efficiency([1.2], 4)", lambda: tree_block_efficiency([1.2], 4), ValueError, "acceptance: values must lie in [0, 1]"),
        # issue 20, item 5: inputs that gave wrong numbers or numpy's words
        ApiCase("a dict as the target (its keys would be read)", "optimal_acceptance({0: 0.3, 1: 0.7}, IID([0.3, 0.7], k=2))", lambda: optimal_acceptance({0: 0.3, 1: 0.7}, IID([0.3, 0.7], k=2)), TypeError, "target: got a mapping (dict)"),
        ApiCase("a dict as the draft", "IID({0: 0.3, 1: 0.7}, k=2)", lambda: IID({0: 0.3, 1: 0.7}, k=2), TypeError, "draft: got a mapping (dict)"),
        ApiCase("a dict given to a scheme", "get_scheme('specinfer').acceptance({0: 0.3, 1: 0.7}, IID([0.3, 0.7], k=2))", lambda: get_scheme("specinfer").acceptance({0: 0.3, 1: 0.7}, IID([0.3, 0.7], k=2)), TypeError, "target: got a mapping (dict)"),
        ApiCase("a set of probabilities", "as_distribution({0.3, 0.7}, 'target')", lambda: as_distribution({0.3, 0.7}, "target"), TypeError, "target: got a set (set)"),
        ApiCase("a complex tensor", "as_distribution(torch.tensor([0.5, 0.5], dtype=torch.complex64), 'target')", complex_tensor, ValueError, "target: expected real probabilities"),
        ApiCase("a negative tolerance", "unit_acceptance(p, IID(q, 2), tolerance=-1)", lambda: unit_acceptance([0.3, 0.7], IID([0.3, 0.7], 2), tolerance=-1), ValueError, "tolerance: must be a finite number in [0, 1)"),
        ApiCase("NaN as a tolerance", "unit_acceptance(p, IID(q, 2), tolerance=float('nan'))", lambda: unit_acceptance([0.3, 0.7], IID([0.3, 0.7], 2), tolerance=np.nan), ValueError, "tolerance: must be a finite number in [0, 1)"),
        ApiCase("a negative number of samples", "IID([0.3, 0.7], k=2).sample(np.random.default_rng(0), -1)", lambda: IID([0.3, 0.7], k=2).sample(np.random.default_rng(0), -1), ValueError, "size: the number of draft tuples must be an integer >= 0, got -1"),
        ApiCase("a seed where a generator is expected, for sampling", "IID([0.3, 0.7], k=2).sample(0)", lambda: IID([0.3, 0.7], k=2).sample(0), TypeError, "rng: expected a numpy.random.Generator"),
        ApiCase("a legacy RandomState where a generator is expected, choosing among drafts without replacement", "optimal_selection_rule(p, WithoutReplacement(q, 3)).choose(tuples, np.random.RandomState(0))", _choose_with_a_random_state, TypeError, "rng: expected a numpy.random.Generator, e.g. numpy.random.default_rng(0), got RandomState"),
        ApiCase("drafts without replacement counting masses below the floor", "WithoutReplacement([0.5, 0.5, 1e-308, 1e-308], k=4)", lambda: WithoutReplacement([0.5, 0.5, 1e-308, 1e-308], k=4), ValueError, "(entries below MASS_FLOOR=1e-300 count as zero), got k=4 > 2"),
    ]


API_CASES = _api_cases()


@dataclass(frozen=True)
class ExtremeCase:
    """A valid but extreme input (issue 20, item 3) that once broke a number: ``call()`` must
    give ``expected`` (to 1e-12), the true value for the reason ``why``."""

    kind: str
    shown: str
    call: Callable[[], object] = field(repr=False)
    expected: object
    why: str

    def param(self):
        return pytest.param(self, id=self.kind.replace(" ", "-"))


def _extreme_cases() -> list[ExtremeCase]:
    from multidraft.schemes import get_scheme
    from multidraft.theory import IID, WithoutReplacement, optimal_acceptance

    def optimal_output(target, draft, k):
        law = IID(draft, k, normalize=True)
        return get_scheme("optimal").output_distribution(np.asarray(target) / np.sum(target), law)

    def tensor_input():
        import torch

        target = torch.tensor([0.25, 0.75], dtype=torch.bfloat16)
        return optimal_acceptance(target, IID(torch.tensor([0.5, 0.5], dtype=torch.float32), k=2)).value

    tiny = [3.3e-06, 0.25947, 0.74053, 8.9e-10]
    return [
        ExtremeCase("a draft token holding all but 1e-20", "get_scheme('rrs-wor').acceptance([0.5, 0.5], WithoutReplacement([1e-20, 1.0], 2))", lambda: get_scheme("rrs-wor").acceptance([0.5, 0.5], WithoutReplacement([1e-20, 1.0], 2)), 1.0, "both tokens are always drafted"),
        ExtremeCase("a draft mass of 6.4e-13 for the optimal verifier", "get_scheme('optimal').output_distribution([1, 0], IID([1 - 6.4e-13, 6.4e-13], 3))", lambda: optimal_output([1.0, 0.0], [1 - 6.4e-13, 6.4e-13], 3), [1.0, 0.0], "lossless: the target"),
        ExtremeCase("p = q with masses 3.3e-6 and 8.9e-10", "get_scheme('optimal').output_distribution(p, IID(p, 3)), p = [3.3e-06, 0.25947, 0.74053, 8.9e-10] normalised", lambda: optimal_output(tiny, tiny, 3), list(np.array(tiny) / sum(tiny)), "lossless: the target"),
        ExtremeCase("drafts without replacement with masses at the floor", "optimal_acceptance([0.4, 0.3, 0.3, 0], WithoutReplacement([0.5, 0.5, 1e-300, 1e-300], 4)).value", lambda: optimal_acceptance([0.4, 0.3, 0.3, 0.0], WithoutReplacement([0.5, 0.5, 1e-300, 1e-300], 4)).value, 1.0, "every token is drafted"),
        ExtremeCase("torch tensors in bfloat16 and float32", "optimal_acceptance(torch.tensor([0.25, 0.75], dtype=torch.bfloat16), IID(torch.tensor([0.5, 0.5]), k=2)).value", tensor_input, 1.0, "q(T)^2 <= p(T) for every T"),
    ]


EXTREME_CASES = _extreme_cases()


@pytest.mark.parametrize("case", [case.param() for case in EXTREME_CASES])
def test_extreme_inputs_give_the_true_value(case):
    np.testing.assert_allclose(np.asarray(case.call(), dtype=float), np.asarray(case.expected, dtype=float), rtol=0, atol=1e-12)


@dataclass(frozen=True)
class _Outcome:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Runner:
    """Runs a command-line case once per test session, even across pytest-xdist workers (the
    outcome is stored under the session's shared temporary directory), in a directory where
    ``full/`` is a non-empty directory, ``blocker`` a file and ``empty.gguf`` an empty file."""

    workdir: Path
    store: Path
    cli: Callable

    def __call__(self, case: CliCase):
        key = hashlib.sha256(json.dumps(case.argv).encode()).hexdigest()[:16]
        stored = self.store / f"{key}.json"
        if stored.exists():
            return _Outcome(**json.loads(stored.read_text()))
        result = self.cli(*case.argv, cwd=self.workdir, timeout=300)
        outcome = _Outcome(result.returncode, result.stdout, result.stderr)
        partial = stored.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(vars(outcome)))
        partial.replace(stored)
        return outcome


@pytest.fixture
def run(tmp_path_factory, cli) -> Runner:
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker has its own basetemp under the session's
        shared = shared.parent
    workdir = shared / "bad-inputs-workdir"
    if not workdir.exists():
        staging = shared / f"bad-inputs-staging-{os.getpid()}"
        (staging / "full").mkdir(parents=True, exist_ok=True)
        (staging / "full" / "keep.txt").write_text("x")
        (staging / "blocker").write_text("x")
        (staging / "empty.gguf").write_bytes(b"")
        try:
            staging.rename(workdir)
        except OSError:  # another worker was first
            pass
    store = shared / "bad-inputs-outcomes"
    store.mkdir(exist_ok=True)
    return Runner(workdir, store, cli)


@pytest.mark.parametrize("case", [case.param() for case in CLI_CASES])
def test_command_line_refuses_with_one_line(case, run):
    result = run(case)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"multidraft {case.argv[0]}: error: "), result.stderr
    assert case.words in lines[0]


@pytest.mark.parametrize("case", [case.param() for case in API_CASES])
def test_api_refuses_with_the_stated_error(case):
    with pytest.raises(case.error) as raised:
        case.call()
    assert type(raised.value) is case.error or isinstance(raised.value, case.error)
    assert case.words in str(raised.value)


def test_every_sub_command_has_at_least_three_bad_values():
    from multidraft.cli import COMMAND_MODULES

    counts = {name: sum(case.argv[0] == name for case in CLI_CASES) for name in COMMAND_MODULES}
    assert min(counts.values()) >= 3, counts
    assert len(CLI_CASES) + len(API_CASES) >= 25


# ----------------------------------------------------------------------------------- the table


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


#: Parts of messages that depend on the machine, shown in a fixed form in the table.
_MACHINE_DEPENDENT = (
    (re.compile(r"(choose one of) [A-Z0-9_]+(, [A-Z0-9_]+)*"), r"\1 <the installed solvers>"),
    (re.compile(r"max_memory=[0-9.]+ (bytes|[KMGT]iB)"), "max_memory=<the memory available>"),
)


def _stable(message: str) -> str:
    for pattern, replacement in _MACHINE_DEPENDENT:
        message = pattern.sub(replacement, message)
    return message


def _cli_row(case: CliCase, result) -> str:
    lines = result.stderr.strip().splitlines() or ["(nothing)"]
    if "Traceback" in result.stderr:
        got = f"exit {result.returncode}, a traceback ending in `{_stable(lines[-1])}`"
    elif len(lines) > 1:
        got = f"exit {result.returncode}, {len(lines)} lines ending in `{_stable(lines[-1])}`"
    else:
        got = f"exit {result.returncode}: `{_stable(lines[0])}`"
    return f"| {case.kind} | `multidraft {_cell(shlex.join(case.argv))}` | {_cell(got)} |"


def _api_row(case: ApiCase) -> str:
    try:
        case.call()
        got = "no error"
    except Exception as error:  # noqa: BLE001 -- the table shows whatever is raised
        got = f"`{type(error).__name__}: {_stable(str(error))}`"
    return f"| {case.kind} | `{_cell(case.shown)}` | {_cell(got)} |"


def _table(run: Runner) -> str:
    header = [
        "# What bad input gets",
        "",
        "Generated by `tests/test_bad_inputs.py`, which tries every row; do not edit by hand. Regenerate with",
        "`MULTIDRAFT_WRITE_DOCS=1 python3 -m pytest tests/test_bad_inputs.py -k docs -p no:cacheprovider`.",
        "",
        "## Command line",
        "",
        "Every row should end with exit status 2 and one line on stderr naming the argument, nothing on",
        "stdout and no traceback (`measure` and `profile` rows use a model that does not exist, so a",
        "value is refused before any model is loaded; only the memory row of `profile` loads the bundled",
        "model, whose shapes the estimate needs). Run from a directory where `full/` is a non-empty",
        "directory, `blocker` a file and `empty.gguf` an empty file.",
        "",
        "| bad input | command | what it gets |",
        "|---|---|---|",
    ]
    api = [
        "",
        "## Python API",
        "",
        "The same checks at the library boundary: the exception and its message.",
        "",
        "| bad input | call | what it gets |",
        "|---|---|---|",
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:  # the processes run in parallel; rows stay in order
        results = list(pool.map(run, CLI_CASES))
    rows = [_cli_row(case, result) for case, result in zip(CLI_CASES, results)]
    return "\n".join(header + rows + api + [_api_row(case) for case in API_CASES] + _extreme_section()) + "\n"


def _extreme_section() -> list[str]:
    from multidraft.theory.laws import MASS_FLOOR

    def shown(value) -> str:
        return np.array2string(np.asarray(value, dtype=float), precision=12, separator=", ", max_line_width=10**4) if np.ndim(value) else f"{float(value):.12g}"

    text = [
        "",
        "## Tiny masses and other extreme inputs",
        "",
        f"One policy, applied by `as_distribution` (the single validation point): a float probability below `MASS_FLOOR = {MASS_FLOOR:g}`",
        "is set to zero; every other entry is kept, however small, and every number computed from it is exact to",
        "rounding. Below the floor float64 cannot compute (subnormal numbers carry fewer than 53 significant bits and",
        "their reciprocals overflow); the mass dropped is less than `n` times the floor. What changes is only whether",
        "such a token counts as supported (see the without-replacement row above). Exact (Fraction) inputs are never",
        "floored. Torch tensors of any float dtype and device are accepted (converted to float64); mappings and sets",
        "are refused. These valid inputs once broke a number (issue 20); each row is checked against the true value.",
        "",
        "| extreme input | call | what it gets | true value |",
        "|---|---|---|---|",
    ]
    rows = [f"| {case.kind} | `{_cell(case.shown)}` | `{shown(case.call())}` | {shown(case.expected)} ({case.why}) |" for case in EXTREME_CASES]
    return text + rows


def test_docs_table_is_current(run):
    table = _table(run)
    if os.environ.get("MULTIDRAFT_WRITE_DOCS"):
        DOCS.write_text(table, encoding="utf-8")
    assert DOCS.read_text(encoding="utf-8") == table, (
        "docs/bad-inputs.md is stale; regenerate it (see this module's docstring)"
    )
