"""The healthy frontier: every method at several strengths (``05_unlearn.frontier.yaml``), its
candidates healthy or not, Table 3 over the attacked healthy checkpoints per healthy rule, ΔES at
matched utility, and the loss barrier and FRAG's importance terms on them (notebook 07).

Which checkpoints forget and are healthy is decided from the unlearning records alone: what the
attacks of these checkpoints show enters nothing there.
"""
from __future__ import annotations

import pandas as pd

from . import analysis, plots, tables
from .declared import Table, sourced
from .recorded import (
    FRONTIER_05,
    FRONTIER_06,
    FRONTIER_07,
    concat,
    made,
    row,
    scored_by_07,
    seeds_by_checkpoint,
    short_label,
)

HEALTH = {"healthy_rules": analysis.HEALTHY_RULES,
          "forgets": f"forget ES at least {analysis.MIN_FORGETTING:g} below the target's"}
MODELS = Table("frontier_models", formats={"strength": "g"})
UTILITY_PARTS = Table("frontier_utility_parts", formats={"strength": "g"})
TABLE3 = Table("frontier_table3")
RECOVERED = Table("frontier_recovered")
MATCHED_UTILITY = Table("frontier_matched_utility")
LMC = Table("frontier_lmc")
IMPORTANCE = Table("frontier_importance")
PANELS = Table("frontier_panels", block=False, figure=True)  # the README's first figure
DECLARED = (MODELS, UTILITY_PARTS, TABLE3, RECOVERED, MATCHED_UTILITY, LMC, IMPORTANCE, PANELS)
COLUMNS = ["model", "method", "forget_split", "strength", "es", "target_es", "model_utility", "target_model_utility",
           "utility_wo_fragile", "target_utility_wo_fragile", "forgets", "healthy_paper", "healthy_parts", "l2_all",
           "FRAG_x100", "A_f_x100", "A_r_x100", "run"]


def candidates(rec) -> pd.DataFrame:
    """One row per recorded run of the frontier's 05 file (file order): its method and strength
    (the learning rate of a dense method, the sparsity of a pruner), forget ES and Model Utility
    with and without its fragile part (:data:`analysis.FRAGILE_PART`) beside the target's, whether
    it forgets and is healthy by each rule (:func:`analysis.healthy_by_rule`), and its predictors."""
    found = rec.methods_of_file(FRONTIER_05)
    rows = []
    for r in found:
        ev = r["results"]["evaluation"]
        rows.append({"model": short_label(r), **row(r), "strength": made(r).get("sparsity")
                     if row(r)["method"] in analysis.PRUNING else r["provenance"]["params"]["lr"],
                     "utility_wo_fragile": analysis.utility_without(ev["unlearned"]),
                     "target_utility_wo_fragile": analysis.utility_without(ev["target"]), "run": r["run"],
                     **{f"part:{k}": ev["unlearned"][k] for k in analysis.UTILITY_PARTS},
                     **{f"target:{k}": ev["target"][k] for k in analysis.UTILITY_PARTS}})
    print(f"{len(found)} of {len(rec.planned('05_unlearn', FRONTIER_05))} runs of {FRONTIER_05} recorded")
    return analysis.healthy_by_rule(pd.DataFrame(rows)) if rows else pd.DataFrame(columns=COLUMNS)


def utility_parts(models: pd.DataFrame) -> pd.DataFrame:
    """Model Utility's nine parts per candidate, the target's first."""
    if not len(models):
        return pd.DataFrame()
    parts = [c for c in models.columns if c.startswith("part:")]
    target = models.drop_duplicates("target_model_utility")[[c.replace("part:", "target:") for c in parts]]
    table = pd.concat([
        target.rename(columns=lambda c: c.replace("target:", "")).assign(model="target", forget_split="",
                                                                          strength=None),
        models[["model", "forget_split", "strength", *parts]].rename(columns=lambda c: c.replace("part:", ""))],
        ignore_index=True)
    return table[["model", "forget_split", "strength", *analysis.UTILITY_PARTS]] if len(table) else table


def attacked(models: pd.DataFrame, attacks: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``models`` with the ΔES of each attack seed, ES after and the share recovered where attacked;
    and the attacked ones."""
    seeds = seeds_by_checkpoint(attacks)
    models = models.assign(delta_es=[seeds.get(run.split("/", 1)[1], []) for run in models.run], es_before=models.es)
    models = models.assign(attack_seeds=models.delta_es.map(len))
    hit = models[models.attack_seeds.gt(0)]
    hit = tables.recovery(hit) if len(hit) else hit.assign(es_after=[], recovered=[])
    return models.join(hit[["es_after", "recovered"]]), hit


def per_rule(hit: pd.DataFrame, n_boot: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per healthy rule with four checkpoints attacked: :func:`analysis.frontier_table3` beside the
    paper's and the authors' values, and the same with the share recovered in place of ΔES (post
    hoc: ΔES is capped by what was forgotten)."""
    table3, recovered = [], []
    for rule in analysis.HEALTHY_RULES:
        chosen = hit[hit[f"healthy_{rule}"]] if len(hit) else hit
        if len(chosen) >= 4:
            t = analysis.table3_beside_authors(analysis.frontier_table3(chosen, n_boot=n_boot))
            table3.append(t.assign(rule=rule, detectable_rho=t.n.map(analysis.detectable_rho)))
            recovered.append(analysis.frontier_table3(chosen.assign(delta_es=chosen.recovered_seeds),
                                                      n_boot=n_boot).assign(rule=rule))
    return concat(table3), concat(recovered)


def ablations(rec, either: pd.DataFrame, n_boot: int) -> dict[Table, pd.DataFrame]:
    """The frontier's notebook-07 runs over ``either`` (the attacked checkpoints healthy by either
    rule): ``frontier_lmc``, the paper's ``tab:lmc`` per family (:func:`analysis.lmc_table`), and
    ``frontier_importance``, the paper's ``importance_variants`` on this set with Table 3's
    intervals per healthy rule, beside the paper's 1B ρ. A checkpoint enters once a 07 run whose
    parameters equal its file's has scored it; both are empty until one has."""
    scored, ablation_runs = scored_by_07(rec, FRONTIER_07, either, [r.split("/", 1)[1] for r in either.run])
    if not len(scored):
        return {LMC: sourced(pd.DataFrame(), []), IMPORTANCE: sourced(pd.DataFrame(), [])}
    read = [*ablation_runs, *scored.run]
    importance = []
    for rule in analysis.HEALTHY_RULES:
        chosen = scored[scored[f"healthy_{rule}"]]
        if len(chosen) >= 4:
            t = analysis.frontier_table3(chosen, analysis.importance_columns(chosen), n_boot=n_boot)
            importance.append(analysis.importance_rows(t.assign(rule=rule)))
    return {LMC: sourced(analysis.lmc_table(scored), read), IMPORTANCE: sourced(concat(importance), read)}


def build(book) -> dict[Table, object]:
    """The chapter: every candidate with its attacks where attacked, Model Utility's parts, Table 3
    per healthy rule, the share recovered, ΔES at matched utility, the loss barrier and importance
    terms, and the panels figure. Keeps ``book.frontier_table3`` for the headline."""
    rec, n_boot = book.records, book.n_boot
    models = candidates(rec)
    found = list(models.run)
    attacks = [r for f in FRONTIER_06 for r in rec.attacks_of_file(f) if row(r)["attack_data"] == "forget_retain"]
    models, hit = attacked(models, attacks)
    table3, recovered = per_rule(hit, n_boot)
    either = hit[hit.healthy_paper | hit.healthy_parts] if len(hit) else hit
    read = [*either.run, *(r["run"] for r in attacks if row(r)["unlearned_run"] in
                           {u.split("/", 1)[1] for u in either.run})]
    listing = models[[*COLUMNS[:-1], "attack_seeds", "es_after", "recovered", "run"]].assign(
        delta_es=models.delta_es.map(lambda v: [round(d, 3) for d in v]))
    book.frontier_table3 = sourced(table3, read)
    out = {MODELS: sourced(listing, [*found, *(r["run"] for r in attacks)], **HEALTH),
           UTILITY_PARTS: sourced(utility_parts(models), found), TABLE3: book.frontier_table3,
           RECOVERED: sourced(recovered, read),
           MATCHED_UTILITY: sourced(analysis.utility_bands(either) if len(either) else pd.DataFrame(), read),
           **ablations(rec, either, n_boot)}
    if len(table3):
        out[PANELS] = sourced(plots.frontier_panels(listing, table3), read)
    return out
