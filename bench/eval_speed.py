"""One full evaluation (ES, forget probability, truth ratio and ROUGE, Model Utility's nine
numbers, ES on the retain set): grouped scoring (each answer once, each question's prompt once,
`metrics.evaluate`) against the path before it (metric by metric, each answer behind its own
prompt, `metrics.evaluate_metric_by_metric`), in one run on one model. Every number must agree
within 1e-5; the time ratio is the point (target: the new path at most a third of the old).
Writes bench/results/eval_speed.json. Usage:
    python bench/eval_speed.py [--model M] [--limit N] [--max-new-tokens T]
By default the smol target if `make reproduce` has trained it, else the embedded base model (the
same architecture, so the same cost), on every record of the smol evaluation (eval_limit 0, 48 tokens).
"""
from __future__ import annotations

import argparse
import time

from frag_utils import data, metrics, models, paths, prompts, records

from _common import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    target = paths.checkpoint_dir("smol", "target")
    parser.add_argument("--model", default=str(target) if models.is_checkpoint(target) else models.SMOLLM2)
    parser.add_argument("--split", default="forget10")
    parser.add_argument("--limit", type=int, default=0, help="first N records of each set (0: all)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--prompt-template", default="openunlearning", help="the smol profile's (prompts.TEMPLATES)")
    args = parser.parse_args()
    prompts.set_template(args.prompt_template)
    model, tokenizer = models.load_model(args.model)
    limit = args.limit or None
    forget = data.load_split("synthetic", f"{args.split}_perturbed", limit)
    sets = data.load_utility_sets("synthetic", limit)
    seconds, values = {}, {}
    for name, run in (("old", lambda: metrics.evaluate_metric_by_metric(model, tokenizer, forget, sets,
                                                                         args.max_new_tokens)),
                      ("new", lambda: metrics.evaluate(model, tokenizer, forget, sets, args.max_new_tokens))):
        start = time.perf_counter()
        values[name] = run()
        seconds[name] = time.perf_counter() - start
    compared = sorted(values["old"])
    worst = max(abs(values["new"][k] - values["old"][k]) for k in compared)
    result = {"model": args.model, "split": args.split, "n_forget": len(forget),
              "n_utility": {k: len(v) for k, v in sets.items()}, "max_new_tokens": args.max_new_tokens,
              "old_seconds": seconds["old"], "new_seconds": seconds["new"],
              "new_over_old": seconds["new"] / seconds["old"], "target_new_over_old": 1 / 3,
              "max_abs_difference": worst, "numbers_compared": compared, "machine": machine()}
    records.write_json(paths.BENCH_RESULTS_DIR / "eval_speed.json", result,
                       records.provenance("bench/eval_speed.py", vars(args)))
    print(f"{args.model}: old {seconds['old']:.1f} s, new {seconds['new']:.1f} s "
          f"(new/old {result['new_over_old']:.2f}, target <= 0.33); largest difference of {len(compared)} "
          f"numbers {worst:.2e}")


if __name__ == "__main__":
    main()
