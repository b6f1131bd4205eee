"""Shared test configuration: hypothesis profiles, and the fixtures the decoding tests share.

Profiles: ``ci`` (the default under CI=true: derandomised, so a run is reproducible) and
``dev`` (more examples locally). Select with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _torch_devices() -> list[str]:
    """The torch devices present: CPU always, CUDA when torch reports one."""
    try:
        import torch
    except ImportError:
        return ["cpu"]
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module", params=_torch_devices())
def device(request):
    """Each torch device present (a GPU run of the suite exercises the CUDA paths)."""
    import torch

    return torch.device(request.param)


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for tiny models: on a busy 2-core machine OpenMP with 2 threads is many
    times slower, and the other core stays with the other tests."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
