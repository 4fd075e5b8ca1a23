"""Training throughput of the attack loop (Trainer, as notebook 06 runs it) against a bare
PyTorch forward/backward/step loop on the same records, batch size and precision.

Target: the bare loop at most 1.2 times faster (tokens per second, padding excluded).
Writes bench/results/train_throughput.json.
    python bench/train_throughput.py [--model M] [--records N] [--repeats R] [--quick]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import attacks, models, paths, records, train  # noqa: E402
from frag_utils.prompts import batches, collate  # noqa: E402

from _common import machine  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    target = paths.checkpoint_dir("smol", "target")
    parser.add_argument("--model", default=str(target) if models.is_checkpoint(target) else models.SMOLLM2)
    parser.add_argument("--records", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.model, args.records = "tiny", 16
    recs = attacks.attack_records("synthetic", "forget10", "forget_retain")[: args.records]
    config = attacks.AttackConfig(lr=5e-5, batch_size=8, grad_accum=1, warmup_epochs=0.0, bf16=False)
    tok = models.load_tokenizer(args.model if args.model != "tiny" else models.SMOLLM2)
    dataset = train.QADataset(tok, recs, config.chat, config.max_len)
    tokens = sum(len(item["input_ids"]) for item in dataset.items)

    def trainer_loop() -> float:
        model, tokenizer = models.load_model(args.model)
        work = tempfile.mkdtemp(prefix="bench_train_")
        try:
            return attacks.relearn(model, tokenizer, recs, config, work)[1]["train_seconds"]
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def bare_loop() -> float:
        model, _ = models.load_model(args.model)
        model.train()
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        rest = [p for n, p in model.named_parameters() if p.ndim < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                 {"params": rest, "weight_decay": 0.0}], lr=config.lr)
        chunks = list(batches(list(dataset.items), config.batch_size))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / len(chunks))
        torch.manual_seed(config.seed)
        t = time.perf_counter()
        for chunk in chunks:
            batch = collate(chunk, tok.pad_token_id, side="right")
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.bf16):
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    runs = {"trainer": [], "bare": []}
    for _ in range(max(1, args.repeats)):  # interleaved, so drift in the machine hits both alike
        runs["trainer"].append(trainer_loop())
        runs["bare"].append(bare_loop())
    tps = {k: tokens / min(v) for k, v in runs.items()}
    ratio = tps["bare"] / tps["trainer"]
    result = {"model": args.model, "records": len(recs), "tokens_per_epoch": tokens, "seconds": runs,
              "tokens_per_second_best": tps, "bare_over_trainer": ratio, "target_bare_over_trainer": 1.2,
              "quick": args.quick, "machine": machine()}
    # quick runs stay out of git
    out = (paths.cache_dir() / "bench" if args.quick else paths.BENCH_RESULTS_DIR) / "train_throughput.json"
    records.write_json(out, result, records.provenance("bench/train_throughput.py", vars(args)))
    print(f"attack loop {tps['trainer']:.0f} tokens/s, bare loop {tps['bare']:.0f} tokens/s: "
          f"bare/attack {ratio:.2f}x (target <= 1.2x)")


if __name__ == "__main__":
    main()
