"""What FRAG costs, stage by stage, against the limits each stage could reach.

* calibration (forward passes with hooks) against the same forward passes without hooks: target 1.2x;
* the weight comparison (streaming the unlearned checkpoint) against reading both checkpoints: target 2x;
* peak resident memory of `frag score` against the size of one checkpoint: target 1.5x (with the
  calibration cached, when both checkpoints are streamed; the first, calibrating run is reported too).
The original is the smol target when `make reproduce` has trained it, else the base model; the
unlearned checkpoint is an FRP prune of it (3 % of every MLP row), saved once to the cache.
Writes bench/results/frag_cost.json.
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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import calibration, data, frag, models, paths, pruning, records  # noqa: E402
from frag_utils.prompts import batches, collate  # noqa: E402

from _common import timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    target = paths.checkpoint_dir("smol", "target")
    parser.add_argument("--original", default=str(target) if models.is_checkpoint(target) else models.SMOLLM2)
    parser.add_argument("--n-calib", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    model, tokenizer = models.load_model(args.original)
    cfg = calibration.CalibConfig(n=args.n_calib)
    modules = calibration.select_modules(model, "all")
    forget, retain = data.load_split("synthetic", "forget10"), data.load_split("synthetic", "retain90")

    def calibrate():
        return (calibration.activation_norms(model, tokenizer, forget, modules, cfg),
                calibration.activation_norms(model, tokenizer, retain, modules, cfg))

    run = calibration.backbone(model, modules)  # what calibration runs: the decoder without the head

    def plain_forward():
        with torch.no_grad():
            for recs in (forget, retain):
                enc = calibration.encode_calibration(tokenizer, calibration.select_records(recs, cfg), cfg)
                for chunk in batches(enc, cfg.batch_size):
                    batch = collate(chunk, tokenizer.pad_token_id, side="right")
                    run(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])

    (xf, xr), calib_t = timed(calibrate, args.repeats)
    _, forward_t = timed(plain_forward, args.repeats)

    unlearned = paths.cache_dir() / "bench" / "frp_pruned"
    if not models.is_checkpoint(unlearned):
        sd, _ = pruning.edited_copy(model, lambda mods: pruning.frp_prune(mods, {n: xf[n] for n in mods},
                                                                          {n: xr[n] for n in mods}, rho=0.03))
        pruned, _ = models.load_model(args.original)
        pruned.load_state_dict(sd, strict=False)
        models.save_checkpoint(pruned, tokenizer, unlearned, {"bench": "frp rho=0.03"})
        del pruned
    # the comparison as `frag score` runs it with calibration cached: both checkpoints streamed
    # from disk tensor by tensor, against reading every byte of both
    original_dir = frag.checkpoint_folder(args.original)
    _, compare_t = timed(lambda: frag.compute_frag(frag.SafetensorsCheckpoint(original_dir),
                                                   frag.SafetensorsCheckpoint(unlearned), xf, xr), args.repeats)

    # reading both checkpoints = every byte of their weight files (safetensors' load_file maps the
    # file and may touch nothing, which would make this baseline meaninglessly small)
    _, read_t = timed(lambda: sum(len(f.read_bytes()) for d in (original_dir, unlearned)
                                  for f in sorted(d.glob("*.safetensors"))), args.repeats)
    ckpt_bytes = frag.SafetensorsCheckpoint(unlearned).size_bytes()

    # `frag score` twice in fresh processes with an empty calibration cache (the original given as
    # its folder, so that nothing else of the cache is needed): first it calibrates
    # (the original model is built and run), then it finds both calibrations cached (the original
    # is streamed like the unlearned checkpoint); each reports its own peak resident memory
    scores = {}
    with tempfile.TemporaryDirectory() as cache:
        for kind in ("uncached", "cached"):
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "frag_utils", "score", "--original", str(original_dir),
                                   "--unlearned", str(unlearned), "--n-calib", str(args.n_calib), "--json"],
                                  capture_output=True, text=True, env={**os.environ, "FRAG_CACHE_DIR": cache})
            if proc.returncode != 0:
                sys.exit(proc.stderr)
            out = json.loads(proc.stdout)
            scores[kind] = {"wall_seconds": time.perf_counter() - t, "peak_rss_bytes": out["peak_rss_bytes"],
                            "timings": out["timings"]}
    assert scores["cached"]["timings"]["original_streamed"], "the second frag score should have found its calibration"
    peak_rss = scores["cached"]["peak_rss_bytes"]
    score_wall = scores["cached"]["wall_seconds"]

    result = {
        "original": args.original, "unlearned": str(unlearned), "n_calib": args.n_calib,
        "calibration_seconds": calib_t, "plain_forward_seconds": forward_t,
        "calibration_over_forward": calib_t["min"] / forward_t["min"], "target_calibration_over_forward": 1.2,
        "comparison_seconds": compare_t, "read_both_seconds": read_t,
        "comparison_over_read": compare_t["min"] / read_t["min"], "target_comparison_over_read": 2.0,
        "frag_score_wall_seconds": score_wall, "frag_score_peak_rss_bytes": peak_rss,
        "checkpoint_bytes": ckpt_bytes, "rss_over_checkpoint": peak_rss / ckpt_bytes, "target_rss_over_checkpoint": 1.5,
        "rss_over_checkpoint_uncached": scores["uncached"]["peak_rss_bytes"] / ckpt_bytes,
        "frag_score_runs": scores,
        "machine": {"torch_threads": torch.get_num_threads(), **records.environment()},
    }
    records.write_json(paths.BENCH_RESULTS_DIR / "frag_cost.json", result,
                       records.provenance("bench/frag_cost.py", vars(args)))
    rows = [("calibration / plain forward", result["calibration_over_forward"], 1.2),
            ("comparison / read both checkpoints", result["comparison_over_read"], 2.0),
            ("frag score peak RSS / checkpoint", result["rss_over_checkpoint"], 1.5),
            ("  the same, calibrating (uncached)", result["rss_over_checkpoint_uncached"], 1.5)]
    print(f"{'ratio':40}{'measured':>10}{'target':>8}")
    for name, got, want in rows:
        print(f"{name:40}{got:>10.2f}{want:>8.1f}  {'met' if got <= want else 'missed'}")
    print(f"calibration {calib_t['min']:.1f} s, comparison {compare_t['min']:.1f} s, frag score {score_wall:.1f} s")


if __name__ == "__main__":
    main()
