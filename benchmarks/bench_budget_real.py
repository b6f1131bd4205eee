"""The budget answer on trees drafted by the bundled model (issue 31, item 3, real half).

Three steps, so that the long part can run as several processes over disjoint prompts:

1. ``plan``: the positional model -- â_i from 10 bundled prompts x 48 positions
   (:func:`multidraft.report.budget_real.collect_positional`, the report's setting) -- gives
   the two shapes of N nodes: the DP's static shape of the best walk (``"dp"``,
   :func:`~multidraft.trees.sequoia_tree`) and the best SpecInfer chains (``"chains"``,
   :func:`~multidraft.report.budget_real.best_chains`), with each walk's predicted E[τ + 1]
   on both. Writes ``--plan FILE`` (JSON).
2. ``run``: every shape of the plan on the units (round, prompt) of this part (prompts
   ``i ≡ part (mod parts)``, round after round), each verifier scored on every drafted block
   (:func:`multidraft.report.budget_blocks.run_units`); one JSON line per (shape, unit) is
   appended to ``--out`` as it finishes, so a run stopped by ``--until`` or killed keeps its
   blocks; it stops once this part's every shape has ``--blocks / parts`` blocks, and resumes
   after the units already in ``--out``.
3. ``summary``: the units of the given ``--out`` files, clustered by prompt
   (:func:`~multidraft.report.budget_blocks.clustered_answer`), printed as a table and written
   with the plan and provenance to ``benchmarks/results/budget_real_blocks.json``.

Usage (the bundled model drafting for itself; ``--draft 15`` for its first 15 layers)::

    python benchmarks/bench_budget_real.py plan --draft self --plan /tmp/self.json
    python benchmarks/bench_budget_real.py run --plan /tmp/self.json --part 0 --parts 2 --blocks 2000 --out /tmp/self0.jsonl
    python benchmarks/bench_budget_real.py summary --plan /tmp/self.json --out /tmp/self0.jsonl /tmp/self1.jsonl

or one process a shape, the second catching up with the first's units at the end::

    python benchmarks/bench_budget_real.py run --plan /tmp/self.json --shapes dp --out /tmp/dp.jsonl
    python benchmarks/bench_budget_real.py run --plan /tmp/self.json --shapes chains --out /tmp/chains.jsonl
    python benchmarks/bench_budget_real.py run --plan /tmp/self.json --shapes chains --out /tmp/chains.jsonl --match /tmp/dp.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

from _common import RESULTS_DIR, provenance, write_json

from multidraft.report.budget_blocks import BLOCK_VERIFIERS, WALKS, blocks_text, budget_shapes, clustered_answer, run_units
from multidraft.report.budget_real import collect_positional
from multidraft.trees import TreeShape

#: The report's real-model setting (target T 0.6, draft T 1.0) and the positional sample.
SETTING = {"target_temperature": 0.6, "draft_temperature": 1.0}
POSITIONAL = {"prompts": 10, "max_new_tokens": 48, "width": 8, "seed": 0}


def _models(draft: str):
    from multidraft.decoding import early_exit, load_model

    target = load_model("default", device="cpu", progress=False)
    return target, (None if draft == "self" else early_exit(target, int(draft)))


def plan(args: argparse.Namespace) -> None:
    from multidraft.decoding import bundled_prompts
    from multidraft.decoding.models import cpu_threads

    target, draft = _models(args.draft)
    began = time.process_time()
    chosen = bundled_prompts().round_robin(POSITIONAL["prompts"]).prompts
    with cpu_threads(1):  # one thread: on a shared machine a second one mostly waits (default_threads)
        sample = collect_positional(
            target, chosen, draft=draft, max_new_tokens=POSITIONAL["max_new_tokens"], width=POSITIONAL["width"],
            seed=POSITIONAL["seed"], verifiers=WALKS, **SETTING,
        )  # fmt: skip
    means = {name: sample.mean()[j].tolist() for j, name in enumerate(WALKS)}
    data = {
        "draft": args.draft,
        "draft_name": target.name if draft is None else draft.name,
        "budget": args.budget,
        **SETTING,
        "positional": {**POSITIONAL, "positions": sample.positions, "acceptance": means},
        **budget_shapes(means, args.budget),
        "plan_seconds": time.process_time() - began,
    }
    write_json(Path(args.plan), data)
    print(json.dumps(data, indent=1))


def _read(paths: list[str]) -> list[dict]:
    lines = []
    for path in paths:
        if Path(path).exists():
            lines += [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return lines


def run(args: argparse.Namespace) -> None:
    from multidraft.decoding import bundled_prompts
    from multidraft.decoding.models import cpu_threads

    data = json.loads(Path(args.plan).read_text())
    target, draft = _models(data["draft"])
    prompts = bundled_prompts()
    mine = [i for i in range(len(prompts.prompts)) if i % args.parts == args.part]
    shapes = {label: data["shapes"][label] for label in args.shapes or data["shapes"]}
    done = _read([args.out])
    blocks = {label: sum(len(u["accepted"]) for u in done if u["shape"] == label) for label in shapes}
    finished = {(u["shape"], u["round"], u["prompt"]) for u in done}
    until = None if args.until is None else datetime.datetime.fromisoformat(args.until).timestamp()
    matched = None if args.match is None else {(u["round"], u["prompt"]) for u in _read(args.match)}
    goal = args.blocks / args.parts if matched is None else float("inf")
    with cpu_threads(1), open(args.out, "a") as out:
        for round_ in range(args.rounds):
            for index in mine:
                if min(blocks.values()) >= goal or (until is not None and time.time() > until):
                    return
                for label, parents in shapes.items():
                    if (label, round_, index) in finished or (matched is not None and (round_, index) not in matched):
                        continue
                    units = run_units(
                        target, draft, TreeShape.static(parents), prompts, [(round_, index)], max_new_tokens=args.max_new_tokens,
                        target_temperature=data["target_temperature"], draft_temperature=data["draft_temperature"],
                        verifiers=args.verifiers,
                    )  # fmt: skip
                    unit = {"shape": label, "max_new_tokens": args.max_new_tokens, **units[0]}
                    out.write(json.dumps(unit) + "\n")
                    out.flush()
                    blocks[label] += len(unit["accepted"])
                    print(f"{label} round {round_} prompt {index}: {len(unit['accepted'])} blocks in {unit['seconds']:.1f} s; {blocks}", flush=True)


def summary(args: argparse.Namespace) -> None:
    data = json.loads(Path(args.plan).read_text())
    units = _read(args.out)
    runs = {label: [u for u in units if u["shape"] == label] for label in data["shapes"]}
    answer = clustered_answer(runs, resamples=args.resamples)
    print(f"{data['draft_name']}, N = {data['budget']}, target T {data['target_temperature']}, draft T {data['draft_temperature']}")
    print(blocks_text(answer, data["predicted"]))
    path = RESULTS_DIR / f"{args.name}.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[data["draft"]] = {"provenance": provenance(), "plan": data, "answer": answer}
    write_json(path, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    p = steps.add_parser("plan")
    p.add_argument("--draft", default="self", help="self, or L: the bundled model's first L layers")
    p.add_argument("--budget", type=int, default=16)
    p.add_argument("--plan", required=True)
    r = steps.add_parser("run")
    r.add_argument("--plan", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--part", type=int, default=0)
    r.add_argument("--parts", type=int, default=1)
    r.add_argument("--blocks", type=int, default=2000, help="blocks per shape over all parts")
    r.add_argument("--rounds", type=int, default=20, help="seed rounds at most")
    r.add_argument("--max-new-tokens", type=int, default=128)
    r.add_argument("--shapes", nargs="+", default=None, help="the plan's shapes to draft (default: all; one process a shape)")
    r.add_argument(
        "--match", nargs="+", default=None, metavar="OUT",
        help="draft exactly the units (round, prompt) of these --out files not yet in --out, whatever --blocks says "
        "(a shape catching up with another's units: only common units are paired)",
    )  # fmt: skip
    r.add_argument(
        "--verifiers", nargs="+", default=list(BLOCK_VERIFIERS),
        help="verifiers scored per block, the driving one first (default: all four)",
    )  # fmt: skip
    r.add_argument("--until", default=None, help="start no unit after this ISO time (e.g. 2026-11-28T18:10+00:00)")
    s = steps.add_parser("summary")
    s.add_argument("--plan", required=True)
    s.add_argument("--out", nargs="+", required=True)
    s.add_argument("--resamples", type=int, default=2000)
    s.add_argument("--name", default="budget_real_blocks")
    args = parser.parse_args()
    {"plan": plan, "run": run, "summary": summary}[args.step](args)


if __name__ == "__main__":
    main()
