"""The optimal iid verifier's exact choice law ``P(i | x)`` at the bundled model's wide iid nodes.

token:optimal's and selective's E[τ | tree] need, at every node with K iid children, the
curtain rule's ``choice_probabilities`` of the drafted tuple: an integral over the position
sets of the tuple's tokens (:meth:`multidraft.theory.verifier.CurtainRule.choice_probabilities`).
With the early-exit draft (the bundled model's first 15 layers at draft T 1.0, target T 0.6)
one token's set has thousands of pieces. This measures, per node and K, the CPU time of one
tuple's probabilities (process time: the machine is shared) and the pieces of the rule
restricted to the tuple. ``--before COMMIT`` runs the same measurement on that commit's
package (``git archive`` into a temporary directory, a child process), in the same run, and
gives the ratio and the largest difference between the two answers.

Writes ``benchmarks/results/choice_probabilities.json`` (machine, versions, date, commit, load).

Usage: ``python benchmarks/bench_choice_probabilities.py [--before main] [--positions 6]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import print_table, write_results

ROOT = Path(__file__).resolve().parents[1]
LAYERS, TARGET_T, DRAFT_T, KS = 15, 0.6, 1.0, (4, 8)


def _nodes(positions: int) -> tuple[np.ndarray, np.ndarray]:
    """``(p, q)`` [positions, V]: the target at T 0.6 and its 15-layer exit at T 1.0 after the
    last ``positions`` tokens of the first bundled prompt."""
    import torch

    from multidraft.decoding import bundled_prompts, early_exit, load_model
    from multidraft.decoding.models import cpu_threads

    with cpu_threads(1), torch.no_grad():
        target = load_model("default", device="cpu", progress=False)
        ids = target.tokenizer(str(bundled_prompts().prompts[0]), return_tensors="pt").input_ids
        logits = [m.model(ids).logits[0, -positions:].double() for m in (target, early_exit(target, LAYERS))]
    p, q = (torch.softmax(x / t, -1).numpy() for x, t in zip(logits, (TARGET_T, DRAFT_T)))
    return p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)


def _child(nodes: Path) -> list[dict]:
    from multidraft.theory.verifier import fit_curtain_rule

    data = np.load(nodes)
    rows = []
    for position, (p, q) in enumerate(zip(data["p"], data["q"])):
        for k in KS:
            rule = fit_curtain_rule(p, q, k)
            tuple_ = np.random.default_rng(position).choice(len(q), size=(1, k), p=q)
            rule.choice_probabilities(tuple_)  # compiles on the first call
            start = time.process_time()
            out = rule.choice_probabilities(tuple_)
            rows.append({
                "position": position, "K": k, "pieces": len(rule.piece_start), "tuple pieces": len(rule.restricted(tuple_[0]).piece_start),
                "cpu ms": 1e3 * (time.process_time() - start), "P(i|x)": out[0].tolist(),
            })  # fmt: skip
    return rows


def _run(tree: Path, nodes: Path) -> list[dict]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(nodes)], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(tree)}, cwd=ROOT / "benchmarks", check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="also run on this commit's package (git archive), in the same run")
    parser.add_argument("--positions", type=int, default=6)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(Path(args.child))))
        return
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        nodes = Path(scratch) / "nodes.npz"
        p, q = _nodes(args.positions)
        np.savez(nodes, p=p, q=q)
        after = _run(ROOT, nodes)
        if args.before:
            archive = subprocess.run(["git", "archive", args.before, "multidraft"], cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", scratch], input=archive, check=True)
            before = _run(Path(scratch), nodes)
            for row, old in zip(after, before):
                row["before cpu ms"] = old["cpu ms"]
                row["speed-up"] = old["cpu ms"] / row["cpu ms"]
                row["max |diff|"] = float(np.abs(np.subtract(row["P(i|x)"], old["P(i|x)"])).max())
    print_table(after, [c for c in after[0] if c != "P(i|x)"])
    path = write_results("choice_probabilities", after, layers=LAYERS, target_temperature=TARGET_T, draft_temperature=DRAFT_T,
                         before=args.before, load_before=load_before, load_after=os.getloadavg())  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
