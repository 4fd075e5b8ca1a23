"""Which attack-free signal ranks relearning? Notebook 08's steps as pure functions of the frontier's records
(:func:`checkpoints`, :func:`rank_table`, :func:`best_pre_attack`, :func:`partial_table`), the authors' own
checkpoints (:func:`authors_checkpoints`, :func:`authors_table3`), and the family of
tables notebook 09 builds from notebook 08's record (:data:`DECLARED`, :func:`build`). The candidates, outcomes and
reading rules were fixed before any number (docs/choices.md, "Which attack-free signal ranks relearning?")."""
from __future__ import annotations

import contextlib
import io
import math
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from .. import paths, records, runs
from . import analysis, plots
from .book import Table, Text, interval, sourced
from .recorded import FRONTIER_06, FRONTIER_10, Records, row
from .stats import bootstrap_partial_spearman, bootstrap_spearman, bootstrap_spearman_gap, spearman, stratified_spearman

NOTEBOOK = "08_predictors"
# signal -> (family, words); the order of every table. The measured family joins once its runs are recorded.
SIGNALS = {
    "l2_all": ("weight space", "global L2"), "FRAG_x100": ("weight space", "FRAG's gap"),
    "A_f_x100": ("weight space", "cos(F, ΔW²)"), "A_r_x100": ("weight space", "cos(R, ΔW²)"),
    "es": ("evaluation", "forget ES"), "forget_probability": ("evaluation", "forget probability"),
    "forget_rouge": ("evaluation", "forget ROUGE"), "forget_truth_ratio": ("evaluation", "forget truth ratio"),
    "es_retain": ("evaluation", "retain ES"), "model_utility": ("evaluation", "Model Utility"),
    "pruning": ("design", "pruning (vs gradient)"), "forget_authors": ("design", "forget-set size (authors)"),
    "strength_rank": ("design", "strength rank in its method"),
    "grad_norm_forget": ("measured", "‖∇ forget loss‖"),
    "grad_norm_forget_retain": ("measured", "‖∇ forget+retain loss‖"),
    "sharpness_random": ("measured", "random sharpness"), "sharpness_sam": ("measured", "SAM sharpness"),
    "probe_es": ("probe", "ES after one attack step"),
}
PRE_ATTACK = tuple(s for s, (family, _) in SIGNALS.items() if family == "evaluation")
MEASURED = tuple(s for s, (family, _) in SIGNALS.items() if family in ("measured", "probe"))  # notebook 10's
MEASURES_NOTEBOOK = "10_sharpness"
FRAG = "FRAG_x100"
OUTCOMES = {"delta_es": "ΔES", "es_after": "forget ES after", "recovered": "share recovered"}
SHORT = {"delta_es": "ΔES", "es_after": "ES after", "recovered": "share"}  # column headers of the views
AUTHORS_SCALES = ("1B", "3B")  # the authors' model sizes: Llama-3.2-1B and 3B


def checkpoints(rec: Records, healthy_rule: str = "paper", attack_data: str = "forget_retain") -> pd.DataFrame:
    """One row per frontier checkpoint healthy by ``healthy_rule`` that ``attack_data`` attacked: its method
    (``model``), split, every signal of :data:`SIGNALS` the records hold, ``weights`` (how the weights notebook 10
    measured stand to its record: :func:`measured_weights`, ``not measured`` where no run measured them; its
    measured family is read where :data:`READ`), and per outcome of :data:`OUTCOMES` the list of its seeds' values
    (``<outcome>_seeds``) and their mean."""
    from . import frontier

    if healthy_rule not in analysis.HEALTHY_RULES:
        raise ValueError(f"healthy_rule must be one of {sorted(analysis.HEALTHY_RULES)}, got {healthy_rule!r}")
    models = frontier.candidates(rec)
    attacks = [r for f in FRONTIER_06 for r in rec.attacks_of_file(f) if row(r)["attack_data"] == attack_data]
    if not attacks:
        raise ValueError(f"no recorded {attack_data!r} attack of the frontier in profile {rec.profile!r}: "
                         "run notebook 06 on the frontier's files first (make reproduce SELECT=06_attacks)")
    _, hit = frontier.attacked(models, attacks)
    df = hit[hit[f"healthy_{healthy_rule}"]].reset_index(drop=True)
    evaluation = [rec.method_by_run[r.split("/", 1)[1]]["results"]["evaluation"]["unlearned"] for r in df.run]
    df = df.assign(**{s: [ev[s] for ev in evaluation] for s in PRE_ATTACK},  # the record's own names
                   pruning=df.method.isin(analysis.PRUNING).astype(int),
                   forget_authors=df.forget_split.map({"forget01": 1, "forget05": 2, "forget10": 3}),
                   strength_rank=df.groupby(["model", "forget_split"]).strength.rank(method="average"),
                   delta_es_seeds=df.delta_es,
                   es_after_seeds=[[b + d for d in ds] for b, ds in zip(df.es, df.delta_es)])
    df = df.assign(delta_es=df.delta_es_seeds.map(np.mean), es_after=df.es_after_seeds.map(np.mean))
    df = df.merge(measured_weights(rec), on="run", how="left").fillna({"weights": "not measured"})
    keep = ["model", "method", "forget_split", "strength", *[s for s in SIGNALS if s in df], "weights",
            *[c for o in OUTCOMES for c in (o, f"{o}_seeds")], "attack_seeds", "run"]
    return df[keep]


def _checkpoints_quietly(profile: str) -> pd.DataFrame:
    """:func:`checkpoints` of ``profile``'s records, without the collectors' count of recorded runs (a notebook's
    aside, not its table). Raises ValueError where the profile has no recorded frontier attack."""
    with contextlib.redirect_stdout(io.StringIO()):
        return checkpoints(Records(profile))


def recovery(profile: str) -> pd.Series:
    """ΔES of each healthy frontier checkpoint of ``profile`` (the mean over its forget+retain attack seeds) by its
    notebook-05 run name, as notebook 08 ranks it; empty where the profile has no recorded frontier attack."""
    try:
        df = _checkpoints_quietly(profile)
    except ValueError:  # no recorded attack of the frontier
        return pd.Series(dtype=float, name="delta_es")
    return pd.Series(df.delta_es.to_numpy(), index=df.run.str.split("/", n=1).str[1], name="delta_es")


READ = ("recorded", "within tolerance")  # the weights a measurement counts on: its record's, or a remake near them


def measurements(rec: Records) -> pd.DataFrame:
    """Every complete run of notebook 10's frontier file (:data:`FRONTIER_10`; a run with other settings is not
    read) that measured a notebook-05 checkpoint, by that run (``run``): its measured family of :data:`SIGNALS` and
    ``weights``, how the weights it measured stand to the 05 record: ``recorded`` (bit for bit), ``within
    tolerance`` or ``outside tolerance`` (a remake on another CPU's kernels, judged by its drift against the
    record), ``unjudged`` (other bits, and no remake's drift that judged them), ``redone`` (the 05 run was made
    again since: its record names other weights). A 05 run measured twice has two rows."""
    found = []
    for spec in rec.planned(MEASURES_NOTEBOOK, FRONTIER_10):
        if not spec.is_complete():
            continue
        r = records.read_json(spec.out_dir / paths.RESULTS_FILE)["results"]
        u = r["unlearned_run"]
        if not u:
            continue
        named = rec.method_by_run.get(u, {}).get("results", {}).get("checkpoint_sha256", {}).get("unlearned")
        if not (named and r["checkpoint_sha256"]["recorded"] == named):
            weights = "redone"
        elif r["weights_as_recorded"] and r["checkpoint_sha256"]["measured"] == named:
            weights = "recorded"
        else:
            weights = (r.get("checkpoint_drift") or {}).get("verdict", "unjudged").replace("bit-identical", "recorded")
        found.append({"run": f"05_unlearn/{u}", **{s: r["row"][s] for s in MEASURED}, "weights": weights})
    return pd.DataFrame(found, columns=["run", *MEASURED, "weights"])


def measured_weights(rec: Records) -> pd.DataFrame:
    """By notebook-05 run (``run``): ``weights``, how the weights notebook 10 measured stand to its record
    (:func:`measurements`; ``measured twice`` where two runs measured it on weights that count), and its measured
    family of :data:`SIGNALS` where it counts (:data:`READ`: on its record's bits, or on a remake within tolerance
    of that record). A status outside READ is not read (:data:`NOT_READ` says why). Of a run's several measurements
    the one read is kept, else the first reason of :data:`NOT_READ`'s order."""
    m = measurements(rec)
    n_read = m.weights.isin(READ).groupby(m.run).transform("sum")
    m = m.assign(weights=m.weights.mask(n_read > 1, "measured twice"))  # which to read is not known
    order = {w: i for i, w in enumerate([*READ, *NOT_READ])}
    m = m.sort_values("weights", key=lambda w: w.map(order), kind="stable").drop_duplicates("run")
    return m.assign(**{s: m[s].where(m.weights.isin(READ)) for s in MEASURED}).reset_index(drop=True)


MEASURED_MIN_SHARE = 0.5  # a measured signal joins the tables once recorded on this share of the checkpoints


def signals(df: pd.DataFrame) -> list[str]:
    """The signals of :data:`SIGNALS` that ``df`` holds for at least four checkpoints (a measured one: for at least
    :data:`MEASURED_MIN_SHARE` of them, so that a partial grid is not read as a result) and that vary (the forget
    set's size does not on one split), in order."""
    def enough(s: str) -> bool:
        n = df[s].notna().sum()
        return n >= 4 and (s not in MEASURED or n >= MEASURED_MIN_SHARE * len(df))
    return [s for s in SIGNALS if s in df and enough(s) and df[s].nunique() > 1]


def splits(df: pd.DataFrame) -> dict[str, pd.Series]:
    """Where each ρ is taken: both splits pooled, then each split alone."""
    return {"both": df.forget_split.ne(""), **{s: df.forget_split.eq(s) for s in sorted(set(df.forget_split),
                                                                                       reverse=True)}}


def _between(part: pd.DataFrame, signal: str, outcome: str, n_boot: int) -> dict:
    """ρ over the mean of each method on each split (the cells), resampling methods."""
    cells = part.groupby(["model", "forget_split"], sort=True)[[signal, outcome]].mean().dropna().reset_index()
    if len(cells) < 4:
        return {"rho": np.nan, "low": np.nan, "high": np.nan, "n": len(cells)}
    return bootstrap_spearman(cells[signal], cells[outcome], n_boot=n_boot, groups=list(cells.model))


def rank_row(part: pd.DataFrame, signal: str, outcome: str, n_boot: int) -> dict:
    """Every reading of one signal against one outcome over ``part``: pooled ρ with its interval (methods, then
    checkpoints, then seeds), within a method (on a split), between method means, and ρ(signal) − ρ(FRAG's gap)
    signed and in size (|ρ(FRAG)| − |ρ(signal)|: above 0 where FRAG ranks better) over the same resamples."""
    y, groups = list(part[f"{outcome}_seeds"]), list(part.model)
    pooled = bootstrap_spearman(part[signal], y, n_boot=n_boot, groups=groups)
    cells = list(part.model + " " + part.forget_split)
    within = stratified_spearman(part[signal], y, groups, n_boot=n_boot, cells=cells)
    between = _between(part, signal, outcome, n_boot)
    gap = bootstrap_spearman_gap(part[FRAG], part[signal], y, n_boot=n_boot, groups=groups)
    size = bootstrap_spearman_gap(part[signal], part[FRAG], y, n_boot=n_boot, groups=groups, absolute=True)
    family, words = SIGNALS[signal]
    return {"outcome": outcome, "signal": signal, "family": family, "words": words,
            "rho": pooled["rho"], "low": pooled["low"], "high": pooled["high"], "n": pooled["n"],
            "methods": pooled["n_groups"], "within_rho": within["rho"], "within_low": within["low"],
            "within_high": within["high"], "between_rho": between["rho"], "between_low": between["low"],
            "between_high": between["high"], "between_n": between["n"], "minus_frag": gap["gap"],
            "minus_frag_low": gap["low"], "minus_frag_high": gap["high"], "frag_beats_by": size["gap"],
            "frag_beats_low": size["low"], "frag_beats_high": size["high"]}


def rank_table(df: pd.DataFrame, n_boot: int, outcomes: Sequence[str] = tuple(OUTCOMES)) -> pd.DataFrame:
    """:func:`rank_row` for every signal of ``df``, outcome and split (:func:`splits`); ``ranks``: whether the
    pooled interval excludes 0 (the rule of docs/choices.md). A measured signal is ranked on no split until it is
    recorded on enough of the whole frontier (:func:`signals` of ``df``), however many of one split it has."""
    joined = set(signals(df))
    rows = [{"split": split, **rank_row(df[mask], s, o, n_boot)} for o in outcomes
            for split, mask in splits(df).items() for s in signals(df[mask]) if s not in MEASURED or s in joined]
    t = pd.DataFrame(rows)
    return t.assign(ranks=(t.low > 0) | (t.high < 0))


def shared_term(df: pd.DataFrame, n_boot: int, given: str = "es", outcome: str = "delta_es") -> pd.DataFrame:
    """The shared term, signal by signal, both splits: its ρ with the forget ES before the attack (``given``), its
    ρ with ``outcome`` (ΔES = ES after − ES before) and its partial ρ with ``outcome`` given ES before, over the
    resamples of every ρ: what a signal ranks of ΔES beyond the term it shares with it. A diagnostic, added after
    the first reading of the tables (docs/choices.md fixes the readings that decide). Each over the checkpoints
    where the signal is recorded (a measured one may not be on all)."""
    rows = []
    for s in signals(df):
        if s == given:
            continue
        p = bootstrap_partial_spearman(df[s], df[given], list(df[f"{outcome}_seeds"]), n_boot=n_boot,
                                       groups=list(df.model))
        on = df[np.isfinite(df[s].astype(float))]
        rows.append({"signal": s, "words": SIGNALS[s][1], "family": SIGNALS[s][0],
                     "rho_es_before": spearman(on[s], on[given]), "rho": spearman(on[s], on[outcome]),
                     "partial": p["rho"], "partial_low": p["low"], "partial_high": p["high"], "n": p["n"]})
    return pd.DataFrame(rows)


def best_pre_attack(table: pd.DataFrame, outcome: str, discovery: str = "forget10") -> str:
    """The evaluation signal with the largest |pooled ρ| with ``outcome`` on ``discovery`` (docs/choices.md)."""
    part = table[table.outcome.eq(outcome) & table.split.eq(discovery) & table.signal.isin(PRE_ATTACK)]
    if not len(part):
        raise ValueError(f"no pre-attack signal was ranked against {outcome!r} on {discovery!r}")
    return str(part.loc[part.rho.abs().idxmax(), "signal"])


def partial_table(df: pd.DataFrame, table: pd.DataFrame, n_boot: int, discovery: str = "forget10",
                  of: Sequence[str] | None = None) -> pd.DataFrame:
    """Per outcome and split, the partial ρ of each of ``of`` (default: FRAG, L2 and the measured signals ``df``
    holds) with the outcome given the best pre-attack signal (chosen on ``discovery``), over the resamples of every
    ρ: what each ranks that the evaluation already did."""
    of = of or ("FRAG_x100", "l2_all", *[s for s in MEASURED if s in signals(df)])
    rows = []
    for outcome in dict.fromkeys(table.outcome):
        given = best_pre_attack(table, outcome, discovery)
        for split, mask in splits(df).items():
            part = df[mask]
            joined = signals(part)
            for signal in of:
                if signal in MEASURED and signal not in joined:  # recorded on under half of this split
                    continue
                p = bootstrap_partial_spearman(part[signal], part[given], list(part[f"{outcome}_seeds"]),
                                               n_boot=n_boot, groups=list(part.model))
                rows.append({"outcome": outcome, "split": split, "signal": signal, "given": given,
                             "rho": p["rho"], "low": p["low"], "high": p["high"], "n": p["n"],
                             "adds": p["low"] > 0 or p["high"] < 0})
    return pd.DataFrame(rows)


# -- the authors' own checkpoints ----------------------------------------------------------------------
AUTHORS_FILE = "authors_checkpoints.csv"
AUTHORS_TABLE3_METHODS = ("graddiff", "npo", "rmu", "sp", "frp_p0")  # their analysis/table3_spearman.py; GA left out
AUTHORS_PREDICTORS = ("l2", "frag_gap", "cos_f", "cos_r")
AUTHORS_BASELINES = {"pruning": "pruning (vs gradient)", "es_before": "forget ES before",
                     "forget_percent": "forget set's size"}


def authors_checkpoints() -> pd.DataFrame:
    """The authors' per-checkpoint predictors and ES (``data/reference/authors_checkpoints.csv``, its sources in
    ``data/reference/README.md``), ``delta_es`` their ΔES under forget+retain, with the design signals their rows
    allow: ``pruning`` (SP or FRP of any veto) and ``forget_percent``."""
    df = pd.read_csv(paths.DATA_DIR / "reference" / AUTHORS_FILE)
    return df.assign(delta_es=df.delta_es_forget_retain,
                     pruning=df.method.str.split("_").str[0].isin(analysis.PRUNING).astype(int),
                     forget_percent=df.forget_split.str.removeprefix("forget").astype(int))


def authors_table3_rows(df: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """Their Table 3's checkpoints per (scale, subset): :data:`AUTHORS_TABLE3_METHODS` on every split, per model
    size and pooled, all and without FRP."""
    chosen = df[df.method.isin(AUTHORS_TABLE3_METHODS)]
    scales = {**{s: chosen[chosen.scale.eq(s)] for s in AUTHORS_SCALES}, "pooled": chosen}
    return {(scale, subset): part[part.method.ne("frp_p0")] if subset == "w/o FRP" else part
            for scale, part in scales.items() for subset in ("all", "w/o FRP")}


def authors_table3(df: pd.DataFrame, columns: Sequence[str] = AUTHORS_PREDICTORS) -> pd.DataFrame:
    """Spearman ρ of each of ``columns`` with their ΔES (forget+retain) over :func:`authors_table3_rows`."""
    return pd.DataFrame([{"scale": scale, "subset": subset, "predictor": c,
                          "rho": spearman(part[c], part.delta_es), "n": len(part)}
                         for (scale, subset), part in authors_table3_rows(df).items() for c in columns])


def authors_against_printed(recomputed: pd.DataFrame) -> pd.DataFrame:
    """Each recomputed ρ beside the authors' recomputation (``authors_csv``: their REPRODUCE.md table, and their
    ``results/table3_spearman.csv`` for cos R, which that table omits; ``data/reference/authors_table3.csv``)."""
    theirs = analysis.authors_table3()
    theirs = theirs[theirs.source.isin(["REPRODUCE.md Table 3 section (table)", "results/table3_spearman.csv"])
                    & theirs.predictor.isin(AUTHORS_PREDICTORS)].set_index(["scale", "subset", "predictor"]).rho
    keys = list(zip(recomputed.scale, recomputed.subset, recomputed.predictor))
    return recomputed.assign(authors_csv=[theirs.get(k, np.nan) for k in keys]).assign(
        difference=lambda t: (t.rho - t.authors_csv).round(6))


# -- notebook 09: the family of tables read from notebook 08's record ----------------------------------------
RANKS = Table("predictors", {"rho": "+.2f", "within_rho": "+.2f"}, block=False, shown=(  # every row, for the CSV
    "outcome", "split", "family", "signal", "rho", "n", "methods", "within_rho", "between_rho", "frag_beats_by"),
    labels={"frag_beats_by": "FRAG vs it"})
POOLED = Table("predictors_pooled")  # for the eye: both splits, a row per signal
SPLITS = Table("predictors_splits")  # forget10 (discovery) beside forget05 (test)
PARTIAL = Table("predictors_partial")
SHARED = Table("predictors_shared_term", {"ρ with ES before": "+.2f", "ρ with ΔES": "+.2f"})  # ES before's share
AUTHORS_RANKS = Table("predictors_authors", {"rho": "+.2f"}, block=False)
AUTHORS_COLUMNS = tuple(f"{scale} {subset}" for scale in ("1B", "3B", "pooled") for subset in ("all", "w/o FRP"))
# for the eye: a row per signal, a column per model size and subset
AUTHORS_WIDE = Table("predictors_authors_wide", dict.fromkeys(AUTHORS_COLUMNS, "+.2f"))
FOREST = Table("predictors_forest", block=False, figure=True)
VERDICT = Table("predictors_verdict", text=True)  # the results page's answer
HEADLINE = Table("predictors_headline", text=True)  # the README's sentences under its verdict
DECLARED = (RANKS, POOLED, SPLITS, PARTIAL, SHARED, AUTHORS_RANKS, AUTHORS_WIDE, FOREST, VERDICT, HEADLINE)


def _ci(t: pd.DataFrame, point: str = "rho", low: str = "low", high: str = "high") -> list[str]:
    """Each row's estimate with its interval in one cell; "—" where there is none (constant in every stratum)."""
    return ["—" if p != p else interval(p, lo, hi) for p, lo, hi in zip(t[point], t[low], t[high])]


def pooled_view(ranks: pd.DataFrame, split: str = "both") -> pd.DataFrame:
    """A row per signal over ``split``: its family, ρ with each outcome, within a method (ΔES), and |ρ(FRAG)| − |ρ|
    for ΔES and ES after."""
    t = ranks[ranks.split.eq(split)]
    by = {o: t[t.outcome.eq(o)].set_index("signal") for o in OUTCOMES}
    d = by["delta_es"]
    out = pd.DataFrame({"family": d.family, "signal": [_named(r, d.n.max()) for _, r in d.iterrows()],
                        **{SHORT[o]: _ci(by[o].reindex(d.index)) for o in OUTCOMES},
                        "within, ΔES": _ci(d, "within_rho", "within_low", "within_high"),
                        **{f"FRAG vs it, {SHORT[o]}": _ci(by[o].reindex(d.index), "frag_beats_by", "frag_beats_low",
                                                          "frag_beats_high") for o in ("delta_es", "es_after")}})
    out.loc[out.index == FRAG, [c for c in out if c.startswith("FRAG vs")]] = "—"  # FRAG against itself
    return out.reset_index(drop=True)


def splits_view(ranks: pd.DataFrame, discovery: str = "forget10") -> pd.DataFrame:
    """A row per signal: ρ with ΔES and with ES after on the discovery split and on the other (its test); "—" on a
    split where the signal has no row (a measured one recorded on under half of that split's checkpoints)."""
    t = ranks[ranks.split.ne("both")]
    order = sorted(set(t.split), key=lambda s: s != discovery)
    cols = {}
    for o in ("delta_es", "es_after"):
        for split in order:
            part = t[t.outcome.eq(o) & t.split.eq(split)].set_index("signal")
            cols[f"{SHORT[o]}, {split}"] = pd.Series(_ci(part), index=part.index)
    words = t.drop_duplicates("signal").set_index("signal").words
    return (pd.DataFrame(cols).reindex(list(words.index)).fillna("—").rename(index=words).rename_axis("signal")
            .reset_index())


def partial_view(partial: pd.DataFrame) -> pd.DataFrame:
    """A row per outcome and signal: its partial ρ given the best pre-attack signal, on both splits and each alone."""
    t = partial.assign(ci=_ci(partial), outcome=partial.outcome.map(OUTCOMES),
                       signal=partial.signal.map(lambda s: SIGNALS[s][1]),
                       given=partial.given.map(lambda s: SIGNALS[s][1]))
    wide = t.pivot_table(index=["outcome", "given", "signal"], columns="split", values="ci", aggfunc="first",
                         sort=False)
    return wide[[c for c in ("forget10", "forget05", "both") if c in wide]].fillna("—").reset_index()


def shared_view(shared: pd.DataFrame) -> pd.DataFrame:
    """A row per signal: ρ with ES before, ρ with ΔES, the partial ρ with ΔES given ES before, and on how many
    checkpoints."""
    return pd.DataFrame({"signal": shared.words, "ρ with ES before": shared.rho_es_before, "ρ with ΔES": shared.rho,
                         "ρ with ΔES given ES before": _ci(shared, "partial", "partial_low", "partial_high"),
                         "n": shared.n})


def authors_view(baselines: pd.DataFrame) -> pd.DataFrame:
    """A row per signal of the authors' rows, a column per model size and subset (:data:`AUTHORS_COLUMNS`): ρ with
    their ΔES."""
    t = baselines.assign(column=baselines.scale + " " + baselines.subset)
    wide = t.pivot_table(index="predictor", columns="column", values="rho", aggfunc="first", sort=False)
    names = {theirs: SIGNALS[ours][1] for ours, theirs in analysis.AUTHORS_PREDICTOR.items()} | AUTHORS_BASELINES
    return wide[list(AUTHORS_COLUMNS)].rename(index=names).rename_axis("signal").reset_index()


def recorded(profile: str) -> tuple[dict, str] | None:
    """Notebook 08's complete record of ``profile`` (its grid file's run) and its run path, or None."""
    (spec,) = runs.plan_run(NOTEBOOK, None, {"profile": profile})  # a collector's one run: its profile's file's
    if not spec.is_complete():
        return None
    return records.read_json(spec.out_dir / paths.RESULTS_FILE), f"{NOTEBOOK}/{spec.name}"


def place(profile: str, unlearned_run: str, signals: Sequence[str] = ("FRAG_x100", "l2_all")) -> tuple | None:
    """Where one notebook-05 checkpoint sits among notebook 08's healthy frontier: for each of ``signals`` and ΔES
    (its seed mean), the checkpoint's value and its rank among the checkpoints (1 the largest), beside notebook 08's
    pooled ρ of each signal with ΔES (its record as it is, current or not); and a figure of ΔES against each signal,
    the checkpoint marked. None where the profile has no notebook-08 record or the checkpoint is not among its
    checkpoints.

    Returns:
        ``(table, figure, n, said)``, ``said`` a sentence: each signal's pooled ρ and whether its interval excludes 0.
    """
    (spec,) = runs.plan_run(NOTEBOOK, None, {"profile": profile})
    file = spec.out_dir / paths.RESULTS_FILE  # as recorded, current or not: the ranks it shows are its own
    record = records.read_json(file)["results"] if file.is_file() else {"runs": []}
    if f"05_unlearn/{unlearned_run}" not in record["runs"]:
        return None
    df = _checkpoints_quietly(profile)
    df = df[df.run.isin(record["runs"])].reset_index(drop=True)
    here = df.run.eq(f"05_unlearn/{unlearned_run}")
    if not here.any():  # no longer among the checkpoints (its 05 run redone, or no longer healthy)
        return None
    ranks = pd.DataFrame(record["ranks"])
    pooled = ranks[ranks.split.eq("both") & ranks.outcome.eq("delta_es")].set_index("signal")
    rows, said = [], []
    for column in (*signals, "delta_es"):
        rank = int(df[column].rank(ascending=False, method="min")[here].iloc[0])
        p = pooled.loc[column] if column in pooled.index else None
        rows.append({"": SIGNALS[column][1] if column in SIGNALS else OUTCOMES[column],
                     "this checkpoint": float(df.loc[here, column].iloc[0]), f"rank of {len(df)}": rank,
                     "ρ with ΔES (notebook 08)": "—" if p is None else interval(p.rho, p.low, p.high)})
        if p is not None and np.isfinite([p.low, p.high]).all():
            verdict = "the interval excludes 0" if p.low > 0 or p.high < 0 else "not resolved: the interval includes 0"
            said.append(f"{rows[-1]['']} ranks ΔES at ρ {interval(p.rho, p.low, p.high)} ({verdict})")
    sentence = f"Over notebook 08's {len(df)} checkpoints, " + "; ".join(said) + "." if said else ""
    return pd.DataFrame(rows), plots.placed(df, here, signals), len(df), sentence


def _named(r: pd.Series, n_all: int) -> str:
    """A signal's words, with its n where it was recorded on fewer checkpoints than the rest."""
    return r.words + (f" (n = {int(r.n)} of {int(n_all)})" if r.n < n_all else "")


def _said(r: pd.Series) -> str:
    """What |ρ(FRAG)| − |ρ(signal)|'s interval says."""
    return "FRAG ranks better" if r.frag_beats_low > 0 else "FRAG ranks worse" if r.frag_beats_high < 0 \
        else "not resolved"


def _against(r: pd.Series) -> str:
    """|ρ(FRAG)| − |ρ(signal)| with its interval and what it says."""
    return f"{interval(r.frag_beats_by, r.frag_beats_low, r.frag_beats_high)}, {_said(r)}"


def headline(ranks: pd.DataFrame, best: dict[str, str], split: str = "both") -> str:
    """The README's sentences under its verdict: the best pre-attack signal of ΔES and of ES after (chosen on the
    discovery split), each ρ over ``split``, and |ρ(FRAG)| − |ρ| against each."""
    t = ranks[ranks.split.eq(split)].set_index(["outcome", "signal"])
    d, a = t.loc[("delta_es", best["delta_es"])], t.loc[("es_after", best["es_after"])]
    return (f"[Before any attack](docs/results/what-ranks-relearning.md), the {d.words} ranks ΔES at "
            f"{interval(d.rho, d.low, d.high)}, and the {a.words} ranks the forget ES after the attack at "
            f"{interval(a.rho, a.low, a.high)}. |ρ(FRAG)| − |ρ({d.words})| is "
            f"{interval(d.frag_beats_by, d.frag_beats_low, d.frag_beats_high)} ({_said(d)}); against the "
            f"{a.words}, {interval(a.frag_beats_by, a.frag_beats_low, a.frag_beats_high)} ({_said(a)}).")


def _test(test: pd.Series, chosen: pd.Series) -> str:
    """Whether the test split confirms a choice: its interval excludes 0 on the side the choice's ρ lies."""
    holds = test.low > 0 if chosen.rho > 0 else test.high < 0
    return "the choice holds" if holds else "not resolved"


def coverage(measured_on: dict[str, int], n: int, header: bool = True) -> str:
    """What the page says of the measured signals not yet in the tables: on how many of the ``n`` checkpoints notebook
    10 has recorded each, and when it joins (:data:`MEASURED_MIN_SHARE`); under the bold header unless ``header`` is
    False (when :func:`measured` has opened the paragraph)."""
    short = {s: k for s, k in measured_on.items() if k < MEASURED_MIN_SHARE * n}
    if not short:
        return ""
    counts = sorted(set(short.values()))
    said = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    names = ", ".join(SIGNALS[s][1] for s in short)
    return ("**Measured at the unlearned weights.** " if header else "") + (
        f"Notebook 10 has recorded {names} on {said} of the {n} checkpoints; each joins these tables once recorded on "
        f"{math.ceil(MEASURED_MIN_SHARE * n)}.")


def _listed(rows: pd.DataFrame, point: str = "rho", low: str = "low", high: str = "high",
            after: Callable[[str], str] = lambda signal: "") -> str:
    """Each row's words with its estimate and interval, then ``after`` of its signal, joined by semicolons."""
    return "; ".join(f"{r.words} {interval(r[point], r[low], r[high])}{after(r.signal)}" for _, r in rows.iterrows())


def _es_before(shared: pd.DataFrame, signal: str) -> str:
    """A signal's ρ with the forget ES before the attack and its partial ρ with ΔES given it (``shared``, indexed by
    signal), in parentheses; "" where the table has no row for it."""
    if signal not in shared.index:
        return ""
    r = shared.loc[signal]
    through = ("" if r.partial_low > 0 or r.partial_high < 0 else
               ", not resolved: it ranks ΔES through the term −ES before, and the claim rests on the forget ES after")
    return (f" (ρ with the forget ES before {r.rho_es_before:+.2f}; given it, "
            f"{interval(r.partial, r.partial_low, r.partial_high)}{through})")


def _by_split(ranks: pd.DataFrame, signal: str) -> str:
    """On how many of each split's checkpoints ``signal`` is recorded, in parentheses, from the rows of the splits
    (a split without the signal's row holds the rest of its pooled n); "" where that cannot be told."""
    splits_ = [s for s in dict.fromkeys(ranks.split) if s != "both"]
    rows = ranks[ranks.signal.eq(signal)]
    known = {s: int(rows[rows.split.eq(s)].n.max()) for s in splits_ if rows.split.eq(s).any()}
    pooled = rows[rows.split.eq("both")].n
    if not splits_ or len(splits_) - len(known) > 1 or not len(pooled):
        return ""
    known |= {s: int(pooled.max()) - sum(known.values()) for s in splits_ if s not in known}
    total = {s: int(ranks[ranks.split.eq(s)].n.max()) for s in splits_}
    return " (" + ", ".join(f"{known[s]} of {s}'s {total[s]}" for s in splits_) + ")"


NOT_READ = {"measured twice": "by two runs, so which to read is not known",
            "outside tolerance": "on a remake outside tolerance of its record",
            "unjudged": "on other weights than its record's, with no remake's drift recorded",
            "redone": "before its 05 run was made again"}  # why not read (:func:`measured_weights`), first first


def _checkpoints(k: int) -> str:
    return f"{k} checkpoint{'s' * (k != 1)}"


def _remade(k: int, not_read: dict[str, int] | None = None) -> str:
    """On how many checkpoints the measured weights are a remake within tolerance of the record, and how many
    measurements were not read and why (``not_read``: :data:`NOT_READ`'s key -> count), as sentences after a space;
    "" for none."""
    out = (f" On {_checkpoints(k)} the weights measured are a remake on another CPU's kernels, within tolerance of "
           "the record rather than its bits." if k else "")
    left = {why: j for why, j in (not_read or {}).items() if j}
    if left:
        total = sum(left.values())
        out += (f" Of the checkpoints measured, {total} {'is' if total == 1 else 'are'} not read: "
                + ", ".join(f"{j} {NOT_READ.get(why, why)}" for why, j in left.items()) + ".")
    return out


def measured(ranks: pd.DataFrame, partial: pd.DataFrame, best: dict[str, str], shared: pd.DataFrame | None = None,
             split: str = "both", outcomes: Sequence[str] = ("delta_es", "es_after"), remade: int = 0,
             not_read: dict[str, int] | None = None) -> str:
    """What the results page says of the measured signals that joined the tables, per outcome of ``outcomes`` over
    ``split``, by the readings docs/choices.md fixed: which rank it (pooled interval clear of 0; a ΔES claim names
    the signal's ρ with the forget ES before and its partial ρ given it, from ``shared``, the term it may share with
    ΔES), where |ρ(FRAG)| − |ρ(signal)| is resolved and where not, and each one's partial ρ given the best
    pre-attack signal (which add rank information); ``remade``: how many were measured on a remake within tolerance
    of its record, not its bits; ``not_read``: how many were not read, by why (:data:`NOT_READ`). Empty where none
    joined. The share recovered is in the tables."""
    t = ranks[ranks.split.eq(split) & ranks.signal.isin(MEASURED) & ranks.outcome.isin(outcomes)]
    if not len(t):
        return ""
    names = list(dict.fromkeys(t.signal))
    n_all = int(ranks[ranks.split.eq(split) & ranks.outcome.isin(outcomes)].n.max())
    n = t.groupby("signal", sort=False).n.min()
    probe = " (the probe takes one step of the attack)" if "probe_es" in names else ""
    on = (f"on {int(n.iloc[0])} of the {n_all} checkpoints{_by_split(ranks, names[0]) if split == 'both' else ''}"
          if n.nunique() == 1 else
          "on " + ", ".join(f"{int(k)} ({SIGNALS[s][1]})" for s, k in n.items()) + f" of the {n_all} checkpoints")
    out = [f"**Measured at the unlearned weights.** {len(names)} signal{'s' * (len(names) > 1)} of notebook 10{probe}, "
           f"{on}; each ρ, and each comparison with FRAG, is over the checkpoints it is recorded on."
           f"{_remade(remade, not_read)}"]
    shared = shared.set_index("signal") if shared is not None and len(shared) else None
    for outcome in outcomes:
        o = t[t.outcome.eq(outcome)]
        if not len(o):
            continue
        ranked = o[o.ranks]
        if not len(ranked):
            said = ["no measured signal ranks it."]
        elif outcome == "delta_es" and shared is not None:  # the term −ES before that ΔES shares with a signal
            said = [f"ranked by {_listed(ranked, after=lambda s: _es_before(shared, s))}."]
        else:
            said = [f"ranked by {_listed(ranked)}."]
        better, worse = o.frag_beats_low > 0, o.frag_beats_high < 0
        for words, mask in (("FRAG ranks better than", better), ("FRAG ranks worse than", worse)):
            if mask.any():
                said.append(f"{words} " + " and ".join(
                    f"{r.words} (|ρ(FRAG)| − |ρ| {interval(r.frag_beats_by, r.frag_beats_low, r.frag_beats_high)})"
                    for _, r in o[mask].iterrows()) + ".")
        rest = o[~(better | worse)]
        if len(rest):
            said.append("|ρ(FRAG)| − |ρ| is not resolved for " + ("any of them." if len(rest) == len(o) else
                                                                  ", ".join(rest.words) + "."))
        p = partial[partial.outcome.eq(outcome) & partial.split.eq(split) & partial.signal.isin(names)]
        p = p.assign(words=p.signal.map(lambda s: SIGNALS[s][1]))
        missing = [SIGNALS[s][1] for s in o.signal if s not in set(p.signal)]
        if len(p):
            adds = p[p.adds]
            said.append(f"Given the {SIGNALS[best[outcome]][1]}, partial ρ: {_listed(p)}; " + (
                f"{', '.join(adds.words)} add{'s' * (len(adds) == 1)} rank information." if len(adds)
                else "none adds rank information that this n resolves."))
        if missing:
            said.append(f"No partial ρ recorded for {', '.join(missing)}.")
        out.append(f"- {OUTCOMES[outcome][0].upper() + OUTCOMES[outcome][1:]}: " + " ".join(said))
    return out[0] + "\n\n" + "\n".join(out[1:])


def verdict(ranks: pd.DataFrame, partial: pd.DataFrame, best: dict[str, str], split: str = "both",
            test_split: str = "forget05", measured_on: dict[str, int] | None = None, n: int = 0,
            shared: pd.DataFrame | None = None, remade: int = 0, not_read: dict[str, int] | None = None) -> str:
    """The results page's answer, per outcome over ``split``: the signals whose interval excludes 0, the best
    pre-attack signal (and its test on ``test_split``) against FRAG, and FRAG's partial ρ given it; then what
    :func:`measured` says of the measured signals in the tables (``shared``: the shared-term table), and what
    :func:`coverage` says of those not yet in them (``measured_on``, of ``n`` checkpoints; ``remade``: how many
    measurements were taken on a remake within tolerance of its record; ``not_read``: those not read, by why)."""
    out = []
    for outcome, words in OUTCOMES.items():
        t = ranks[ranks.outcome.eq(outcome) & ranks.split.eq(split)].set_index("signal")
        if not len(t):
            continue
        p = partial[partial.outcome.eq(outcome) & partial.split.eq(split) & partial.signal.eq(FRAG)].iloc[0]
        b = t.loc[best[outcome]]
        test = ranks[ranks.outcome.eq(outcome) & ranks.split.eq(test_split) & ranks.signal.eq(best[outcome])].iloc[0]
        ranked = [f"{_named(t.loc[s], t.n.max())} {interval(t.loc[s, 'rho'], t.loc[s, 'low'], t.loc[s, 'high'])}"
                  for s in t.index if t.loc[s, "ranks"]]
        out.append(f"**{words[0].upper() + words[1:]}.** " + (
            f"Intervals that exclude 0: {'; '.join(ranked)}." if ranked else "No signal's interval excludes 0.")
            + f" The best pre-attack signal, chosen on forget10, is the {b.words}; on forget05, its test, it ranks "
            f"{words} at {interval(test.rho, test.low, test.high)} ({_test(test, b)}). |ρ(FRAG)| − |ρ({b.words})| is "
            f"{_against(b)}. Given it, FRAG's partial ρ is {interval(p.rho, p.low, p.high)}"
            + (": FRAG adds rank information." if p.adds else ", not resolved."))
    joined = measured(ranks, partial, best, shared, split, remade=remade, not_read=not_read)
    short = coverage(measured_on or {}, n, header=not joined)
    out += [joined, short + _remade(remade, not_read) if short and not joined else short]
    return "\n\n".join(o for o in out if o)


def build(book) -> dict[Table, object]:
    """The chapter: notebook 08's record of the book's profile as tables, the forest plot and the verdict."""
    found = recorded(book.records.profile)
    if found is None:
        print(f"no complete {NOTEBOOK} record of profile {book.records.profile!r}: its tables stay empty")
        return {}
    record, run = found
    res = record["results"]
    ranks, partial = pd.DataFrame(res["ranks"]), pd.DataFrame(res["partial"])
    authors = pd.DataFrame(res["authors_baselines"])
    book.predictor_ranks, book.predictors_best = sourced(ranks, [run]), res["best_pre_attack"]
    return {RANKS: book.predictor_ranks, POOLED: sourced(pooled_view(ranks), [run]),
            SPLITS: sourced(splits_view(ranks), [run]), PARTIAL: sourced(partial_view(partial), [run]),
            SHARED: sourced(shared_view(pd.DataFrame(res["shared_term"])), [run]),
            AUTHORS_RANKS: sourced(authors, [run]), AUTHORS_WIDE: sourced(authors_view(authors), [run]),
            FOREST: sourced(plots.predictor_forest(ranks, authors), [run]),
            VERDICT: sourced(Text(verdict(ranks, partial, res["best_pre_attack"], measured_on=res.get("measured_on"),
                                          n=res["checkpoints"], shared=pd.DataFrame(res["shared_term"]),
                                          remade=res.get("measured_remade", 0),
                                          not_read=res.get("measured_not_read"))), [run]),
            HEADLINE: sourced(Text(headline(ranks, res["best_pre_attack"])), [run])}
