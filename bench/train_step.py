"""One epoch of the smol target's fine-tuning on a sample of its records, step by step, in one run on
one machine: the path before issue 27 (the Trainer's default loss on the full logits, batches in
random order, SmolLM2's default system prompt) against each change since, and against the changes
tried for issue 41:
  1. label_positions: the loss from logits at label positions only (`train.AnswerLossTrainer`),
  2. grouped: and batches grouped by length (`group_by_length`, what the smol target and gold use),
  3. short_prompt: and OpenUnlearning's short system prompt (the smol profile: today's path),
  4. fused_adamw: and PyTorch's fused AdamW (`optimizer: adamw_torch_fused`) for the foreach one,
  5. compiled_layers: and each decoder layer compiled (inductor), every shape dynamic (the layers
     share one graph: what is traced and guarded is one layer, not the model); not adopted (bench/README.md).
Each variant trains a fresh copy of the model for one epoch; its seconds per step (the median of
the steps after the first, which pays start-up and compilation) are the point, beside a large fp32
matrix product's rate on the same threads and the matrix products' share of each step (their
FLOPs counted by the profiler). Each variant's weights after the epoch are compared with the
short_prompt variant's (max |difference|: 0 when the change moves no bit). ``--profile`` adds
where a step's time goes (torch.profiler, self time by operator, steps 2 to 4 of one more
short_prompt epoch, apart from the timed one, which the profiler would slow).
Writes bench/results/train_step.json. Usage:
    python bench/train_step.py [--model M] [--records N] [--variants ...] [--profile] [--quick]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import data, models, paths, prompts, records, train  # noqa: E402

from _common import machine  # noqa: E402

VARIANTS = {  # name: (trainer class, group by length, prompt template, optimizer, decoder layers compiled)
    "old": (Trainer, False, "model", "adamw_torch", False),
    "label_positions": (None, False, "model", "adamw_torch", False),
    "grouped": (None, True, "model", "adamw_torch", False),
    "short_prompt": (None, True, "openunlearning", "adamw_torch", False),
    "fused_adamw": (None, True, "openunlearning", "adamw_torch_fused", False),
    "compiled_layers": (None, True, "openunlearning", "adamw_torch_fused", True),
}
BASE = "short_prompt"  # today's path: the others' weights are compared with its


class StepTimes(TrainerCallback):
    """Wall seconds of every optimizer step, and (with ``profile``) a torch.profiler over steps 2 to 4."""

    def __init__(self, profile: bool = False):
        self.times: list[float] = []
        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True,
                                               schedule=torch.profiler.schedule(wait=1, warmup=0, active=3, repeat=1)
                                               ) if profile else None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.profiler:
            self.profiler.start()

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)
        if self.profiler:
            self.profiler.step()

    def on_train_end(self, args, state, control, **kwargs):
        if self.profiler:
            self.profiler.stop()


def matmul_gflops(threads: int, n: int = 2048, repeats: int = 5) -> float:
    """The rate of an n x n x n fp32 matrix product on these threads (the best of ``repeats``)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def where_time_goes(prof: torch.profiler.profile, steps: int) -> dict:
    """Self CPU seconds per step by kind of operator (and the 12 costliest operators), from the profile."""
    kinds = {"matrix products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_mkl_linear",
                                 "mkldnn", "aten::linear"),
             "attention": ("scaled_dot_product", "_flash_attention", "_efficient_attention"),
             "optimizer": ("_fused_adamw", "_foreach_", "aten::lerp", "Optimizer."),
             "embedding": ("embedding",),
             "softmax, loss": ("softmax", "nll_loss", "cross_entropy")}
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    share: dict[str, float] = {}
    for e in events:
        kind = next((k for k, keys in kinds.items() if any(s in e.key for s in keys)), "elementwise and other")
        share[kind] = share.get(kind, 0.0) + e.self_cpu_time_total / 1e6 / steps
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]
    return {"seconds_per_step_by_kind": {k: round(v, 3) for k, v in sorted(share.items(), key=lambda kv: -kv[1])},
            "top_operators": [{"op": e.key, "seconds_per_step": round(e.self_cpu_time_total / 1e6 / steps, 3),
                               "calls_per_step": e.count / steps} for e in top],
            "matmul_gflop_per_step": sum(e.flops for e in events) / 1e9 / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=models.SMOLLM2)
    parser.add_argument("--records", type=int, default=96, help="first N records of the full split")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--profile", action="store_true", help=f"profile steps 2 to 4 of {BASE}")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None, help="the JSON to write (default: bench/results/train_step.json)")
    args = parser.parse_args()
    if args.quick:
        args.model, args.records = "tiny", 32
    if BASE not in args.variants:
        args.variants = [BASE, *args.variants]
    recs = data.load_split("synthetic", "full", args.records)
    threads = torch.get_num_threads()
    per_step, first_step, totals, steps, tokens, losses, weights, apart = {}, {}, {}, {}, {}, {}, {}, {}
    profile = None
    for name in [*args.variants, *(["profile"] if args.profile else [])]:  # profiled apart: it slows the steps
        profiled = name == "profile"
        trainer_cls, grouped, template, optimizer, compiled = VARIANTS[BASE if profiled else name]
        prompts.set_template(template)
        config = train.TrainConfig(epochs=1.0, lr=2e-4, batch_size=16, grad_accum=1, warmup_epochs=0.0,
                                   scheduler="constant", group_by_length=grouped, seed=42, device="cpu",
                                   optimizer=optimizer)
        model, tokenizer = models.load_model(args.model, seed=42)
        if compiled:  # in place, each decoder layer: one traced graph serves them all
            for layer in model.model.layers:
                layer.compile(dynamic=True)
        dataset = train.QADataset(tokenizer, recs, config.chat, config.max_len)
        timer = StepTimes(profile=profiled)
        work = tempfile.mkdtemp(prefix="bench_step_")
        try:
            trainer = train.make_trainer(model, tokenizer, dataset, config, work, trainer_cls=trainer_cls,
                                         count_tokens=True, callbacks=[timer])
            summary = train.run_trainer(trainer, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        torch.compiler.reset()
        if profiled:
            profile = where_time_goes(timer.profiler, 3)
            continue
        steps[name], totals[name] = summary["global_steps"], summary["train_seconds"]
        first_step[name] = timer.times[0]
        per_step[name] = statistics.median(timer.times[1:]) if len(timer.times) > 1 else timer.times[0]
        tokens[name] = sum(len(item["input_ids"]) for item in dataset.items)
        losses[name] = summary["final_train_loss"]
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if name == BASE:
            weights = state
        apart[name] = state
    prompts.set_template("model")
    differences = {name: max(float((s[k] - weights[k]).abs().max()) for k in weights) if _same_data(name) else None
                   for name, s in apart.items()}
    rate = matmul_gflops(threads)
    result = {"model": args.model, "records": len(recs), "batch_size": 16, "threads": threads, "steps": steps,
              "real_tokens": tokens, "seconds_per_step": per_step, "first_step_seconds": first_step,
              "train_seconds": totals, "final_train_loss": losses,
              "over_base": {name: per_step[name] / per_step[BASE] for name in per_step},
              "max_abs_weight_difference_from_base": differences, "matmul_gflops_2048": rate,
              "quick": args.quick, "machine": machine()}
    if "old" in per_step:
        result["over_old"] = {name: per_step[name] / per_step["old"] for name in per_step}
    if profile:
        profile["step_rate_over_matmul_rate"] = profile["matmul_gflop_per_step"] / per_step[BASE] / rate
        # every variant does the same matrix products (the same batches and model): its rate is theirs over its step
        profile["step_rate_over_matmul_rate_by_variant"] = {name: profile["matmul_gflop_per_step"] / sec / rate
                                                           for name, sec in per_step.items() if _same_data(name)}
        result["profile"] = profile
    out = Path(args.out) if args.out else (paths.cache_dir() / "bench" if args.quick else
                                           paths.BENCH_RESULTS_DIR) / "train_step.json"
    records.write_json(out, result, records.provenance("bench/train_step.py", vars(args)))
    print(f"fp32 matrix product (2048^3) on {threads} threads: {rate:.0f} GFLOP/s")
    for name in per_step:
        diff = differences[name]
        print(f"{name:16s} {per_step[name]:6.2f} s/step (first {first_step[name]:6.1f} s)  "
              f"{result['over_base'][name]:.2f}x {BASE}; weights "
              + ("other data" if diff is None else "identical" if diff == 0 else f"up to {diff:.1e} apart"))
    if profile:
        print(f"matrix products {profile['matmul_gflop_per_step']:.0f} GFLOP per step; the whole step at "
              + ", ".join(f"{v:.0%} ({k})" for k, v in profile["step_rate_over_matmul_rate_by_variant"].items())
              + " of the matrix-product rate")
        for kind, sec in profile["seconds_per_step_by_kind"].items():
            print(f"  {kind:24s} {sec:6.2f} s/step")


def _same_data(name: str) -> bool:
    """Variants that train on the same batches as the base (the same prompt and order)."""
    return VARIANTS[name][1:3] == VARIANTS[BASE][1:3]


if __name__ == "__main__":
    main()
