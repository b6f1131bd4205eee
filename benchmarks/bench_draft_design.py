"""The draft design study of Yan, Agarwal and Venkataraman (2024), in miniature, on any device.

Question: is the best draft by throughput the best draft by acceptance? Candidates are
early-exit drafts of the bundled SmolLM2-135M-Instruct (its first d of 30 layers, same head,
sharing the target's weights) and the full model itself at other temperatures. For each
candidate, K in ``--ks`` drafts and draft length L in ``--lengths`` (eager, or with
``--compile`` on static KV caches with compiled forwards -- CUDA graphs on CUDA):

* measured acceptance and block efficiency: :func:`multidraft.decoding.measure` (SpecInfer
  selection, i.i.d. drafts), plus the per-live-draft acceptance a_j (mean of the scheme's exact
  acceptance at the visited positions with j live drafts) and the survival rate ρ (how many
  non-selected live drafts carried the accepted token);
* measured latency: :func:`multidraft.decoding.profiling.profile_latency` for the draft
  (decode steps, batch K) and the target (verify calls, batch K, L + 1 tokens);
* predicted throughput: :func:`multidraft.theory.throughput` from a_j, ρ and the latency
  tables (of the compiled forwards with ``--compile``); measured throughput: new tokens /
  (drafting + verification + selection time), and the measured speed-up over autoregressive
  sampling of the same prompts in the same :func:`measure` run;
* the best (K, L) the model predicts for the candidate (:func:`best_configuration`).

Writes ``<out>/draft_design[_<device>][_compiled].json`` and ``.png`` (measured and predicted
speed-up against draft depth, acceptance on a second axis). Timings on a shared CPU are noisy;
the JSON records the load average before and after.

Run: ``nice -n 10 python3 benchmarks/bench_draft_design.py`` (about 15-30 minutes on a CPU);
on a GPU: ``python3 benchmarks/bench_draft_design.py --device cuda --compile --depths 2,4,8,15
--ks 1,2,4,8 --lengths 2,4,6``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, provenance, write_json  # noqa: E402


def live_acceptance(results, k: int) -> tuple[list[float], list[int], float, int]:
    """Per-live-draft acceptance a_1..a_K and survival ρ estimated from the position records.

    a_j: mean exact acceptance (scheme's ``expected``) at the positions with j live drafts, the
    empirical rate where it is not finite; a j never visited takes a_{j-1} (a_1 when none below).
    ρ: Σ (j' - 1) / Σ (j - 1) over accepted positions with j > 1 live drafts followed by a
    position with j' live drafts in the same block.
    """
    records = results.records
    values, counts = [], []
    for j in range(1, k + 1):
        at = [r for r in records if r.k_live == j]
        counts.append(len(at))
        expected = np.array([r.expected for r in at], dtype=float)
        if at and np.isfinite(expected).all():
            values.append(float(expected.mean()))
        elif at:
            values.append(float(np.mean([r.accepted for r in at])))
        else:
            values.append(float("nan"))
    for j in range(k):
        if np.isnan(values[j]):
            below = [v for v in values[:j] if not np.isnan(v)]
            above = [v for v in values[j:] if not np.isnan(v)]
            values[j] = below[-1] if below else above[0]
    following = {(r.block, r.depth): r.k_live for r in records}
    others = survivors = 0
    for r in records:
        if r.accepted and r.k_live > 1 and (r.block, r.depth + 1) in following:
            others += r.k_live - 1
            survivors += following[(r.block, r.depth + 1)] - 1
    survival = survivors / others if others else 0.0
    return values, counts, survival, others


def run_study(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from multidraft.decoding import DEFAULT_PROMPTS, Sampling, early_exit, load_model, measure
    from multidraft.decoding.profiling import profile_latency
    from multidraft.theory.speed import best_configuration, throughput, tree_block_efficiency

    load_before = os.getloadavg()
    started = time.perf_counter()
    target = load_model("default", device=args.device, progress=False)
    layers = int(target.model.config.num_hidden_layers)
    prompts = list(DEFAULT_PROMPTS[: args.prompts])
    ks, lengths = tuple(args.ks), tuple(args.lengths)
    batches = tuple(sorted({1, *ks})) if len(set(ks) | {1}) > 1 else (1, 2)
    verify_tokens = tuple(sorted({1, 2, *(length + 1 for length in lengths), args.max_length + 1}))
    profile_kwargs = dict(batch_sizes=batches, context=args.context, repeats=args.repeats, warmup=args.warmup,
                          compile=args.compile)  # fmt: skip

    # The load of a shared machine drifts over minutes, so every candidate gets its own target
    # profile, and every measurement its own autoregressive baseline (measure's, same run).
    candidates = [("early-exit", d, 1.0) for d in args.depths] + [("self", layers, t) for t in args.self_temperatures]
    rows, curves, profiles = [], [], {}
    for kind, depth, temperature in candidates:
        draft = early_exit(target, depth) if kind == "early-exit" else None
        print(f"profiling the target ({layers} layers) ...", flush=True)
        target_profile = profile_latency(target, token_counts=verify_tokens, **profile_kwargs)
        print(target_profile.table(), flush=True)
        if draft is None:
            draft_profile = target_profile
        else:
            print(f"profiling the draft {draft.name} ...", flush=True)
            draft_profile = profile_latency(draft, token_counts=(1, 2), **profile_kwargs)
            print(draft_profile.table(), flush=True)
        label = f"{depth} layers" if kind == "early-exit" else f"self, T={temperature:g}"
        widest = None
        for k in ks:
            for length in lengths:
                t0 = time.perf_counter()
                result = measure(
                    target, draft=draft, k=k, length=length, scheme=args.scheme, prompts=prompts,
                    max_new_tokens=args.max_new_tokens, seed=args.seed, target_sampling=Sampling(1.0),
                    draft_sampling=Sampling(temperature), compile=args.compile, progress=False,
                )  # fmt: skip
                a, counts, survival, pairs = live_acceptance(result, k)
                predicted_be = tree_block_efficiency(a, length, survival)
                predicted = throughput(a, length, draft_profile.latency, target_profile.latency, survival)
                row = {
                    "candidate": label,
                    "kind": kind,
                    "depth": depth,
                    "draft_temperature": temperature,
                    "k": k,
                    "length": length,
                    "compiled": result.compiled,
                    "positions": result.positions,
                    "empirical_acceptance": result.empirical_acceptance,
                    "expected_acceptance": result.expected_acceptance,
                    "optimal_acceptance": result.optimal_acceptance,
                    "acceptance_by_live": a,
                    "positions_by_live": counts,
                    "survival": survival,
                    "survival_pairs": pairs,
                    "block_efficiency_measured": result.block_efficiency,
                    "block_efficiency_predicted": predicted_be,
                    "draft_step_ms": 1e3 * draft_profile.latency(k, 1),
                    "verify_ms": 1e3 * target_profile.latency(k, length + 1),
                    "throughput_predicted": predicted,
                    "throughput_measured": result.tokens_per_second,
                    "autoregressive_tokens_per_second": result.autoregressive_tokens_per_second,
                    "speedup_measured": result.speedup,
                    "speedup_predicted": predicted * target_profile.latency(1, 1),
                    "seconds_drafting": result.seconds_drafting,
                    "seconds_verification": result.seconds_verification,
                    "seconds_selection": result.seconds_selection,
                    "seconds_warmup": result.seconds_warmup,
                    "wall_seconds": time.perf_counter() - t0,
                }
                rows.append(row)
                if k == max(ks) and widest is None:
                    widest = (a, survival)
                print(
                    f"{label:>14}  K={k} L={length}  acc={row['empirical_acceptance']:.3f} "
                    f"(E {row['expected_acceptance']:.3f})  BE meas {row['block_efficiency_measured']:.2f} "
                    f"pred {predicted_be:.2f}  tok/s meas {row['throughput_measured']:.2f} pred {predicted:.2f}  "
                    f"x{row['speedup_measured']:.2f} meas, x{row['speedup_predicted']:.2f} pred  "
                    f"({row['wall_seconds']:.0f} s)",
                    flush=True,
                )
        curve = best_configuration(
            widest[0], draft_profile.latency, target_profile.latency, ks=ks, lengths=range(1, args.max_length + 1),
            survival=widest[1],
        )  # fmt: skip
        curves.append(
            {
                "candidate": label,
                "ks": list(curve.ks),
                "lengths": list(curve.lengths),
                "throughput": curve.throughput.tolist(),
                "speedup": curve.speedup.tolist(),
                "best_k": curve.best_k,
                "best_length": curve.best_length,
                "best_throughput": curve.best_throughput,
                "best_speedup": curve.best_speedup,
            }
        )
        profiles[label] = {"target": target_profile.to_dict(), "draft": draft_profile.to_dict()}
    return {
        "provenance": provenance(),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "seconds_total": time.perf_counter() - started,
        "config": {
            "target": target.name,
            "device": str(target.device),
            "compile": args.compile,
            "threads": torch.get_num_threads(),
            "layers": layers,
            "scheme": args.scheme,
            "lengths": list(lengths),
            "ks": list(ks),
            "prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "seed": args.seed,
            "target_temperature": 1.0,
        },
        "latency_profiles": profiles,
        "rows": rows,
        "best_configurations": curves,
        "findings": findings(rows, ks),
    }


def findings(rows: list[dict], ks: tuple[int, ...]) -> dict:
    """What wins and by how much. For each K: the best candidate by acceptance, by measured and
    by predicted speed-up (over its draft lengths); overall: the best (candidate, K, L) by
    measured speed-up and its margin over the best of the other candidates.

    Acceptance is the mean exact acceptance of the scheme at the visited positions (lower
    variance than the accepted fraction over the same positions). Throughput is compared as the
    speed-up over autoregressive sampling in the same measurement, which cancels most of the
    drift of a shared machine's load between candidates.
    """
    out: dict = {}
    for k in ks:
        at = [r for r in rows if r["k"] == k]
        measured = max(at, key=lambda r: r["speedup_measured"])
        out[str(k)] = {
            "best_by_acceptance": max(at, key=lambda r: r["expected_acceptance"])["candidate"],
            "best_by_measured_speedup": f"{measured['candidate']}, L={measured['length']} (x{measured['speedup_measured']:.2f})",
            "best_by_predicted_speedup": max(at, key=lambda r: r["speedup_predicted"])["candidate"],
        }
    best = max(rows, key=lambda r: r["speedup_measured"])
    others = [r for r in rows if r["candidate"] != best["candidate"]]
    runner = max(others, key=lambda r: r["speedup_measured"]) if others else None
    out["overall"] = {
        "winner": f"{best['candidate']}, K={best['k']}, L={best['length']}",
        "speedup_measured": best["speedup_measured"],
        "runner_up": None if runner is None else f"{runner['candidate']}, K={runner['k']}, L={runner['length']}",
        "margin": None if runner is None else best["speedup_measured"] / runner["speedup_measured"],
    }
    return out


def print_table(report: dict) -> None:
    header = (
        f"{'candidate':>14} {'K':>2} {'L':>2} {'acc':>6} {'E[acc]':>6} {'BE meas':>7} {'BE pred':>7} "
        f"{'draft ms':>8} {'verify ms':>9} {'tok/s meas':>10} {'tok/s pred':>10} {'AR tok/s':>8} {'x meas':>6} {'x pred':>6}"
    )
    print(header)
    for r in report["rows"]:
        print(
            f"{r['candidate']:>14} {r['k']:>2} {r['length']:>2} {r['empirical_acceptance']:6.3f} "
            f"{r['expected_acceptance']:6.3f} {r['block_efficiency_measured']:7.2f} {r['block_efficiency_predicted']:7.2f} "
            f"{r['draft_step_ms']:8.1f} {r['verify_ms']:9.1f} {r['throughput_measured']:10.2f} "
            f"{r['throughput_predicted']:10.2f} {r['autoregressive_tokens_per_second']:8.2f} "
            f"{r['speedup_measured']:6.2f} {r['speedup_predicted']:6.2f}"
        )
    for c in report["best_configurations"]:
        print(f"{c['candidate']:>14}: model's best K={c['best_k']}, L={c['best_length']} ({c['best_speedup']:.2f}x)")
    print(json.dumps(report["findings"], indent=1))


def _best_length(rows: list[dict]) -> dict:
    """Per (candidate, K): the row of the draft length with the best measured speed-up."""
    best: dict = {}
    for r in rows:
        key = (r["candidate"], r["k"])
        if key not in best or r["speedup_measured"] > best[key]["speedup_measured"]:
            best[key] = r
    return best


def plot(report: dict, path: Path) -> None:
    """Speed-up over autoregressive against draft depth (dots: measured, lines: predicted), at
    each (candidate, K)'s best measured draft length; acceptance on a twin axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = report["config"]
    rows = list(_best_length(report["rows"]).values())
    ks, layers = config["ks"], config["layers"]
    colors = dict(zip(ks, ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]))
    early = sorted({r["depth"] for r in rows if r["kind"] == "early-exit"})
    selfs = sorted({r["draft_temperature"] for r in rows if r["kind"] == "self"})
    offsets = {t: layers + 3.0 * (i + 1) for i, t in enumerate(selfs)}  # self drafts right of the axis end
    fig, ax = plt.subplots(figsize=(8, 5.4))
    for k in ks:
        at = {r["depth"]: r for r in rows if r["k"] == k and r["kind"] == "early-exit"}
        ax.plot(early, [at[d]["speedup_predicted"] for d in early], "-", color=colors[k], label=f"K={k} predicted")
        ax.plot(early, [at[d]["speedup_measured"] for d in early], "o", color=colors[k], label=f"K={k} measured")
        for d in early:
            ax.annotate(f"L={at[d]['length']}", (d, at[d]["speedup_measured"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")  # fmt: skip
        for r in (r for r in rows if r["k"] == k and r["kind"] == "self"):
            x = offsets[r["draft_temperature"]]
            ax.plot([x], [r["speedup_measured"]], "o", color=colors[k])
            ax.plot([x], [r["speedup_predicted"]], "_", color=colors[k], markersize=14, mew=2)
    ax.axhline(1.0, color="gray", ls=":", label="autoregressive target")
    ax.set_ylim(bottom=0)
    ax.set_xticks(early + [offsets[t] for t in selfs])
    ax.set_xticklabels([str(d) for d in early] + [f"full\nT={t:g}" for t in selfs])
    ax.set_xlabel(f"draft: early exit after d of {layers} layers (draft T=1), or the full model at temperature T")
    ax.set_ylabel("speed-up over autoregressive (same run)\n(dots: measured, lines and dashes: predicted)")
    twin = ax.twinx()
    first = [r for r in rows if r["k"] == min(ks)]
    by_depth = {r["depth"]: r for r in first if r["kind"] == "early-exit"}
    twin.plot(early, [by_depth[d]["expected_acceptance"] for d in early], "s--", color="black", alpha=0.5,
              label=f"acceptance (K={min(ks)})")  # fmt: skip
    for r in (r for r in first if r["kind"] == "self"):
        twin.plot([offsets[r["draft_temperature"]]], [r["expected_acceptance"]], "s", color="black", alpha=0.5)
    twin.set_ylabel(f"per-token acceptance, K={min(ks)}\n(mean exact acceptance at the visited positions)")
    twin.set_ylim(0, 1.02)
    handles, labels = ax.get_legend_handles_labels()
    handles2, labels2 = twin.get_legend_handles_labels()
    ax.legend(handles + handles2, labels + labels2, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
    mode = "compiled" if config.get("compile") else "eager"
    ax.set_title(
        f"SmolLM2-135M target on {config.get('device', 'cpu')} ({mode}, {config.get('threads', '?')} threads), "
        f"{config['scheme']}, best L of {config['lengths']} per point",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


def _integers(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")] if text else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto (cuda, mps, cpu), cpu, cuda, ...")
    parser.add_argument("--compile", action="store_true", help="static KV caches and compiled forwards")
    parser.add_argument("--depths", type=_integers, default=[4, 8, 15])
    parser.add_argument("--self-temperatures", type=_floats, default=[0.7, 1.5])
    parser.add_argument("--ks", type=_integers, default=[1, 2, 4])
    parser.add_argument("--lengths", type=_integers, default=[3])
    parser.add_argument("--max-length", type=int, default=8, help="largest L of the predicted best-(K, L) curve")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--scheme", default="specinfer")
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--replot", action="store_true", help="only redraw the figure from the JSON")
    args = parser.parse_args(argv)
    from multidraft.decoding import resolve_device

    device = resolve_device(args.device).type
    name = "draft_design" + ("" if device == "cpu" else f"_{device}") + ("_compiled" if args.compile else "")
    json_path, png_path = args.out / f"{name}.json", args.out / f"{name}.png"
    if args.replot:
        report = json.loads(json_path.read_text())
    else:
        report = run_study(args)
        write_json(json_path, report)
    print_table(report)
    plot(report, png_path)
    print(f"wrote {json_path} and {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
