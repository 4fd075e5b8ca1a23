"""The paper's claims one per row, Table 3's (bf16, fp32 beside it) and Table 1's, and the README's
first table."""
from __future__ import annotations

import pandas as pd

from .. import drift
from . import analysis, tables
from .declared import Table, sourced
from .recorded import MARGIN_SEEDS_06, params, short_label

CLAIMS, CLAIMS_FP32 = (Table(name, dict.fromkeys(("paper_1B", "authors_recomputed_1B", ours, "low", "high"), "+.2f"))
                       for name, ours in (("claims", "ours_bf16"), ("claims_fp32", "ours_fp32")))
CLAIMS_TABLE1, HEADLINE = Table("claims_table1"), Table("headline", dict.fromkeys(("paper_1B", "authors_1B"), "+.2f"))
DECLARED = (HEADLINE, CLAIMS, CLAIMS_FP32, CLAIMS_TABLE1)


def same_attack_but_the_seed(repeats: list[dict], attacks: list[dict]) -> None:
    """Refuse a seed repeat that differs from its attack in more than the seed, or repeats a seed run."""
    def settings(r):
        return {k: v for k, v in params(r).items() if k not in ("seed", "run_name")}

    by_attack = {}
    for r in attacks:
        s = settings(r)
        by_attack[(s["unlearned_run"], s["attack_data"])] = (r, s)
    seen = {(k, params(r)["seed"]) for k, (r, _) in by_attack.items()}
    for r in repeats:
        s = settings(r)
        key = (s["unlearned_run"], s["attack_data"])
        first, first_settings = by_attack.get(key, (None, None))
        if first is not None and first_settings != s:
            differ = sorted(k for k in s.keys() | first_settings.keys() if s.get(k) != first_settings.get(k))
            raise ValueError(f"{r['run']} repeats {first['run']} at another seed but differs in {differ}: make the "
                             "parameter files agree (the grid's attack file and its seed-repeat files).")
        seed = (key, params(r)["seed"])
        if seed in seen:
            raise ValueError(f"{r['run']} repeats an attack at a seed it was already run with ({seed[1]}).")
        seen.add(seed)


def _keyed_in(df: pd.DataFrame, other: pd.DataFrame) -> list[bool]:
    """Which attacks of ``df`` ``other`` has too (the same model and attack data, at any seed)."""
    keys = set(zip(other.unlearned_run, other.attack_data))
    return [k in keys for k in zip(df.unlearned_run, df.attack_data)]


def table1_claims(rec, rows: pd.DataFrame) -> pd.DataFrame:
    """Table 1's claims (:func:`analysis.table1_claims`) in bf16, and in fp32 for the attacks recorded
    in fp32, each attack at the mean over its seeds (Table 3's repeats, :data:`MARGIN_SEEDS_06`); a
    margin inside the widest range of one checkpoint's seeds is not resolved; FRP's seeds counted."""
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
    on_frontier = bool(len(ft3)) and ft3.rule.eq("paper").any()
    chosen = ft3 if on_frontier else t3
    table = analysis.headline(ft3[ft3.rule.eq("paper")] if on_frontier else t3[t3.weights.eq("bf16")] if len(t3)
                              else t3)
    return sourced(table, chosen.attrs["source_runs"])


def build(book) -> dict[Table, pd.DataFrame]:
    """The chapter (after the paper's and the frontier's): the fp32 claims in the bf16 table's last column."""
    t3, checkpoints, read = book.table3, book.table3_checkpoints, book.table3.attrs["source_runs"]
    claims_fp32 = analysis.claims(t3, checkpoints, weights="fp32", n_boot=book.n_boot)
    claims = analysis.beside(analysis.claims(t3, checkpoints, n_boot=book.n_boot), claims_fp32)
    return {HEADLINE: headline(book), CLAIMS: sourced(claims, read), CLAIMS_FP32: sourced(claims_fp32, read),
            CLAIMS_TABLE1: table1_claims(book.records, book.grid_rows)}
