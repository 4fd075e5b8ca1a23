"""Write the attack-variant files from the unlearning records.

    python scripts/plan_attack_variants.py [--profile smol]

For each split of frag_utils.report.variants.VARIANT_SPLITS, the attacks of the paper's appendix tables
(learning rate, optimizer, attack data, horizon) and a LoRA attack, each one change of the grid's
forget+retain attack (frag_utils.report.variants.ATTACK_VARIANTS), one file per family
(06_attacks.<family>_<split>.yaml), at seeds 42 and 1, on the split's gold
model and on one healthy frontier checkpoint per method at matched utility (the one whose Model
Utility, as a fraction of the target's, is nearest the median of the split's healthy checkpoints:
frag_utils.report.plans.variant_checkpoints); multiple choice on the target itself too, in a
file of its own (frag_utils.report.variants.MC_TARGET). Chosen from the unlearning records alone, before
any variant is run, and only once every frontier unlearning run of the split is recorded (a later
record could move the median and so the choice). A file once written is not rewritten with other
entries: its runs would drop out of the tables (delete it, and its records, to plan anew).
"""
from __future__ import annotations

import argparse

import yaml

from frag_utils.report import plans, variants
from frag_utils.report.recorded import FRONTIER_05, Records

HEADER = """# {profile}: the attack variants of family {family} on {split} (issue 42), written by
# scripts/plan_attack_variants.py from the unlearning records: each one change of the grid's
# forget+retain attack (06_attacks.table1.yaml's first entry; frag_utils.report.collect.ATTACK_VARIANTS), on
{chosen}# at seed 42 for every checkpoint, then at seed 1. Do not edit by hand.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smol")
    args = parser.parse_args()
    rec = Records(args.profile)
    for split in variants.VARIANT_SPLITS:
        planned = [s for s in rec.planned("05_unlearn", FRONTIER_05) if s.params["forget_split"] == split]
        missing = [s.name for s in planned if not s.is_complete()]
        if missing or not planned:
            print(f"{split}: {len(missing)} of the {len(planned)} frontier unlearning runs are not recorded yet "
                  f"(e.g. {missing[:1]}); nothing written: the choice waits for all of them")
            continue
        chosen = plans.variant_checkpoints(rec, split)
        listing = ("# the split's gold model and one healthy frontier checkpoint per method at matched utility:\n"
                   + "".join(f"#   {label}: {run}\n" for label, run in chosen.items()))
        for family, entries in plans.attack_variants(rec, split).items():
            body = yaml.safe_dump(entries, sort_keys=False, default_flow_style=None, width=1000)  # an entry a line
            file = rec.params_dir / variants.variants_file(family, split)
            if file.is_file() and yaml.safe_load(file.read_text()) != entries:
                raise SystemExit(f"{file} exists with other entries: its recorded runs would drop out of the tables. "
                                 "Delete it and its records in papermill_runs/06_attacks/ to plan anew.")
            on = "# the target itself (profile-target: notebook 02's target), the table's reference row:\n" \
                if family == variants.MC_TARGET else listing
            file.write_text(HEADER.format(profile=args.profile, family=family, split=split, chosen=on) + body)
            print(f"{file.name}: {len(entries)} attacks of "
                  f"{'the target' if family == variants.MC_TARGET else f'{len(chosen)} checkpoints'}")


if __name__ == "__main__":
    main()
