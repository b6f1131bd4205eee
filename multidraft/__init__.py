"""multidraft: exact theory, LPs, schemes and real-model measurements for multi-draft
speculative sampling (Khisti et al., ICLR 2025; SpecTr; SpecInfer; Hu et al. 2025).

Subpackages, in import order (each imports only those before it):
``theory`` (numpy only) ← ``lp`` (cvxpy, pycddlib, sympy) ← ``schemes`` ← ``decoding``
(torch, transformers) ← ``report`` ← ``cli``. Importing ``multidraft`` loads nothing heavy.
"""

__version__ = "0.1.0"
__all__ = ["__version__", "ProblemTooLargeError", "retain_freed_memory"]


def __getattr__(name: str) -> object:
    """``multidraft.ProblemTooLargeError`` and ``multidraft.retain_freed_memory`` (glibc's
    thresholds fixed for the process: :mod:`multidraft._allocator`), imported on first use so
    ``import multidraft`` stays light."""
    if name == "ProblemTooLargeError":
        from multidraft.theory.laws import ProblemTooLargeError

        return ProblemTooLargeError
    if name == "retain_freed_memory":
        from multidraft._allocator import retain_freed_memory

        return retain_freed_memory
    raise AttributeError(f"module 'multidraft' has no attribute {name!r}")
