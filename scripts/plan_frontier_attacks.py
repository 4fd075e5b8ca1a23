"""Write the healthy frontier's attack files from the unlearning records (issue 39).

    python scripts/plan_frontier_attacks.py [--profile smol]

For each split of 05_unlearn.frontier.yaml, every recorded checkpoint that forgets and is healthy
by either rule of docs/choices.md ("The healthy frontier"; frag_utils.analysis.healthy_by_rule) gets
the faithful grid's forget+retain attack at seeds 42 and 1, in
papermill_runs/params/<profile>/06_attacks.frontier_<split>.yaml. The rule reads the unlearning
records alone, never an attack. Run it again as more unlearning records land: the files only grow,
and the runs' names stay as they were (one file per split).
"""
from __future__ import annotations

import argparse

import yaml

from frag_utils import collect

HEADER = """# {profile}: the healthy frontier's relearning attacks on {split} (issue 39), written by
# scripts/plan_frontier_attacks.py from the records of 05_unlearn.frontier.yaml: every checkpoint that
# takes forget ES at least 0.1 below the target's and keeps Model Utility (or Model Utility without its
# real-authors ROUGE) at least half the target's, decided before any of them was attacked
# (docs/choices.md, "The healthy frontier"); the faithful grid's forget+retain attack (the settings of
# 06_attacks.table1.yaml), at seed 42 for every checkpoint, then at seed 1. Do not edit by hand.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smol")
    args = parser.parse_args()
    grid = collect.Collection(args.profile)
    for file in collect.FRONTIER_06:
        split = file.split("_")[-1].split(".")[0]
        entries = grid.frontier_attack_plan(split)
        if not entries:
            print(f"{file}: no healthy checkpoint on {split} recorded yet; not written")
            continue
        body = yaml.safe_dump(entries, sort_keys=False, default_flow_style=None, width=1000)  # an entry a line
        text = HEADER.format(profile=args.profile, split=split) + body
        (grid.params_dir / file).write_text(text)
        print(f"{file}: {len(entries)} attacks of {len(entries) // len(collect.FRONTIER_SEEDS)} checkpoints")


if __name__ == "__main__":
    main()
