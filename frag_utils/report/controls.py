"""The controls and ablations the claims rest on: noise and matched controls, the FRP ablations (Tables 5-7),
notebook 07 on Table 3's checkpoints, the attack's precision; each empty until a run of its own is recorded."""
from __future__ import annotations

import pandas as pd

from . import analysis, plots, recorded, tables
from .book import Table, sourced
from .recorded import made, name, params, row, scored_by_07, seed_deltas

SPARSITY = dict.fromkeys(("lambda", "sparsity", "frp_sparsity", "sp_sparsity"), "g")
NOISE, NOISE_FIGURE = Table("noise_controls"), Table("noise_controls", block=False, figure=True)
MATCHED = Table("matched_controls", SPARSITY, shown=(
    "matched", "frp_sparsity", "sp_sparsity", "l2_gap_pct", "es_frp", "es_sp", "model_utility_frp", "model_utility_sp",
    "delta_es_frp", "delta_es_sp", "FRAG_x100_frp", "FRAG_x100_sp"))
LAMBDA = Table("ablation_lambda", SPARSITY)
SPARSITY_, SCORING = Table("ablation_sparsity", SPARSITY), Table("ablation_scoring", SPARSITY)
PRECISION, TABLE3_LMC, TABLE3_IMPORTANCE = Table("attack_precision"), Table("table3_lmc"), Table("table3_importance")
DECLARED = (NOISE, MATCHED, LAMBDA, SPARSITY_, SCORING, TABLE3_IMPORTANCE, TABLE3_LMC, PRECISION, NOISE_FIGURE)
ABLATION_COLUMNS = ["es", "model_utility", "es_after", "delta_es", "model_utility_after", "l2_all", "FRAG_x100",
                    "A_f_x100", "A_r_x100", "run", "attack_run"]


def _empty(*declared: Table) -> dict[Table, pd.DataFrame]:
    return {t: sourced(pd.DataFrame(), []) for t in declared}


def ablations(rec) -> dict[Table, pd.DataFrame]:
    """The paper's Tables 5-7 on forget10 in bf16 under the retain attack: FRP's λ (the paper's beta), sparsity
    or scoring rule varied around the grid's FRP (P 0), which each holds."""
    centre, found = rec.centre(), rec.methods_of_file(recorded.ABLATIONS_05)
    if centre is None or not found:
        return _empty(LAMBDA, SPARSITY_, SCORING)
    rows = rec.attacked([centre, *found], "retain", (recorded.ABLATIONS_06, rec.grid_06))
    released, default_sparsity = rows.variant.eq("released"), rows.sparsity.eq(0.03)
    chosen = {LAMBDA: (rows[released & default_sparsity], ["lambda"]),
              SPARSITY_: (rows[released & rows["lambda"].eq(0.05)], ["sparsity"]),
              SCORING: (rows[default_sparsity & (~released | rows["lambda"].eq(0.05))], ["variant"])}
    out = {}
    for declared, (t, key) in chosen.items():
        t = t.sort_values(key, kind="stable").reset_index(drop=True) if len(t) > 1 else t.iloc[0:0]
        out[declared] = sourced(t[[*key, *ABLATION_COLUMNS]], [*t.run, *[r for r in t.attack_run if r]])
    return out


def _noise(rec, centre: dict, found: list[dict]) -> pd.DataFrame:
    """Appendix A.2: the grid's FRP (P 0) on forget10 in bf16 and noise at its L2, under two attacks."""
    files = (recorded.CONTROLS_06, rec.grid_06)
    noise = [r for r in found if row(r)["method"] == "noise"
             and params(r)["match_l2_run"] == name(centre)]  # scaled to this FRP run
    fr = rec.attacked([centre, *noise], "forget_retain", files)
    retain = rec.attacked([centre, *noise], "retain", (*files, recorded.ABLATIONS_06))
    columns = ["model", "es", "model_utility", "l2_all", "A_f_x100", "A_r_x100", "FRAG_x100"]
    table = fr[columns].assign(retain_delta_es=retain.delta_es, forget_retain_delta_es=fr.delta_es, run=fr.run)
    return sourced(table, [*fr.run, *[r for r in (*fr.attack_run, *retain.attack_run) if r]])


def _matched(rec, found: list[dict]) -> pd.DataFrame:
    """Appendix C.4: FRP against SP at the same budget and at the same update norm, under forget+retain."""
    frp = {name(r): r for r in rec.methods_of_file(recorded.ABLATIONS_05) if made(r).get("variant") == "released"
           and params(r)["frp_lam"] == 0.05}
    pairs = []  # (kind, frp, sp)
    for sp in [r for r in found if row(r)["method"] == "sp"] + rec.forget10_bf16("sp"):
        matched, budget = params(sp)["match_l2_run"], made(sp).get("sparsity")
        partner = frp.get(matched) if matched else next(
            (r for r in frp.values() if r["results"]["made"].get("sparsity") == budget), None)
        if partner is not None:
            pairs.append(("update norm" if matched else "sparsity", partner, sp))
    if not pairs:
        return sourced(pd.DataFrame(), [])
    attacked = rec.attacked([r for _, f, s in pairs for r in (f, s)], "forget_retain",
                            (recorded.CONTROLS_06, rec.grid_06, recorded.ABLATIONS_06))
    rows, read = [], []
    for i, kind in enumerate(kind for kind, _, _ in pairs):
        a, b = attacked.iloc[2 * i], attacked.iloc[2 * i + 1]
        rows.append({"matched": kind, "frp_sparsity": a.sparsity, "sp_sparsity": b.sparsity,
                     "l2_gap_pct": 100 * (b.l2_all / a.l2_all - 1),
                     **{f"{k}_{m}": r[k] for k in ("l2_all", "es", "model_utility", "delta_es", "FRAG_x100")
                        for m, r in (("frp", a), ("sp", b))}, "runs": f"{a.run} | {b.run}"})
        read += [a.run, b.run, *[r for r in (a.attack_run, b.attack_run) if r]]
    return sourced(pd.DataFrame(rows).sort_values(["matched", "frp_sparsity"]).reset_index(drop=True), read)


def controls(rec) -> dict[Table, pd.DataFrame]:
    """The noise controls and the matched controls."""
    centre, found = rec.centre(), rec.methods_of_file(recorded.CONTROLS_05)
    if centre is None or not found:
        return _empty(NOISE, MATCHED)
    return {NOISE: _noise(rec, centre, found), MATCHED: _matched(rec, found)}


def attack_precision(rec) -> pd.DataFrame:
    """The bf16 set's models under the grid's attack in bf16 (Table 3's seed repeats too) and in fp32, beside the
    fp32 set's model under its own, per split and method, then each method's mean over the three splits."""
    models = [r for r in rec.methods_of_file(rec.grid_05) if row(r)["method"] in (*recorded.DENSE, "sp", "frp")
              and params(r).get("weights") == "bf16"]
    in_fp32 = rec.attacked(models, "forget_retain", recorded.ATTACK_PRECISION_06)
    if not len(in_fp32) or not in_fp32.attack_run.astype(bool).any():
        return sourced(pd.DataFrame(), [])
    in_bf16 = rec.attacked(models, "forget_retain", (rec.grid_06,))
    repeats = rec.forget_retain_repeats({name(m) for m in models})
    seeds = seed_deltas(repeats)

    def identity(r):  # split, method and FRP's veto: what a model of the fp32 set shares with its bf16 twin
        return row(r)["forget_split"], row(r)["method"], params(r).get("frp_veto", 0.0)

    twins = [r for r in rec.methods_of_file(rec.grid_05) if params(r).get("weights") == "fp32"]
    twin_attacks = rec.attacked(twins, "forget_retain", (rec.grid_06,)) if twins else pd.DataFrame(
        columns=["run", "attack_run", "delta_es"])
    twin_delta = dict(zip(map(identity, twins), twin_attacks.delta_es))
    table = pd.DataFrame({
        "forget_split": in_bf16.forget_split, "model": in_bf16.model, "es": in_bf16.es,
        "model_utility": in_bf16.model_utility, "l2_all": in_bf16.l2_all, "delta_es_bf16": in_bf16.delta_es,
        "delta_es_bf16_seeds": [[round(d, 3) for d in ([b] if pd.notna(b) else []) + seeds.get(name(r), [])]
                                for r, b in zip(models, in_bf16.delta_es)],
        "delta_es_fp32": in_fp32.delta_es, "model_utility_after_bf16": in_bf16.model_utility_after,
        "model_utility_after_fp32": in_fp32.model_utility_after,
        "fp32_set_delta_es": [twin_delta.get(identity(r), float("nan")) for r in models],
        "run": in_bf16.run, "attack_run_bf16": in_bf16.attack_run, "attack_run_fp32": in_fp32.attack_run})
    numbers = ["es", "model_utility", "l2_all", "delta_es_bf16", "delta_es_fp32", "model_utility_after_bf16",
               "model_utility_after_fp32", "fp32_set_delta_es"]
    means = table.groupby("model", sort=False)[numbers].agg(
        lambda v: tables.mean_if_complete(v, len(tables.SPLITS))).reset_index()
    read = [*table.run, *[r for r in (*table.attack_run_bf16, *table.attack_run_fp32, *twin_attacks.attack_run) if r],
            *(r["run"] for r in repeats), *twin_attacks.run]
    return sourced(pd.concat([table, means.assign(forget_split="mean")], ignore_index=True)[table.columns], read)


def table3_ablations(rec, checkpoints: pd.DataFrame, n_boot: int) -> dict[Table, pd.DataFrame]:
    """The paper's ``tab:lmc`` and ``importance_variants`` (with Table 3's intervals) on Table 3's checkpoints
    in bf16 (``checkpoints``, ΔES a list of seeds), from the 07 runs of :data:`recorded.TABLE3_07`."""
    chosen = checkpoints[checkpoints.weights.eq("bf16")] if len(checkpoints) else checkpoints
    names = list(chosen.unlearned_run) if len(chosen) else []
    scored, ablation_runs = scored_by_07(rec, recorded.TABLE3_07, chosen, names)
    if not len(scored):
        return _empty(TABLE3_LMC, TABLE3_IMPORTANCE)
    repeats = [r["run"] for r in rec.forget_retain_repeats(set(scored.unlearned_run))]
    read = [*ablation_runs, *(f"05_unlearn/{u}" for u in scored.unlearned_run), *scored.run, *repeats]
    importance = (analysis.importance_rows(analysis.paper_table3(scored, analysis.importance_columns(scored),
                                                                 n_boot=n_boot))
                  if len(scored) >= 4 else pd.DataFrame())
    return {TABLE3_LMC: sourced(analysis.lmc_table(scored), read), TABLE3_IMPORTANCE: sourced(importance, read)}


def build(book) -> dict[Table, object]:
    """The chapter (after the paper's)."""
    rec = book.records
    out = {**controls(rec), **ablations(rec), **table3_ablations(rec, book.table3_checkpoints, book.n_boot),
           PRECISION: attack_precision(rec)}
    if len(out[NOISE]):
        out[NOISE_FIGURE] = sourced(plots.noise_controls(out[NOISE]), out[NOISE].attrs["source_runs"])
    return out
