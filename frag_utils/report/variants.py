"""The attack variants (the paper's appendix attack tables, each one change of the grid's attack) on the
checkpoints of ``scripts/plan_attack_variants.py``, the worst within a utility bound, and multiple choice."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import parameters
from .book import Table, sourced
from .recorded import row

VARIANTS, WORST, MULTIPLE_CHOICE = Table("attack_variants"), Table("attack_worst"), Table("multiple_choice")
DECLARED = (VARIANTS, WORST, MULTIPLE_CHOICE)

VARIANT_SPLITS = ("forget10",)
MC_FAMILY = "multiple_choice"  # a family of variant files: the protocol's attack with multiple choice
# each family's file (variants_file) varies one setting of the protocol's attack
ATTACK_VARIANTS = {
    "attack_lr": ({"lr": 5e-5}, {"lr": 1e-4}, {"lr": 4e-4}),  # the protocol's 2e-4 x 1/4, 1/2, 2
    # the paper's optimizer and attack-data rows; plain SGD, Adafactor, the paraphrased forget set and
    # forget+general appended later (issue 65), so the files name them after the first three
    "attack_optim": ({"optimizer": "sgd_momentum"}, {"optimizer": "adagrad"}, {"weight_decay": 0.0},
                     {"optimizer": "sgd"}, {"optimizer": "adafactor"}),
    "attack_data": ({"attack_data": "forget"}, {"attack_data": "retain"}, {"attack_data": "mix50"},
                    {"attack_data": "paraphrased_forget"}, {"attack_data": "forget_general"}),
    "attack_horizon": ({"epochs": 10, "eval_epochs": "1,2,3,5,10"},),
    "attack_lora": ({"lora_rank": 16, "lr": 1e-3},),  # LoRA at 5x the protocol's rate, as LoRA is usually run
    # not a variant: the protocol's attack again with lm-eval's multiple choice before and after it
    MC_FAMILY: ({"eval_mc": True},),
}
MC_CHANCE = 0.25  # four options (frag_utils.multiple_choice)
# the target's own protocol attack with multiple choice (its file apart: the reference row of the
# multiple-choice table, a model no 05 run made)
MC_TARGET = "multiple_choice_target"
UTILITY_BOUND = 0.5  # the worst attack counts only attacks that keep this fraction of the target's Model Utility


def variants_file(family: str, forget_split: str) -> str:
    """The attack file of one family on one split (only the family's settings vary in it)."""
    return f"06_attacks.{family}_{forget_split}.yaml"


def variant_base(rec, run: str, forget_split: str) -> dict:
    """The grid's forget+retain attack of one checkpoint, in fp32 (a bf16 model too: small steps round away)."""
    weights = rec.method_by_run[run]["provenance"]["params"].get("weights") if run in rec.method_by_run else None
    return {**rec.protocol, "unlearned_run": run, "forget_split": forget_split, "attack_data": "forget_retain",
            **({"weights": "fp32"} if weights == "bf16" else {})}


def _label(change: dict) -> str:
    """A variant's name: its changes of the protocol, ``key value``."""
    return ", ".join(f"{k} {parameters._fmt(v)}" for k, v in change.items() if k != "eval_epochs")


def _by_epoch(recs: list[dict], horizon: bool) -> list[tuple[int | None, list[dict]]]:
    """The attack numbers of ``recs`` (one per seed): per evaluated epoch of a horizon run, else its end."""
    if not recs:
        return []
    if not horizon:
        return [(None, [{"es": row(r)["es_after"], "delta_es": row(r)["delta_es"],
                         "model_utility": row(r)["model_utility_after"],
                         "es_retain": row(r).get("es_retain_after", np.nan)} for r in recs])]
    epochs = sorted({int(e) for r in recs for e in r["results"]["epochs"]})
    return [(e, [{"es": r["results"]["epochs"][str(e)]["es"],
                  "delta_es": r["results"]["epochs"][str(e)]["es"] - row(r)["es_before"],
                  "model_utility": r["results"]["epochs"][str(e)]["model_utility"],
                  "es_retain": r["results"]["epochs"][str(e)].get("es_retain", np.nan)}
                 for r in recs if str(e) in r["results"]["epochs"]]) for e in epochs]


def _found(rec, attack_params: dict) -> dict | None:
    return rec.all_attacks.get(rec.key(attack_params))


def _family(rec, split: str, family: str, changes: tuple, used: list[str]) -> list[dict]:
    """One family on one split: per checkpoint, before the attack, the protocol, each change."""
    planned = rec.planned("06_attacks", variants_file(family, split))
    runs_of = list(dict.fromkeys(s.params["unlearned_run"] for s in planned))
    seeds = sorted({s.params["seed"] for s in planned})
    rows = []
    for run in runs_of:
        base, label = variant_base(rec, run, split), rec.label(run)
        first = [r for r in (_found(rec, {**base, "seed": seed}) for seed in seeds) if r is not None]
        model = row(rec.method_by_run[run]) if run in rec.method_by_run else None
        before = row(first[0]) if first else model  # from its first protocol attack, else its 05 row
        if before is not None:
            rows.append({"split": split, "family": family, "variant": "before the attack", "model": label, "seeds": 0,
                         "es_after": before.get("es_before", before.get("es")), "es_after_range": 0.0, "delta_es": 0.0,
                         "model_utility_after": before.get("model_utility_before", before.get("model_utility")),
                         "es_retain_after": (first[0]["results"]["before"].get("es_retain", np.nan) if first
                                             else before.get("es_retain", np.nan))})
        cases = [("protocol", first)] + [
            (_label(change), [r for r in (_found(rec, {**base, "seed": seed, **change}) for seed in seeds)
                              if r is not None]) for change in changes]
        for variant, recs in cases:
            used += [r["run"] for r in recs]
            for epoch, per_seed in _by_epoch(recs, family == "attack_horizon" and variant != "protocol"):
                es = [e["es"] for e in per_seed]  # over the seeds: the mean ES after and its range
                rows.append({"split": split, "family": family,
                             "variant": f"{variant}, after epoch {epoch}" if epoch else variant, "model": label,
                             "seeds": len(es), "es_after": float(np.mean(es)),
                             "es_after_range": float(np.ptp(es)) if len(es) > 1 else np.nan,
                             "delta_es": float(np.mean([e["delta_es"] for e in per_seed])),
                             "model_utility_after": float(np.mean([e["model_utility"] for e in per_seed])),
                             "es_retain_after": float(np.mean([e["es_retain"] for e in per_seed])),
                             "target_model_utility": model["target_model_utility"] if model else float("nan")})
    return rows


def _worst(table: pd.DataFrame) -> pd.DataFrame:
    """Per split and model, the attack with the highest mean ES after within :data:`UTILITY_BOUND`; how many were."""
    attacked = table[table.seeds.gt(0)].drop_duplicates(["split", "variant", "model"])
    attacked = attacked.assign(within=attacked.model_utility_after >= UTILITY_BOUND * attacked.target_model_utility)
    worst = []
    for (split, model), part in attacked.groupby(["split", "model"], sort=False):
        within = part[part.within]
        top = (within.loc[within.es_after.idxmax(), ["variant", "seeds", "es_after", "delta_es",
                                                     "model_utility_after"]].to_dict() if len(within) else
               {"variant": None})  # every attack costs more utility than the bound allows
        worst.append({"split": split, "model": model, **top, "attacks_within_bound": len(within),
                      "attacks": len(part)})
    return pd.DataFrame(worst)


def multiple_choice(rec, found: list[tuple[str, dict]]) -> pd.DataFrame:
    """Per split and model (the target first), the mean over seeds of lm-eval's 4-way accuracy on the
    forget and the utility sets before and after the protocol's attack, with chance."""
    if not found:
        return sourced(pd.DataFrame(), [])
    rows = [{"split": split, "model": rec.label(row(r)["unlearned_run"]) if row(r)["unlearned_run"] else "target",
             **{k: row(r)[k] for k in ("mc_forget_acc_before", "mc_forget_acc_after", "mc_delta_forget_acc",
                                       "mc_utility_acc_before", "mc_utility_acc_after")}} for split, r in found]
    table = pd.DataFrame(rows).groupby(["split", "model"], sort=False)
    return sourced(table.mean().join(table.size().rename("seeds")).reset_index().assign(chance=MC_CHANCE),
                   [r["run"] for _, r in found])


def build(book) -> dict[Table, pd.DataFrame]:
    """The chapter: per family, variant and model the mean over seeds; the worst attack; multiple choice."""
    rec, rows, used, mc = book.records, [], [], []
    for split in VARIANT_SPLITS:
        for family in (MC_TARGET, *ATTACK_VARIANTS):
            if family in (MC_TARGET, MC_FAMILY):
                planned = rec.planned("06_attacks", variants_file(family, split))
                mc += [(split, r) for r in (_found(rec, s.params) for s in planned) if r is not None]
            else:
                rows += _family(rec, split, family, ATTACK_VARIANTS[family], used)
    table, choice = pd.DataFrame(rows), multiple_choice(rec, mc)
    if not len(table) or not (table.seeds.gt(0) & ~table.variant.isin(["before the attack", "protocol"])).any():
        return {VARIANTS: sourced(pd.DataFrame(), []), WORST: sourced(pd.DataFrame(), []), MULTIPLE_CHOICE: choice}
    used = list(dict.fromkeys(used))
    bound = f"Model Utility after the attack at least {UTILITY_BOUND:g} of the target's"
    return {VARIANTS: sourced(table.drop(columns="target_model_utility"), used),
            WORST: sourced(_worst(table), used, utility_bound=bound), MULTIPLE_CHOICE: choice}
