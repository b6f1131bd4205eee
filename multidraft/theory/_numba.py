"""Compiling a module's kernels with numba so that the disk cache works.

numba caches a compiled function only if every function it calls is a *module global*: a kernel
that calls another through a closure variable (``def build(jit): @jit def f ...; @jit def g: f()``)
is compiled afresh in every process and adds a new cache entry each time (seconds per process
for the larger passes). So the kernels are plain module-level functions, compiled in place on
first use by :func:`compile_in_place`; numba is imported only then.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping, Sequence

__all__ = ["compile_in_place"]

_LOCK = threading.Lock()


def compile_in_place(
    namespace: MutableMapping[str, object], names: Sequence[str], fastmath: frozenset[str] = frozenset(),
    inline: frozenset[str] = frozenset(),
) -> None:
    """Replace the functions ``names`` of a module's ``namespace`` (its ``globals()``) by their
    numba-compiled versions (``cache=True, nogil=True``); names already compiled are kept.
    Compilation itself happens at each kernel's first call, by which time every callee it names
    is compiled. ``fastmath``: LLVM flags for reductions that may be reordered (``{"reassoc"}``
    lets a sum be vectorised; the result then differs from the sequential sum by rounding).
    ``inline``: names compiled with ``inline="always"``, whose body numba copies into every
    kernel that calls them (the same operations, so the same bits), where a call passing arrays
    costs more than a short body (the front/back pass: 13% of it at K = 2). Threads may call it at
    once (fits in threads): one wraps each kernel, under a lock, and the others keep its
    dispatcher."""
    global _COMPILED_TYPE
    if _COMPILED_TYPE is not None and all(type(namespace[name]) is _COMPILED_TYPE for name in names):
        return  # the usual case (a wor fit calls this ~30 times): no imports, no ABC isinstance (~8 µs a call)
    import numba
    from numba.core.dispatcher import Dispatcher

    pending = [name for name in names if not isinstance(namespace[name], Dispatcher)]
    if pending:  # building the decorator costs ~30 µs per call
        options = dict(cache=True, nogil=True, fastmath=set(fastmath) or False)
        jit = numba.njit(**options)
        inlined = numba.njit(**options, inline="always") if set(inline) & set(pending) else None
        with _LOCK:  # threads fitting at once: one wraps, the others see its dispatcher (jit of one raises)
            for name in pending:
                if not isinstance(namespace[name], Dispatcher):
                    namespace[name] = (inlined if name in inline else jit)(namespace[name])
    if names:
        _COMPILED_TYPE = type(namespace[names[0]])


#: The class of numba's compiled functions (``CPUDispatcher``) once one is made or seen: a name
#: bound to an instance of exactly it is compiled already (the fast check of
#: :func:`compile_in_place`; anything else takes the full check).
_COMPILED_TYPE = None
