"""The parameter files that ``scripts/plan_frontier_attacks.py`` and ``scripts/plan_attack_variants.py``
write from the unlearning records (they make no table): the frontier's attacks and notebook-07 runs,
and the attack variants."""
from __future__ import annotations

from . import frontier
from .recorded import name, row
from .variants import ATTACK_VARIANTS, MC_TARGET, VARIANT_SEEDS, variant_base, variants_file

FRONTIER_SEEDS = (42, 1)  # the attack seeds of each healthy checkpoint: attack.sh's, then one more
# the frontier's notebook-07 settings: the paper profile's (papermill_runs/params/paper/07_ablations.yaml)
# on the smol target
FRONTIER_ABLATION = {"original": "profile-target", "prompt_template": "openunlearning", "n_calib": 128, "ig_steps": 4,
                     "lmc_stride": 0.05}


def frontier_attacks(rec, forget_split: str, seeds: tuple[int, ...] = FRONTIER_SEEDS) -> list[dict]:
    """The forget+retain attacks of the frontier's checkpoints on ``forget_split`` that forget and
    are healthy by either rule (:func:`frontier.candidates`), each at every seed of ``seeds`` (the
    first seed for every checkpoint before the next), with the faithful grid's attack settings
    (the first entry of its attack file): the entries of its attack file."""
    models = frontier.candidates(rec)
    chosen = models[(models.healthy_paper | models.healthy_parts) & models.forget_split.eq(forget_split)]
    return [{**rec.protocol, "unlearned_run": run.split("/", 1)[1], "forget_split": forget_split,
             "attack_data": "forget_retain", "seed": seed} for seed in seeds for run in chosen.run]


def variant_checkpoints(rec, forget_split: str) -> dict[str, str]:
    """The checkpoints the attack variants run on (model label -> 05 run name): the split's gold
    model of the faithful grid, then, per method (FRP per veto P), the frontier checkpoint that
    forgets and is healthy by the paper's rule whose Model Utility, as a fraction of the target's,
    is nearest the median of all such checkpoints of the split (the first in file order on a
    tie). Read from the unlearning records alone, as the frontier's healthy rule is."""
    gold = [r for r in rec.methods_of_file(rec.grid_05)
            if row(r)["method"] == "gold" and row(r)["forget_split"] == forget_split]
    models = frontier.candidates(rec)
    healthy = models[models.healthy_paper & models.forget_split.eq(forget_split)]
    chosen = {"gold": name(gold[0])} if gold else {}
    if len(healthy):
        frac = healthy.model_utility / healthy.target_model_utility
        off = (frac - frac.median()).abs()
        for label in dict.fromkeys(healthy.model):
            chosen[label] = healthy.run[off[healthy.model.eq(label)].idxmin()].split("/", 1)[1]
    return chosen


def attack_variants(rec, forget_split: str, seeds: tuple[int, ...] = VARIANT_SEEDS) -> dict[str, list]:
    """Per family of :data:`ATTACK_VARIANTS`, the entries of its file on the split
    (:func:`variants_file`): each change on every checkpoint of :func:`variant_checkpoints`, at
    each seed (the first seed for all before the next); the first family's file also holds the
    protocol's own attack of each checkpoint and seed. An entry another parameter file of the
    profile already plans (the frontier's protocol attacks) is left to that file. :data:`MC_TARGET`
    (a file of its own) attacks the target itself with multiple choice, at each seed: the table's
    reference row."""
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
                        for seed in seeds for change in ATTACK_VARIANTS["multiple_choice"]]
    return plans
