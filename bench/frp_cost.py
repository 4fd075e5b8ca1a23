"""FRP's pruning step against the calibration forward passes it needs.

FRP needs activation norms of the original model on forget and retain text (400 sequences of
each in the paper), then ranks and zeroes entries row by row. This measures both on this
machine; the ranking should be a small fraction of the calibration. No target is set by the
issue: the ratio is reported. Writes bench/results/frp_cost.json.
    python bench/frp_cost.py [--model M] [--n-calib N] [--repeats R] [--quick]
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import calibration, data, models, paths, pruning, records  # noqa: E402

from _common import machine, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    target = paths.checkpoint_dir("smol", "target")
    parser.add_argument("--model", default=str(target) if models.is_checkpoint(target) else models.SMOLLM2)
    parser.add_argument("--n-calib", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.model, args.n_calib = "tiny", 8
    model, tokenizer = models.load_model(args.model)
    cfg = calibration.CalibConfig(n=args.n_calib)
    mlp = calibration.select_modules(model, "mlp")
    forget, retain = data.load_split("synthetic", "forget10"), data.load_split("synthetic", "retain90")

    def calibrate():
        return (calibration.activation_norms(model, tokenizer, forget, mlp, cfg),
                calibration.activation_norms(model, tokenizer, retain, mlp, cfg))

    (xf, xr), calib_t = timed(calibrate, args.repeats)

    def prune():
        clone = copy.deepcopy(model)
        return pruning.frp_prune(calibration.select_modules(clone, "mlp"), xf, xr, rho=0.03)

    _, prune_t = timed(prune, args.repeats)
    _, copy_t = timed(lambda: copy.deepcopy(model), args.repeats)  # the copy is not FRP's cost
    prune_only = max(prune_t["min"] - copy_t["min"], 0.0)
    result = {"model": args.model, "n_calib": args.n_calib, "calibration_seconds": calib_t,
              "prune_seconds_including_copy": prune_t, "copy_seconds": copy_t, "prune_seconds": prune_only,
              "prune_over_calibration": prune_only / calib_t["min"], "quick": args.quick, "machine": machine()}
    # quick runs stay out of git
    out = (paths.cache_dir() / "bench" if args.quick else paths.BENCH_RESULTS_DIR) / "frp_cost.json"
    records.write_json(out, result, records.provenance("bench/frp_cost.py", vars(args)))
    print(f"calibration ({args.n_calib} sequences per split) {calib_t['min']:.1f} s; FRP ranking and zeroing "
          f"{prune_only:.2f} s: {result['prune_over_calibration']:.3f}x the calibration")


if __name__ == "__main__":
    main()
