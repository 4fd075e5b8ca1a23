"""Write papermill_runs/tolerance.yaml from the measured spread (the target seeds and the second target).

    python scripts/derive_tolerances.py

Each evaluation number's tolerance is the larger of its range over the smol target's (and the
forget10 gold model's) training seeds 42, 43 and 44 and a floor of 0.02, rounded up to 0.01
(frag_utils.drift.derive_tolerances); the same quantity measured on unlearned and attacked models
takes the same tolerance; ΔES's is the largest range of ΔES over the three attack seeds of a Table 3
checkpoint, rounded up to 0.01; ES before and after the attack and ΔES are at least as wide as their
largest shift between a forget10 Table 3 checkpoint and its twin unlearned from the seed-43 target.
FRAG, its cosines and the L2 norms keep theirs (they are functions of the weights that no seed study
here measures). The rule and the numbers are in
docs/reproducibility.md, "How reruns are judged"; tests/test_verify.py checks that the file covers
the recorded spread.
"""
from __future__ import annotations

import math

from frag_utils import drift
from frag_utils.report import book, paper, targets


def main() -> None:
    current = drift.load_tolerance()
    evaluations = drift.recorded_seed_evaluations()
    lines = [
        "# How far a rerun may land from its record, per metric (the last key of a number's path in",
        "# results.json), before `make verify` fails and the runner's drift table says OUTSIDE.",
        "# A number is absolute; {relative: r} is a fraction of the recorded value. Numbers not named here",
        "# are not judged. Written by scripts/derive_tolerances.py; the rule: docs/reproducibility.md.",
        "#"]
    derived: dict[str, float] = {}
    if len(evaluations) == len(drift.SEED_RUNS):
        spread = drift.seed_spread(list(evaluations.values()))
        derived = drift.derive_tolerances(spread)
        lines += ["# Evaluation numbers: the larger of their range over the training seeds of "
                  f"{', '.join(evaluations)} (notebook 02: target and forget10 gold) and {drift.SEED_FLOOR},",
                  "# rounded up to 0.01; the widest number of each metric, and its range:"]
        lines += [f"#   {m}: {s['range']:.4f} at {s['where']}" for m, s in sorted(spread.items())]
    else:
        print(f"only {sorted(evaluations)} of {drift.SEED_RUNS} are recorded: the evaluation numbers keep their "
              "tolerances (frag run 02_target_and_gold -f smol/02_target_and_gold.seeds.yaml records the others)")
        lines += [f"# Evaluation numbers: kept until the target seeds {', '.join(drift.SEED_RUNS)} are all recorded",
                  "# (set from one cross-machine remake, 2026-11-25)."]
    smol = book.Book("smol", n_boot=1)
    smol.chapter(paper, display=False)
    checkpoints = smol.table3_checkpoints
    attack = drift.attack_seed_range(list(checkpoints.delta_es))
    derived["delta_es"] = math.ceil(attack * 100 - 1e-9) / 100
    lines += [f"# ΔES: the largest range over the three attack seeds of a Table 3 checkpoint, {attack:.4f}."]
    shifts = drift.target_shifts(targets.second_target(smol.records, checkpoints))
    if shifts:  # the unlearned and attacked models' numbers move with the target's seed: at least that far
        lines += ["# ES before and after the attack and ΔES: at least their largest shift between a forget10 Table 3",
                  "# checkpoint of the seed-42 target and its twin from the seed-43 target, rounded up to 0.01:"]
        lines += [f"#   {m}: {s['range']:.4f} at {s['where']}" for m, s in sorted(shifts.items())]
        for m, s in shifts.items():
            derived[m] = max(derived.get(m, 0.0), math.ceil(s["range"] * 100 - 1e-9) / 100)
    lines += ["# FRAG, its cosines and the L2 norms: set from one cross-machine remake (2026-11-25), kept."]
    for k, (absolute, relative) in current.items():
        if k in derived:
            lines.append(f"{k}: {derived.pop(k):g}")
        else:
            lines.append(f"{k}: {{relative: {relative:g}}}" if relative else f"{k}: {absolute:g}")
    lines += [f"{k}: {v:g}" for k, v in derived.items()]  # a metric the file did not name yet
    drift.TOLERANCE_FILE.write_text("\n".join(lines) + "\n")
    print(f"wrote {drift.TOLERANCE_FILE}")


if __name__ == "__main__":
    main()
