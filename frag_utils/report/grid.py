"""The grid itself: the pilots that chose its settings, what it costs, the runs no file lists."""
from __future__ import annotations

import pandas as pd

from .. import costs, parameters, runs
from .book import Table, sourced
from .recorded import DENSE, FRONTIER_06, PROTOCOL_PILOT, STRENGTH_PILOT, name, params, row

RATES = dict.fromkeys(("lr", "rmu_coeff", "model_lr"), "g")
STRENGTH = Table("strength_pilot", RATES, shown=(
    "model", "weights", "forget_split", "lr", "rmu_coeff", "es", "es_retain", "model_utility", "l2_all", "FRAG_x100",
    "target_es"))
PROTOCOL = Table("protocol_pilot", RATES)
GRID_TIMES = Table("grid_times", {"hours": ".2f", "median_minutes": ".1f", "estimated_hours": ".2f"})
OTHER_ATTACKS = Table("other_runs_attacks", RATES, block=False, shown=(
    "model", "forget_split", "attack_data", "optimizer", "lr", "epochs", "lora_rank", "seed", "es_after", "delta_es",
    "grid_delta_es", "model_utility_after"))
OTHER_UNLEARNING = Table("other_runs_unlearning", RATES, block=False, shown=(
    "model", "weights", "forget_split", "lr", "es", "es_retain", "model_utility", "l2_all", "FRAG_x100", "target_es",
    "target_model_utility"))
DECLARED = (STRENGTH, PROTOCOL, OTHER_ATTACKS, OTHER_UNLEARNING, GRID_TIMES)
PILOT_SETTINGS = {STRENGTH_PILOT: ("lr", "rmu_coeff"), PROTOCOL_PILOT: ("lr", "batch_size", "grad_accum")}
OTHER_ATTACK_KEYS = ("attack_data", "lr", "optimizer", "epochs", "lora_rank", "forget_split")
# a rule in words: no list of runs says it
TIMES_SOURCES = ("every run the profile's parameter files list; hours from the recorded ones, estimated_hours adds "
                 "the others at the median recorded run of their kind (frag_utils.costs)")


def pilots(rec) -> dict[Table, pd.DataFrame]:
    """Each dense method in bf16 at several learning rates (the grid's at the chosen one), and the forget+retain
    attack at the reference recipe and at the profile's (the grid's own attack of GA on forget10 in bf16)."""
    strength = rec.methods_of_file(STRENGTH_PILOT) + rec.forget10_bf16(*DENSE)
    ga = {name(r) for r in rec.forget10_bf16("ga")}
    protocol = rec.attacks_of_file(PROTOCOL_PILOT) + [  # the grid's own attack is the scaled recipe on GA
        r for r in rec.attacks_of_file(rec.grid_06)
        if row(r)["attack_data"] == "forget_retain" and row(r)["unlearned_run"] in ga]
    attack_rows = pd.DataFrame([
        {"model": rec.label(row(r)["unlearned_run"]),
         "model_lr": params(rec.method_by_run[row(r)["unlearned_run"]])["lr"],
         **{k: params(r)[k] for k in PILOT_SETTINGS[PROTOCOL_PILOT]},
         **{k: row(r)[k] for k in ("optimizer_steps", "es_before", "es_after", "delta_es")}, "run": r["run"]}
        for r in protocol if row(r)["unlearned_run"] in rec.method_by_run])
    table = rec.model_frame(strength, PILOT_SETTINGS[STRENGTH_PILOT])
    if len(table):
        table = table.assign(rmu_coeff=table.rmu_coeff.where(table.method.eq("rmu"))).sort_values(
            ["method", "lr"], kind="stable").reset_index(drop=True)
    return {STRENGTH: sourced(table, [r["run"] for r in strength]),
            PROTOCOL: sourced(attack_rows, attack_rows.run if len(attack_rows) else [])}


def other_runs(rec) -> dict[Table, pd.DataFrame]:
    """The records no parameter file of the profile lists, by name or by parameters: the attacks
    (beside the grid's ΔES of the same model, data and seed, ``grid_delta_es``) and the 05 runs."""
    specs = runs.grid(rec.profile) if rec.profile in runs.profiles() else []
    defaults = {nb: parameters.notebook_defaults(nb) for nb in ("05_unlearn", "06_attacks")}

    def identity(notebook, p):  # a record the grid holds under another name is the grid's
        return notebook, parameters.params_key(p, defaults[notebook], notebook=notebook)

    in_grid = ({f"{s.notebook.stem}/{s.name}" for s in specs}
               | {identity(s.notebook.stem, s.params) for s in specs if s.notebook.stem in defaults})

    def user_run(notebook, r):
        return r["run"] not in in_grid and identity(notebook, params(r)) not in in_grid

    other_05 = [r for r in rec.method_runs if user_run("05_unlearn", r)]
    other_06 = [r for r in rec.attack_runs if r["run"] not in rec.stale and user_run("06_attacks", r)]
    # the grid's own attack of the same model and data at the same seed: Table 1's, or the healthy frontier's
    grid_attacks = [*rec.attacks_of_file(rec.grid_06), *(r for f in FRONTIER_06 for r in rec.attacks_of_file(f))]
    grid_delta = {(row(r)["unlearned_run"], row(r)["attack_data"], params(r).get("seed")): row(r)["delta_es"]
                  for r in grid_attacks}
    attacks = pd.DataFrame([
        {"model": rec.label(row(r)["unlearned_run"]), **{k: row(r)[k] for k in OTHER_ATTACK_KEYS},
         "seed": params(r).get("seed"), "es_before": row(r)["es_before"], "es_after": row(r)["es_after"],
         "delta_es": row(r)["delta_es"], "model_utility_after": row(r)["model_utility_after"],
         "grid_delta_es": grid_delta.get((row(r)["unlearned_run"], row(r)["attack_data"], params(r).get("seed")),
                                         float("nan")),
         "run": r["run"]} for r in other_06])
    methods = rec.model_frame(other_05, ("lr",))
    print(f"runs outside the profile's parameter files: {len(methods)} of notebook 05, {len(attacks)} of notebook 06")
    return {OTHER_ATTACKS: sourced(attacks, attacks.run if len(attacks) else []),
            OTHER_UNLEARNING: sourced(methods, methods.run)}


def build(book) -> dict[Table, pd.DataFrame]:
    """The chapter: the pilots, what the grid costs (``frag_utils.costs``), the runs outside it."""
    rec = book.records
    return {**pilots(rec), GRID_TIMES: sourced(costs.notebook_times(runs.grid(rec.profile)), TIMES_SOURCES),
            **other_runs(rec)}
