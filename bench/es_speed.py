"""Extraction Strength in one teacher-forced pass against its generation-loop definition.

Same model, same forget examples: the values must be identical; the speed ratio is the point.
Writes bench/results/es_speed.json. Usage:
    python bench/es_speed.py [--model M] [--limit N] [--repeats R]
By default the model is the smol target (if `make reproduce` has trained it), else the base model.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from frag_utils import data, metrics, models, paths, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    target = paths.checkpoint_dir("smol", "target")
    parser.add_argument("--model", default=str(target) if models.is_checkpoint(target) else models.SMOLLM2)
    parser.add_argument("--split", default="forget10")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    model, tokenizer = models.load_model(args.model)
    recs = data.load_split("synthetic", args.split, args.limit)
    fast_times, slow_times = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        fast = metrics.extraction_strength(model, tokenizer, recs, batch_size=16)
        fast_times.append(time.perf_counter() - t)
    for _ in range(max(1, args.repeats // 3)):
        t = time.perf_counter()
        slow = metrics.extraction_strength_by_generation(model, tokenizer, recs)
        slow_times.append(time.perf_counter() - t)
    mismatches = sum(abs(a - b) > 1e-12 for a, b in zip(fast["per_example"], slow["per_example"]))
    result = {
        "model": args.model, "split": args.split, "n_examples": len(recs),
        "es_one_pass": fast["value"], "es_generation": slow["value"], "per_example_mismatches": mismatches,
        "one_pass_seconds": {"min": min(fast_times), "median": statistics.median(fast_times)},
        "generation_seconds": {"min": min(slow_times), "median": statistics.median(slow_times)},
        "speedup_min_over_min": min(slow_times) / min(fast_times), "target_speedup": 20.0,
        "machine": {"torch_threads": torch.get_num_threads(), **records.environment()},
    }
    records.write_json(paths.BENCH_RESULTS_DIR / "es_speed.json", result,
                       records.provenance("bench/es_speed.py", vars(args)))
    print(f"{'':24}{'one pass':>12}{'generation':>12}")
    print(f"{'ES':24}{fast['value']:>12.4f}{slow['value']:>12.4f}")
    print(f"{'seconds (min)':24}{min(fast_times):>12.2f}{min(slow_times):>12.2f}")
    print(f"per-example mismatches: {mismatches} of {len(recs)}; speed ratio {result['speedup_min_over_min']:.1f}x "
          f"(target >= 20x)")


if __name__ == "__main__":
    main()
