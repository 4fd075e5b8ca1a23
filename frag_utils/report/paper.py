"""The paper's checkpoints: the faithful grid's models, the paper's Table 1 (averaged over the splits
and per split), Table 3 in the paper's protocol per precision (the seed repeats of its attacks in its
intervals, :func:`frag_utils.report.stats.bootstrap_spearman`), the extended set, their figures."""
from __future__ import annotations

import pandas as pd

from . import analysis, plots, tables
from .declared import Table, sourced
from .recorded import concat, made, params, row, short_label

UNLEARNED_MODELS, TABLE1, TABLE1_PER_SPLIT = Table("unlearned_models"), Table("table1"), Table("table1_per_split")
TABLE3_BY_PRECISION, TABLE3_CHECKPOINTS = Table("table3_by_precision"), Table("table3_by_precision_checkpoints")
TABLE3_RECOVERED, TABLE3_EXTENDED = Table("table3_recovered"), Table("table3_extended")
TABLE3_EXTENDED_CHECKPOINTS = Table("table3_extended_checkpoints", block=False)
TABLE3_PANELS = Table("table3_panels", block=False, figure=True)
TABLE1_BY_PRECISION = Table("frontier_table1", block=False, figure=True)  # Table 1's ΔES against utility
PER_LAYER_FRAG = Table("per_layer_frag", block=False, figure=True)
DECLARED = (UNLEARNED_MODELS, TABLE1, TABLE1_PER_SPLIT, TABLE3_BY_PRECISION, TABLE3_CHECKPOINTS, TABLE3_RECOVERED,
            TABLE3_EXTENDED, TABLE3_EXTENDED_CHECKPOINTS, TABLE3_PANELS, TABLE1_BY_PRECISION, PER_LAYER_FRAG)
CHECKPOINT_COLUMNS = ["weights", "model", "forget_split", "delta_es", "attack_seeds", "es_before", "es_after",
                      "target_es", "recovered", *analysis.PAPER_TABLE3_PREDICTORS, "run"]
EXTENDED_COLUMNS = ["weights", "model", "forget_split", "reason", "delta_es", "attack_seeds", "es_before",
                    "model_utility_before", *analysis.PAPER_TABLE3_PREDICTORS, "run"]


def grid_rows(rec) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The grid's attacks (:func:`tables.attack_rows`, with the target's ES and Model Utility), and
    the seed repeats."""
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
            by_precision.append(table.assign(weights=weights, checkpoints=len(chosen)))
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


def build(book) -> dict[Table, object]:
    """The chapter; keeps the grid's attacks (``book.grid_rows``), Table 3 and its checkpoints (ΔES a
    list of seeds) for the chapters that read them."""
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
    return {UNLEARNED_MODELS: sourced(rec.model_frame(found), [r["run"] for r in found]),
            TABLE1: sourced(tables.table1(rows) if len(rows) else pd.DataFrame(), rows.run),
            TABLE1_PER_SPLIT: sourced(tables.table1_per_split(rows), rows.run),
            TABLE3_BY_PRECISION: t3["by_precision"],
            TABLE3_CHECKPOINTS: sourced(checkpoints, t3["checkpoints"].attrs["source_runs"]),
            TABLE3_RECOVERED: t3["recovered"], TABLE3_EXTENDED: ext, TABLE3_EXTENDED_CHECKPOINTS: listing,
            **figures(rec, fr, t3)}
