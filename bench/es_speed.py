"""Extraction Strength in one teacher-forced pass against its generation-loop definition.

Same model, same forget examples: the values must be identical; the speed ratio is the point.
The generation loop tries prefixes k = 0, 1, ... and stops at the first whose greedy
continuation is the rest of the answer, so its cost falls with how much the model has memorized:
a target that reproduces most answers stops after a generation or two, an unlearned model (what
ES is mostly measured on) needs many. Both are measured.
Writes bench/results/es_speed.json. Usage:
    python bench/es_speed.py [--model M ...] [--limit N] [--repeats R]
By default: the smol target (if `make reproduce` has trained it, else the base model) and the
NPO checkpoint of the smol grid (when made).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from frag_utils import data, metrics, models, paths, records


def default_models() -> list[str]:
    """The smol target (if trained, else the base model) and, when made, its NPO checkpoint: ES is
    measured on both kinds, and the generation loop's cost depends on which (see the docstring)."""
    target = paths.checkpoint_dir("smol", "target")
    chosen = [str(target) if models.is_checkpoint(target) else models.SMOLLM2]
    record = paths.RUNS_DIR / "05_unlearn" / "smol__method=npo" / "results.json"
    if record.is_file():
        unlearned = records.read_json(record)["results"]["unlearned"]
        if models.is_checkpoint(unlearned):
            chosen.append(unlearned)
    return chosen


def measure(model_id: str, recs: list[dict], repeats: int) -> dict:
    model, tokenizer = models.load_model(model_id)
    fast_times, slow_times = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        fast = metrics.extraction_strength(model, tokenizer, recs, batch_size=16)
        fast_times.append(time.perf_counter() - t)
    for _ in range(max(1, repeats // 3)):
        t = time.perf_counter()
        slow = metrics.extraction_strength_by_generation(model, tokenizer, recs)
        slow_times.append(time.perf_counter() - t)
    mismatches = sum(abs(a - b) > 1e-12 for a, b in zip(fast["per_example"], slow["per_example"]))
    return {"model": model_id, "n_examples": len(recs),
            "es_one_pass": fast["value"], "es_generation": slow["value"], "per_example_mismatches": mismatches,
            "one_pass_seconds": {"min": min(fast_times), "median": statistics.median(fast_times)},
            "generation_seconds": {"min": min(slow_times), "median": statistics.median(slow_times)},
            "speedup_min_over_min": min(slow_times) / min(fast_times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", action="append", help="a model to measure (repeatable; default: the smol "
                        "target and its NPO checkpoint)")
    parser.add_argument("--split", default="forget10")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    recs = data.load_split("synthetic", args.split, args.limit)
    rows = [measure(m, recs, args.repeats) for m in (args.model or default_models())]
    result = {"split": args.split, "rows": rows, "target_speedup": 20.0,
              "machine": {"torch_threads": torch.get_num_threads(), **records.environment()}}
    records.write_json(paths.BENCH_RESULTS_DIR / "es_speed.json", result,
                       records.provenance("bench/es_speed.py", vars(args)))
    for r in rows:
        print(r["model"])
        print(f"  {'':22}{'one pass':>12}{'generation':>12}")
        print(f"  {'ES':22}{r['es_one_pass']:>12.4f}{r['es_generation']:>12.4f}")
        print(f"  {'seconds (min)':22}{r['one_pass_seconds']['min']:>12.2f}{r['generation_seconds']['min']:>12.2f}")
        print(f"  per-example mismatches: {r['per_example_mismatches']} of {r['n_examples']}; speed ratio "
              f"{r['speedup_min_over_min']:.1f}x (target >= 20x)")


if __name__ == "__main__":
    main()
