"""Write the attack-variant files from the unlearning records.

    python scripts/plan_attack_variants.py [--profile smol]

For each split of frag_utils.report.variants.VARIANT_SPLITS, the attacks of the paper's appendix tables
(learning rate, optimizer, attack data, horizon) and a LoRA attack, each one change of the grid's
forget+retain attack (frag_utils.report.variants.ATTACK_VARIANTS), one file per family
(06_attacks.<family>_<split>.yaml), at seeds 42 and 1, on the split's gold
model and on one healthy frontier checkpoint per method of the paper's at matched utility (the one whose
Model Utility, as a fraction of the target's, is nearest the median of the split's healthy checkpoints of those:
variant_checkpoints below); multiple choice on the target itself too, in a
file of its own (frag_utils.report.MC_TARGET). Chosen from the unlearning records alone, before
any variant is run, and only once every frontier unlearning run of the split is recorded (a later
record could move the median and so the choice). A file once written keeps its entries under their
names: a family's new changes are added to it, and a plan that would drop or rename one of its runs
is refused (they would drop out of the tables; delete the file and its records to plan anew).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from frag_utils.report import frontier, variants
from frag_utils.report.recorded import FRONTIER_05, Records, name, row
from frag_utils.report.variants import ATTACK_VARIANTS, MC_FAMILY, MC_TARGET, variant_base, variants_file

SEEDS = (42, 1)
PAPER = frontier.PAPER_METHODS  # the variants study the paper's methods; those added later leave them be

HEADER = """# {profile}: the attack variants of family {family} on {split} (issue 42), written by
# scripts/plan_attack_variants.py from the unlearning records: each one change of the grid's
# forget+retain attack (06_attacks.table1.yaml's first entry; frag_utils.report.variants.ATTACK_VARIANTS), on
{chosen}# at seed 42 for every checkpoint, then at seed 1. Do not edit by hand.
"""


def variant_checkpoints(rec: Records, forget_split: str) -> dict[str, str]:
    """Label -> 05 run of the variants' checkpoints: the split's gold model of the grid, then per method
    of the paper's the frontier checkpoint healthy by the paper's rule whose utility fraction of the target's is
    nearest the median of all such (the first on a tie); from the unlearning records alone."""
    gold = [r for r in rec.methods_of_file(rec.grid_05)
            if row(r)["method"] == "gold" and row(r)["forget_split"] == forget_split]
    models = frontier.candidates(rec)
    healthy = models[models.healthy_paper & models.forget_split.eq(forget_split) & models.method.isin(PAPER)]
    chosen = {"gold": name(gold[0])} if gold else {}
    if len(healthy):
        frac = healthy.model_utility / healthy.target_model_utility
        off = (frac - frac.median()).abs()
        for label in dict.fromkeys(healthy.model):
            chosen[label] = healthy.run[off[healthy.model.eq(label)].idxmin()].split("/", 1)[1]
    return chosen


def attack_variants(rec: Records, forget_split: str, seeds: tuple[int, ...] = SEEDS) -> dict[str, list]:
    """Per family, its file's entries (:func:`variants_file`): each change on every checkpoint of
    :func:`variant_checkpoints` at each seed, the first family's with the protocol's own attack, less
    what another file plans; and :data:`MC_TARGET`: the target itself with multiple choice."""
    elsewhere = {rec.key(s.params) for f in sorted(rec.params_dir.glob("06_attacks.*.yaml"))
                 if not any(f.name == variants_file(family, forget_split) for family in ATTACK_VARIANTS)
                 for s in rec.planned("06_attacks", f.name)}
    chosen = variant_checkpoints(rec, forget_split).values()
    first = next(iter(ATTACK_VARIANTS))
    plans = {}
    for family, changes in ATTACK_VARIANTS.items():
        entries = [{**variant_base(rec, run, forget_split), "seed": seed, **change}
                   for seed in seeds for run in chosen for change in ({},) * (family == first) + changes]
        plans[family] = [e for e in entries if rec.key(e) not in elsewhere]
    plans[MC_TARGET] = [{**rec.protocol, "model": "profile-target", "forget_split": forget_split,
                         "attack_data": "forget_retain", "weights": "fp32", "seed": seed, **change}
                        for seed in seeds for change in ATTACK_VARIANTS[MC_FAMILY]]
    return plans


def kept(file, entries: list[dict]) -> bool:
    """Whether ``entries`` hold every run of ``file`` under the same name (new ones may be added)."""
    import tempfile

    from frag_utils import runs

    with tempfile.TemporaryDirectory() as tmp:
        new = Path(tmp) / file.name
        new.write_text(yaml.safe_dump(entries, sort_keys=False))
        planned = {s.name: s.params for s in runs.plan_run("06_attacks", new)}
    return all(planned.get(s.name) == s.params for s in runs.plan_run("06_attacks", file))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smol")
    args = parser.parse_args()
    rec = Records(args.profile)
    for split in variants.VARIANT_SPLITS:
        planned = [s for s in rec.planned("05_unlearn", FRONTIER_05)
                   if s.params["forget_split"] == split and s.params["method"] in PAPER]
        missing = [s.name for s in planned if not s.is_complete()]
        if missing or not planned:
            print(f"{split}: {len(missing)} of the {len(planned)} frontier unlearning runs are not recorded yet "
                  f"(e.g. {missing[:1]}); nothing written: the choice waits for all of them")
            continue
        chosen = variant_checkpoints(rec, split)
        listing = ("# the split's gold model and one healthy frontier checkpoint per method at matched utility:\n"
                   + "".join(f"#   {label}: {run}\n" for label, run in chosen.items()))
        for family, entries in attack_variants(rec, split).items():
            body = yaml.safe_dump(entries, sort_keys=False, default_flow_style=None, width=1000)  # an entry a line
            file = rec.params_dir / variants_file(family, split)
            if file.is_file() and not kept(file, entries):
                raise SystemExit(f"{file} exists with entries this plan drops or renames: its recorded runs would "
                                 "drop out of the tables. Delete it and its records in papermill_runs/06_attacks/ to "
                                 "plan anew.")
            on = "# the target itself (profile-target: notebook 02's target), the table's reference row:\n" \
                if family == MC_TARGET else listing
            file.write_text(HEADER.format(profile=args.profile, family=family, split=split, chosen=on) + body)
            print(f"{file.name}: {len(entries)} attacks of "
                  f"{'the target' if family == MC_TARGET else f'{len(chosen)} checkpoints'}")


if __name__ == "__main__":
    main()
