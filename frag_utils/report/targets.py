"""How far the target's training seed moves what the grid measures: notebook 02 at each seed, and
forget10's Table 3 checkpoints unlearned again from the seed-43 target."""
from __future__ import annotations

import pandas as pd

from .. import drift, paths
from . import tables
from .book import Table, sourced
from .recorded import SECOND_TARGET_06, row, short_label

TARGET_SEEDS = Table("target_seeds")
SECOND_TARGET = Table("second_target", shown=("model", "target_es_42", "target_es_43", "delta_es_42", "delta_es_43",
                                              "delta_es_shift", "attack_seed_range_42", "l2_all_42", "l2_all_43",
                                              "FRAG_x100_42", "FRAG_x100_43"))
DECLARED = (TARGET_SEEDS, SECOND_TARGET)
PREDICTORS = ("es_before", "l2_all", "FRAG_x100", "A_f_x100", "A_r_x100")


def target_seeds(rec) -> pd.DataFrame:
    """Each number of notebook 02 the tolerance file judges (:data:`drift.SEED_METRICS`) at each
    training seed (:data:`drift.SEED_RUNS`), with its mean, standard deviation and range."""
    evaluations = drift.recorded_seed_evaluations() if rec.profile == "smol" else {}  # the seeds are smol's
    evaluations = evaluations if len(evaluations) > 1 else {}  # one seed has no spread
    # each run's training seed (drift.SEED_RUNS; smol, the first, names none)
    seeds = [int(run.rsplit("=", 1)[1]) if "seed=" in run else paths.TARGET_SEED for run in evaluations]
    rows = []
    for path, values in drift.seed_numbers(list(evaluations.values())).items():
        values = pd.Series(values, index=seeds)
        rows.append({"number": path, **{f"seed_{seed}": v for seed, v in values.items()},
                     "mean": values.mean(), "sd": values.std(ddof=1), "range": values.max() - values.min()})
    return sourced(pd.DataFrame(rows), [f"02_target_and_gold/{run}" for run in evaluations])


def second_target(rec, checkpoints: pd.DataFrame) -> pd.DataFrame:
    """Per forget10 Table 3 checkpoint in bf16, its twin from the seed-43 target attacked at seed 42: ΔES, the
    predictors and the target's forget ES on each, the shift, and the first's ΔES range over its seeds."""
    attacks = tables.attack_rows(rec.attacks_of_file(SECOND_TARGET_06), rec.method_by_run, short_label)
    if not len(checkpoints) or not len(attacks):
        return sourced(pd.DataFrame(), [])
    first = checkpoints[checkpoints.weights.eq("bf16") & checkpoints.forget_split.eq("forget10")]
    attacks = attacks.assign(target_es=[row(rec.method_by_run[u])["target_es"] for u in attacks.unlearned_run])
    repeats = [(row(r)["unlearned_run"], r["run"]) for r in rec.forget_retain_repeats()]
    compared, read = [], []
    for _, b in attacks.iterrows():  # b: the twin from the seed-43 target
        if not first.model.eq(b.model).any():
            continue
        a = first[first.model.eq(b.model)].iloc[0]
        seeds = list(a.delta_es)  # the seed-42 target's checkpoint: its ΔES per attack seed
        compared.append({"model": b.model, "target_es_42": a.target_es, "target_es_43": b.target_es,
                         "delta_es_42": seeds[0], "delta_es_43": b.delta_es, "delta_es_shift": b.delta_es - seeds[0],
                         "attack_seed_range_42": drift.attack_seed_range([seeds]), "attack_seeds_42": len(seeds),
                         **{f"{k}_{seed}": t[k] for k in PREDICTORS for seed, t in ((42, a), (43, b))}})
        read += [f"05_unlearn/{a.unlearned_run}", a.run, *[r for u, r in repeats if u == a.unlearned_run],
                 f"05_unlearn/{b.unlearned_run}", b.run]
    return sourced(pd.DataFrame(compared), read)


def build(book) -> dict[Table, pd.DataFrame]:
    """The chapter (after the paper's)."""
    return {TARGET_SEEDS: target_seeds(book.records),
            SECOND_TARGET: second_target(book.records, book.table3_checkpoints)}
