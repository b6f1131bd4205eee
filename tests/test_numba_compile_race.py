"""compile_in_place from threads that fit at once (tests/test_optimal_batch.py's threaded fits
failed 1 run in 3 on a cold numba cache: "A jit decorator was called on an already jitted
function"). One thread is held after it has found a kernel uncompiled until another has
compiled it; it must then keep that dispatcher. The unlocked loop (the twin) raises there."""

from __future__ import annotations

import threading

import numba
import pytest

from multidraft.theory import _numba


def _kernel(x):
    return x + 1


def _race(monkeypatch, compile_in_place):
    """Thread A finds ``_kernel`` uncompiled, then waits (inside ``numba.njit``) until thread B
    has compiled it; returns A's exception (or None) and the namespace."""
    namespace = {"_kernel": _kernel}
    b_done = threading.Event()
    njit = numba.njit

    def held(*args, **kwargs):
        if threading.current_thread().name == "A":
            assert b_done.wait(30)
        return njit(*args, **kwargs)

    monkeypatch.setattr(numba, "njit", held)
    errors = {}

    def run(name):
        try:
            compile_in_place(namespace, ["_kernel"])
        except Exception as error:  # noqa: BLE001 - reported to the test
            errors[name] = error
        if name == "B":
            b_done.set()

    a = threading.Thread(target=run, args=("A",), name="A")
    a.start()
    b = threading.Thread(target=run, args=("B",), name="B")
    b.start()
    a.join(60)
    b.join(60)
    return errors, namespace


def _unlocked(namespace, names):
    """The twin: the loop without the lock and the second look."""
    from numba.core.dispatcher import Dispatcher

    pending = [name for name in names if not isinstance(namespace[name], Dispatcher)]
    jit = numba.njit(cache=False, nogil=True)
    for name in pending:
        namespace[name] = jit(namespace[name])


def test_a_thread_that_finds_a_kernel_compiled_meanwhile_keeps_it(monkeypatch):
    errors, namespace = _race(monkeypatch, _numba.compile_in_place)
    assert errors == {}
    assert namespace["_kernel"](1) == 2


def test_the_unlocked_loop_is_caught(monkeypatch):
    errors, _ = _race(monkeypatch, _unlocked)
    assert set(errors) == {"A"}
    with pytest.raises(TypeError, match="already jitted"):
        raise errors["A"]
