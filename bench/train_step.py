"""One epoch of the smol target's fine-tuning on a sample of its records, the path before issue 27
(the Trainer's default loss on the full logits, batches in random order, SmolLM2's default system
prompt) against the new one, step by step, in one run on one machine:
  1. the loss from logits at label positions only (`train.AnswerLossTrainer`, the same loss),
  2. and batches grouped by length (`group_by_length`, what the smol target and gold use),
  3. and OpenUnlearning's short system prompt (the smol profile's `prompt_template`).
Each variant trains a fresh copy of the model for one epoch; its seconds per step are the point.
Writes bench/results/train_step.json. Usage:
    python bench/train_step.py [--model M] [--records N] [--repeats R] [--quick]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from transformers import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import data, models, paths, prompts, records, train  # noqa: E402

from _common import machine  # noqa: E402

VARIANTS = {  # name: (trainer class, group by length, prompt template)
    "old": (Trainer, False, "model"),
    "label_positions": (None, False, "model"),
    "grouped": (None, True, "model"),
    "short_prompt": (None, True, "openunlearning"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=models.SMOLLM2)
    parser.add_argument("--records", type=int, default=96, help="first N records of the full split")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.model, args.records = "tiny", 32
    recs = data.load_split("synthetic", "full", args.records)
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    tokens, steps = {}, {}
    for _ in range(max(1, args.repeats)):  # interleaved, so drift in the machine hits every variant alike
        for name, (trainer_cls, grouped, template) in VARIANTS.items():
            prompts.set_template(template)
            config = train.TrainConfig(epochs=1.0, lr=2e-4, batch_size=16, grad_accum=1, warmup_epochs=0.0,
                                       scheduler="constant", group_by_length=grouped, seed=42, device="cpu")
            model, tokenizer = models.load_model(args.model, seed=42)
            dataset = train.QADataset(tokenizer, recs, config.chat, config.max_len)
            work = tempfile.mkdtemp(prefix="bench_step_")
            try:
                trainer = train.make_trainer(model, tokenizer, dataset, config, work, trainer_cls=trainer_cls,
                                             count_tokens=True)
                summary = train.run_trainer(trainer, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            seconds[name].append(summary["train_seconds"])
            steps[name] = summary["global_steps"]
            tokens[name] = sum(len(item["input_ids"]) for item in dataset.items)
    prompts.set_template("model")
    per_step = {name: min(v) / steps[name] for name, v in seconds.items()}
    result = {"model": args.model, "records": len(recs), "batch_size": 16, "seconds": seconds, "steps": steps,
              "real_tokens": tokens, "seconds_per_step_best": per_step,
              "over_old": {name: per_step[name] / per_step["old"] for name in VARIANTS},
              "quick": args.quick, "machine": machine()}
    out = (paths.cache_dir() / "bench" if args.quick else paths.BENCH_RESULTS_DIR) / "train_step.json"
    records.write_json(out, result, records.provenance("bench/train_step.py", vars(args)))
    for name in VARIANTS:
        print(f"{name:16s} {per_step[name]:6.2f} s/step  ({result['over_old'][name]:.2f}x the old path)")


if __name__ == "__main__":
    main()
