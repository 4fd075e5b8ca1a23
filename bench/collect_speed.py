"""The within-method interval of the healthy frontier's Table 3 (notebook 09's costliest table),
scored on the committed smol frontier's attacked checkpoints healthy by the paper's rule (FRAG
against their ΔES per seed, as its listing rounds them), 2000 resamples as notebook 09 draws them:
resample by resample, each stratum (a drawn method's checkpoints on one forget split) ranked on
its own (the path before, `loop`), against every resample's strata ranked together by size
(`stats.stratified_spearman` today). The draws must be identical, bit for bit (the committed
tables regenerate byte for byte); target: today's at most a tenth of the loop's time.
Writes bench/results/collect_speed.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils.report import book, frontier, stats  # noqa: E402

from _common import machine, timed  # noqa: E402


def loop_draws(x: np.ndarray, runs: list, groups: list, cell: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """The stratified ρ of each resample, one resample and one stratum at a time."""
    sizes, idx, yb, parts = stats._resampled(runs, n_boot, seed, tuple(groups))
    draws = []
    for m, e, p in zip(sizes, np.cumsum(sizes), parts):
        drawn = cell[idx[e - m:e]]
        within = [q[drawn[q] == c] for q in p for c in dict.fromkeys(drawn[q])]
        draws.append(float(stats._stratified(x[idx[e - m:e]], yb[e - m:e], within)[0]))
    return np.asarray(draws)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    models = book.Book("smol", n_boot=1).chapter(frontier, display=False)["frontier_models"]
    chosen = models[models.attack_seeds.gt(0) & models.healthy_paper]
    if len(chosen) < 4:
        sys.exit("bench/collect_speed.py needs the committed smol frontier's attacks (4 healthy attacked checkpoints).")
    x = chosen["FRAG_x100"].to_numpy(float)
    runs = [np.asarray(v, float) for v in chosen.delta_es]
    groups = list(chosen.method)
    labels = list(chosen.method + " " + chosen.forget_split)
    cell = np.array([list(dict.fromkeys(labels)).index(c) for c in labels])

    def today():
        sizes, idx, yb, parts = stats._resampled(runs, args.n_boot, 0, tuple(groups))
        return stats._within_draws(x, yb, sizes, idx, parts, cell)

    stats._draws(tuple(len(v) for v in runs), args.n_boot, 0, tuple(groups))  # drawn once, cached: not timed
    new, new_t = timed(today, args.repeats)
    old, old_t = timed(lambda: loop_draws(x, runs, groups, cell, args.n_boot, 0), args.repeats)
    out = {"checkpoints": len(x), "methods": len(set(groups)), "strata": len(set(labels)), "n_boot": args.n_boot,
           "identical": bool(np.array_equal(old, new, equal_nan=True)), "loop_s": old_t, "today_s": new_t,
           "today_over_loop": new_t["min"] / old_t["min"], "target_today_over_loop": 0.1}
    print(f"{len(x)} checkpoints, {out['methods']} methods, {out['strata']} strata, {args.n_boot} resamples: "
          f"loop {old_t['min']:.2f} s, today {new_t['min']:.3f} s ({out['today_over_loop']:.3f}x), "
          f"identical draws: {out['identical']}")
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    (results / "collect_speed.json").write_text(json.dumps({"machine": machine(), "results": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
