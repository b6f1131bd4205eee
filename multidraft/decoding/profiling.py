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

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from multidraft.decoding.models import CACHE_KEYWORD, forward_with_cache
from multidraft.theory.laws import SizeEstimate, check_count, check_size
from multidraft.theory.speed import LatencyModel

__all__ = ["LatencyGrid", "LatencyProfile", "profile_latency", "profile_memory", "available_memory"]


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
    compiled : bool
        Whether the compiled forward on the static cache was timed (``compile=True``).
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
    compiled: bool = False

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
            f"{self.name} on {self.device}: median ms per {'compiled ' if self.compiled else ''}forward call "
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
            "compiled": self.compiled,
        }


def _grid(values: Sequence[int], name: str) -> tuple[int, ...]:
    grid = tuple(values)
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in grid):
        raise ValueError(f"{name}: expected positive integers, got {grid}")
    if len(grid) < 2 or any(b <= a for a, b in zip(grid, grid[1:])):
        raise ValueError(f"{name}: expected at least two strictly increasing values, got {grid}")
    return tuple(int(v) for v in grid)


@dataclass(frozen=True)
class LatencyGrid:
    """The measurement plan of :func:`profile_latency`, validated on construction (so the
    command line refuses bad values before a model loads).

    ``batch_sizes`` and ``token_counts``: at least two strictly increasing positive integers
    each; ``context`` >= 0 cached tokens; ``repeats`` >= 1 timed and ``warmup`` >= 0 untimed
    calls per grid point (>= 1 with ``compile``, so that compilation is never timed).
    """

    batch_sizes: tuple[int, ...] = (1, 2, 4)
    token_counts: tuple[int, ...] = (1, 2, 5, 9)
    context: int = 64
    repeats: int = 5
    warmup: int = 2
    compile: bool = False

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "batch_sizes", _grid(self.batch_sizes, "batch_sizes"))
        put(self, "token_counts", _grid(self.token_counts, "token_counts"))
        put(self, "context", check_count(self.context, "context", minimum=0))
        put(self, "repeats", check_count(self.repeats, "repeats"))
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile: expected True or False, got {self.compile!r}")
        put(self, "warmup", check_count(self.warmup, "warmup", minimum=1 if self.compile else 0))


def profile_memory(network: torch.nn.Module, batch: int, tokens: int, context: int) -> int:
    """Estimated peak bytes of profiling ``batch`` sequences of ``tokens`` new tokens on a cache
    of ``context`` tokens (besides the weights): the KV cache, the logits of the widest call
    (the prefill of ``context`` tokens or a timed call of ``tokens``) and its activations,

        b·(c + m)·layers·2·kv_heads·head_dim·e  +  b·w·V·4  +  b·w·(ffn + 4·hidden)·e  +  b·heads·w·(c + m)·e,

    with w = max(c, m), e the parameter size in bytes and the shapes read from the model's
    config (one layer and one head when it has none).
    """
    weight = network.get_input_embeddings().weight
    vocab, hidden = (int(v) for v in weight.shape)
    size = weight.element_size()
    config = getattr(network, "config", None)
    layers = int(getattr(config, "num_hidden_layers", None) or 1)
    heads = int(getattr(config, "num_attention_heads", None) or 1)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or max(1, hidden // heads))
    ffn = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    total, widest = context + tokens, max(context, tokens)
    cache = batch * total * layers * 2 * kv_heads * head_dim * size
    logits = batch * widest * vocab * max(size, 4)
    activations = batch * widest * (ffn + 4 * hidden) * size + batch * heads * widest * total * size
    return cache + logits + activations


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device``: free CUDA memory, or the kernel's
    ``MemAvailable`` (else the free pages) for the CPU; None where unknown (MPS, other)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _check_memory(network: torch.nn.Module, name: str, grid: LatencyGrid, device: torch.device, limit: int | None) -> None:
    """Refuse, through the size guard and before anything is allocated, a grid whose largest
    point needs more than ``limit`` bytes (default: what ``device`` has available)."""
    if limit is None:
        limit = available_memory(device)
        if limit is None:
            return
    batch, tokens = grid.batch_sizes[-1], grid.token_counts[-1]
    estimate = SizeEstimate(
        f"latency profile of {name} (batch {batch:,}, context {grid.context:,} + {tokens:,} tokens)",
        batch * (grid.context + tokens),
        profile_memory(network, batch, tokens, grid.context),
        unit="cached token positions",
    )
    check_size(
        estimate,
        f"profile smaller batch sizes or a shorter context (the limit is what {device} has available now; "
        "pass max_memory= to change it)",
        max_variables=2**62,
        max_memory=limit,
    )


def _synchronize(device: torch.device) -> None:
    """Wait for queued kernels so that a clock reading covers the work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _median_call(
    call: Callable[[], object], reset: Callable[[], None], grid: LatencyGrid, device: torch.device, clock: Callable[[], float]
) -> tuple[float, float]:
    """``grid.warmup`` untimed then ``grid.repeats`` timed calls, each followed by ``reset``
    (untimed); the median and the spread (max - min) of the timed ones."""
    timed = []
    for index in range(grid.warmup + grid.repeats):
        _synchronize(device)
        start = clock()
        call()
        _synchronize(device)
        elapsed = clock() - start
        reset()
        if index >= grid.warmup:
            timed.append(elapsed)
    return statistics.median(timed), max(timed) - min(timed)


def profile_latency(
    model: Any,
    *,
    batch_sizes: Sequence[int] = (1, 2, 4),
    token_counts: Sequence[int] = (1, 2, 5, 9),
    context: int = 64,
    repeats: int = 5,
    warmup: int = 2,
    seed: int = 0,
    compile: bool = False,
    max_memory: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> LatencyProfile:
    """Median latency t(b, m) of one forward pass: b sequences, m new tokens, ``context`` cached.

    For each batch size b: one untimed prefill of b × ``context`` random token ids builds the
    KV cache; then for each m, ``warmup`` untimed and ``repeats`` timed calls
    ``model(input_ids [b, m])`` after the cache (:func:`~multidraft.decoding.models.forward_with_cache`),
    each followed by cropping the cache back to ``context`` tokens. ``seconds[i, j]`` is the
    median of the timed calls at (``batch_sizes[i]``, ``token_counts[j]``). A draft needs m = 1 (decode step) at the numbers
    of drafts K; a target needs m = L + 1 (verify call) for the draft lengths L considered.

    Parameters
    ----------
    model : LoadedModel or torch.nn.Module
        A causal LM taking ``input_ids``, a KV cache and ``use_cache`` (transformers
        style); a :class:`~multidraft.decoding.LoadedModel` is unwrapped.
    batch_sizes, token_counts : sequence of int
        At least two strictly increasing positive values each.
    context : int
        Tokens in the cache before each timed call (0: no cache, the call sees only m tokens).
    repeats : int
        Timed calls per grid point (>= 1); the median is kept.
    warmup : int
        Untimed calls per grid point before the timed ones (>= 0; >= 1 with ``compile``).
    seed : int
        Seed of the torch generator drawing the random token ids.
    compile : bool
        Time the compiled forward on the static cache that decoding with ``compile=True``
        uses (:class:`~multidraft.decoding.ModelState`; needs a LoadedModel and ``context >= 1``).
    max_memory : int, optional
        Bytes the largest grid point may need (:func:`profile_memory`); default: what the
        model's device has available now (:func:`available_memory`). Checked before anything
        is allocated.
    clock : callable
        Seconds counter (``time.perf_counter``); replaceable to test the bookkeeping.

    Returns
    -------
    LatencyProfile

    Raises
    ------
    ValueError
        Bad grid or counts; ``context > 0`` with a model that returns no KV cache.
    ProblemTooLargeError
        The largest grid point would need more than ``max_memory`` bytes.

    References
    ----------
    Yan, Agarwal and Venkataraman, "Decoding Speculative Decoding", 2024 (latency of draft and
    target calls); gpt-fast's benchmark (synchronise before reading clocks, exclude warm-up).
    """
    grid = LatencyGrid(batch_sizes, token_counts, context, repeats, warmup, compile)
    network = getattr(model, "model", model) if not isinstance(model, torch.nn.Module) else model
    if not isinstance(network, torch.nn.Module):
        raise ValueError(f"model: expected a LoadedModel or a torch.nn.Module, got {type(model).__name__}")
    if compile and (network is model or grid.context < 1):
        raise ValueError("compile: profiling the compiled forward needs a LoadedModel and context >= 1")
    name = getattr(model, "name", None) or type(network).__name__
    embeddings = network.get_input_embeddings()
    device, vocab = embeddings.weight.device, int(embeddings.weight.shape[0])
    _check_memory(network, str(name), grid, device, max_memory)
    generator = torch.Generator().manual_seed(seed)

    def random_ids(batch: int, count: int) -> torch.Tensor:
        return torch.randint(0, vocab, (batch, count), generator=generator).to(device)

    shape = (len(grid.batch_sizes), len(grid.token_counts))
    seconds, spread = np.empty(shape), np.empty(shape)
    compiled = compile
    with torch.inference_mode():
        for i, batch in enumerate(grid.batch_sizes):
            if compile:
                state = _static_state(model, grid, batch, random_ids)
                calls = [_state_call(state, random_ids(batch, count), grid.context) for count in grid.token_counts]
            else:
                calls = _eager_calls(network, grid, batch, random_ids)
            for j, (call, reset) in enumerate(calls):
                seconds[i, j], spread[i, j] = _median_call(call, reset, grid, device, clock)
            compiled = compiled and (not compile or state.compiled)
    seconds.setflags(write=False)
    spread.setflags(write=False)
    return LatencyProfile(
        name=str(name),
        device=str(device),
        context=grid.context,
        batch_sizes=grid.batch_sizes,
        token_counts=grid.token_counts,
        seconds=seconds,
        spread=spread,
        repeats=grid.repeats,
        warmup=grid.warmup,
        threads=torch.get_num_threads(),
        compiled=compiled,
    )


def _eager_calls(network: torch.nn.Module, grid: LatencyGrid, batch: int, random_ids: Callable) -> list[tuple]:
    """Per token count: the call ``network(ids [batch, m], cache)`` and the crop back to
    ``context`` tokens, on a dynamic cache prefilled with ``context`` random ids."""
    cache = None
    if grid.context > 0:
        cache = getattr(forward_with_cache(network, random_ids(batch, grid.context)), CACHE_KEYWORD)
        if cache is None or not hasattr(cache, "crop"):
            raise ValueError("context: the model returns no croppable KV cache; pass context=0")
    calls = []
    for count in grid.token_counts:
        ids = random_ids(batch, count)

        def call(ids: torch.Tensor = ids) -> object:
            return forward_with_cache(network, ids, cache, use_cache=cache is not None)

        def reset(count: int = count) -> None:
            if cache is not None:
                cache.crop(-count)  # back to `context` tokens (negative: tokens to remove)

        calls.append((call, reset))
    return calls


def _static_state(loaded: Any, grid: LatencyGrid, batch: int, random_ids: Callable) -> Any:
    """A compiled :class:`ModelState` of ``batch`` rows holding ``context`` random tokens."""
    from multidraft.decoding.state import ModelState

    prompt = random_ids(1, grid.context + 1)[0].tolist()
    capacity = grid.context + 1 + max(grid.token_counts)
    return ModelState(loaded, prompt, rows=batch, compile=True, capacity=capacity, role="profile")


def _state_call(state: Any, ids: torch.Tensor, context: int) -> tuple[Callable, Callable]:
    """The compiled forward of ``ids`` on ``state`` and the move back to ``context`` tokens."""

    def call() -> object:
        return state.forward(ids)

    def reset() -> None:
        state.commit(0, context, state.pending, shared=context)

    return call, reset
