"""``multidraft measure``: empirical multi-draft acceptance on a real model, beside the theory.

The bundled SmolLM2-135M-Instruct drafting for itself at temperature 1.5 (target at 1.0)::

    multidraft measure --k 2 --length 4 --draft-temperature 1.5 --max-new-tokens 32 --json

A separate draft model sharing the tokenizer, or an early exit of the target::

    multidraft measure --target ID --draft ID
    multidraft measure --model default --early-exit 12

Tree verifiers (``--verifier``, default ``token``: the token walk with ``--scheme``), each
driving its own run on the same prompts and seeds, every one scored on every block by its exact
expected accepted length given the drafted tree::

    multidraft measure --k 2 --length 4 --verifier token traversal selective token:optimal

``--score NAME ...`` adds verifiers that are scored on every block without driving a run of
their own (one run ranks them all on the same trees)::

    multidraft measure --k 4 --length 4 --verifier token --score traversal selective token:optimal

Prompts from a file (JSON lines with a ``"prompt"`` field and an optional ``"task"``, or one
prompt a line), the bundled set of 30 tagged prompts, or a ``datasets`` dataset; tagged prompts
add a per-task table::

    multidraft measure --prompts bundled --max-new-tokens 16
    multidraft measure --dataset tatsu-lab/alpaca:train:instruction --max-prompts 200

On several processes (one GPU each, or CPU processes over gloo), the prompts are split over the
ranks and rank 0 prints one merged result, equal to one process's (seeds are per prompt);
a target larger than one device is spread by accelerate with ``--device-map auto``::

    torchrun --nproc_per_node 8 -m multidraft measure --prompts bundled --json
    multidraft measure --target meta-llama/Llama-3.1-70B-Instruct --device-map auto

Tree shapes (issue 31, item 1): ``--tree 2,2,1`` drafts an expansion schedule (children per
node at each depth: 2 at the root, 2 below each, then 1), ``--tree-budget N`` an EAGLE-2-style
dynamic tree of N nodes (each node's ``--k`` most likely tokens are candidates, depth at most
``--length``); each node drafts iid by default, ``--without-replacement`` or ``--top-k`` choose
the per-node law (dynamic trees are top-k). A verifier that is not lossless on that law is
refused in one line naming those that are. One draft sampling drafts every node::

    multidraft measure --tree 2,2,1 --verifier token traversal --score selective token:optimal
    multidraft measure --tree-budget 8 --k 2 --length 4 --verifier token --score selective

With two or more verifiers the text opens, and the JSON opens (``gain``), with the paired gain
of each over the first on the same trees, in tokens per target call and in percent of the
first's block efficiency, each with its 95% interval; blocks whose difference is within rounding
(:data:`multidraft.decoding.results.TIE`) are ties, not ranked. A run whose draft is the target
with the target's sampling says so in one line first (degenerate: every lossless verifier
accepts a whole path).

Every value is checked before a model loads. ``--without-replacement`` without ``--scheme``
runs ``rrs-wor`` (specinfer's counterpart for such drafts) and says so; a scheme that does not fit
the drafts is refused with the name of one that does. A ``--length`` beyond ``--max-new-tokens``
is cut to it, with a note (drafting 1000-token blocks to keep 2 tokens is all waste). The text
summary leaves out rows without data (no token-level lines when the first verifier is not the
token walk, no baseline columns with ``--no-baseline``, no paired section for one verifier).
The same run times plain autoregressive sampling of the prompts and prints the speed-up beside
tokens/s (``--no-baseline`` skips it);
``--compile`` runs static KV caches with compiled forwards (CUDA graphs on CUDA).

A progress bar goes to stderr when it is a terminal; ``--json`` prints one JSON object on stdout with
``empirical_acceptance``, ``expected_acceptance``, ``optimal_acceptance``, ``ci95`` (95%
interval of empirical - expected, model-based variance), ``positions``, ``block_efficiency``,
``tokens_per_second``, ``autoregressive_tokens_per_second``, ``speedup``, ``verifiers`` (per
verifier: realised and expected block efficiency, the 95% interval of realised − expected
accepted length, tokens/s, the verifier's time), ``paired`` (every verifier's expected accepted
length minus the first's, block by block, with its interval) and the rest of
:meth:`multidraft.decoding.Results.summary`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

#: The token verifier's scheme without ``--scheme``, and with ``--without-replacement``
#: (SpecInfer's recursive rejection sampling for drafts drawn without replacement).
DEFAULT_SCHEME = "specinfer"
DEFAULT_WOR_SCHEME = "rrs-wor"
#: accelerate's named device maps (``--device-map``).
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``measure`` sub-command."""
    parser = subparsers.add_parser(
        "measure",
        help="empirical vs theoretical acceptance of multi-draft speculative sampling on a real model",
        description="Run multi-draft speculative sampling with a registered scheme and, at every "
        "verified position, put the scheme's exact acceptance and the optimal acceptance for the "
        "same distributions beside the empirical outcome.",
    )
    models = parser.add_mutually_exclusive_group()
    models.add_argument(
        "--model", default=None, help="target model: 'default' (bundled SmolLM2-135M-Instruct), a directory, a .gguf file or a hub id"
    )
    models.add_argument("--target", default=None, help="target model (same forms as --model)")
    drafts = parser.add_mutually_exclusive_group()
    drafts.add_argument("--draft", default=None, help="draft model sharing the target's tokenizer (default: the target itself)")
    drafts.add_argument("--early-exit", type=int, default=None, metavar="L", help="draft with the target's first L layers")
    parser.add_argument("--k", type=int, default=2, help="number of drafts K (default 2)")
    parser.add_argument(
        "--length", type=int, default=4,
        help="tokens per draft L (default 4; more than --max-new-tokens is cut to it, with a note)",
    )  # fmt: skip
    parser.add_argument(
        "--draft-temperature", type=float, nargs="+", default=[1.5], metavar="T",
        help="one temperature for all drafts or K temperatures (default 1.5)",
    )  # fmt: skip
    parser.add_argument("--draft-top-p", type=float, nargs="+", default=[1.0], metavar="P", help="draft top-p (one or K values)")
    parser.add_argument("--target-temperature", type=float, default=1.0, help="target temperature (default 1.0)")
    parser.add_argument("--target-top-p", type=float, default=1.0, help="target top-p (default 1.0)")
    parser.add_argument(
        "--scheme", default=None,
        help=f"token-level scheme of the token verifier (default {DEFAULT_SCHEME}, or {DEFAULT_WOR_SCHEME} with "
        "--without-replacement, which specinfer does not apply to)",
    )  # fmt: skip
    parser.add_argument(
        "--verifier", nargs="+", default=["token"], metavar="NAME",
        help="tree verifiers, each driving its own run on the same prompts and seeds and all scored on every "
        "block: token (the token walk with --scheme), token:SCHEME, block (K = 1), traversal, selective "
        "(default token)",
    )  # fmt: skip
    parser.add_argument(
        "--score", nargs="+", default=[], metavar="NAME",
        help="further tree verifiers scored on every block (paired with the first --verifier) without driving a run",
    )  # fmt: skip
    parser.add_argument(
        "--without-replacement", action="store_true",
        help="draw the first K draft tokens without replacement (with --tree: every node drafts without replacement)",
    )  # fmt: skip
    trees = parser.add_mutually_exclusive_group()
    trees.add_argument(
        "--tree", default=None, metavar="K1,K2,...",
        help="draft a tree by an expansion schedule: children per node at each depth, e.g. 2,2,1 (replaces --k and --length)",
    )  # fmt: skip
    trees.add_argument(
        "--tree-budget", type=int, default=None, metavar="N",
        help="draft an EAGLE-2-style dynamic tree of N nodes: every node's --k most likely tokens are candidates, "
        "the N of largest draft path probability are kept, depth at most --length (top-k law)",
    )  # fmt: skip
    parser.add_argument("--top-k", action="store_true", help="with --tree: each node drafts its most likely tokens (the greedy law)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="new tokens per prompt (default 32)")
    sources = parser.add_mutually_exclusive_group()
    sources.add_argument("--prompt", action="append", default=None, help="a prompt (repeatable; default: four built-in prompts)")
    sources.add_argument(
        "--prompts", default=None, metavar="FILE",
        help="prompts from a file: JSON lines with a \"prompt\" field and an optional \"task\" (.jsonl, .json), else one "
        "prompt a line; 'bundled' for the 30 bundled prompts tagged chat, code, math, translation, summarisation",
    )  # fmt: skip
    sources.add_argument(
        "--dataset", default=None, metavar="NAME[:SPLIT[:FIELD]]",
        help="prompts from a datasets dataset (hub id or save_to_disk directory; split default train, field default "
        "the first of prompt, text, instruction, question); needs the datasets extra",
    )  # fmt: skip
    parser.add_argument("--max-prompts", type=int, default=None, metavar="N", help="only the first N prompts of --prompts or --dataset")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, ...")
    parser.add_argument(
        "--device-map", default=None, choices=DEVICE_MAPS,
        help="place the target and draft with accelerate across every GPU (then the CPU): for models larger than one "
        "device; replaces --device, one process (not under torchrun)",
    )  # fmt: skip
    parser.add_argument("--compile", action="store_true", help="static KV cache and torch.compile (CUDA graphs on CUDA)")
    parser.add_argument("--no-baseline", action="store_true", help="do not time autoregressive decoding (no speed-up)")
    parser.add_argument(
        "--threads", type=int, default=None,
        help="torch CPU threads (default: the idle cores -- the cores this process may use minus the "
        "1-minute load average, at least 1 -- since torch's one-per-core runs many times slower on a busy CPU)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check every value, load the models, measure, print the summary."""
    import torch

    from multidraft.decoding import DraftSpec, MeasureConfig, early_exit, load_model, run_measurement
    from multidraft.decoding.generation import check_specs
    from multidraft.decoding.models import default_threads
    from multidraft.decoding.prompts import resolve_prompts
    from multidraft.decoding.sharding import check_world, rank_device, run_sharded, world_size

    if args.threads is not None and args.threads < 1:
        raise ValueError(f"threads: must be >= 1, got {args.threads}")
    if args.early_exit is not None and args.early_exit < 1:
        raise ValueError(f"early-exit: must be >= 1 layers, got {args.early_exit}")
    if args.max_prompts is not None and args.prompts is None and args.dataset is None:
        raise ValueError("max-prompts: applies to --prompts or --dataset only")
    processes = world_size()
    if args.device_map is not None and (args.device != "auto" or processes > 1):
        raise ValueError(
            "device-map: places one model over every device, so it takes neither --device nor torchrun's several processes"
        )
    found = resolve_prompts(args.prompts, args.dataset)
    prompts = args.prompt if found is None else found.head(args.max_prompts)
    notes = []
    shape = _shape(args)
    scheme = args.scheme
    if scheme is None:
        scheme = DEFAULT_WOR_SCHEME if args.without_replacement else DEFAULT_SCHEME
        if args.without_replacement:
            notes.append(
                f"scheme {scheme} (the default {DEFAULT_SCHEME} does not apply to drafts without replacement; "
                f"{scheme} is its counterpart for them)"
            )
    length = args.length
    if shape is None and 1 <= args.max_new_tokens < length:  # a block of L drafts emits up to L + 1 tokens: more is waste
        length = args.max_new_tokens
        notes.append(f"length {length}: --length {args.length} exceeds --max-new-tokens {length}; drafts are cut to {length} tokens")
    config = MeasureConfig(
        k=args.k,
        length=length,
        scheme=scheme,
        prompts=prompts,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        target_sampling=_sampling(args.target_temperature, args.target_top_p, "target"),
        draft_sampling=_draft_samplings(args.draft_temperature, args.draft_top_p, 1 if shape is not None else args.k),
        without_replacement=args.without_replacement and shape is None,
        shape=shape,
        device=rank_device(args.device),
        compile=args.compile,
        baseline=not args.no_baseline,
        verifiers=args.verifier,
        scored=args.score,
    )
    check_world(len(config.prompts), processes)
    torch.set_num_threads(args.threads or default_threads())
    target = load_model(args.target or args.model or "default", device=config.device, device_map=args.device_map)
    if args.early_exit is not None:
        draft = early_exit(target, args.early_exit)
    elif args.draft is not None:
        draft = load_model(args.draft, device=config.device, device_map=args.device_map)
    else:
        draft = None
    specs = [DraftSpec(draft, sampling) for sampling in config.draft_sampling]
    check_specs(target, specs, config.without_replacement)
    first = os.environ.get("RANK", "0") == "0"  # under torchrun only rank 0 prints
    if not args.json and first:  # before the run, so that a changed setting is seen at once
        for note in notes:
            print(f"note: {note}", flush=True)
    if processes > 1:
        results = run_sharded(config, target, specs, progress=True)
        if results is None:
            return 0
    else:
        results = run_measurement(config, target, specs, progress=True)
    if args.json:
        print(dataclasses.replace(results, notes=(*notes, *results.notes)).to_json())
        return 0
    _print_results(results)
    return 0


def _print_results(results) -> None:
    """The summary; rows without data (no token-level positions when the first verifier is
    not the token walk, no baseline) are left out rather than printed as n/a."""
    from multidraft.decoding.measurement import DEGENERATE

    config = results.config
    token_walk = any(name.startswith("token:") for name in config.verifier_names)
    scheme = f", scheme {config.scheme_name}" if token_walk else ""
    drafts = f"K={config.k}, L={config.length}" if config.shape is None else f"tree {config.shape!r}"
    print(f"target {results.target}, draft {results.draft}{scheme}, {drafts}")
    if DEGENERATE in results.notes:
        print(f"note: {DEGENERATE}")
    _print_gain(results)
    low, high = results.ci95
    if results.positions:
        print(f"positions             {results.positions}")
        print(f"empirical acceptance  {results.empirical_acceptance:.4f}")
    if results.expected_positions:
        print(f"expected acceptance   {results.expected_acceptance:.4f} ({results.expected_positions} positions)")
        print(f"  95% CI emp - exp    [{_signed(low)}, {_signed(high)}] (variance from the expected acceptances)")
    if results.optimal_positions:
        print(f"optimal acceptance    {results.optimal_acceptance:.4f} ({results.optimal_positions} positions)")
    print(f"block efficiency      {results.block_efficiency:.3f} tokens per target call")
    baseline = results.autoregressive_tokens_per_second == results.autoregressive_tokens_per_second
    print(
        f"tokens per second     {results.tokens_per_second:.2f} speculative"
        + (f", {results.autoregressive_tokens_per_second:.2f} autoregressive, speed-up {results.speedup:.2f}x" if baseline else "")
        + f" ({'compiled' if results.compiled else 'eager'}, {results.device})"
    )
    print(
        f"time (s)              drafting {results.seconds_drafting:.2f}, verification "
        f"{results.seconds_verification:.2f}, selection {results.seconds_selection:.2f}, "
        f"theory {results.seconds_theory:.2f}"
        + (f", autoregressive {results.seconds_autoregressive:.2f}" if baseline else "")
        + f", warm-up {results.seconds_warmup:.2f}"
    )
    _print_verifiers(results)
    _print_tasks(results)
    for note in results.notes:
        if note != DEGENERATE:
            print(f"note: {note}")


def _print_gain(results) -> None:
    """First and plainly: every further verifier's paired gain over the first on the same
    trees, in tokens per target call and percent, with 95% intervals; blocks within rounding are
    ties (not ranked)."""
    from multidraft.decoding.results import TIE

    if len(results.paired) < 2:  # one verifier: nothing to pair it with
        return
    reference = results.paired[0]
    print(
        f"paired on the same {reference.blocks} blocks: gain over {reference.verifier} (block efficiency "
        f"{reference.expected_block_efficiency:.3f}) in E[tau | tree], tokens per target call"
    )
    width = max(len(score.verifier) for score in results.paired)
    for score in results.paired[1:]:
        low, high = score.ci95
        plow, phigh = score.percent_ci95
        ties = score.blocks - score.ahead - score.behind
        ranking = (
            f"tied on every block (within {TIE:g} tokens)" if ties == score.blocks
            else f"ahead on {score.ahead}, behind on {score.behind}, tied on {ties} blocks"
        )  # fmt: skip
        print(
            f"  {score.verifier:{width}s}  {_signed(score.difference)} tokens per call ({_percent(score.percent)}), "
            f"95% CI [{_signed(low)}, {_signed(high)}] ([{_percent(plow)}, {_percent(phigh)}]); "
            f"block efficiency {score.expected_block_efficiency:.3f}; {ranking}"
        )


def _print_verifiers(results) -> None:
    """Per verifier that drove a run: realised against expected block efficiency (the paired
    gains come first, :func:`_print_gain`)."""
    print(f"verifiers ({results.verifiers[0].name} drove the lines above; each ran the same prompts and seeds)")
    width = max(len(name) for name in results.config.verifier_names)
    for run in results.verifiers:
        low, high = run.ci95
        print(
            f"  {run.name:{width}s}  {run.blocks} blocks, block efficiency {run.block_efficiency:.3f} realised, "
            f"{run.expected_block_efficiency:.3f} expected; 95% CI tau - E[tau | tree] [{_signed(low)}, {_signed(high)}]; "
            f"{run.tokens_per_second:.2f} tokens/s, verifier {run.seconds_verifier:.2f} s"
        )


def _print_tasks(results) -> None:
    """Per task of tagged prompts: positions, empirical / expected / optimal acceptance and
    block efficiency of the first verifier (nothing for untagged prompts)."""
    tasks = results.by_task()
    if not tasks:
        return
    width = max(len(task.task) for task in tasks)
    print(f"by task ({results.verifiers[0].name})")
    for task in tasks:
        acceptance = (
            f"acceptance {task.empirical_acceptance:.3f} empirical, {task.expected_acceptance:.3f} expected, "
            f"{task.optimal_acceptance:.3f} optimal; " if task.positions else ""
        )
        print(
            f"  {task.task:{width}s}  {task.prompts} prompts, {task.positions} positions, {task.blocks} blocks; {acceptance}"
            f"block efficiency {task.block_efficiency:.3f} realised, {task.expected_block_efficiency:.3f} expected"
        )


def _shape(args: argparse.Namespace):
    """The tree shape of ``--tree`` / ``--tree-budget`` (None: chains), its law from
    ``--without-replacement`` / ``--top-k``; every misuse refused in one line."""
    from multidraft.trees import TreeShape

    if args.top_k and args.without_replacement:
        raise ValueError("top-k: choose one per-node law, --top-k or --without-replacement")
    if args.tree_budget is not None:
        if args.without_replacement:
            raise ValueError("tree-budget: a dynamic tree keeps each node's most likely tokens (the top-k law); drop --without-replacement")
        return TreeShape.dynamic(args.tree_budget, args.length, branching=args.k)
    if args.tree is None:
        if args.top_k:
            raise ValueError("top-k: the top-k law applies to trees; give --tree K1,K2,... or --tree-budget N")
        return None
    try:
        schedule = [int(part) for part in args.tree.split(",")]
    except ValueError:
        raise ValueError(f"tree: expected children per node at each depth such as 2,2,1, got {args.tree!r}") from None
    law = "top-k" if args.top_k else "without-replacement" if args.without_replacement else "iid"
    return TreeShape.expansion(schedule, law=law)


def _sampling(temperature: float, top_p: float, role: str):
    """One Sampling; a bad value is reported with its role (target or draft)."""
    from multidraft.decoding import Sampling

    try:
        return Sampling(temperature, top_p)
    except ValueError as error:
        raise ValueError(f"{role} {error}") from None


def _draft_samplings(temperatures: list[float], top_ps: list[float], k: int) -> list:
    """K draft Samplings from one or K temperatures and one or K top-p values."""
    for values, flag in ((temperatures, "--draft-temperature"), (top_ps, "--draft-top-p")):
        if len(values) not in (1, k):
            raise ValueError(f"{flag}: give one value or k={k} values, got {len(values)}")
    count = max(len(temperatures), len(top_ps))
    pick = (lambda values, i: values[i] if len(values) > 1 else values[0])  # noqa: E731
    return [_sampling(pick(temperatures, i), pick(top_ps, i), "draft") for i in range(count)]


def _signed(value: float) -> str:
    return "n/a" if value != value else f"{value:+.4f}"


def _percent(value: float) -> str:
    return "n/a" if value != value else f"{value:+.1f}%"
