"""One tolerance policy for float inputs (theory/laws/_distributions.py's module docstring): a row within
the rounding of its dtype at its length is accepted and rescaled; a larger error is refused with
the error in the message and a keyword that exists. Model outputs as they come (a float32 softmax
over 128,256 tokens, any bfloat16 or float16 softmax) pass everywhere: distributions, draft laws,
the optimum, schemes (exact and batched), draft trees (numpy and batched)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from multidraft.schemes import get_scheme  # noqa: E402
from multidraft.theory import (  # noqa: E402
    IID,
    as_distribution,
    check_row_sums,
    optimal_acceptance,
    single_draft_acceptance,
    sum_tolerance,
)
from multidraft.trees import DraftTree  # noqa: E402

N = 128_256  # Llama 3's vocabulary
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def softmax_rows(dtype, count: int, n: int = N, seed: int = 0) -> list[torch.Tensor]:
    """Model-like rows as a model hands them over: softmax of scaled Gaussian logits, computed in
    ``dtype`` (float32 logits for float32, cast first for the half types), flat to peaked."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for index in range(count):
        logits = torch.randn(n, generator=generator) * (1.0, 3.0, 8.0)[index % 3]
        if index % 4 == 3:
            logits[index] = 25.0  # one token holds almost all the mass
        rows.append(torch.softmax(logits.to(dtype), dim=-1))
    return rows


def sum_error(row: torch.Tensor) -> float:
    return float(row.double().sum()) - 1.0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_tolerance_covers_what_softmax_rounding_does(dtype):
    """The bound is checked against measured rounding (it could fail: a bound at u_d alone
    misses the float32 rows, the broken twin below)."""
    rows = softmax_rows(dtype, 12)
    errors = [abs(sum_error(row)) for row in rows]
    assert max(errors) <= sum_tolerance(dtype, N)
    unit = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]
    assert max(errors) <= 2 * (unit + math.sqrt(N) * 2.0**-24)


def test_a_bound_without_the_length_term_would_refuse_float32_softmax():
    """The deliberately wrong twin: a per-entry rounding bound without the √n accumulation term
    refuses real float32 softmax rows, so the length term is doing work."""
    worst = max(abs(sum_error(row)) for row in softmax_rows(torch.float32, 12))
    assert worst > 2 * 2.0**-24 and worst > 1e-6  # the rows that used to be refused


def test_tolerances_by_dtype_and_length():
    assert sum_tolerance("float64", 3) == 1e-6 == sum_tolerance(np.float64, N)
    assert sum_tolerance(torch.float32, N) == pytest.approx(2 * (2.0**-24 + math.sqrt(N) * 2.0**-24))
    assert sum_tolerance("bfloat16", N) == pytest.approx(2 * (2.0**-8 + math.sqrt(N) * 2.0**-24))
    assert sum_tolerance(np.dtype("float32"), 10) == 1e-6  # short rows: the float64 floor
    assert sum_tolerance("int64", N) == 1e-6  # integers are read as float64


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_model_rows_are_accepted_and_rescaled(dtype):
    target, draft = softmax_rows(dtype, 2, seed=1)
    p = as_distribution(target, "target")
    assert p.dtype == np.float64 and abs(p.sum() - 1) < 1e-12
    law = IID(draft, k=2)
    assert abs(law.draft.sum() - 1) < 1e-12
    best = optimal_acceptance(target, law).value
    single = single_draft_acceptance(target, draft)
    assert single - 1e-12 <= best <= 1 + 1e-12
    assert get_scheme("specinfer").acceptance(target, law) <= best + 1e-9
    numpy_rows = target.float().numpy() if dtype != torch.bfloat16 else None
    if numpy_rows is not None:  # numpy arrays carry their dtype the same way
        assert abs(as_distribution(numpy_rows.astype(str(dtype).removeprefix("torch.")), "target").sum() - 1) < 1e-12


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_errors_beyond_rounding_are_refused_showing_the_error(dtype):
    row = softmax_rows(dtype, 1)[0].double()
    off = row * (1 + 3 * sum_tolerance(dtype, N))
    name = str(dtype).removeprefix("torch.")
    with pytest.raises(ValueError, match=rf"^target: entries sum to 1 \+ [0-9.e-]+, more than float64 rounding explains at n = {N}"):
        as_distribution(off, "target")  # a float64 tensor: float64's tolerance
    with pytest.raises(ValueError, match=rf"^target: entries sum to 1 \+ [0-9.e-]+, more than {name} rounding explains at n = {N} \(tolerance [0-9.e-]+\); rescale it with as_distribution\(\.\.\., normalize=True\)"):
        as_distribution(off.to(dtype) if dtype == torch.float32 else (row.to(dtype) * 1.05), "target")


def test_the_named_keyword_exists_and_rescales():
    """The hint in every refusal names a keyword of a function that has it."""
    message = ""
    try:
        optimal_acceptance([0.5, 0.6], IID([0.5, 0.5], k=2))
    except ValueError as error:
        message = str(error)
    assert "sum to 1 + 0.1" in message
    call = re.search(r"rescale it with (\w+)\(\.\.\., (\w+)=True\)", message)
    assert call and call.group(1) == "as_distribution" and call.group(2) == "normalize"
    fixed = as_distribution([0.5, 0.6], "target", normalize=True)
    assert optimal_acceptance(fixed, IID([0.5, 0.5], k=2)).value == pytest.approx(1.0)


def test_check_row_sums_shows_the_sign():
    with pytest.raises(ValueError, match=r"^draft: entries sum to 1 - 0.01, more than float32 rounding explains at n = 10 \(tolerance 1e-06\)"):
        check_row_sums(0.99, "draft", dtype="float32", n=10)
    check_row_sums(1 - 9e-7, "draft", dtype="float32", n=10)


def _tree_tables(dtype, n: int = 4096):
    rows = softmax_rows(dtype, 5, n=n, seed=2)
    target = torch.stack(rows[:3]).reshape(1, 3, n)
    draft = torch.stack(rows[3:5]).reshape(1, 2, n)
    tokens = torch.stack([torch.multinomial(draft[0, d].float(), 1, generator=torch.Generator().manual_seed(d)) for d in range(2)], dim=-1)
    return tokens, target, draft


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_draft_trees_follow_the_same_policy(dtype):
    tokens, target, draft = _tree_tables(dtype)
    tree = DraftTree(tokens.numpy(), target, draft)
    assert np.abs(tree.target.sum(axis=-1) - 1).max() < 1e-12  # rescaled
    off = target.double() * 1.01
    with pytest.raises(ValueError, match=r"^target: a distribution's entries sum to 1 \+ 0.0[0-9]+, more than float64 rounding explains at n = 4096"):
        DraftTree(tokens.numpy(), off, draft)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batched_scheme_rows_follow_the_same_policy(dtype):
    rows = softmax_rows(dtype, 3, n=4096, seed=3)
    target = torch.stack(rows[:1])
    drafts = torch.stack([torch.stack(rows[1:3])])
    tokens = torch.stack([drafts[0, i].float().argmax() for i in range(2)]).reshape(1, 2)
    scheme = get_scheme("specinfer")
    generator = torch.Generator().manual_seed(0)
    scheme.select_batch(target, drafts, tokens, generator)
    with pytest.raises(ValueError, match=r"^target: a row's entries sum to 1 \+ 0.0[0-9]+, more than "):
        scheme.select_batch(target.double() * 1.05, drafts.double(), tokens, generator)
