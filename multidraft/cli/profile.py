"""``multidraft profile``: measured latency of forward passes, the input of the throughput model.

::

    multidraft profile                         # the bundled SmolLM2, batch 1,2,4 x tokens 1,2,5,9
    multidraft profile --model default --layers 8 --batch-sizes 1,2,4 --token-counts 1,2 --json

Prints the median milliseconds per call for each batch size (rows) and number of new tokens
(columns) on a KV cache of ``--context`` tokens; ``--layers N`` profiles the early-exit draft
made of the first N layers. A grid whose largest point would need more memory than the device
has available is refused once the model is loaded, before anything is allocated for it.
"""

from __future__ import annotations

import argparse
import json

from multidraft.cli._lists import comma_list

_integers = comma_list(int, "comma-separated integers")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``profile`` sub-command."""
    parser = subparsers.add_parser(
        "profile",
        help="measure decode and verify latency of a model on this device",
        description="Median latency of one forward pass over b sequences of m new tokens on a KV "
        "cache (warm-up excluded, device synchronised before reading clocks).",
    )
    parser.add_argument("--model", default="default", help="model spec for load_model (default: bundled SmolLM2)")
    parser.add_argument("--layers", type=int, default=None, help="profile the early-exit draft of the first N layers")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, mps, ...")
    parser.add_argument("--batch-sizes", type=_integers, default=[1, 2, 4], help="comma-separated, increasing")
    parser.add_argument("--token-counts", type=_integers, default=[1, 2, 5, 9], help="comma-separated, increasing")
    parser.add_argument("--context", type=int, default=64, help="tokens in the KV cache before each call")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per grid point (median kept)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls per grid point")
    parser.add_argument("--compile", action="store_true", help="time the compiled forward on a static KV cache")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random token ids (default 0)")
    parser.add_argument(
        "--threads", type=int, default=None,
        help="torch CPU threads (default: the idle cores, at least 1, as for measure)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check every value, load the model, profile it and print the latency table."""
    import torch

    from multidraft.decoding.models import default_threads, early_exit, load_model, resolve_device
    from multidraft.decoding.profiling import LatencyGrid, profile_latency

    grid = LatencyGrid(args.batch_sizes, args.token_counts, args.context, args.repeats, args.warmup, args.compile)
    if args.layers is not None and args.layers < 1:
        raise ValueError(f"layers: must be >= 1, got {args.layers}")
    if args.seed < 0:
        raise ValueError(f"seed: must be >= 0, got {args.seed}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"threads: must be >= 1, got {args.threads}")
    resolve_device(args.device)
    torch.set_num_threads(args.threads or default_threads())
    loaded = load_model(args.model, device=args.device)
    if args.layers is not None:
        loaded = early_exit(loaded, args.layers)
    profile = profile_latency(
        loaded,
        batch_sizes=grid.batch_sizes,
        token_counts=grid.token_counts,
        context=grid.context,
        repeats=grid.repeats,
        warmup=grid.warmup,
        seed=args.seed,
        compile=grid.compile,
    )
    print(json.dumps(profile.to_dict()) if args.json else profile.table())
    return 0
