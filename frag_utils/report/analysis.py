"""Predictor analysis (paper §4, Table 3): how well does each attack-free score (FRAG with gamma 1 and 0 = ``A_f``,
``A_r``, the global L2) rank robustness, ΔES under the forget+retain attack? Spearman's ρ over *healthy*
checkpoints with a bootstrap interval, which shows how little a single ρ over few checkpoints says; a predictor
of robustness correlates *negatively* with ΔES. Also the paper's claims and the frontier's tables."""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from .. import paths
from .stats import bootstrap_spearman, bootstrap_spearman_gap, permutation_spearman, stratified_spearman

# the column that names a checkpoint's method for the intervals: the model label (FRP's two vetoes
# are two methods), resampled as one unit because its checkpoints share a recipe and a target
GROUP_BY = "model"
# The paper's Table 3 (the authors' analysis/table3_spearman.py): a fixed method list, one
# checkpoint per method and forget split at its main setting, the forget+retain attack. GA is left
# out by name as collapsed; no utility rule. Columns: all, and without FRP.
PAPER_TABLE3_METHODS = ("graddiff", "npo", "rmu", "sp", "frp")
PAPER_TABLE3_PREDICTORS = ("l2_all", "FRAG_x100", "A_f_x100", "A_r_x100")
# this repository's predictor columns -> the authors' names for the same quantity
AUTHORS_PREDICTOR = {"l2_all": "l2", "FRAG_x100": "frag_gap", "A_f_x100": "cos_f", "A_r_x100": "cos_r"}
# below this many methods an interval that resamples methods is nominal: a cluster bootstrap over few
# clusters covers less than its level (a verdict "with 95 % confidence" says so)
FEW_METHODS = 10
# Table 3's checkpoints in the paper's protocol: 5 methods x 3 splits, 4 x 3 without FRP
PLANNED_CHECKPOINTS = {"all": 15, "w/o FRP": 12}


def healthy(df: pd.DataFrame, min_utility_fraction: float = 0.5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(healthy, excluded)``: the checkpoints whose Model Utility before the attack is at least
    ``min_utility_fraction`` of the target's, and the collapsed others, with a ``reason``."""
    collapsed = df.model_utility_before < min_utility_fraction * df.target_model_utility
    return df[~collapsed], df[collapsed].assign(reason=f"Model Utility below {min_utility_fraction:g} x target's")


def predictor_table(df: pd.DataFrame, subsets: dict[str, pd.Series], predictors: Sequence[str],
                    n_boot: int = 2000) -> pd.DataFrame:
    """Spearman ρ of each predictor with ``delta_es`` (a list of seeds each) per subset (name -> mask over
    ``df``), its interval over the :data:`GROUP_BY` methods, their checkpoints and seeds (:func:`bootstrap_spearman`)
    and its p-value across checkpoints (:func:`permutation_spearman`)."""
    rows = []
    for name, mask in subsets.items():
        part = df[mask]
        for p in predictors:
            res = bootstrap_spearman(part[p], part.delta_es, n_boot=n_boot, groups=list(part[GROUP_BY]))
            perm = permutation_spearman(part[p], part.delta_es) if res["n"] >= 3 else {}
            rows.append({"subset": name, "predictor": p, "n": res["n"], "methods": res["n_groups"],
                         "attacks": sum(res["n_seeds"]), "rho": res["rho"], "low": res["low"], "high": res["high"],
                         "p_perm": perm.get("p", np.nan), "resampled": "methods, checkpoints, seeds",
                         "degenerate_resamples": res["n_degenerate"]})
    return pd.DataFrame(rows)


def paper_table3_checkpoints(df: pd.DataFrame, main_runs: set[str]) -> pd.DataFrame:
    """The checkpoints of the paper's Table 3: the rows of ``df`` of its methods at their main setting
    (``main_runs``), by method and split; two for one method and split are refused (ambiguous settings)."""
    chosen = df[df.method.isin(PAPER_TABLE3_METHODS) & df.unlearned_run.isin(main_runs)]
    twice = chosen.groupby(["method", "forget_split"]).size()
    if (twice > 1).any():
        raise ValueError(f"More than one main checkpoint for {list(twice[twice > 1].index)}: name one run per "
                         "method and split as its main setting.")
    order = {m: i for i, m in enumerate(PAPER_TABLE3_METHODS)}
    return chosen.assign(_o=chosen.method.map(order)).sort_values(["_o", "forget_split"]).drop(columns="_o")


def paper_table3_subsets(chosen: pd.DataFrame) -> dict[str, pd.Series]:
    """Table 3's two columns as masks over its checkpoints: "all", and "w/o FRP"."""
    return {"all": chosen.method.ne(""), "w/o FRP": chosen.method.ne("frp")}


def paper_table3(chosen: pd.DataFrame, predictors: Sequence[str] = PAPER_TABLE3_PREDICTORS,
                 n_boot: int = 2000) -> pd.DataFrame:
    """:func:`predictor_table` over the Table 3 checkpoints, "all" and "w/o FRP"."""
    return predictor_table(chosen, paper_table3_subsets(chosen), predictors, n_boot)


def authors_table3() -> pd.DataFrame:
    """The authors' Table 3 as their paper and repository give it (``data/reference/authors_table3.csv``): ``rho``
    and ``n`` per scale, subset, predictor (``frag_printed``: the paper's printed FRAG column) and source."""
    return pd.read_csv(paths.DATA_DIR / "reference" / "authors_table3.csv")


def _authors_rho(scale: str, printed: bool = False) -> pd.Series:
    """The authors' ρ at ``scale`` by (subset, predictor): printed in the paper, or recomputed (first source)."""
    t = authors_table3()
    t = t[t.scale.eq(scale) & t.source.str.startswith("paper").eq(printed)]
    return t.drop_duplicates(["subset", "predictor"]).set_index(["subset", "predictor"]).rho


def table3_beside_authors(ours: pd.DataFrame) -> pd.DataFrame:
    """:func:`paper_table3` with, beside each row, the authors' recomputation (``authors_<scale>``) and the value
    the paper prints (``paper_<scale>``; its FRAG column is cos F alone, and stands in the FRAG row, as printed),
    at 1B, 3B and pooled."""
    name = ours.predictor.map(AUTHORS_PREDICTOR)
    beside = {f"authors_{scale}": _authors_rho(scale) for scale in ("1B", "3B", "pooled")}
    beside |= {f"paper_{scale}": _authors_rho(scale, printed=True).rename(index={"frag_printed": "frag_gap"})
               for scale in ("1B", "3B", "pooled")}
    return ours.assign(**{k: [v.get((s, p), float("nan")) for s, p in zip(ours.subset, name)]
                          for k, v in beside.items()})


def _verdict(low: float, high: float, above: str, below: str) -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "not measured yet"
    if high < 0:
        return f"{below} with 95 % confidence"
    if low > 0:
        return f"{above} with 95 % confidence"
    return "not resolved: the interval includes 0"


def _l2_verdict(part: pd.DataFrame, frag: pd.Series | None, low: float, n_boot: int) -> str:
    """The verdict of an L2 claim over ``part``, off the interval of ρ(L2) − ρ(FRAG) over paired resamples: supported
    only where FRAG's own ρ (``frag``) is negative too; L2 ranks in reverse where its own interval's ``low`` is > 0."""
    gap = {"gap": np.nan, "low": np.nan, "high": np.nan}
    if len(part):
        gap = bootstrap_spearman_gap(part.FRAG_x100, part.l2_all, list(part.delta_es), n_boot=n_boot,
                                     groups=list(part[GROUP_BY]))
    verdict = _verdict(gap["low"], gap["high"], "supported: ρ(L2) > ρ(FRAG)", "reversed: ρ(L2) < ρ(FRAG)")
    if verdict.startswith("supported") and frag is not None and not frag.high < 0:
        # FRAG beating L2 means a negative FRAG ρ with L2's above it, not only L2's above FRAG's
        verdict = ("not supported as the paper means it: ρ(L2) > ρ(FRAG) with 95 % confidence, but FRAG's "
                   f"own ρ is not negative ({frag.rho:+.2f} [{frag.low:+.2f}, {frag.high:+.2f}])")
    if np.isfinite(gap["gap"]):
        verdict += f" (ρ(L2) − ρ(FRAG) {gap['gap']:+.2f} [{gap['low']:+.2f}, {gap['high']:+.2f}])"
    if low > 0:
        verdict += "; L2 ranks in reverse with 95 % confidence: the larger updates recovered more"
    return verdict


def claims(table3: pd.DataFrame, checkpoints: pd.DataFrame, weights: str = "bf16", n_boot: int = 2000) -> pd.DataFrame:
    """The paper's Table 3 claims one per row, from this repository's Table 3 of one precision and its checkpoints:
    the paper's and the authors' recomputed value at 1B, ours with its interval, and a verdict read off the
    interval alone, once every checkpoint of :data:`PLANNED_CHECKPOINTS` is recorded. FRAG is the Eq. 5 gap (the
    printed FRAG column is cos(F, ΔW²): its own row); an L2 row asks whether L2 ranks worse (:func:`_l2_verdict`)."""
    printed, recomputed = _authors_rho("1B", printed=True), _authors_rho("1B")
    ours = table3[table3.weights.eq(weights)].set_index(["subset", "predictor"]) if len(table3) else None
    cps = checkpoints[checkpoints.weights.eq(weights)] if len(checkpoints) else checkpoints
    specs = [("FRAG (Eq. 5 gap) correlates negatively with ΔES", "all", "FRAG_x100", "frag_printed"),
             ("the same without FRP", "w/o FRP", "FRAG_x100", "frag_printed"),
             ("cos(F, ΔW²) alone, what the printed FRAG column tracks, correlates negatively", "all", "A_f_x100",
              "frag_printed"),
             ("global L2 ranks robustness worse than FRAG (the ρ are L2's; the verdict, ρ(L2) − ρ(FRAG))", "all",
              "l2_all", "l2"),
             ("the same without FRP", "w/o FRP", "l2_all", "l2")]
    rows = []
    for claim, subset, predictor, paper_name in specs:
        r = ours.loc[(subset, predictor)] if ours is not None and (subset, predictor) in ours.index else None
        rho, low, high, n = (r.rho, r.low, r.high, int(r.n)) if r is not None else (np.nan, np.nan, np.nan, 0)
        attacks = int(r.attacks) if r is not None else 0
        verdict = _verdict(low, high, "reversed: ρ > 0", "supported: ρ < 0")
        if predictor == "l2_all":
            frag = ours.loc[(subset, "FRAG_x100")] if ours is not None and (subset, "FRAG_x100") in ours.index else None
            verdict = _l2_verdict(cps[paper_table3_subsets(cps)[subset]] if len(cps) else cps, frag, low, n_boot)
        methods = int(r.methods) if r is not None and "methods" in r and pd.notna(r.methods) else n
        if "95 %" in verdict and methods < FEW_METHODS:
            verdict += (f"; nominal, {methods} methods: the interval resamples so few that it covers less than "
                        "it says (a bootstrap over few clusters)")
        if n < PLANNED_CHECKPOINTS[subset] and verdict != "not measured yet":
            verdict = f"no verdict yet: {n} of {PLANNED_CHECKPOINTS[subset]} checkpoints recorded"
        rows.append({"claim": claim, "subset": subset, "predictor": predictor,
                     "paper_1B": printed.get((subset, paper_name), np.nan),
                     "authors_recomputed_1B": recomputed.get((subset, AUTHORS_PREDICTOR[predictor]), np.nan),
                     f"ours_{weights}": rho, "low": low, "high": high, "n": n, "attacks": attacks, "verdict": verdict,
                     "what_follows": next((t for start, t in _FOLLOWS[predictor] if verdict.startswith(start)), "")})
    return pd.DataFrame(rows)


def beside(claims_: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """``claims_`` with the same claims in another precision (``other``) in one column more: ρ with interval, ``n``,
    the verdict's first words and, on the L2 rows, ρ(L2) − ρ(FRAG) with its interval and whether L2 is reversed."""
    weights = next(c for c in other.columns if c.startswith("ours_"))

    def cell(r: pd.Series) -> str:
        if not r.n:
            return r.verdict
        text = f"{r[weights]:+.2f} [{r.low:+.2f}, {r.high:+.2f}], n {int(r.n)}: {r.verdict.split(':')[0]}"
        gap = re.search(r"\(ρ\(L2\) − ρ\(FRAG\) [^)]*\)", r.verdict)
        reversed_ = "; L2 in reverse" if "L2 ranks in reverse" in r.verdict else ""
        return text + (f" {gap.group(0)}" if gap else "") + reversed_
    return claims_.assign(**{weights: [cell(r) for _, r in other.iterrows()]})


# what each kind of verdict means for the claim, read off the verdict's first words (in order)
_FOLLOWS = {"FRAG_x100": (("supported", "at 135M too, the larger the FRAG gap, the less an attack recovers"),
                          ("reversed", "at 135M the FRAG gap ranks robustness in reverse"),
                          ("not resolved", "these checkpoints cannot tell whether the FRAG gap ranks robustness")),
            "A_f_x100": (("supported", "cos F alone ranks robustness at 135M too"),
                         ("reversed", "cos F alone ranks robustness in reverse at 135M"),
                         ("not resolved", "these checkpoints cannot tell whether cos F alone ranks robustness")),
            "l2_all": (("supported", "global L2 ranks robustness worse than FRAG, as the paper says"),
                       ("not supported", "L2 sits above FRAG, but FRAG's own ρ is not shown negative: this is not "
                                         "FRAG predicting robustness better"),
                       ("reversed", "global L2 ranks robustness better than FRAG at 135M"),
                       ("not resolved", "these checkpoints cannot tell L2 and FRAG apart"))}

# -- the paper's Table 1 claim: FRP keeps the least after each attack --------------------------
TABLE1_BASELINES = ("ga", "graddiff", "npo", "rmu", "sp")
# this repository's model labels (recorded.short_label) -> the paper's Table 1 rows
TABLE1_KEYS = {"gold": "gold", "GA": "ga", "GradDiff": "graddiff", "NPO": "npo", "RMU": "rmu", "SP": "sp",
               "FRP (P 0)": "frp_p0", "FRP (P 0.15)": "frp_p0.15"}
_LABELS = {v: k for k, v in TABLE1_KEYS.items()}
_ATTACK_NAMES = {"retain": "retain", "forget": "forget", "forget_retain": "forget+retain"}


def paper_table1() -> pd.DataFrame:
    """The paper's Table 1 at Llama-3.2-1B (``data/reference/paper_table1.csv``): per method and
    attack (``none`` for the unlearned model), forget ES, ΔES and Model Utility."""
    return pd.read_csv(paths.DATA_DIR / "reference" / "paper_table1.csv")


def _lowest(values: pd.Series, frp: float) -> tuple[str, bool]:
    """``"<FRP's> vs <the lowest baseline's> (<which>)"`` and whether FRP's is lower."""
    return f"{frp:.3f} vs {values.min():.3f} ({_LABELS[values.idxmin()]})", bool(frp < values.min())


def table1_claims(table1: pd.DataFrame, target_model_utility: float, weights: str = "bf16",
                  min_utility_fraction: float = 0.5, seed_spread: float = float("nan")) -> pd.DataFrame:
    """The paper's Table 1 claim, "FRP achieves the lowest post-attack ES/ΔES", one row per attack: FRP (P 0)
    against the lowest baseline, forget ES after the attack and ΔES, in the paper at 1B and here (``table1``'s
    rows of ``weights``, each attack at the mean over its few seeds), with a verdict read off the numbers. It
    names the compared models below ``min_utility_fraction`` of the target's utility ("a utility-collapsed model
    is not meaningfully robust"), and calls a measure whose margin is under ``seed_spread`` (the widest range of
    ΔES over one checkpoint's seeds: conservative, as means over a few seeds move less) not resolved, whichever
    way it points."""
    paper = paper_table1()
    ours = table1[table1.weights.eq(weights) & table1.model.isin(list(TABLE1_KEYS))] if len(table1) else table1
    ours = ours.set_index(ours.model.map(TABLE1_KEYS)) if len(ours) else ours
    floor = min_utility_fraction * target_model_utility
    rows = []
    for attack, name in _ATTACK_NAMES.items():
        p = paper[paper.attack.eq(attack)].set_index("method")
        p_es, _ = _lowest(p.es.loc[list(TABLE1_BASELINES)], p.es["frp_p0"])
        p_delta, _ = _lowest(p.delta_es.loc[list(TABLE1_BASELINES)], p.delta_es["frp_p0"])
        cols = [f"{attack}_es", f"{attack}_delta_es", "mu_before"]
        compared = ["frp_p0", *TABLE1_BASELINES]
        known = bool(len(ours)) and set(compared) <= set(ours.index)
        known = known and bool(ours.loc[compared, cols].notna().all().all())
        if known:
            base = ours.loc[list(TABLE1_BASELINES)]
            es, es_low = _lowest(base[cols[0]], ours.loc["frp_p0", cols[0]])
            delta, delta_low = _lowest(base[cols[1]], ours.loc["frp_p0", cols[1]])
            margins = {"ES": abs(ours.loc["frp_p0", cols[0]] - base[cols[0]].min()),
                       "ΔES": abs(ours.loc["frp_p0", cols[1]] - base[cols[1]].min())}
            status = {k: "not resolved" if margins[k] < seed_spread else "holds" if low else "does not hold"
                      for k, low in (("ES", es_low), ("ΔES", delta_low))}
            inside = {k: f"{v:.3f}" for k, v in margins.items() if v < seed_spread}  # the measure named where both are
            said = " and ".join(f"{k} {v}" for k, v in inside.items()) if len(inside) > 1 else "".join(inside.values())
            why = f" (margin {said}, inside the attack-seed spread {seed_spread:.3f})" if inside else ""
            verdict = (status["ES"] + why if len(set(status.values())) == 1 else  # one word for both measures
                       "; ".join(f"{v} for {k}" + (why if v == "not resolved" else "") for k, v in status.items()))
            named = dict.fromkeys(["frp_p0", base[cols[0]].idxmin(), base[cols[1]].idxmin()])
            collapsed = [m for m in named if ours.loc[m, "mu_before"] < floor]
            if collapsed:
                verdict += (f"; utility collapsed: Model Utility before the attack below {min_utility_fraction:g} x "
                            f"the target's ({floor:.3f}), " + ", ".join(f"{_LABELS[m]} {ours.loc[m, 'mu_before']:.3f}"
                                                                       for m in collapsed))
            held = [k for k, v in status.items() if v == "holds"]
            follows = (f"FRP's lowest {' and '.join(held)} comes with a collapsed model: by the paper's premise, not "
                       "robustness" if "frp_p0" in collapsed and held else
                       "at 135M FRP resists this attack best, with its utility kept"
                       if set(status.values()) == {"holds"} else
                       "at 135M a baseline keeps less of the forgotten knowledge by at least one of the two measures"
                       if "does not hold" in status.values() else
                       "at 135M the attack's seeds cannot tell FRP from the best baseline by at least one measure")
            mu = float(ours.loc["frp_p0", "mu_before"])
        else:
            es = delta = verdict = "not measured yet"
            mu, follows = float("nan"), ""
        rows.append({"claim": f"FRP (P 0) keeps the lowest forget ES and ΔES after the {name} attack", "attack": attack,
                     "weights": weights, "paper_1B_es": p_es, "paper_1B_delta_es": p_delta, "ours_es": es,
                     "ours_delta_es": delta, "frp_model_utility": mu, "verdict": verdict, "what_follows": follows})
    return pd.DataFrame(rows)


# -- the healthy frontier: checkpoints that forget and keep their utility ---------------------------
UTILITY_PARTS = tuple(f"{s}/{m}" for s in ("retain_perturbed", "real_authors_perturbed", "world_facts_perturbed")
                      for m in ("probability", "rouge", "truth_ratio"))
# the part of Model Utility that one question in thirty can take to 0 at 135M (the target's own
# real-authors ROUGE is 0.12): the second healthy rule leaves it out
FRAGILE_PART = "real_authors_perturbed/rouge"
HEALTHY_RULES = {"paper": "Model Utility at least half the target's",
                 "parts": f"Model Utility without {FRAGILE_PART} at least half the target's"}
MIN_FORGETTING = 0.1  # forget ES at least this far below the target's: the checkpoint unlearned something
PRUNING = ("sp", "frp")


def utility_without(parts: dict[str, float]) -> float:
    """Model Utility (the harmonic mean of :data:`UTILITY_PARTS`) without :data:`FRAGILE_PART`."""
    from ..metrics import harmonic_mean

    return harmonic_mean([parts[k] for k in UTILITY_PARTS if k != FRAGILE_PART])


def healthy_by_rule(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``forgets`` (:data:`MIN_FORGETTING`) and, per rule of :data:`HEALTHY_RULES`, ``healthy_<rule>``:
    it forgets and keeps half the target's utility by that rule. Stated before any attack is looked at."""
    forgets = df.es <= df.target_es - MIN_FORGETTING
    return df.assign(forgets=forgets, healthy_paper=forgets & (df.model_utility >= 0.5 * df.target_model_utility),
                     healthy_parts=forgets & (df.utility_wo_fragile >= 0.5 * df.target_utility_wo_fragile))


PAPER_METHODS = ("ga", "graddiff", "npo", "rmu", "sp", "frp")  # the paper's; FRP at two vetoes: its seven models


def frontier_subsets(df: pd.DataFrame) -> dict[str, pd.Series]:
    """Table 3's columns on the frontier: the paper's two, each family, the paper's seven methods alone where others
    join them (``paper's 7``), and each forget split alone where several are attacked (does a reading of one split
    hold on the other?)."""
    subsets = {"all": df.method.ne(""), "w/o FRP": df.method.ne("frp"), "pruning": df.method.isin(PRUNING),
               "dense": ~df.method.isin(PRUNING)}
    if not df.method.isin(PAPER_METHODS).all():
        subsets["paper's 7"] = df.method.isin(PAPER_METHODS)
    splits = list(dict.fromkeys(df.forget_split))
    return {**subsets, **({s: df.forget_split.eq(s) for s in splits} if len(splits) > 1 else {})}


def frontier_table3(df: pd.DataFrame, predictors: Sequence[str] = PAPER_TABLE3_PREDICTORS,
                    n_boot: int = 2000) -> pd.DataFrame:
    """Table 3 per subset of :func:`frontier_subsets` with four checkpoints: the pooled ρ and the within-method ρ
    (within each method on each split: ``within_strata`` have one) with its interval and stratified p-value."""
    rows = []
    for name, mask in frontier_subsets(df).items():
        part = df[mask]
        if len(part) < 4:
            continue
        pooled = predictor_table(part, {name: pd.Series(True, index=part.index)}, predictors, n_boot)
        cells = list(part[GROUP_BY] + " " + part.forget_split)
        for r, p in zip(pooled.to_dict("records"), predictors):
            within = stratified_spearman(part[p], part.delta_es, list(part[GROUP_BY]), n_boot=n_boot, cells=cells)
            perm = permutation_spearman(part[p], part.delta_es, strata=cells)
            rows.append({**r, "within_rho": within["rho"], "within_low": within["low"],
                         "within_high": within["high"], "within_p_perm": perm["p"],
                         "within_strata": sum(1 for rho, _ in within["per_group"].values() if np.isfinite(rho))})
    return pd.DataFrame(rows)


# The paper's Appendix C.5: FRAG's importance term replaced (notebook 07), what each needs, and the
# paper's ρ against ΔES on its 15 TOFU-1B checkpoints (Table importance_variants)
IMPORTANCE_REQUIRES = {"activation": "forward", "fisher": "backward", "influence": "backward", "obd": "backward",
                       "ig": "backward"}
PAPER_IMPORTANCE_RHO = {"activation": -0.92, "fisher": 0.57, "influence": 0.25, "obd": -0.79, "ig": -0.84}
# A loss barrier above this (nats of mean answer-token loss) is a bump; below it, rounding along a
# line on which the loss never rises above its chord (the paper's tab:lmc: 0.000 for 42 checkpoints)
BARRIER_BUMP = 1e-3
# The paper's tab:lmc at 1B: family -> (checkpoints, the barrier's range as printed)
PAPER_LMC = {"dense and FRP": (42, "0.000"), "SP": (4, "0.076-0.387")}
# what the importance tables rank per importance term: the FRAG gap (Eq. 5) and cos(F, ΔW²) alone,
# which the paper's printed "activation" value is (its Table 3 FRAG column: the authors' REPRODUCE.md)
IMPORTANCE_SCORES = {"FRAG_x100": "FRAG gap (Eq. 5)", "A_f_x100": "cos(F, ΔW²)"}


def importance_columns(scored: pd.DataFrame) -> list[str]:
    """The ``<score>:<term>`` columns of ``scored``, in :data:`IMPORTANCE_REQUIRES`' order."""
    return [f"{s}:{k}" for s in IMPORTANCE_SCORES for k in IMPORTANCE_REQUIRES if f"{s}:{k}" in scored]


def importance_rows(table: pd.DataFrame) -> pd.DataFrame:
    """A ρ table over ``<score>:<term>`` predictors with the score, the term, what it needs and the paper's
    1B ρ for it (beside both scores: its activation value is the printed Table 3 FRAG, i.e. cos(F, ΔW²))."""
    score, kind = table.predictor.str.split(":").str[0], table.predictor.str.split(":").str[1]
    return table.assign(score=score.map(IMPORTANCE_SCORES), importance=kind, requires=kind.map(IMPORTANCE_REQUIRES),
                        paper_1B=kind.map(PAPER_IMPORTANCE_RHO))


def lmc_table(df: pd.DataFrame) -> pd.DataFrame:
    """The paper's ``tab:lmc``: per family (dense, FRP, SP) the checkpoints, the barrier's least and largest
    value, and how many exceed :data:`BARRIER_BUMP`, beside the paper's 1B values (dense and FRP pooled)."""
    family = df.method.map(lambda m: "SP" if m == "sp" else "FRP" if m == "frp" else "dense")
    rows = []
    for name in ("dense", "FRP", "SP"):
        part = df.barrier[family.eq(name)]
        if len(part):
            paper = PAPER_LMC["SP" if name == "SP" else "dense and FRP"]
            rows.append({"family": name, "checkpoints": len(part), "barrier_min": float(part.min()),
                         "barrier_max": float(part.max()), "with_a_bump": int(part.gt(BARRIER_BUMP).sum()),
                         "paper_1B_checkpoints": paper[0], "paper_1B_barrier": paper[1]})
    return pd.DataFrame(rows)


def detectable_rho(n: int, level: float = 0.95, power: float = 0.8) -> float:
    """The smallest |ρ| that ``n`` independent checkpoints detect (Fisher's z, Spearman's variance 1.06 / (n − 3)):
    a floor, as checkpoints of a few methods are not independent."""
    if n < 4:
        return float("nan")
    z = (stats.norm.ppf(1 - (1 - level) / 2) + stats.norm.ppf(power)) * np.sqrt(1.06 / (n - 3))
    return float(np.tanh(z))


def utility_bands(df: pd.DataFrame, edges: Sequence[float] = (0.5, 0.75, 1.0, np.inf)) -> pd.DataFrame:
    """The paper's "ΔES at matched utility" (``ctrl_matched_utility``): per band of utility over the target's and
    method, the checkpoints and their mean ΔES; FRP's beside each other method's in the same band is the comparison."""
    frac = df.model_utility / df.target_model_utility
    labels = [f"{lo:g}-{hi:g}" if np.isfinite(hi) else f">= {lo:g}" for lo, hi in zip(edges[:-1], edges[1:])]
    band = pd.cut(frac, list(edges), right=False, labels=labels)
    means = df.delta_es.map(lambda v: float(np.mean(v)) if np.ndim(v) else float(v))
    out = pd.DataFrame({"band": band, "model": df.model, "delta_es": means, "es_after": df.es_before + means})
    return out.dropna(subset=["band"]).groupby(["band", "model"], observed=True).agg(
        checkpoints=("delta_es", "size"), delta_es=("delta_es", "mean"), es_after=("es_after", "mean")).reset_index()


def headline(table3: pd.DataFrame, subset: str = "all") -> pd.DataFrame:
    """The README's one short table: per predictor of Table 3 over ``subset`` (:func:`table3_beside_authors`), the
    paper's value at 1B (its FRAG column, cos F, in the FRAG row as it names it, marked "(cos F)"), the authors'
    recomputation, ours with its interval and n."""
    def signed(v: float) -> str:
        return "—" if pd.isna(v) else f"{v:+.2f}"

    if not len(table3):  # nothing attacked yet (a partial grid, the paper dry run's first collection)
        return pd.DataFrame(columns=["predictor", "paper_1B", "authors_1B", "ours", "n"])
    rows = table3[table3.subset.eq(subset)]
    return pd.DataFrame({
        "predictor": rows.predictor.map({"l2_all": "global L2", "FRAG_x100": "FRAG gap (Eq. 5)",
                                         "A_f_x100": "cos(F, ΔW²)", "A_r_x100": "cos(R, ΔW²)"}),
        "paper_1B": [signed(v) + (" (cos F)" if p == "FRAG_x100" and pd.notna(v) else "")  # what it printed as FRAG
                     for p, v in zip(rows.predictor, rows.paper_1B)],
        "authors_1B": [signed(v) for v in rows.authors_1B],
        "ours": [f"{r:+.2f} [{lo:+.2f}, {hi:+.2f}]" for r, lo, hi in zip(rows.rho, rows.low, rows.high)],
        "n": [f"{int(n)} ({int(m)} methods)" for n, m in zip(rows.n, rows.methods)]}).reset_index(drop=True)
