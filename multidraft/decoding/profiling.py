"""Measured per-call latency of a causal language model: the input of the throughput model.

Speculative decoding spends its time in two kinds of forward passes (Yan, Agarwal and
Venkataraman, "Decoding Speculative Decoding", 2024):

* the draft's **decode step**: K sequences (a batch of K), one new token each, on top of a
  KV cache — latency t_draft(K, 1);
* the target's **verify call**: K sequences of L + 1 new tokens each — t_target(K, L + 1).

:func:`profile_latency` times exactly these calls for a grid of batch sizes b and token
counts m, on a KV cache of ``context`` tokens of random ids, on the model's own device. Each
grid point runs ``warmup`` untimed calls, then ``repeats`` timed ones, and keeps the median;
on CUDA/MPS the device is synchronised before each clock reading (as gpt-fast does). After
every call the cache is cropped back to ``context`` tokens, so every repeat sees the same
state. The result converts to a :class:`multidraft.theory.LatencyModel` for
:func:`multidraft.theory.throughput` and :func:`multidraft.theory.best_configuration`.

Timings depend on the machine, its load and the thread count; they are measurements, not
constants — the tests check the bookkeeping (grid, median, warm-up) with a scripted clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from multidraft.theory.distributions import check_count
from multidraft.theory.speed import LatencyModel

__all__ = ["LatencyProfile", "profile_latency"]


@dataclass(frozen=True, eq=False)
class LatencyProfile:
    """Median latency of forward passes over a grid of batch sizes × new-token counts.

    Attributes
    ----------
    name : str
        The model's name (``LoadedModel.name`` or its class name).
    device : str
        Where it ran.
    context : int
        Tokens already in the KV cache before each timed call.
    batch_sizes, token_counts : tuple[int, ...]
        The grid (increasing).
    seconds : numpy.ndarray, shape (len(batch_sizes), len(token_counts))
        Median seconds per call over ``repeats`` timed calls.
    spread : numpy.ndarray, same shape
        Max minus min of the timed calls (a noise indicator).
    repeats, warmup : int
        Timed and untimed calls per grid point.
    threads : int
        ``torch.get_num_threads()`` during the measurement.
    """

    name: str
    device: str
    context: int
    batch_sizes: tuple[int, ...]
    token_counts: tuple[int, ...]
    seconds: np.ndarray
    spread: np.ndarray
    repeats: int
    warmup: int
    threads: int

    @property
    def latency(self) -> LatencyModel:
        """The table as a :class:`~multidraft.theory.LatencyModel` (bilinear interpolation)."""
        return LatencyModel(self.batch_sizes, self.token_counts, self.seconds)

    def table(self) -> str:
        """A plain-text table: one row per batch size, one column per token count, milliseconds."""
        header = ["batch \\ tokens"] + [str(m) for m in self.token_counts]
        rows = [[str(b)] + [f"{1e3 * s:.2f}" for s in row] for b, row in zip(self.batch_sizes, self.seconds)]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = [
            f"{self.name} on {self.device}: median ms per forward call "
            f"(context {self.context}, {self.repeats} repeats after {self.warmup} warm-up, {self.threads} threads)",
            "  ".join(h.rjust(w) for h, w in zip(header, widths)),
        ]
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (seconds as nested lists)."""
        return {
            "name": self.name,
            "device": self.device,
            "context": self.context,
            "batch_sizes": list(self.batch_sizes),
            "token_counts": list(self.token_counts),
            "seconds": self.seconds.tolist(),
            "spread": self.spread.tolist(),
            "repeats": self.repeats,
            "warmup": self.warmup,
            "threads": self.threads,
        }


def _grid(values: Sequence[int], name: str) -> tuple[int, ...]:
    grid = tuple(values)
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in grid):
        raise ValueError(f"{name}: expected positive integers, got {grid}")
    if len(grid) < 2 or any(b <= a for a, b in zip(grid, grid[1:])):
        raise ValueError(f"{name}: expected at least two strictly increasing values, got {grid}")
    return tuple(int(v) for v in grid)


def _synchronize(device: torch.device) -> None:
    """Wait for queued kernels so that a clock reading covers the work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def profile_latency(
    model: Any,
    *,
    batch_sizes: Sequence[int] = (1, 2, 4),
    token_counts: Sequence[int] = (1, 2, 5, 9),
    context: int = 64,
    repeats: int = 5,
    warmup: int = 2,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> LatencyProfile:
    """Median latency t(b, m) of one forward pass: b sequences, m new tokens, ``context`` cached.

    For each batch size b: one untimed prefill of b × ``context`` random token ids builds the
    KV cache; then for each m, ``warmup`` untimed and ``repeats`` timed calls
    ``model(input_ids [b, m], past_key_values=cache)``, each followed by cropping the cache back
    to ``context`` tokens. ``seconds[i, j]`` is the median of the timed calls at
    (``batch_sizes[i]``, ``token_counts[j]``). A draft needs m = 1 (decode step) at the numbers
    of drafts K; a target needs m = L + 1 (verify call) for the draft lengths L considered.

    Parameters
    ----------
    model : LoadedModel or torch.nn.Module
        A causal LM taking ``input_ids``, ``past_key_values`` and ``use_cache`` (transformers
        style); a :class:`~multidraft.decoding.LoadedModel` is unwrapped.
    batch_sizes, token_counts : sequence of int
        At least two strictly increasing positive values each.
    context : int
        Tokens in the cache before each timed call (0: no cache, the call sees only m tokens).
    repeats : int
        Timed calls per grid point (>= 1); the median is kept.
    warmup : int
        Untimed calls per grid point before the timed ones (>= 0).
    seed : int
        Seed of the torch generator drawing the random token ids.
    clock : callable
        Seconds counter (``time.perf_counter``); replaceable to test the bookkeeping.

    Returns
    -------
    LatencyProfile

    Raises
    ------
    ValueError
        Bad grid or counts; ``context > 0`` with a model that returns no KV cache.

    References
    ----------
    Yan, Agarwal and Venkataraman, "Decoding Speculative Decoding", 2024 (latency of draft and
    target calls); gpt-fast's benchmark (synchronise before reading clocks, exclude warm-up).
    """
    batches = _grid(batch_sizes, "batch_sizes")
    tokens = _grid(token_counts, "token_counts")
    context = check_count(context, "context", minimum=0)
    repeats = check_count(repeats, "repeats")
    warmup = check_count(warmup, "warmup", minimum=0)
    network = getattr(model, "model", model) if not isinstance(model, torch.nn.Module) else model
    if not isinstance(network, torch.nn.Module):
        raise ValueError(f"model: expected a LoadedModel or a torch.nn.Module, got {type(model).__name__}")
    name = getattr(model, "name", None) or type(network).__name__
    embeddings = network.get_input_embeddings()
    device, vocab = embeddings.weight.device, int(embeddings.weight.shape[0])
    generator = torch.Generator().manual_seed(seed)

    def random_ids(batch: int, count: int) -> torch.Tensor:
        return torch.randint(0, vocab, (batch, count), generator=generator).to(device)

    seconds = np.empty((len(batches), len(tokens)))
    spread = np.empty_like(seconds)
    with torch.inference_mode():
        for i, batch in enumerate(batches):
            cache = None
            if context > 0:
                cache = network(input_ids=random_ids(batch, context), use_cache=True).past_key_values
                if cache is None or not hasattr(cache, "crop"):
                    raise ValueError("context: the model returns no croppable KV cache; pass context=0")
            for j, count in enumerate(tokens):
                ids = random_ids(batch, count)
                timed = []
                for call in range(warmup + repeats):
                    _synchronize(device)
                    start = clock()
                    network(input_ids=ids, past_key_values=cache, use_cache=cache is not None)
                    _synchronize(device)
                    elapsed = clock() - start
                    if cache is not None:
                        cache.crop(-count)  # back to `context` tokens (negative: tokens to remove)
                    if call >= warmup:
                        timed.append(elapsed)
                seconds[i, j] = statistics.median(timed)
                spread[i, j] = max(timed) - min(timed)
    seconds.setflags(write=False)
    spread.setflags(write=False)
    return LatencyProfile(
        name=str(name),
        device=str(device),
        context=context,
        batch_sizes=batches,
        token_counts=tokens,
        seconds=seconds,
        spread=spread,
        repeats=repeats,
        warmup=warmup,
        threads=torch.get_num_threads(),
    )
