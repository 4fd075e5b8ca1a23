"""Write the healthy frontier's attack and ablation files from the unlearning records.

    python scripts/plan_frontier_attacks.py [--profile smol]

For each split of 05_unlearn.frontier.yaml, every recorded checkpoint that forgets and is healthy
by either rule of docs/choices.md ("The healthy frontier"; frag_utils.report.analysis.healthy_by_rule) gets
the faithful grid's forget+retain attack at seeds 42 and 1, in
papermill_runs/params/<profile>/06_attacks.frontier_<split>.yaml, and a place in the split's one
notebook-07 run (the loss barrier along the line from the target, and FRAG with each importance
term), in 07_ablations.frontier_<split>.yaml at the paper profile's settings. The rule reads the
unlearning records alone, never an attack. Run it again as more unlearning records land: the attack
files only grow, and their runs' names stay as they were (one file per split); a grown list of
checkpoints makes the split's 07 run incomplete (its parameters changed), so it is made again whole.
The 07 runs study the paper's methods (frag_utils.report.frontier.PAPER_METHODS): the methods added beyond them
(SimNPO, IdkDPO, UNDIAL, WGA) are attacked, and leave the 07 runs as they are.
Every attacked checkpoint, and the target on each split for scale, also gets a notebook-10 run (the gradient
norms, sharpness and one-step probe of the attack's loss at its weights) in 10_sharpness.frontier.yaml, with the
attack's batch and peak learning rate.
"""
from __future__ import annotations

import argparse

import yaml

from frag_utils.report import frontier
from frag_utils.report.recorded import FRONTIER_06, FRONTIER_07, FRONTIER_10, Records

FRONTIER_SEEDS = (42, 1)  # the attack seeds of each healthy checkpoint: attack.sh's, then one more
# the frontier's notebook-07 settings: the paper profile's (papermill_runs/params/paper/07_ablations.yaml)
# on the smol target
FRONTIER_ABLATION = {"original": "profile-target", "prompt_template": "openunlearning", "n_calib": 128, "ig_steps": 4,
                     "lmc_stride": 0.05}

HEADER = """# {profile}: the healthy frontier's relearning attacks on {split} (issue 39), written by
# scripts/plan_frontier_attacks.py from the records of 05_unlearn.frontier.yaml: every checkpoint that
# takes forget ES at least 0.1 below the target's and keeps Model Utility (or Model Utility without its
# real-authors ROUGE) at least half the target's, decided before any of them was attacked
# (docs/choices.md, "The healthy frontier"); the faithful grid's forget+retain attack (the settings of
# 06_attacks.table1.yaml), at seed 42 for every checkpoint, then at seed 1. Do not edit by hand.
"""

HEADER_10 = """# {profile}: the attack's loss measured at the weights of every checkpoint the frontier attacks, both
# splits, and at the target on each split for scale (issue 82): the forget and forget+retain gradient norms,
# random and SAM sharpness of the forget loss and the one-step probe (docs/choices.md, "Which attack-free
# signal ranks relearning?"), with the attack's batch and peak learning rate, written by
# scripts/plan_frontier_attacks.py with the attack files. Do not edit by hand.
"""

HEADER_07 = """# {profile}: the loss barrier and FRAG's importance terms on the healthy frontier's {split} checkpoints
# (issue 39, step 5; issue 42), written by scripts/plan_frontier_attacks.py with the attack file of
# the same split: every checkpoint it attacks, in one notebook-07 run at the paper profile's settings
# (forget-set loss at 21 points from the target to the checkpoint; n_calib 128, 4 integrated-gradient
# steps). Do not edit by hand.
"""


def healthy(rec: Records, forget_split: str):
    """The frontier's checkpoints on ``forget_split`` that forget and are healthy by either rule."""
    models = frontier.candidates(rec)
    return models[(models.healthy_paper | models.healthy_parts) & models.forget_split.eq(forget_split)]


def frontier_attacks(rec: Records, forget_split: str, seeds: tuple[int, ...] = FRONTIER_SEEDS) -> list[dict]:
    """The grid's forget+retain attack of each frontier checkpoint on ``forget_split`` that forgets and
    is healthy by either rule, at each seed (the first for every checkpoint before the next)."""
    return [{**rec.protocol, "unlearned_run": run.split("/", 1)[1], "forget_split": forget_split,
             "attack_data": "forget_retain", "seed": seed} for seed in seeds for run in healthy(rec, forget_split).run]


def frontier_measures(rec: Records, splits: list[str]) -> list[dict]:
    """Notebook 10's run of every checkpoint the attack files attack, then of the target on each split (last: a run
    no record extends computes on the kernel path of its recorded siblings, the checkpoints')."""
    settings = {"profile": rec.profile, "prompt_template": rec.protocol["prompt_template"],
                "batch_size": rec.protocol["batch_size"] * rec.protocol["grad_accum"],
                "probe_lr": rec.protocol["lr"], "eval_limit": rec.protocol["eval_limit"]}
    targets = [{**settings, "model": "profile-target", "forget_split": split} for split in splits]
    return [{**settings, "unlearned_run": run.split("/", 1)[1], "forget_split": split}
            for split in splits for run in healthy(rec, split).run] + targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smol")
    args = parser.parse_args()
    rec = Records(args.profile)
    for file in FRONTIER_06:
        split = file.split("_")[-1].split(".")[0]
        entries = frontier_attacks(rec, split)
        if not entries:
            print(f"{file}: no healthy checkpoint on {split} recorded yet; not written")
            continue
        body = yaml.safe_dump(entries, sort_keys=False, default_flow_style=None, width=1000)  # an entry a line
        text = HEADER.format(profile=args.profile, split=split) + body
        (rec.params_dir / file).write_text(text)
        print(f"{file}: {len(entries)} attacks of {len(entries) // len(FRONTIER_SEEDS)} checkpoints")
        chosen = healthy(rec, split)
        checkpoints = [run.split("/", 1)[1] for run in chosen[chosen.method.isin(frontier.PAPER_METHODS)].run]
        ablation = {"profile": args.profile, **FRONTIER_ABLATION, "forget_split": split,
                    "unlearned_runs": ",".join(checkpoints)}
        file_07 = FRONTIER_07[FRONTIER_06.index(file)]
        (rec.params_dir / file_07).write_text(HEADER_07.format(profile=args.profile, split=split)
                                               + yaml.safe_dump([ablation], sort_keys=False, width=100000))
        print(f"{file_07}: the barrier and the importance terms of {len(checkpoints)} checkpoints")
    splits = [f.split("_")[-1].split(".")[0] for f in FRONTIER_06]
    measures = frontier_measures(rec, [s for s in splits if len(healthy(rec, s))])
    (rec.params_dir / FRONTIER_10).write_text(HEADER_10.format(profile=args.profile) + yaml.safe_dump(
        measures, sort_keys=False, default_flow_style=None, width=1000))
    print(f"{FRONTIER_10}: {len(measures)} checkpoints measured")


if __name__ == "__main__":
    main()
