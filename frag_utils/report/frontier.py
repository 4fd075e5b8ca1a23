"""The healthy frontier: every method at several strengths; which checkpoints forget and stay healthy (from the
unlearning records alone); Table 3 over the attacked ones per healthy rule; ΔES at matched utility; notebook 07."""
from __future__ import annotations

import pandas as pd

from . import analysis, plots, tables
from .book import Table, Text, interval, sourced
from .recorded import FRONTIER_05, FRONTIER_06, FRONTIER_07, concat, made, row, scored_by_07, seed_deltas, short_label

STRENGTH = {"strength": "g"}
MODELS = Table("frontier_models", STRENGTH, shown=(
    "model", "forget_split", "strength", "es", "model_utility", "forgets", "healthy_paper", "healthy_parts", "l2_all",
    "FRAG_x100", "es_after", "delta_es"))
UTILITY_PARTS = Table("frontier_utility_parts", STRENGTH, labels={  # Model Utility's parts, by set and metric
    f"{s}_perturbed/{m}": f"{short} {m_short}" for s, short in (("retain", "retain"), ("real_authors", "authors"),
                                                                ("world_facts", "facts"))
    for m, m_short in (("probability", "prob"), ("rouge", "ROUGE"), ("truth_ratio", "TR"))})
TABLE3, RECOVERED, MATCHED_UTILITY = Table("frontier_table3"), Table("frontier_recovered"), \
    Table("frontier_matched_utility")
LMC, IMPORTANCE = Table("frontier_lmc"), Table("frontier_importance")
PANELS = Table("frontier_panels", block=False, figure=True)  # the README's first figure
VERDICT = Table("headline_verdict", text=True)  # the README's answer, under its first table
DECLARED = (MODELS, UTILITY_PARTS, TABLE3, RECOVERED, MATCHED_UTILITY, LMC, IMPORTANCE, PANELS, VERDICT)
PREDICTOR_WORDS = {"l2_all": "global L2", "FRAG_x100": "FRAG's gap", "A_f_x100": "cos(F, ΔW²)",
                   "A_r_x100": "cos(R, ΔW²)"}
# the paper's methods: the frontier's notebook-07 runs and attack variants study these; the methods added beyond
# them (SimNPO, IdkDPO, UNDIAL, WGA) join the frontier's attacks and tables and leave those choices as they were
PAPER_METHODS = analysis.PAPER_METHODS
COLUMNS = ["model", "method", "forget_split", "strength", "es", "target_es", "model_utility", "target_model_utility",
           "utility_wo_fragile", "target_utility_wo_fragile", "forgets", "healthy_paper", "healthy_parts", "l2_all",
           "FRAG_x100", "A_f_x100", "A_r_x100", "run"]


def candidates(rec) -> pd.DataFrame:
    """One row per recorded run of the frontier's file: its strength (a dense method's learning rate, a
    pruner's sparsity), Model Utility's parts, and whether it forgets and is healthy by each rule."""
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
    """``models`` with each attack seed's ΔES, ES after and the share recovered; and the attacked ones."""
    seeds = seed_deltas(attacks)
    models = models.assign(delta_es=[seeds.get(run.split("/", 1)[1], []) for run in models.run], es_before=models.es)
    models = models.assign(attack_seeds=models.delta_es.map(len))
    hit = models[models.attack_seeds.gt(0)]
    hit = tables.recovery(hit) if len(hit) else hit.assign(es_after=[], recovered=[])
    return models.join(hit[["es_after", "recovered"]]), hit


def per_rule(hit: pd.DataFrame, analyse) -> pd.DataFrame:
    """``analyse(checkpoints, rule)`` over the checkpoints healthy by each rule, where four are."""
    chosen = {rule: hit[hit[f"healthy_{rule}"]] if len(hit) else hit for rule in analysis.HEALTHY_RULES}
    return concat([analyse(c, rule) for rule, c in chosen.items() if len(c) >= 4])


def table3(hit: pd.DataFrame, n_boot: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per healthy rule, :func:`analysis.frontier_table3` beside the paper's and the authors' values,
    and the same with the share recovered in place of ΔES (post hoc: ΔES is capped by what was forgotten)."""
    def beside(chosen, rule):
        t = analysis.table3_beside_authors(analysis.frontier_table3(chosen, n_boot=n_boot))
        return t.assign(rule=rule, detectable_rho=t.n.map(analysis.detectable_rho))

    return per_rule(hit, beside), per_rule(hit, lambda chosen, rule: analysis.frontier_table3(
        chosen.assign(delta_es=chosen.recovered_seeds), n_boot=n_boot).assign(rule=rule))


def ablations(rec, either: pd.DataFrame, n_boot: int) -> dict[Table, pd.DataFrame]:
    """The paper's ``tab:lmc`` and ``importance_variants`` (per healthy rule) over ``either`` (attacked, healthy
    by either rule), from the frontier's notebook-07 runs."""
    scored, ablation_runs = scored_by_07(rec, FRONTIER_07, either, [r.split("/", 1)[1] for r in either.run])
    if not len(scored):
        return {LMC: sourced(pd.DataFrame(), []), IMPORTANCE: sourced(pd.DataFrame(), [])}
    importance = per_rule(scored, lambda chosen, rule: analysis.importance_rows(analysis.frontier_table3(
        chosen, analysis.importance_columns(chosen), n_boot=n_boot).assign(rule=rule)))
    read = [*ablation_runs, *scored.run]
    return {LMC: sourced(analysis.lmc_table(scored), read), IMPORTANCE: sourced(importance, read)}


def l2_minus_frag(hit: pd.DataFrame, n_boot: int, rule: str = "paper") -> dict:
    """ρ(global L2, ΔES) − ρ(FRAG's gap, ΔES) over the checkpoints healthy by ``rule``, with its interval over the
    paired resamples (methods, then checkpoints, then seeds): above 0 where FRAG ranks ΔES the better (the paper's
    sign is negative), which two separate intervals cannot say."""
    chosen = hit[hit[f"healthy_{rule}"]]
    return analysis.bootstrap_spearman_gap(chosen.FRAG_x100, chosen.l2_all, list(chosen.delta_es), n_boot=n_boot,
                                           groups=list(chosen[analysis.GROUP_BY]))


def verdict(t3: pd.DataFrame, recovered: pd.DataFrame, gap: dict, rule: str = "paper") -> str:
    """The README's answer in three sentences, from the pooled ρ over the healthy checkpoints by ``rule``: whether
    FRAG's gap ranks ΔES, beside global L2, with n; their difference ``gap`` (:func:`l2_minus_frag`); every pooled
    interval (of ΔES or, post hoc, the share recovered) that excludes 0. The smallest ρ n detects and the
    within-method ρ are on the healthy frontier's page, one link deeper."""
    def _ci(r) -> str:
        return interval(r.rho, r.low, r.high)

    t = t3[t3.rule.eq(rule) & t3.subset.eq("all")].set_index("predictor")
    rec = recovered[recovered.rule.eq(rule) & recovered.subset.eq("all")].set_index("predictor")
    frag, l2 = t.loc["FRAG_x100"], t.loc["l2_all"]
    excludes = (frag.low > 0) or (frag.high < 0)
    answer = ("Not resolved" if not excludes else "Yes, with the paper's negative sign" if frag.high < 0
              else "No, the paper's opposite sign")
    first = (f"**{answer}:** over the {int(frag.n)} healthy checkpoints of {int(frag.methods)} methods, FRAG's "
             f"gap ranks ΔES at ρ {_ci(frag)} and global L2 ranks it at {_ci(l2)}. FRAG's advantage, ρ(L2) − "
             f"ρ(FRAG), is {interval(gap['gap'], gap['low'], gap['high'])}.")

    def said(r) -> str:  # the paper's sign is negative for every predictor (Table 3)
        return f"{_ci(r)}, " + ("the paper's sign" if r.high < 0 else "the opposite sign")

    resolved = [f"{PREDICTOR_WORDS[p]} with ΔES, {said(r)}" for p, r in t.iterrows() if r.low > 0 or r.high < 0]
    resolved += [f"{PREDICTOR_WORDS[p]} with the share of the forgotten ES recovered (post hoc), {said(r)}"
                 for p, r in rec.iterrows() if r.low > 0 or r.high < 0]
    over = f"over all {int(frag.n)}"
    second = ("No weight-space predictor's pooled interval excludes 0." if not resolved else
              f"{'Pooled intervals' if len(resolved) > 1 else 'The one pooled interval'} {over} that exclude"
              f"{'' if len(resolved) > 1 else 's'} 0: {'; '.join(resolved)}.")
    return " ".join((first, second))


def build(book) -> dict[Table, object]:
    """The chapter; keeps ``book.frontier_table3`` for the headline."""
    rec = book.records
    models = candidates(rec)
    found = list(models.run)
    attacks = [r for f in FRONTIER_06 for r in rec.attacks_of_file(f) if row(r)["attack_data"] == "forget_retain"]
    models, hit = attacked(models, attacks)
    t3, recovered = table3(hit, book.n_boot)
    either = hit[hit.healthy_paper | hit.healthy_parts] if len(hit) else hit
    read = [*either.run, *(r["run"] for r in attacks if row(r)["unlearned_run"] in
                           {u.split("/", 1)[1] for u in either.run})]
    listing = models[[*COLUMNS[:-1], "attack_seeds", "es_after", "recovered", "run"]].assign(
        delta_es=models.delta_es.map(lambda v: [round(d, 3) for d in v]))
    book.frontier_table3 = sourced(t3, read)
    health = {"healthy_rules": analysis.HEALTHY_RULES,
              "forgets": f"forget ES at least {analysis.MIN_FORGETTING:g} below the target's"}
    out = {MODELS: sourced(listing, [*found, *(r["run"] for r in attacks)], **health),
           UTILITY_PARTS: sourced(utility_parts(models), found), TABLE3: book.frontier_table3,
           RECOVERED: sourced(recovered, read),
           MATCHED_UTILITY: sourced(analysis.utility_bands(either) if len(either) else pd.DataFrame(), read),
           **ablations(rec, either, book.n_boot)}
    if len(t3):
        out[PANELS] = sourced(plots.frontier_panels(listing, t3), read)
        out[VERDICT] = sourced(Text(verdict(t3, recovered, l2_minus_frag(hit, book.n_boot))), read)
    return out
