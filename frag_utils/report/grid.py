"""The grid itself: the two pilots that chose its settings (``docs/choices.md``), what it costs,
and the runs of the profile that no parameter file lists (a user's rerun or own file)."""
from __future__ import annotations

import pandas as pd

from .. import costs, parameters, runs
from .declared import Table, sourced
from .recorded import DENSE, PROTOCOL_PILOT, STRENGTH_PILOT, name, params, row

RATES = {"lr": "g", "rmu_coeff": "g", "model_lr": "g"}
STRENGTH = Table("strength_pilot", formats=RATES)
PROTOCOL = Table("protocol_pilot", formats=RATES)
GRID_TIMES = Table("grid_times", formats={"hours": ".2f", "median_minutes": ".1f", "estimated_hours": ".2f"})
OTHER_ATTACKS = Table("other_runs_attacks", formats=RATES, block=False)
OTHER_UNLEARNING = Table("other_runs_unlearning", formats=RATES, block=False)
DECLARED = (STRENGTH, PROTOCOL, OTHER_ATTACKS, OTHER_UNLEARNING, GRID_TIMES)
PILOT_SETTINGS = {STRENGTH_PILOT: ("lr", "rmu_coeff"), PROTOCOL_PILOT: ("lr", "batch_size", "grad_accum")}
OTHER_ATTACK_KEYS = ("attack_data", "lr", "optimizer", "epochs", "lora_rank", "forget_split")
# a rule in words: no list of runs says it
TIMES_SOURCES = ("every run the profile's parameter files list; hours from the recorded ones, estimated_hours adds "
                 "the others at the median recorded run of their kind (frag_utils.costs)")


def pilots(rec) -> dict[Table, pd.DataFrame]:
    """``strength_pilot`` (each dense method in bf16 at several learning rates; the grid's own
    forget10 bf16 runs are its rows at the chosen rate) and ``protocol_pilot`` (the forget+retain
    attack at the reference recipe and at the profile's; the grid's own attack of GA on forget10 in
    bf16 is the latter's first row)."""
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
    """Every complete record of the profile that no parameter file of it lists, by name or by
    parameters: the attacks beside the grid's ΔES for the same model and attack data
    (``grid_delta_es``, seed 42), and the notebook-05 runs."""
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
    grid_delta = {(row(r)["unlearned_run"], row(r)["attack_data"]): row(r)["delta_es"]
                  for r in rec.attacks_of_file(rec.grid_06)}
    attacks = pd.DataFrame([
        {"model": rec.label(row(r)["unlearned_run"]), **{k: row(r)[k] for k in OTHER_ATTACK_KEYS},
         "seed": params(r).get("seed"), "es_before": row(r)["es_before"], "es_after": row(r)["es_after"],
         "delta_es": row(r)["delta_es"], "model_utility_after": row(r)["model_utility_after"],
         "grid_delta_es": grid_delta.get((row(r)["unlearned_run"], row(r)["attack_data"]), float("nan")),
         "run": r["run"]} for r in other_06])
    methods = rec.model_frame(other_05, ("lr",))
    print(f"runs outside the profile's parameter files: {len(methods)} of notebook 05, {len(attacks)} of notebook 06")
    return {OTHER_ATTACKS: sourced(attacks, attacks.run if len(attacks) else []),
            OTHER_UNLEARNING: sourced(methods, methods.run)}


def build(book) -> dict[Table, pd.DataFrame]:
    """The chapter: the pilots, what the grid costs (notebook time over every run the profile's
    parameter files list, ``frag_utils.costs``), and the runs outside the grid."""
    rec = book.records
    return {**pilots(rec), GRID_TIMES: sourced(costs.notebook_times(runs.grid(rec.profile)), TIMES_SOURCES),
            **other_runs(rec)}
