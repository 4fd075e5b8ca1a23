"""The paper's checkpoints: the grid's models, Tables 1 and 3 in the paper's protocol (its attacks' seed repeats in
Table 3's intervals), the extended set, their figures, the paper's claims one per row, the README's first table."""
from __future__ import annotations

import pandas as pd

from .. import drift
from . import analysis, plots, tables
from .book import Table, sourced
from .recorded import MARGIN_SEEDS_06, concat, made, params, row, short_label

UNLEARNED_MODELS = Table("unlearned_models", shown=(
    "model", "weights", "forget_split", "es", "es_retain", "model_utility", "l2_all", "FRAG_x100", "A_f_x100",
    "A_r_x100", "target_es"))
TABLE1 = Table("table1", shown=(
    "weights", "model", "es_before", "mu_before", "retain_es", "retain_delta_es", "forget_es", "forget_delta_es",
    "forget_retain_es", "forget_retain_delta_es", "avg_delta_es"))
TABLE1_PER_SPLIT = Table("table1_per_split")
TABLE3_BY_PRECISION = Table("table3_by_precision")
TABLE3_CHECKPOINTS = Table("table3_by_precision_checkpoints", shown=(
    "weights", "model", "forget_split", "delta_es", "attack_seeds", "es_before", "recovered", "l2_all", "FRAG_x100",
    "A_f_x100", "A_r_x100"))
TABLE3_RECOVERED, TABLE3_EXTENDED = Table("table3_recovered"), Table("table3_extended")
TABLE3_EXTENDED_CHECKPOINTS = Table("table3_extended_checkpoints", block=False)
TABLE3_PANELS = Table("table3_panels", block=False, figure=True)
TABLE1_BY_PRECISION = Table("frontier_table1", block=False, figure=True)  # Table 1's ΔES against utility
PER_LAYER_FRAG = Table("per_layer_frag", block=False, figure=True)
CLAIMS, CLAIMS_FP32 = (Table(name, dict.fromkeys(("paper_1B", "authors_recomputed_1B", ours, "low", "high"), "+.2f"),
                             shown=("claim", "paper_1B", ours, "n", "verdict"))
                       for name, ours in (("claims", "ours_bf16"), ("claims_fp32", "ours_fp32")))
CLAIMS_TABLE1 = Table("claims_table1", shown=("claim", "weights", "ours_delta_es", "verdict"))
HEADLINE = Table("headline", dict.fromkeys(("paper_1B", "authors_1B"), "+.2f"))
DECLARED = (UNLEARNED_MODELS, TABLE1, TABLE1_PER_SPLIT, TABLE3_BY_PRECISION, TABLE3_CHECKPOINTS, TABLE3_RECOVERED,
            TABLE3_EXTENDED, TABLE3_EXTENDED_CHECKPOINTS, HEADLINE, CLAIMS, CLAIMS_FP32, CLAIMS_TABLE1, TABLE3_PANELS,
            TABLE1_BY_PRECISION, PER_LAYER_FRAG)
CHECKPOINT_COLUMNS = ["weights", "model", "forget_split", "delta_es", "attack_seeds", "es_before", "es_after",
                      "target_es", "recovered", *analysis.PAPER_TABLE3_PREDICTORS, "run"]
EXTENDED_COLUMNS = ["weights", "model", "forget_split", "reason", "delta_es", "attack_seeds", "es_before",
                    "model_utility_before", *analysis.PAPER_TABLE3_PREDICTORS, "run"]


def grid_rows(rec) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The grid's attacks (with the target's ES and Model Utility) and the seed repeats."""
    found = rec.attacks_of_file(rec.grid_06)
    rows = tables.attack_rows(found, rec.method_by_run, short_label)
    rows = rows.assign(**{k: [row(rec.method_by_run[u])[k] for u in rows.unlearned_run]
                          for k in ("target_es", "target_model_utility")})
    repeats = tables.attack_rows(rec.attacks_of_file(rec.seeds_06), rec.method_by_run, short_label)
    print(f"{len(found)} of {len(rec.planned('06_attacks', rec.grid_06))} runs of {rec.grid_06} recorded, "
          f"{len(repeats)} of {len(rec.planned('06_attacks', rec.seeds_06))} seed repeats of {rec.seeds_06}")
    return rows, repeats


def _with_repeats(chosen: pd.DataFrame, repeats: pd.DataFrame, read: list[str]) -> pd.DataFrame:
    """``chosen`` with ΔES the list of its seeds and the share recovered; the runs noted in ``read``."""
    matched = repeats[repeats.unlearned_run.isin(chosen.unlearned_run) & repeats.attack_data.eq("forget_retain")]
    read += [*chosen.run, *matched.run]
    return tables.recovery(tables.with_seed_repeats(chosen, matched))


def table3(rec, fr: pd.DataFrame, repeats: pd.DataFrame, n_boot: int) -> dict[str, pd.DataFrame]:
    """Per precision with four checkpoints: Table 3 (FRP's main setting, veto P 0), its checkpoints,
    and the same with the share recovered in place of ΔES (post hoc)."""
    main = {u for u in fr.unlearned_run if not (row(rec.method_by_run[u])["method"] == "frp"
                                                and made(rec.method_by_run[u]).get("veto"))}
    by_precision, checkpoints, recovered, read = [], [], [], []
    for weights, g in fr.groupby("weights"):
        chosen = analysis.paper_table3_checkpoints(g, main)
        if len(chosen) >= 4:
            chosen = _with_repeats(chosen, repeats, read)
            table = analysis.table3_beside_authors(analysis.paper_table3(chosen, n_boot=n_boot))
            by_precision.append(table.assign(weights=weights))
            checkpoints.append(chosen)
            recovered.append(analysis.paper_table3(chosen.assign(delta_es=chosen.recovered_seeds),
                                                   n_boot=n_boot).assign(weights=weights))
    return {"by_precision": sourced(concat(by_precision), read), "checkpoints": sourced(concat(checkpoints), read),
            "recovered": sourced(concat(recovered), read)}


def extended(fr: pd.DataFrame, repeats: pd.DataFrame, n_boot: int, min_utility_fraction: float) -> tuple:
    """The extended set (every healthy checkpoint: not gold, Model Utility before the attack at least
    ``min_utility_fraction`` of the target's; GA and FRP (P 0.15) too) and why each is in or out."""
    seeds = repeats[repeats.attack_data.eq("forget_retain")].groupby("unlearned_run").size()
    rule = {"exclusion_rule": "gold model; Model Utility before the attack below "
                              f"{min_utility_fraction:g} x the target's"}
    extended_, listing, read = [], [], []
    for weights, g in fr.groupby("weights"):
        ok, excluded = analysis.healthy(g[g.method.ne("gold")], min_utility_fraction)
        listed = pd.concat([ok.assign(reason="included"), excluded])
        listing.append(listed.assign(attack_seeds=1 + listed.unlearned_run.map(seeds).fillna(0).astype(int)))
        if len(ok) >= 4:
            extended_.append(analysis.paper_table3(_with_repeats(ok, repeats, read), n_boot=n_boot).assign(
                weights=weights))
    return (sourced(concat(extended_), read, **rule),
            sourced(concat(listing).reindex(columns=EXTENDED_COLUMNS), fr[fr.method.ne("gold")].run, **rule))


def per_layer_frag(rec, forget_split: str = "forget10") -> pd.DataFrame:
    """Per model of the grid on one split (in bf16 where the grid has it) and decoder block, its
    contribution to FRAG (``A_f`` share − gamma · ``A_r`` share, x100, over the block's projections)."""
    found = rec.methods_of_file(rec.grid_05)
    weights = "bf16" if any(params(r).get("weights") == "bf16" for r in found) else "fp32"
    found = [r for r in found if params(r).get("weights", "fp32") == weights
             and params(r)["forget_split"] == forget_split]
    rows = [{"model": short_label(r), "block": int(m["module"].split("layers.")[1].split(".")[0])
             if "layers." in m["module"] else -1,
             "contribution_x100": 100 * (m["a_f_share"] - r["results"]["frag"]["gamma"] * m["a_r_share"])}
            for r in found for m in r["results"]["frag"]["per_layer"]]
    table = pd.DataFrame(rows).groupby(["model", "block"], sort=False, as_index=False).sum() if rows else pd.DataFrame()
    return sourced(table, [r["run"] for r in found])


def figures(rec, fr: pd.DataFrame, t3: dict[str, pd.DataFrame]) -> dict[Table, object]:
    """Table 3 as small multiples, Table 1's ΔES against utility per precision, per-layer FRAG."""
    out: dict[Table, object] = {}
    if len(t3["checkpoints"]):
        out[TABLE3_PANELS] = sourced(plots.table3_panels(t3["checkpoints"], t3["by_precision"]),
                                     t3["checkpoints"].attrs["source_runs"])
    if len(fr):
        out[TABLE1_BY_PRECISION] = sourced(plots.frontier_by_precision(fr), fr.run)
    per_layer = per_layer_frag(rec)
    if len(per_layer):
        out[PER_LAYER_FRAG] = sourced(plots.per_layer_frag(per_layer), per_layer.attrs["source_runs"])
    return out


def same_attack_but_the_seed(repeats: list[dict], attacks: list[dict]) -> None:
    """Refuse a seed repeat that differs from its attack in more than the seed, or repeats a seed run."""
    def key(r):
        return params(r)["unlearned_run"], params(r)["attack_data"]

    def settings(r):
        return {k: v for k, v in params(r).items() if k not in ("seed", "run_name")}

    by_attack = {key(r): r for r in attacks}
    seen = {(k, params(r)["seed"]) for k, r in by_attack.items()}
    for r in repeats:
        first = by_attack.get(key(r))
        if first is not None and settings(first) != settings(r):
            a, b = settings(first), settings(r)
            differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            raise ValueError(f"{r['run']} repeats {first['run']} at another seed but differs in {differ}: make the "
                             "parameter files agree (the grid's attack file and its seed-repeat files).")
        if (key(r), params(r)["seed"]) in seen:
            raise ValueError(f"{r['run']} repeats an attack at a seed it was already run with ({params(r)['seed']}).")
        seen.add((key(r), params(r)["seed"]))


def _keyed_in(df: pd.DataFrame, other: pd.DataFrame) -> list[bool]:
    """Which attacks of ``df`` ``other`` has too (the same model and attack data, at any seed)."""
    keys = set(zip(other.unlearned_run, other.attack_data))
    return [k in keys for k in zip(df.unlearned_run, df.attack_data)]


def table1_claims(rec, rows: pd.DataFrame) -> pd.DataFrame:
    """Table 1's claims (:func:`analysis.table1_claims`) in bf16, and in fp32 for the attacks recorded in fp32,
    each attack at the mean over its seeds (Table 3's repeats, :data:`MARGIN_SEEDS_06`), FRP's counted."""
    repeat_records, margin_records = rec.attacks_of_file(rec.seeds_06), rec.attacks_of_file(MARGIN_SEEDS_06)
    same_attack_but_the_seed([*repeat_records, *margin_records], rec.attacks_of_file(rec.grid_06))
    repeats = tables.attack_rows(repeat_records, rec.method_by_run, short_label)
    margin = tables.attack_rows(margin_records, rec.method_by_run, short_label)
    print(f"{len(margin)} of {len(rec.planned('06_attacks', MARGIN_SEEDS_06))} runs of {MARGIN_SEEDS_06} recorded")
    target_mu = set(rows.target_model_utility)
    if len(target_mu) > 1:
        raise ValueError(f"the grid's models were made from targets of different Model Utility {sorted(target_mu)}")
    mu = target_mu.pop() if target_mu else float("nan")
    every = pd.concat([repeats, margin], ignore_index=True)
    every = every[_keyed_in(every, rows)] if len(every) else every  # a repeat whose seed 42 is not recorded
    seeded = tables.seed_means(rows, every)
    repeated = rows[_keyed_in(rows, every)] if len(every) else rows.iloc[:0]
    spread = drift.attack_seed_range(list(tables.with_seed_repeats(repeated, every).delta_es)) if len(every) \
        else float("nan")
    table1_seeded = tables.table1(seeded) if len(seeded) else pd.DataFrame()
    in_fp32 = set(rows[rows.weights.eq("fp32")].attack_data)
    claims = pd.concat([analysis.table1_claims(table1_seeded, mu, seed_spread=spread),
                        analysis.table1_claims(table1_seeded, mu, weights="fp32", seed_spread=spread).pipe(
                            lambda c: c[c.attack.isin(in_fp32)])], ignore_index=True)
    frp = seeded[seeded.model.map(analysis.TABLE1_KEYS).eq("frp_p0")]
    frp = frp.groupby(["weights", "attack_data"]).attack_seeds.min()
    claims = claims.assign(frp_attack_seeds=[frp.get(k, float("nan")) for k in zip(claims.weights, claims.attack)])
    return sourced(claims, [*rows.run, *repeats.run, *margin.run])


def headline(book) -> pd.DataFrame:
    """The README's first table (:func:`analysis.headline`): over the healthy frontier (the paper's
    rule) once four checkpoints are attacked, until then over the paper's Table 3 in bf16."""
    ft3, t3 = book.frontier_table3, book.table3
    if len(ft3) and ft3.rule.eq("paper").any():
        table, read = analysis.headline(ft3[ft3.rule.eq("paper")]), ft3.attrs["source_runs"]
        ranks = book.predictor_ranks
        if len(ranks) and "delta_es" in book.predictors_best:  # the best attack-free baseline (notebook 08) below
            b = ranks[ranks.outcome.eq("delta_es") & ranks.split.eq("both")
                      & ranks.signal.eq(book.predictors_best["delta_es"])].iloc[0]
            table = pd.concat([table, pd.DataFrame([{
                "predictor": f"{b.words} (before)", "paper_1B": "—", "authors_1B": "—",
                "ours": f"{b.rho:+.2f} [{b.low:+.2f}, {b.high:+.2f}]",
                "n": f"{int(b.n)} ({int(b.methods)} methods)"}])],
                ignore_index=True)
            read = [*read, *ranks.attrs["source_runs"]]
        return sourced(table, read)
    return sourced(analysis.headline(t3[t3.weights.eq("bf16")] if len(t3) else t3), t3.attrs["source_runs"])


def build(book) -> dict[Table, object]:
    """The chapter (after the frontier's, whose Table 3 the headline reads); keeps the grid's attacks, Table 3
    and its checkpoints (ΔES a list of seeds) on the book for later chapters."""
    rec = book.records
    found = rec.methods_of_file(rec.grid_05)
    print(f"{len(found)} of {len(rec.planned('05_unlearn', rec.grid_05))} runs of {rec.grid_05} recorded")
    rows, repeats = grid_rows(rec)
    fr = rows[rows.attack_data.eq("forget_retain")]
    t3 = table3(rec, fr, repeats, book.n_boot)
    book.grid_rows, book.table3_checkpoints, book.table3 = rows, t3["checkpoints"], t3["by_precision"]
    checkpoints = t3["checkpoints"].reindex(columns=CHECKPOINT_COLUMNS).assign(
        delta_es=lambda t: t.delta_es.map(lambda seeds: [round(d, 3) for d in seeds]))
    ext, listing = extended(fr, repeats, book.n_boot, book.min_utility_fraction)
    read = t3["by_precision"].attrs["source_runs"]
    claims_fp32 = analysis.claims(t3["by_precision"], t3["checkpoints"], weights="fp32", n_boot=book.n_boot)
    claims = analysis.beside(analysis.claims(t3["by_precision"], t3["checkpoints"], n_boot=book.n_boot), claims_fp32)
    return {UNLEARNED_MODELS: sourced(rec.model_frame(found), [r["run"] for r in found]),
            TABLE1: sourced(tables.table1(rows) if len(rows) else pd.DataFrame(), rows.run),
            TABLE1_PER_SPLIT: sourced(tables.table1_per_split(rows), rows.run),
            TABLE3_BY_PRECISION: t3["by_precision"], TABLE3_CHECKPOINTS: sourced(checkpoints, read),
            TABLE3_RECOVERED: t3["recovered"], TABLE3_EXTENDED: ext, TABLE3_EXTENDED_CHECKPOINTS: listing,
            HEADLINE: headline(book), CLAIMS: sourced(claims, read), CLAIMS_FP32: sourced(claims_fp32, read),
            CLAIMS_TABLE1: table1_claims(rec, rows), **figures(rec, fr, t3)}
