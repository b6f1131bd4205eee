"""CPU threads for the batched torch paths: never the slow choice on a shared machine.

torch's default, one thread per core, makes every parallel region wait for its slowest thread;
where other processes hold the cores, that thread is descheduled and the region takes many
times longer. Every batched entry point (schemes' ``select_batch``, tree verifiers'
``verify_batch``) and the decoding runs therefore use the idle cores only. torch is imported
when a function runs, so importing this module (and the schemes) stays light.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["default_threads", "cpu_threads", "on_idle_cores"]


def default_threads() -> int:
    """CPU threads for torch that are never the slow choice on a shared machine.

    torch's default, one thread per core, makes every parallel region wait for its slowest
    core: where other processes hold cores, a decode step of a small model takes many times
    longer (``multidraft measure`` on a busy 2-core machine: 5 min 33 s against 40 s with one
    thread, the same numbers). So the default is the cores this process may run on (its CPU
    affinity) minus the busy ones (the 1-minute load average, rounded), at least 1 and at
    most torch's own default: one thread on a busy machine, every idle core on an idle one.
    """
    import torch

    default = torch.get_num_threads()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    busy = int(os.getloadavg()[0] + 0.5) if hasattr(os, "getloadavg") else 0
    return max(1, min(default, usable - busy))


@contextmanager
def cpu_threads(count: int | None = None) -> Iterator[int]:
    """Within the block torch uses ``count`` CPU threads (default :func:`default_threads`);
    the previous setting is restored afterwards. Yields the count."""
    if count is None:
        count = default_threads()
    elif isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"threads: must be an integer >= 1, got {count!r}")
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(before)


Method = TypeVar("Method", bound=Callable)


def on_idle_cores(method: Method) -> Method:
    """Run a batched torch entry point (``select_batch``, ``verify_batch``) on
    :func:`default_threads` CPU threads, restored afterwards: where other processes hold the
    cores, torch's one-thread-per-core default makes every parallel region wait for a descheduled
    thread (SpecTr's ``select_batch`` at B = 256, n = 49152: seconds instead of tens of
    milliseconds; ``benchmarks/bench_threads.py``). Never more threads than torch's setting;
    nested entry points keep the outer choice."""

    @functools.wraps(method)
    def on_idle(*args, **kwargs):
        with cpu_threads():
            return method(*args, **kwargs)

    return on_idle  # type: ignore[return-value]
