"""Batched torch paths beside a busy process: torch's default threads against the idle-core rule.

SpecTr's ``select_batch`` (B = 256, n = 49152, K = 2, float32 and float64) and traversal's
``verify_batch`` (B = 16, K = 4, L = 4, n = 4096) are timed three ways in one run: on the machine
as it is with the rule (``on_idle_cores``, what every batched entry point does), then beside a
process that keeps every core busy, once with torch's default of one thread per core (the
undecorated method) and once with the rule. The busy process is two spinning workers started
here and stopped after each measurement. Issue 34's bar: ``select_batch`` <= 100 ms beside it.

    python benchmarks/bench_threads.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from contextlib import contextmanager

import numpy as np
import torch
from _common import measure, print_table, write_results

from multidraft.schemes import get_scheme
from multidraft.trees import get_verifier

BAR_MS = 100.0


def _spin(stop) -> None:
    while not stop.is_set():
        pass


@contextmanager
def busy_cores(count: int):
    """``count`` processes spinning on the CPU until the block ends."""
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    workers = [context.Process(target=_spin, args=(stop,), daemon=True) for _ in range(count)]
    for worker in workers:
        worker.start()
    time.sleep(0.5)
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=5)


def scheme_inputs(batch: int, n: int, k: int, dtype: torch.dtype):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(batch, n, generator=generator, dtype=torch.float64) * 3
    target = torch.softmax(logits, -1).to(dtype)
    draft = torch.softmax(logits / 1.6, -1).to(dtype)
    tokens = torch.multinomial(draft.double(), k, replacement=True, generator=generator)
    return target, draft[:, None, :].expand(batch, k, n).contiguous(), tokens


def tree_inputs(batch: int, k: int, length: int, n: int):
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(batch, k, length + 1, n, generator=generator, dtype=torch.float64) * 3
    target = torch.softmax(logits, -1)
    draft = torch.softmax(logits[:, :, :length] / 1.6, -1)
    tokens = torch.multinomial(draft.reshape(-1, n), 1, generator=generator).reshape(batch, k, length)
    return tokens, target, draft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(cores)  # torch's default: one thread per core

    spectr = get_scheme("spectr")
    traversal = get_verifier("traversal")
    cases = []
    for dtype in (torch.float32, torch.float64):
        target, drafts, tokens = scheme_inputs(256, 49152, 2, dtype)
        for rule, method in (("idle-core rule", spectr.select_batch), ("torch default", type(spectr).select_batch.__wrapped__.__get__(spectr))):
            generator = torch.Generator().manual_seed(2)
            cases.append((f"spectr select_batch B=256 n=49152 K=2 {str(dtype)[6:]}", rule, lambda m=method, a=(target, drafts, tokens, generator): m(*a)))
    tokens, target, draft = tree_inputs(16, 4, 4, 4096)
    for rule, method in (("idle-core rule", traversal.verify_batch), ("torch default", type(traversal).verify_batch.__wrapped__.__get__(traversal))):
        generator = torch.Generator().manual_seed(3)
        rng = np.random.default_rng(0)
        cases.append(("traversal verify_batch B=16 K=4 L=4 n=4096", rule, lambda m=method, g=generator, r=rng: m(tokens, target, draft, g, rng=r)))

    rows = []
    for path, rule, call in cases:
        if rule == "idle-core rule":
            quiet = measure(call, args.repeats)
            rows.append({"path": path, "machine": "as it is", "threads": rule, "median_ms": quiet.median * 1e3, "load_average": os.getloadavg()[0]})
        with busy_cores(cores):
            timing = measure(call, args.repeats)
            load = os.getloadavg()[0]
        rows.append({"path": path, "machine": f"{cores} cores busy", "threads": rule, "median_ms": timing.median * 1e3, "load_average": load})
    for row in rows:
        row["within_bar"] = row["median_ms"] <= BAR_MS if row["path"].startswith("spectr") else None
    print(f"Batched torch paths beside a process keeping {cores} cores busy (median of {args.repeats}, ms; bar {BAR_MS:g} ms for select_batch)")
    print_table(rows, ["path", "machine", "threads", "median_ms", "load_average", "within_bar"])
    for path in dict.fromkeys(row["path"] for row in rows):
        busy = {row["threads"]: row["median_ms"] for row in rows if row["path"] == path and row["machine"] != "as it is"}
        print(f"{path}: torch default / idle-core rule beside the busy process = {busy['torch default'] / busy['idle-core rule']:.1f}x")
    print(write_results("threads", rows, cores=cores, repeats=args.repeats))


if __name__ == "__main__":
    main()
