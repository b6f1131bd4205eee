"""A measurement split over the processes ``torchrun`` starts.

``torchrun --nproc_per_node N -m multidraft measure ...`` starts N processes with ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK`` set. Process r runs the prompts ``r, r + N, r + 2N, ...``
(:func:`shard_indices`) on its own device (``cuda:LOCAL_RANK`` on CUDA, the CPU otherwise),
the per-prompt tallies are gathered (``gloo`` on CPU, ``NCCL`` on CUDA), and rank 0 joins them
in prompt order (:func:`~multidraft.decoding.measurement.merge_shards`) into one
:class:`~multidraft.decoding.Results`. Seeds are per prompt
(:func:`~multidraft.decoding.config.prompt_seeds`), so the merged records equal those of one
process block for block; only the times differ, and they are summed over the processes (the
tokens per second are per process, not of the whole job).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from multidraft.decoding.config import MeasureConfig
from multidraft.decoding.drafting import DraftSpec
from multidraft.decoding.measurement import measure_shard, merge_shards
from multidraft.decoding.models import LoadedModel, resolve_device
from multidraft.decoding.results import Results

__all__ = ["world_size", "shard_indices", "check_world", "rank_device", "run_sharded"]


def world_size() -> int:
    """Processes of this job: ``WORLD_SIZE`` as torchrun sets it, 1 without torchrun."""
    value = os.environ.get("WORLD_SIZE", "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"WORLD_SIZE: expected a positive integer, got {value!r}")
    return int(value)


def shard_indices(prompts: int, rank: int, size: int) -> range:
    """The prompt indices process ``rank`` of ``size`` runs: ``rank, rank + size, ...``.

    >>> [list(shard_indices(5, rank, 2)) for rank in range(2)]
    [[0, 2, 4], [1, 3]]
    """
    return range(rank, prompts, size)


def check_world(prompts: int, size: int) -> None:
    """Refuse more processes than prompts (a process would have nothing to run).

    Raises
    ------
    ValueError
        ``size > prompts``, naming both.
    """
    if size > prompts:
        raise ValueError(
            f"torchrun: {size} processes for {prompts} prompts; start at most {prompts} (--nproc_per_node) or give more prompts"
        )


def rank_device(device: str) -> str:
    """This process's device: under torchrun a CUDA device without an index becomes
    ``cuda:LOCAL_RANK`` (one GPU per process); anything else is left as given."""
    if world_size() == 1 or resolve_device(device).type != "cuda" or ":" in device:
        return device
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"


def run_sharded(
    config: MeasureConfig,
    target: LoadedModel,
    specs: Sequence[DraftSpec],
    *,
    keep_distributions: bool = False,
    progress: bool = True,
) -> Results | None:
    """:func:`~multidraft.decoding.run_measurement` over the processes of a torchrun job: each
    runs its :func:`shard_indices`, all gather, and rank 0 returns the merged
    :class:`~multidraft.decoding.Results` (the other ranks None). Initialises the default
    process group (``nccl`` when the target is on CUDA, else ``gloo``) from torchrun's
    environment and destroys it afterwards.

    Raises
    ------
    ValueError
        More processes than prompts (:func:`check_world`).
    """
    import torch.distributed as dist

    size = world_size()
    check_world(len(config.prompts), size)
    cuda = target.device.type == "cuda"
    if cuda:
        torch.cuda.set_device(target.device)
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    try:
        rank = dist.get_rank()
        indices = shard_indices(len(config.prompts), rank, size)
        shard = measure_shard(
            config, target, specs, indices, keep_distributions=keep_distributions, progress=progress, label=f" [rank {rank}/{size}]"
        )
        shards: list = [None] * size
        dist.all_gather_object(shards, shard)
    finally:
        dist.destroy_process_group()
    return merge_shards(config, target, specs, shards) if rank == 0 else None
