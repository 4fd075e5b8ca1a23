"""Write the attack-variant files from the unlearning records (issue 42).

    python scripts/plan_attack_variants.py [--profile smol]

For each split of frag_utils.collect.VARIANT_SPLITS, the attacks of the paper's appendix tables
(learning rate, optimizer, attack data, horizon) and a LoRA attack, each one change of the grid's
forget+retain attack (frag_utils.collect.ATTACK_VARIANTS), one file per family
(06_attacks.<family>_<split>.yaml), at seeds 42 and 1, on the split's gold
model and on one healthy frontier checkpoint per method at matched utility (the one whose Model
Utility, as a fraction of the target's, is nearest the median of the split's healthy checkpoints:
frag_utils.collect.Collection.variant_checkpoints). Chosen from the unlearning records alone, before
any variant is run; run it once the split's frontier unlearning runs are recorded. The protocol's
own attack is not listed: the frontier's and the grid's attack files hold it.
"""
from __future__ import annotations

import argparse

import yaml

from frag_utils import collect

HEADER = """# {profile}: the attack variants of family {family} on {split} (issue 42), written by
# scripts/plan_attack_variants.py from the unlearning records: each one change of the grid's
# forget+retain attack (06_attacks.table1.yaml's first entry; frag_utils.collect.ATTACK_VARIANTS), on
# the split's gold model and one healthy frontier checkpoint per method at matched utility:
{chosen}# at seed 42 for every checkpoint, then at seed 1. Do not edit by hand.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smol")
    args = parser.parse_args()
    grid = collect.Collection(args.profile)
    for split in collect.VARIANT_SPLITS:
        chosen = grid.variant_checkpoints(split)
        if len(chosen) < 2:
            print(f"{split}: no healthy frontier checkpoint recorded yet; nothing written")
            continue
        listing = "".join(f"#   {label}: {run}\n" for label, run in chosen.items())
        for family, entries in grid.attack_variants_plan(split).items():
            body = yaml.safe_dump(entries, sort_keys=False, default_flow_style=None, width=1000)  # an entry a line
            file = collect.variants_file(family, split)
            (grid.params_dir / file).write_text(HEADER.format(profile=args.profile, family=family, split=split,
                                                              chosen=listing) + body)
            print(f"{file}: {len(entries)} attacks of {len(chosen)} checkpoints")


if __name__ == "__main__":
    main()
