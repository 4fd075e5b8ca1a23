"""FRAG end to end against one forget+retain relearning attack, on the same model and split.

The paper's practical claim: FRAG is a cheap stand-in for running the attack (about 60 times
cheaper at 1B). Here, on this machine, one run of each:
* FRAG: load the original, calibrate it on forget and retain text (uncached), compare the
  unlearned checkpoint's weights;
* the attack: one epoch of fine-tuning the unlearned model on forget+retain at the smol grid's
  settings (fp32 in deterministic mode since 2026-11-25; bf16 autocast before; batch 8, lr 5e-5),
  training only (its evaluation excluded).
Target: FRAG at least 100 times cheaper. Also timed: FRAG with the original's calibration
already made (scoring one more checkpoint against the same original: the comparison alone).
Writes bench/results/frag_vs_attack.json.
    python bench/frag_vs_attack.py [--original M] [--unlearned DIR] [--repeats R] [--quick]
``--quick`` runs the tiny model on a few records (a check that the script works, not a measurement).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import attacks, calibration, data, frag, models, paths, pruning, records  # noqa: E402

from _common import machine, timed  # noqa: E402


def default_pair() -> tuple[str, str]:
    """The smol target and its NPO-unlearned checkpoint (from the 05 record), when made; else
    (a fresh machine: records committed, cache empty) the base model and an FRP prune of it, made
    here once. The timings depend on the architecture, not on which update it is."""
    target = paths.checkpoint_dir("smol", "target")
    original = str(target) if models.is_checkpoint(target) else models.SMOLLM2
    record = paths.RUNS_DIR / "05_unlearn" / "smol__method=npo" / "results.json"
    unlearned = records.read_json(record)["results"]["unlearned"] if record.is_file() else ""
    return original, unlearned


def fallback_unlearned(original: str) -> str:
    out = paths.cache_dir() / "bench" / "frp_pruned_small_calibration"
    if not models.is_checkpoint(out):
        pruning.prune_checkpoint(original, out, method="frp", sparsity=0.03, calib=calibration.CalibConfig(n=16))
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    original, unlearned = default_pair()
    parser.add_argument("--original", default=original)
    parser.add_argument("--unlearned", default=unlearned)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    limit = 8 if args.quick else None
    if args.quick:  # a tiny pair made here
        args.original = "tiny"
        model, tok = models.load_model("tiny")
        args.unlearned = str(Path(tempfile.mkdtemp()) / "tiny_noisy")
        sd, _ = pruning.edited_copy(model, lambda mods: {n: m.weight.data.mul_(0.99) for n, m in mods.items()})
        model.load_state_dict(sd, strict=False)
        models.save_checkpoint(model, tok, args.unlearned)
    if not args.unlearned or not models.is_checkpoint(args.unlearned):
        if args.unlearned != parser.get_default("unlearned"):
            sys.exit(f"No unlearned checkpoint at {args.unlearned}: pass a checkpoint directory.")
        print(f"The smol NPO checkpoint is not in the cache ({args.unlearned or 'no record'}): timing an FRP "
              "prune of the original instead.", flush=True)
        args.unlearned = fallback_unlearned(args.original)
    forget = data.load_split("synthetic", "forget10", limit)
    retain = data.load_split("synthetic", "retain90", limit)
    cfg = calibration.CalibConfig(n=128)

    def frag_end_to_end():
        model, tokenizer = models.load_model(args.original)
        modules = calibration.select_modules(model, "all")
        xf = calibration.activation_norms(model, tokenizer, forget, modules, cfg)
        xr = calibration.activation_norms(model, tokenizer, retain, modules, cfg)
        return frag.compute_frag(frag.state_dict_of(model), frag.SafetensorsCheckpoint(args.unlearned), xf, xr).frag

    score, frag_t = timed(frag_end_to_end, args.repeats)

    # the comparison alone, in this process: what scoring one more checkpoint against an already
    # calibrated original costs inside a notebook loop (the `frag score` command adds its process
    # start and imports, a few seconds; see frag_cost.json)
    model, tokenizer = models.load_model(args.original)
    modules = calibration.select_modules(model, "all")
    xf = calibration.activation_norms(model, tokenizer, forget, modules, cfg)
    xr = calibration.activation_norms(model, tokenizer, retain, modules, cfg)
    w0 = frag.state_dict_of(model) if args.quick else frag.SafetensorsCheckpoint(frag.checkpoint_folder(args.original))
    n_calib = {"forget": len(calibration.select_records(forget, cfg)),
               "retain": len(calibration.select_records(retain, cfg))}
    del model
    _, compare_t = timed(lambda: frag.compute_frag(w0, frag.SafetensorsCheckpoint(args.unlearned), xf, xr),
                         args.repeats)

    attack_records = attacks.attack_records("synthetic", "forget10", "forget_retain")[: limit or None]
    config = attacks.AttackConfig(lr=5e-5, batch_size=8, grad_accum=1, warmup_epochs=0.0, bf16=False)

    def attack():
        model, tokenizer = models.load_model(args.unlearned)
        work = tempfile.mkdtemp(prefix="bench_attack_")
        try:
            return attacks.relearn(model, tokenizer, attack_records, config, work)[1]["global_steps"]
        finally:
            shutil.rmtree(work, ignore_errors=True)

    steps, attack_t = timed(attack, 1)
    ratio = attack_t["min"] / frag_t["min"]
    result = {"original": args.original, "unlearned": args.unlearned, "frag": score, "frag_seconds": frag_t,
              "attack_seconds": attack_t, "attack_steps": steps, "attack_records": len(attack_records),
              "attack_over_frag": ratio, "target_attack_over_frag": 100.0,
              "calibration_sequences": n_calib, "frag_cached_seconds": compare_t,
              "attack_over_frag_cached": attack_t["min"] / compare_t["min"],
              "quick": args.quick, "machine": machine()}
    # quick runs stay out of git
    out = (paths.cache_dir() / "bench" if args.quick else paths.BENCH_RESULTS_DIR) / "frag_vs_attack.json"
    records.write_json(out, result, records.provenance("bench/frag_vs_attack.py", vars(args)))
    print(f"FRAG end to end {frag_t['min']:.1f} s (median {frag_t['median']:.1f}); one forget+retain attack "
          f"{attack_t['min']:.1f} s ({steps} steps): the attack costs {ratio:.1f}x FRAG (target >= 100x); "
          f"{result['attack_over_frag_cached']:.0f}x the comparison alone, the original's calibration made "
          f"({compare_t['min']:.1f} s)")


if __name__ == "__main__":
    main()
