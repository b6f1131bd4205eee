"""A model's KV-cached state during decoding, eager or compiled.

The committed tokens sit in a KV cache, except the ``pending`` ones that are known but not fed
yet (the last emitted token, and after a fully accepted block the last draft token too). Two
cache layouts share one interface (:class:`ModelState`):

* **dynamic** (default): transformers' ``DynamicCache``. One row between blocks; a block's
  first forward widens it to K rows and :meth:`ModelState.commit` keeps the accepted row,
  cropped to the accepted prefix.
* **static** (``compile=True``): a ``StaticCache`` of fixed ``rows x capacity`` and a forward
  compiled by ``torch.compile`` with static shapes (on CUDA with CUDA graphs, mode
  ``"reduce-overhead"``), the design of gpt-fast: every step has one of a few shapes
  (``[K, 1]`` decode, ``[K, 2]`` after a fully accepted block, ``[K, L + 1]`` verify), so
  each is compiled once and replayed. All rows hold the committed prefix: a commit copies the
  accepted row's new entries into the other rows and moves the write position back to the
  accepted length. Entries beyond it are stale but harmless: a query at position t attends to
  keys at positions <= t only, and the next forward overwrites them before any query reads
  them. The prompt's prefill (one variable-length call) runs eagerly on the same cache.

Compilation is tried once per process and backend; when it fails (no C compiler for
inductor's CPU code, an operation dynamo cannot trace) the state warns once, records the
reason in :attr:`ModelState.compile_error` and runs the same static cache eagerly, so a run
with ``compile=True`` never fails for want of a compiler. ``MULTIDRAFT_COMPILE_BACKEND``
overrides the backend (``inductor`` by default; ``eager`` or ``aot_eager`` trace the graph
without generating code, which is how the test suite exercises this path quickly on CPU).

Caches are pooled on the :class:`~multidraft.decoding.LoadedModel`, one per (role, rows),
grown (in steps of :data:`CAPACITY_STEP` positions) when a longer one is asked for and reused
across prompts and calls: CUDA graphs record the cache's addresses, so a fresh cache per prompt
would force a re-recording each time (transformers keeps its static cache on the model for the
same reason). Two states alive at once need different roles (``"draft"`` and ``"target"`` when
a model drafts for itself).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from multidraft.decoding.models import LoadedModel, forward_with_cache

__all__ = ["ModelState", "compile_backend", "COMPILE_BACKEND_ENV"]

#: Environment variable naming the ``torch.compile`` backend of ``compile=True``.
COMPILE_BACKEND_ENV = "MULTIDRAFT_COMPILE_BACKEND"
#: Static caches are allocated in multiples of this many positions (so prompts of similar
#: lengths share one cache, and one set of compiled graphs).
CAPACITY_STEP = 128
#: Compiled graphs kept per step function: shapes x models x caches of a long study.
RECOMPILE_LIMIT = 256


def compile_backend() -> str:
    """The ``torch.compile`` backend: ``$MULTIDRAFT_COMPILE_BACKEND`` or ``"inductor"``."""
    return os.environ.get(COMPILE_BACKEND_ENV) or "inductor"


def _logits(model: Any, tokens: torch.Tensor, cache: Any) -> torch.Tensor:
    """One forward over ``tokens [B, T]`` after the cache: logits ``[B, T, V]``."""
    return forward_with_cache(model, tokens, cache).logits


@functools.cache
def _compiled(backend: str, cuda_graphs: bool) -> Any:
    """``torch.compile(_logits)`` with static shapes and the whole forward as one graph."""
    mode = "reduce-overhead" if cuda_graphs and backend == "inductor" else None
    return torch.compile(_logits, backend=backend, mode=mode, fullgraph=True, dynamic=False)


@functools.cache
def _limit_name() -> str:
    """dynamo's name for the recompile limit (``cache_size_limit`` before torch 2.6)."""
    import torch._dynamo

    return "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"


def _compile_errors() -> tuple[type[BaseException], ...]:
    """Failures of compilation (not of the model), after which the eager forward is used."""
    import torch._dynamo.exc as dynamo_errors

    errors: list[type[BaseException]] = [dynamo_errors.TorchDynamoException]
    try:
        from torch._inductor.exc import InductorError

        errors.append(InductorError)
    except ImportError:  # pragma: no cover - older torch
        pass
    return tuple(errors)


def _reason(error: BaseException) -> str:
    """One line naming the root cause of a compilation failure (dynamo wraps the backend's)."""
    root = error
    while (inner := getattr(root, "inner_exception", None) or root.__cause__) is not None:
        root = inner
    lines = [line for line in str(root).splitlines() if line.strip()]
    return f"{type(root).__name__}: {lines[0].strip()}" if lines else type(root).__name__


class _DynamicKV:
    """transformers' DynamicCache: one row between blocks, widened on demand."""

    def __init__(self, loaded: LoadedModel) -> None:
        from transformers import DynamicCache

        self.loaded = loaded
        self.cache = DynamicCache(config=loaded.model.config)

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def rows(self) -> int:
        return int(self.cache.layers[0].keys.shape[0]) if self.length > 0 else 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[0] > 1 and self.rows() == 1:
            self.cache.batch_repeat_interleave(tokens.shape[0])
        return _logits(self.loaded.model, tokens, self.cache)

    def select(self, rows: Sequence[int]) -> None:
        if self.length > 0:
            self.cache.batch_select_indices(torch.tensor(list(rows), device=self.loaded.device))

    def commit(self, row: int, keep: int) -> None:
        if self.rows() > 1:
            self.cache.batch_select_indices(torch.tensor([row], device=self.loaded.device))
        excess = self.length - keep
        if excess > 0:
            self.cache.crop(-excess)


class _StaticKV:
    """A pooled StaticCache of ``rows x capacity`` with a compiled forward (module docstring)."""

    def __init__(self, loaded: LoadedModel, rows: int, capacity: int, role: str) -> None:
        from transformers import StaticCache

        limit = getattr(loaded.model.config, "max_position_embeddings", None)
        if limit is not None and capacity > int(limit):
            raise ValueError(f"the static cache would need {capacity} positions; the model has {limit}")
        pool = loaded.runtime.setdefault("static_caches", {})
        if (role, rows) not in pool or pool[(role, rows)].layers[0].max_cache_len < capacity:
            rounded = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
            rounded = min(rounded, int(limit)) if limit is not None else rounded
            pool[(role, rows)] = StaticCache(config=loaded.model.config, max_cache_len=rounded)
        self.cache = pool[(role, rows)]
        self.loaded, self.rows_held = loaded, rows
        self.capacity = int(self.cache.layers[0].max_cache_len)
        self.layers = self.cache.layers
        if not all(isinstance(getattr(layer, "cumulative_length", None), torch.Tensor) for layer in self.layers):
            import transformers

            raise RuntimeError(
                f"compile=True needs a transformers StaticCache with a position counter per layer "
                f"(a tensor cumulative_length, transformers >= 5.13); installed transformers {transformers.__version__}"
            )
        self.length = 0
        if not self.cache.is_initialized:
            # Allocate the cache eagerly (never inside a compiled graph), then start empty.
            _logits(loaded.model, torch.zeros((rows, 1), dtype=torch.long, device=loaded.device), self.cache)
            for layer in self.layers:
                # The cache's tensors keep their addresses (CUDA graphs rely on it); an
                # unguarded mark lets caches of equal shape share one compiled graph.
                for tensor in (layer.keys, layer.values, layer.cumulative_length):
                    torch._dynamo.mark_static_address(tensor, guard=False)
        self.set_length(0)
        backend = compile_backend()
        failure = loaded.runtime.get("compile_error", {}).get(backend)
        self.error: str | None = failure
        self.step = None if failure else _compiled(backend, loaded.device.type == "cuda")
        self.backend = backend

    def rows(self) -> int:
        return self.rows_held

    def set_length(self, length: int) -> None:
        """Move every layer's write position to ``length``."""
        for layer in self.layers:
            layer.cumulative_length.fill_(length)
        self.length = length

    def forward(self, tokens: torch.Tensor, compiled: bool = True) -> torch.Tensor:
        rows, width = tokens.shape
        if rows != self.rows_held:
            tokens = tokens.expand(self.rows_held, -1) if rows == 1 else tokens
        if tokens.shape[0] != self.rows_held:
            raise ValueError(f"tokens: this state holds {self.rows_held} rows, got {rows}")
        if self.length + width > self.capacity:
            raise ValueError(f"tokens: {self.length} cached + {width} new exceed the static cache's {self.capacity}")
        if self.step is None or not compiled:
            logits = _logits(self.loaded.model, tokens, self.cache)
        else:
            logits = self._compiled_forward(tokens)
        self.length += width
        return logits

    def _compiled_forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cuda = tokens.device.type == "cuda"
        try:
            with torch._dynamo.config.patch({_limit_name(): RECOMPILE_LIMIT}):
                if cuda:
                    torch.compiler.cudagraph_mark_step_begin()
                logits = self.step(self.loaded.model, tokens.contiguous(), self.cache)
            # CUDA graphs reuse their output buffers at the next replay.
            return logits.clone() if cuda else logits
        except _compile_errors() as error:
            reason = _reason(error)
            self.loaded.runtime.setdefault("compile_error", {})[self.backend] = reason
            self.error, self.step = reason, None
            warnings.warn(
                f"torch.compile ({self.backend}) failed, decoding continues eagerly on the static cache: {reason}",
                RuntimeWarning,
                stacklevel=4,
            )
            self.set_length(self.length)
            return _logits(self.loaded.model, tokens, self.cache)

    def commit(self, row: int, keep: int, shared: int) -> None:
        """Rows agree on ``[0, shared)``; copy row ``row``'s ``[shared, keep)`` into every row."""
        if self.rows_held > 1 and keep > shared:
            for layer in self.layers:
                for tensor in (layer.keys, layer.values):
                    tensor[:, :, shared:keep] = tensor[row : row + 1, :, shared:keep]
        self.set_length(keep)


class ModelState:
    """A model's KV cache over the committed tokens, except the ``pending`` ones not fed yet.

    Parameters
    ----------
    loaded : LoadedModel
        The model.
    prompt : sequence of int
        At least one token; all but the last are fed at once (prefill), the last is pending.
    rows : int
        Rows of the static cache (the K of the drafts fed together); the dynamic cache widens
        itself to whatever a forward brings.
    compile : bool
        Static cache and compiled forward (module docstring) instead of the dynamic cache.
    capacity : int, optional
        Tokens the static cache must hold (prompt, new tokens, one block's look-ahead);
        default: the prompt plus 256.
    role : str
        Which pooled static cache to use; two states alive at once need different roles.
    """

    @torch.inference_mode()
    def __init__(
        self,
        loaded: LoadedModel,
        prompt: Sequence[int],
        *,
        rows: int = 1,
        compile: bool = False,
        capacity: int | None = None,
        role: str = "main",
    ) -> None:
        if len(prompt) == 0:
            raise ValueError("prompt: needs at least one token")
        self.loaded = loaded
        if compile:
            self.kv: _DynamicKV | _StaticKV = _StaticKV(loaded, rows, capacity or len(prompt) + 256, role)
        else:
            self.kv = _DynamicKV(loaded)
        self.pending: list[int] = [int(t) for t in prompt]
        if len(self.pending) > 1:
            self.prefill(self.pending[:-1])
            self.pending = self.pending[-1:]

    @property
    def compiled(self) -> bool:
        """Whether forwards run compiled (False: eager, or compilation failed)."""
        return isinstance(self.kv, _StaticKV) and self.kv.step is not None

    @property
    def compile_error(self) -> str | None:
        """Why compilation failed, when it was asked for and did."""
        return self.kv.error if isinstance(self.kv, _StaticKV) else None

    @property
    def length(self) -> int:
        """Number of tokens in the cache."""
        return self.kv.length

    @torch.inference_mode()
    def prefill(self, tokens: Sequence[int]) -> None:
        """Feed ``tokens`` (eagerly: one call of a length no other call has)."""
        ids = torch.tensor([list(tokens)], device=self.loaded.device)
        if isinstance(self.kv, _StaticKV):
            self.kv.forward(ids, compiled=False)
        else:
            self.kv.forward(ids)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed ``tokens [B, T]`` after the cache; logits ``[B, T, V]``."""
        return self.kv.forward(tokens)

    @torch.inference_mode()
    def select_rows(self, rows: Sequence[int]) -> None:
        """Make the cache rows ``rows`` (indices of the present rows, repeats allowed) the new
        rows, in order: how a tree's depth-d nodes take their parents' caches (per-branch cache
        rows, :mod:`multidraft.decoding.tree_drafting`). The dynamic cache only."""
        if isinstance(self.kv, _StaticKV):
            raise ValueError("compile: tree shapes draft on the dynamic cache; the static cache holds a fixed number of rows")
        self.kv.select(rows)

    def pending_rows(self, rows: int) -> torch.Tensor:
        """The pending tokens as ``[rows, P]``."""
        return torch.tensor([self.pending], device=self.loaded.device).expand(rows, -1)

    @torch.inference_mode()
    def commit(self, row: int, keep: int, pending: Sequence[int], shared: int | None = None) -> None:
        """Keep cache row ``row``, cut to its first ``keep`` tokens; set the pending tokens.

        ``shared``: the length up to which all rows are known to agree (the cache length before
        the block); only the static cache uses it, to copy no more than the block's entries.
        """
        if isinstance(self.kv, _StaticKV):
            self.kv.commit(row, keep, 0 if shared is None else min(shared, keep))
        else:
            self.kv.commit(row, keep)
        self.pending = [int(t) for t in pending]

    @torch.inference_mode()
    def warm_up(self, widths: Sequence[int]) -> None:
        """Run (and so compile) one forward of each width ``[rows, T]``, then restore the state;
        a no-op for the dynamic cache, which compiles nothing."""
        if not isinstance(self.kv, _StaticKV):
            return
        length = self.kv.length
        for width in widths:
            self.kv.forward(torch.zeros((self.kv.rows_held, width), dtype=torch.long, device=self.loaded.device))
            self.kv.set_length(length)
