"""Token processing and the drafting of K sequences (the KV-cached model state is in
:mod:`multidraft.decoding.state`).

Every distribution that leaves this module is float64 and renormalised: logits are divided by
the temperature, soft-maxed in float64 and filtered by top-p exactly as
:func:`multidraft.theory.softmax` and :func:`multidraft.theory.top_p` do, so the theory sees
the very distributions the tokens were sampled from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from multidraft.decoding.models import LoadedModel
from multidraft.decoding.state import ModelState

__all__ = [
    "Sampling",
    "DraftSpec",
    "Drafts",
    "process_logits",
    "sample_tokens",
    "sample_without_replacement",
    "draft_block",
]


@dataclass(frozen=True)
class Sampling:
    """How a model's next token is drawn: ``top_p(softmax(logits / temperature), top_p)``.

    One bundle for the target and for each draft (as gpt-fast passes one sampling setting
    through its decode path). ``temperature = 0`` is greedy decoding (the argmax, ties split
    evenly); ``top_p = 1`` keeps every token (Holtzman et al., 2020).

    >>> Sampling(1.5)
    Sampling(temperature=1.5, top_p=1.0)
    >>> Sampling(top_p=0)
    Traceback (most recent call last):
    ...
    ValueError: top_p: must lie in (0, 1], got 0
    """

    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        temperature, top_p = self.temperature, self.top_p
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
            raise ValueError(f"temperature: must be a finite number >= 0, got {temperature!r}")
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise ValueError(f"top_p: must lie in (0, 1], got {top_p!r}")
        object.__setattr__(self, "temperature", float(temperature))
        object.__setattr__(self, "top_p", float(top_p))


@dataclass(frozen=True)
class DraftSpec:
    """One draft: a model (``None`` = the target itself) and its :class:`Sampling`.

    The paper's experiments draft with the target's own model at temperatures 1.2-2.4 against
    a target at 1.0 (Khisti et al., ICLR 2025, Section 5).
    """

    model: LoadedModel | None = None
    sampling: Sampling = Sampling()

    def __post_init__(self) -> None:
        if not isinstance(self.sampling, Sampling):
            raise ValueError(f"sampling: expected a Sampling, got {type(self.sampling).__name__}")

    @property
    def key(self) -> tuple[int, Sampling]:
        """Drafts with equal keys (same model object and sampling) have the same law at a
        shared prefix."""
        return (id(self.model), self.sampling)


def process_logits(logits: torch.Tensor, temperature: torch.Tensor | float, top_p: torch.Tensor | float) -> torch.Tensor:
    """Sampling distribution ``top_p(softmax(logits / T), mass)`` in float64.

    ``logits [..., V]``; ``temperature`` and ``top_p`` broadcast against ``logits[..., :1]``
    (one value per row allowed). ``T = 0`` gives the one-hot argmax (ties split evenly).
    Top-p keeps the tokens, by decreasing probability (ties by lower index), whose preceding
    mass is ``< top_p`` (Holtzman et al., 2020) and renormalises -- the rule of
    :func:`multidraft.theory.top_p`.

    >>> process_logits(torch.tensor([0.0, 0.0, -float("inf")]), 1.0, 1.0)
    tensor([0.5000, 0.5000, 0.0000], dtype=torch.float64)
    """
    z = logits.to(torch.float64)
    temperature = torch.as_tensor(temperature, dtype=torch.float64, device=z.device)
    top_p = torch.as_tensor(top_p, dtype=torch.float64, device=z.device)
    greedy = z == z.max(dim=-1, keepdim=True).values
    greedy = greedy / greedy.sum(dim=-1, keepdim=True)
    safe = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    probs = torch.softmax(z / safe, dim=-1)
    probs = torch.where(temperature > 0, probs, greedy)
    if bool((top_p < 1).any()):
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        keep_sorted = (before < top_p) | (top_p >= 1)
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample_tokens(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``probs [..., V]`` -> ``[...]`` long, by the inverse CDF of one
    uniform per row (the schemes' :func:`~multidraft.schemes._torch.sample_rows`: the level
    stays strictly below the row total, so a token of probability zero is never drawn)."""
    from multidraft.schemes._torch import sample_rows

    rows = probs.reshape(-1, probs.shape[-1]).clone()  # sample_rows overwrites its input
    return sample_rows(rows, generator).reshape(probs.shape[:-1])


def sample_without_replacement(probs: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """``k`` distinct tokens from ``probs [..., V]`` (each row on its own) by successive
    sampling (Gumbel-top-k: ``argtop_k(log q + G)``, G iid Gumbel; Vieira 2014, Kool et al.
    2019), in draw order: ``[..., k]``. Tokens of probability zero come last (key -inf)."""
    u = torch.rand(probs.shape, generator=generator, dtype=torch.float64, device=probs.device)
    keys = torch.log(probs) - torch.log(-torch.log(u.clamp_min(torch.finfo(torch.float64).tiny)))
    return torch.topk(keys, k).indices


@dataclass(frozen=True)
class Drafts:
    """K drafted sequences.

    Attributes
    ----------
    tokens : torch.Tensor, shape [K, L], long
        Drafted tokens.
    probs : torch.Tensor, shape [K, L, V], float64
        ``probs[k, i]`` is the distribution draft k sampled ``tokens[k, i]`` from.
    """

    tokens: torch.Tensor
    probs: torch.Tensor


@torch.inference_mode()
def draft_block(
    state: ModelState,
    specs: Sequence[DraftSpec],
    length: int,
    generator: torch.Generator,
    without_replacement: bool = False,
) -> Drafts:
    """Draft K = ``len(specs)`` sequences of ``length`` tokens in one batched, KV-cached pass.

    Step i feeds ``[K, 1]`` tokens (the pending tokens at i = 0) and samples
    ``x_{k,i} ~ q_k(· | prefix, x_{k,<i})`` with draft k's sampling. With
    ``without_replacement`` the first position draws K distinct tokens from q_1 by
    Gumbel-top-K (all drafts must then share one temperature and top-p). The last token is
    not fed back: its continuation is never needed.
    """
    k = len(specs)
    device = state.loaded.device
    temperature = torch.tensor([[s.sampling.temperature] for s in specs], dtype=torch.float64, device=device)
    top_p = torch.tensor([[s.sampling.top_p] for s in specs], dtype=torch.float64, device=device)
    inputs = state.pending_rows(k)
    tokens, probs = [], []
    for i in range(length):
        logits = state.forward(inputs)[:, -1, :]  # [K, V]
        q = process_logits(logits, temperature, top_p)  # [K, V]
        if i == 0 and without_replacement:
            x = sample_without_replacement(q[0], k, generator)
        else:
            x = sample_tokens(q, generator)  # [K]
        tokens.append(x)
        probs.append(q)
        if i < length - 1:
            inputs = x[:, None]
    return Drafts(torch.stack(tokens, dim=1), torch.stack(probs, dim=1))
