"""Torch helpers shared by the batched (decoding) forms of the schemes.

Shapes follow the decoding convention: ``target [B, n]``, ``drafts [B, K, n]`` (the draft
distribution each draft token was drawn from), ``tokens [B, K]`` long. Work stays on the input
device (SpecTr's ρ* and the truncated LP compute in float64); randomness comes only from the
caller's ``torch.Generator``, which is checked.
"""

from __future__ import annotations

import torch

from multidraft.theory import check_row_sums


def check_sums(values: torch.Tensor, name: str, rows: str = "a row's entries") -> None:
    """Refuse the rows of ``values [..., n]`` whose sums are off by more than the rounding of
    their dtype at length n (:func:`~multidraft.theory.sum_tolerance`, the package's one
    tolerance policy); NaN or infinite entries and negative ones are refused first. Accepted rows
    are used as given: the rules normalise every residual they sample from, so a sum within
    rounding of one changes no law beyond rounding.

    Rows of 32 bits or fewer are summed in float32, the accumulation the policy allows for
    (torch's blocked sum adds far less than its ``√n u`` term), float64 rows in float64:
    widening a [256, 49152] float32 batch to float64 first costs 30x the sum itself on a CPU."""
    wide = torch.float64 if values.dtype == torch.float64 else torch.float32
    sums = values.sum(dim=-1, dtype=wide).reshape(-1)
    if not bool(torch.isfinite(sums).all()):
        raise ValueError(f"{name}: entries must be finite")
    if float(values.min()) < 0:
        raise ValueError(f"{name}: entries must be non-negative")
    worst = float(sums[(sums - 1).abs().argmax()])
    check_row_sums(worst, name, dtype=values.dtype, n=values.shape[-1], rows=rows)


def check_generator(generator: object) -> torch.Generator:
    """Randomness only from an explicit ``torch.Generator`` (no hidden global state)."""
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator: expected a torch.Generator, got {type(generator).__name__}")
    return generator


def check_batch(target: torch.Tensor, drafts: torch.Tensor, tokens: torch.Tensor, k: int | None = None) -> int:
    """Validate the batched inputs; return K. Raises ValueError naming the argument."""
    if not isinstance(target, torch.Tensor) or target.ndim != 2:
        raise ValueError(f"target: expected a tensor [B, n], got {getattr(target, 'shape', type(target).__name__)}")
    batch, n = target.shape
    if batch and n:
        check_sums(target, "target")
    if not isinstance(drafts, torch.Tensor) or drafts.ndim != 3 or drafts.shape[0] != batch or drafts.shape[2] != n:
        raise ValueError(f"drafts: expected a tensor [B={batch}, K, n={n}], got {getattr(drafts, 'shape', None)}")
    if not isinstance(tokens, torch.Tensor) or tokens.shape != drafts.shape[:2]:
        raise ValueError(f"tokens: expected a long tensor [B={batch}, K={drafts.shape[1]}], got {getattr(tokens, 'shape', None)}")
    if tokens.dtype != torch.long:
        raise ValueError(f"tokens: expected dtype torch.long, got {tokens.dtype}")
    if k is not None and drafts.shape[1] != k:
        raise ValueError(f"drafts: this scheme needs K={k} drafts, got K={drafts.shape[1]}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= n):
        raise ValueError(f"tokens: token ids must lie in [0, {n})")
    chosen = drafts.gather(2, tokens.unsqueeze(-1)).squeeze(-1)
    if bool((chosen <= 0).any()):
        row, col = (chosen <= 0).nonzero()[0].tolist()
        raise ValueError(
            f"tokens: draft {col} of row {row} (token {int(tokens[row, col])}) has probability zero "
            "under its draft distribution"
        )
    return drafts.shape[1]


def sample_rows(weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row of non-negative ``weights [R, n]`` (rows of positive mass), with
    probability proportional to the row, by inverse CDF (one cumsum, one searchsorted).
    **Overwrites** ``weights`` with its cumulative sums (callers pass a scratch tensor).

    The level is kept strictly below the row total and the first index whose cumulative sum
    exceeds it is returned, so an index of weight zero is never drawn.
    """
    cumulative = weights.cumsum_(dim=-1)
    total = cumulative[:, -1:]
    if total.numel() and not bool((torch.isfinite(total) & (total > 0)).all()):
        raise ValueError("weights: every row must have positive, finite mass to be sampled")
    uniform = torch.rand(total.shape, generator=check_generator(generator), dtype=weights.dtype, device=weights.device)
    level = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cumulative, level, right=True).squeeze(-1)


def uniforms(shape: tuple[int, ...], like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Uniform [0, 1) numbers in the dtype and device of ``like``."""
    return torch.rand(shape, generator=check_generator(generator), dtype=like.dtype, device=like.device)
