import numpy as np
import pandas as pd
import pytest
from scipy import stats

from frag_utils.report import analysis as A
from frag_utils.report import stats as S
from frag_utils.report.book import short_verdict


def _slow_spearman(x, y):
    """Pearson correlation of average ranks, written out."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    rx, ry = ranks(list(x)), ranks(list(y))
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5


def test_spearman_matches_the_rank_definition_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 5, 12).astype(float)  # many ties
        y = x * 0.5 + rng.normal(size=12)
        assert S.spearman(x, y) == pytest.approx(_slow_spearman(x, y), abs=1e-12)


def test_row_ranks_are_scipys_average_ranks_to_the_bit():
    """The bootstrap's and the permutation null's ranks (every row at once) are scipy's rankdata, ties included."""
    rng = np.random.default_rng(3)
    ties = rng.integers(0, 3, (40, 9)).astype(float)
    for a in (rng.normal(size=(40, 9)), ties, np.ones((2, 5)), rng.normal(size=(3, 1))):
        assert np.array_equal(S._ranks(a), stats.rankdata(a, axis=1))


def test_spearman_is_nan_for_constant_or_tiny_inputs():
    assert np.isnan(S.spearman([1, 1, 1, 1], [1, 2, 3, 4]))
    assert np.isnan(S.spearman([1, 2], [2, 1]))


def test_bootstrap_interval_agrees_with_scipy_percentile_bootstrap():
    rng = np.random.default_rng(1)
    x = rng.normal(size=15)
    y = -x + rng.normal(scale=1.0, size=15)
    ours = S.bootstrap_spearman(x, y, n_boot=4000, seed=3)
    ref = stats.bootstrap((x, y), lambda a, b: stats.spearmanr(a, b).statistic, paired=True, vectorized=False,
                          n_resamples=4000, method="percentile", random_state=5).confidence_interval
    assert ours["rho"] == pytest.approx(stats.spearmanr(x, y).statistic)
    assert ours["low"] == pytest.approx(ref.low, abs=0.06) and ours["high"] == pytest.approx(ref.high, abs=0.06)
    assert ours["low"] < ours["rho"] < ours["high"]
    assert S.bootstrap_spearman(x, y, n_boot=200, seed=3) == S.bootstrap_spearman(x, y, n_boot=200, seed=3)


def test_bootstrap_of_a_monotone_relation_is_one_and_skips_degenerate_draws():
    x = np.arange(4.0)
    res = S.bootstrap_spearman(x, 2 * x + 1, n_boot=500, seed=0)
    assert res["rho"] == 1.0 and res["low"] == 1.0 and res["high"] == 1.0
    assert res["n_degenerate"] > 0  # with n = 4 some draws repeat one point


def test_bootstrap_refuses_bad_settings():
    with pytest.raises(ValueError, match="n_boot must be >= 1"):
        S.bootstrap_spearman([1, 2, 3], [1, 2, 3], n_boot=0)


def test_healthy_excludes_collapsed_models_with_the_reason():
    df = pd.DataFrame({"name": ["a", "b", "d"], "model_utility_before": [0.30, 0.10, 0.17],
                       "target_model_utility": [0.34] * 3})
    ok, out = A.healthy(df, min_utility_fraction=0.5)
    assert ok.name.tolist() == ["a", "d"]  # 0.17 = exactly half of 0.34 stays
    assert dict(zip(out.name, out.reason)) == {"b": "Model Utility below 0.5 x target's"}


def test_predictor_table_reports_each_subset_and_predictor():
    df = pd.DataFrame({"FRAG_x100": [5, 4, 3, 2, 1.0], "l2_all": [1, 2, 3, 5, 4.0],
                       "delta_es": [0.1, 0.2, 0.3, 0.4, 0.5], "method": ["frp", "npo", "ga", "rmu", "sp"]})
    df = df.assign(model=df.method)
    t = A.predictor_table(df, {"all": df.method.ne(""), "without FRP": df.method.ne("frp")},
                          predictors=("FRAG_x100", "l2_all"), n_boot=100)
    got = {(r.subset, r.predictor): (r.n, r.rho) for r in t.itertuples()}
    assert got[("all", "FRAG_x100")] == (5, pytest.approx(-1.0))
    assert got[("all", "l2_all")] == (5, pytest.approx(0.9))
    assert got[("without FRP", "FRAG_x100")][0] == 4


def test_bootstrap_drops_non_finite_pairs_for_rho_and_interval_alike():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=12), rng.normal(size=12)
    with_nan = S.bootstrap_spearman(np.append(x, np.nan), np.append(y, 0.3), n_boot=300, seed=1)
    clean = S.bootstrap_spearman(x, y, n_boot=300, seed=1)
    assert with_nan["n_dropped"] == 1 and with_nan["n"] == 12
    assert (with_nan["rho"], with_nan["low"], with_nan["high"]) == (clean["rho"], clean["low"], clean["high"])


def test_paper_table3_takes_one_main_checkpoint_per_method_and_split_without_ga():
    rows = []
    for split in ("forget01", "forget05", "forget10"):
        for method in ("ga", "graddiff", "npo", "rmu", "sp", "frp", "gold"):
            for setting in ("main", "sweep"):
                rows.append({"method": method, "forget_split": split, "unlearned_run": f"{method}_{split}_{setting}",
                             "delta_es": len(rows) % 7 / 10, "l2_all": len(rows) % 5, "FRAG_x100": len(rows) % 3,
                             "A_f_x100": len(rows) % 4, "A_r_x100": len(rows) % 6})
    df = pd.DataFrame(rows).assign(model=lambda t: t.method)
    main = {r for r in df.unlearned_run if r.endswith("_main")}
    chosen = A.paper_table3_checkpoints(df, main)
    assert len(chosen) == 15 and set(chosen.method) == {"graddiff", "npo", "rmu", "sp", "frp"}
    assert (chosen.groupby(["method", "forget_split"]).size() == 1).all()
    assert chosen.unlearned_run.str.endswith("_main").all()
    table = A.paper_table3(chosen, n_boot=50)
    by = table.set_index(["subset", "predictor"])
    assert by.loc[("all", "l2_all"), "n"] == 15 and by.loc[("w/o FRP", "l2_all"), "n"] == 12
    slow = S.spearman(chosen[chosen.method != "frp"].l2_all, chosen[chosen.method != "frp"].delta_es)
    assert by.loc[("w/o FRP", "l2_all"), "rho"] == pytest.approx(slow)
    with pytest.raises(ValueError, match="More than one main checkpoint"):
        A.paper_table3_checkpoints(df, main | {"npo_forget10_sweep"})
    # the authors' values beside each row, typed from their sources (data/reference/authors_table3.csv)
    beside = A.table3_beside_authors(table).set_index(["subset", "predictor"])
    assert beside.loc[("all", "FRAG_x100"), "authors_pooled"] == -0.60  # the Eq. 5 gap, recomputed
    assert beside.loc[("all", "FRAG_x100"), "paper_pooled"] == -0.78  # printed: cos F alone
    # the paper's Table 3 at 1B and 3B, as printed: global L2 and "FRAG", all and without FRP
    printed = beside[["paper_1B", "paper_3B"]]
    assert printed.loc[("all", "l2_all")].tolist() == [-0.56, -0.17]
    assert printed.loc[("w/o FRP", "FRAG_x100")].tolist() == [-0.85, -0.71]
    assert beside.loc[("w/o FRP", "l2_all"), "authors_1B"] == -0.36
    assert beside.loc[("all", "A_r_x100"), "authors_pooled"] == -0.68 and np.isnan(beside.loc[("all", "A_r_x100"),
                                                                                               "paper_1B"])
    assert beside.loc[("all", "l2_all"), "rho"] == by.loc[("all", "l2_all"), "rho"]  # this repository's own, kept


def test_authors_table3_holds_each_sources_numbers_and_they_agree_but_for_one_cell():
    t = A.authors_table3()
    assert not t.duplicated(["scale", "subset", "predictor", "source"]).any()
    assert t.rho.between(-1, 1).all() and set(t.subset) == {"all", "w/o FRP"}
    assert (t.n == t.scale.map({"1B": 15, "3B": 15, "pooled": 30}) * t.subset.map({"all": 1, "w/o FRP": 0.8})).all()
    at = t.set_index(["scale", "subset", "predictor", "source"]).rho
    paper, reproduce = "paper Table 3", "REPRODUCE.md Table 3 section (table)"
    # the reading of the sources: pooled, all (w/o FRP)
    for predictor, rho_all, rho_without in (("l2", -0.36, -0.10), ("frag_gap", -0.60, -0.31),
                                            ("cos_f", -0.76, -0.67), ("frag_printed", -0.78, -0.74)):
        assert (at[("pooled", "all", predictor, reproduce)], at[("pooled", "w/o FRP", predictor, reproduce)]) == \
            (rho_all, rho_without)
    assert (at[("pooled", "all", "frag_printed", paper)], at[("pooled", "w/o FRP", "frag_printed", paper)]) == \
        (-0.78, -0.74)
    assert (at[("1B", "w/o FRP", "frag_gap", reproduce)], at[("1B", "w/o FRP", "l2", reproduce)]) == (-0.34, -0.36)
    assert at[("pooled", "all", "cos_r", "REPRODUCE.md Table 3 section (text)")] == -0.68
    # where two sources give the same cell they agree, except the 3B L2 over all checkpoints
    spread = t.groupby(["scale", "subset", "predictor"]).rho.agg(lambda r: r.max() - r.min())
    assert spread[spread > 0].index.tolist() == [("3B", "all", "l2")]
    assert (at[("3B", "all", "l2", paper)], at[("3B", "all", "l2", reproduce)]) == (-0.17, -0.16)


def test_bootstrap_over_seeds_carries_the_seed_noise_and_reduces_to_the_pairs_bootstrap():
    rng = np.random.default_rng(4)
    x = rng.normal(size=14)
    truth = -x + rng.normal(scale=0.5, size=14)
    quiet = [[v, v, v] for v in truth]  # three seeds that agree: the checkpoint bootstrap alone
    noisy = [v + rng.normal(scale=1.5, size=3) for v in truth]
    plain = S.bootstrap_spearman(x, truth, n_boot=3000, seed=7)
    same = S.bootstrap_spearman(x, quiet, n_boot=3000, seed=7)
    assert same["rho"] == plain["rho"] and same["n_seeds"] == [3] * 14
    assert same["low"] == pytest.approx(plain["low"], abs=0.05)
    assert same["high"] == pytest.approx(plain["high"], abs=0.05)
    wide = S.bootstrap_spearman(x, noisy, n_boot=3000, seed=7)
    means = S.bootstrap_spearman(x, [np.mean(v) for v in noisy], n_boot=3000, seed=7)
    assert wide["rho"] == means["rho"]  # rho against each checkpoint's mean over its seeds
    assert wide["high"] - wide["low"] > (means["high"] - means["low"]) + 0.05  # and the seeds widen the interval


def test_bootstrap_over_seeds_drops_non_finite_seeds_and_empty_checkpoints():
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    y = [[0.5, np.nan], [0.4], [np.nan], [0.2, 0.25], [0.1]]
    res = S.bootstrap_spearman(x, y, n_boot=200, seed=0)
    assert res["n"] == 4 and res["n_dropped"] == 1 and res["n_seeds"] == [1, 1, 2, 1]
    assert res["rho"] == pytest.approx(-1.0)


def test_claims_put_the_paper_the_authors_recomputation_and_ours_side_by_side_with_a_verdict_from_the_interval():
    def row(subset, predictor, rho, low, high, n):
        return {"weights": "bf16", "subset": subset, "predictor": predictor, "rho": rho, "low": low, "high": high,
                "n": n, "attacks": 3 * n}
    table3 = pd.DataFrame([row("all", "FRAG_x100", -0.7, -0.9, -0.3, 15),
                           row("w/o FRP", "FRAG_x100", -0.2, -0.7, 0.4, 12), row("all", "A_f_x100", 0.6, 0.2, 0.9, 15),
                           row("all", "l2_all", 0.5, 0.1, 0.8, 15),
                           row("w/o FRP", "l2_all", 0.1, -0.5, 0.6, 12)])
    # 15 checkpoints: FRAG falls with ΔES, L2 rises with it (so L2 ranks worse), three seeds each
    rng = np.random.default_rng(0)
    methods = ["graddiff", "npo", "rmu", "sp", "frp"] * 3
    delta = np.linspace(0.0, 0.7, 15)
    checkpoints = pd.DataFrame({"weights": "bf16", "method": methods, "model": methods,
                                "FRAG_x100": -delta + rng.normal(0, 0.01, 15),
                                "l2_all": delta + rng.normal(0, 0.01, 15),
                                "delta_es": [[d, d + 0.01, d - 0.01] for d in delta]})
    c = A.claims(table3, checkpoints, n_boot=200).set_index(["subset", "predictor"])
    frag = c.loc[("all", "FRAG_x100")]
    # the paper's 1B row prints FRAG -0.92 (its cos F column); the authors recompute the gap as -0.66
    assert (frag.paper_1B, frag.authors_recomputed_1B, frag.ours_bf16, frag.attacks) == (-0.92, -0.66, -0.7, 45)
    assert frag.verdict.startswith("supported: ρ < 0")
    assert c.loc[("w/o FRP", "FRAG_x100")].verdict.startswith("not resolved")
    assert c.loc[("all", "A_f_x100")].verdict.startswith("reversed") and c.loc[("all", "A_f_x100")].paper_1B == -0.92
    # L2 against FRAG through the paired gap of the checkpoints, not the two separate intervals
    l2 = c.loc[("all", "l2_all")]
    assert l2.verdict.startswith("supported: ρ(L2) > ρ(FRAG)") and l2.paper_1B == -0.56
    gap = S.bootstrap_spearman_gap(checkpoints.FRAG_x100, checkpoints.l2_all, list(checkpoints.delta_es), n_boot=200)
    assert gap["gap"] == pytest.approx(2.0) and gap["low"] > 0 and f"{gap['gap']:+.2f}" in l2.verdict
    # fewer checkpoints than the paper's protocol plans: the numbers, but no verdict
    # L2 above a FRAG that does not itself correlate negatively: not the paper's claim
    flat = table3.copy()
    flat.loc[(flat.subset == "all") & (flat.predictor == "FRAG_x100"), ["rho", "low", "high"]] = [0.2, -0.3, 0.6]
    l2 = A.claims(flat, checkpoints, n_boot=200).set_index(["subset", "predictor"]).loc[("all", "l2_all")]
    assert l2.verdict.startswith("not supported as the paper means it") and "(+0.20 [-0.30, +0.60])" in l2.verdict
    assert l2.verdict.endswith("the larger updates recovered more")  # its own interval (0.1, 0.8) is above 0
    assert l2.what_follows.startswith("L2 sits above FRAG, but FRAG's own ρ is not shown negative")
    assert c.loc[("all", "FRAG_x100")].what_follows.startswith("at 135M too")
    # an interval over five methods is nominal, and the verdict says so, in the short form a table shows too
    few = A.claims(table3.assign(methods=5), checkpoints, n_boot=50).set_index(["subset", "predictor"])
    assert few.loc[("all", "FRAG_x100")].verdict == (
        "supported: ρ < 0 with 95 % confidence; nominal, 5 methods: the interval resamples so few that it covers "
        "less than it says (a bootstrap over few clusters)")
    assert short_verdict(few.loc[("all", "FRAG_x100")].verdict) == (
        "supported; nominal, 5 methods")
    assert few.loc[("w/o FRP", "FRAG_x100")].verdict == c.loc[("w/o FRP", "FRAG_x100")].verdict  # nothing to qualify
    short = A.claims(table3.assign(n=4), checkpoints.iloc[:4], n_boot=50)
    assert short.verdict.str.startswith("no verdict yet: 4 of").all()
    # the fp32 claims read the fp32 rows and checkpoints only: beside the bf16 ones, a partial fp32 set
    both = pd.concat([table3, table3.assign(weights="fp32", rho=0.3, n=9)], ignore_index=True)
    fp32 = A.claims(both, pd.concat([checkpoints, checkpoints.iloc[:9].assign(weights="fp32")]), weights="fp32",
                    n_boot=50)
    assert "ours_fp32" in fp32 and "ours_bf16" not in fp32 and (fp32.ours_fp32 == 0.3).all()
    assert fp32.verdict.str.startswith("no verdict yet: 9 of").all()
    assert (A.claims(both, checkpoints, n_boot=50).ours_bf16 == c.reset_index().ours_bf16).all()
    # a complete fp32 set whose checkpoints rank the other way: the L2 gap is read from them alone
    swapped = checkpoints.assign(weights="fp32", FRAG_x100=checkpoints.l2_all, l2_all=checkpoints.FRAG_x100)
    full = pd.concat([table3, table3.assign(weights="fp32")], ignore_index=True)
    l2_fp32 = A.claims(full, pd.concat([checkpoints, swapped]), weights="fp32", n_boot=200).iloc[3]
    assert l2_fp32.verdict.startswith("reversed: ρ(L2) < ρ(FRAG)") and "(ρ(L2) − ρ(FRAG) -2.00" in l2_fp32.verdict
    # side by side: the fp32 claims in one column of the bf16 table, the bf16 columns untouched
    side = A.beside(c.reset_index(), fp32)
    assert side.drop(columns="ours_fp32").equals(c.reset_index())
    assert side.ours_fp32.iloc[0] == f"+0.30 [{fp32.low[0]:+.2f}, {fp32.high[0]:+.2f}], n 9: no verdict yet"
    # an L2 row: its own ρ and interval, and the verdict on the gap with the gap's interval
    side = A.beside(c.reset_index(), A.claims(full, pd.concat([checkpoints, swapped]), weights="fp32", n_boot=200))
    l2_cell = side.set_index(["subset", "predictor"]).loc[("all", "l2_all"), "ours_fp32"]
    assert l2_cell.startswith("+0.50 [+0.10, +0.80], n 15: reversed (ρ(L2) − ρ(FRAG) -2.00 [")
    assert l2_cell.endswith("; L2 in reverse")  # L2's own interval (0.1, 0.8) is above 0
    none_in_fp32 = A.claims(table3.iloc[:0], pd.DataFrame(), weights="fp32")
    assert (A.beside(c.reset_index(), none_in_fp32).ours_fp32 == "not measured yet").all()
    empty = A.claims(table3.iloc[:0], pd.DataFrame())  # what notebook 09 passes before any checkpoint
    assert (empty.verdict == "not measured yet").all() and (empty.n == 0).all() and (empty.what_follows == "").all()


def test_the_gap_of_two_predictors_uses_the_resamples_of_each_one_alone():
    rng = np.random.default_rng(3)
    y = [list(rng.normal(0, 1, 3)) for _ in range(12)]
    a, b = rng.normal(0, 1, 12), rng.normal(0, 1, 12)
    gap = S.bootstrap_spearman_gap(a, b, y, n_boot=300, seed=5)
    ra, rb = S.bootstrap_spearman(a, y, n_boot=300, seed=5), S.bootstrap_spearman(b, y, n_boot=300, seed=5)
    assert gap["gap"] == pytest.approx(rb["rho"] - ra["rho"])
    # the same draws: a predictor against itself has a gap of exactly 0 in every resample
    same = S.bootstrap_spearman_gap(a, a, y, n_boot=300)
    assert same["gap"] == 0 and same["low"] == 0 and same["high"] == 0


def test_table1_claims_compare_frp_with_the_lowest_baseline_and_flag_collapsed_models():
    attacks = ("retain", "forget", "forget_retain")

    def model(label, es, delta, mu_before=0.3, weights="bf16"):
        """es, delta: one value per attack (retain, forget, forget+retain)."""
        return {"weights": weights, "model": label, "mu_before": mu_before,
                **{f"{a}_es": e for a, e in zip(attacks, es)}, **{f"{a}_delta_es": d for a, d in zip(attacks, delta)},
                **{f"{a}_mu": 0.3 for a in attacks}}
    table1 = pd.DataFrame([
        model("gold", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),  # not a baseline, lower than everything
        model("GA", (0.5, 0.5, 0.5), (0.3, 0.3, 0.3)), model("GradDiff", (0.6, 0.6, 0.6), (0.1, 0.1, 0.1)),
        model("NPO", (0.55, 0.55, 0.55), (0.2, 0.2, 0.2)), model("RMU", (0.7, 0.2, 0.7), (0.4, 0.4, 0.4)),
        model("SP", (0.4, 0.4, 0.4), (0.25, 0.25, 0.25), mu_before=0.05),
        # FRP: lowest in both under retain, in ES only under forget+retain, in neither under forget
        model("FRP (P 0)", (0.3, 0.3, 0.3), (0.05, 0.45, 0.15)),
        model("FRP (P 0.15)", (0.1, 0.1, 0.1), (0.0, 0.0, 0.0)),  # not the compared FRP
        model("SP (at an FRP run's L2)", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)),  # a control: left out
        model("FRP (P 0)", (0.9, 0.9, 0.9), (0.9, 0.9, 0.9), weights="fp32")])
    c = A.table1_claims(table1, target_model_utility=0.3).set_index("claim")
    assert len(c) == 3
    retain, forget, fr = (c.loc[f"FRP (P 0) keeps the lowest forget ES and ΔES after the {n} attack"]
                          for n in ("retain", "forget", "forget+retain"))
    # the paper's 1B block: FRP (β 0) 0.104 after forget+retain, SP 0.237 the lowest baseline
    assert (fr.paper_1B_es, fr.paper_1B_delta_es) == ("0.104 vs 0.237 (SP)", "0.049 vs 0.113 (SP)")
    assert (retain.ours_es, retain.ours_delta_es) == ("0.300 vs 0.400 (SP)", "0.050 vs 0.100 (GradDiff)")
    assert (forget.ours_es, forget.ours_delta_es) == ("0.300 vs 0.200 (RMU)", "0.450 vs 0.100 (GradDiff)")
    assert (fr.ours_es, fr.ours_delta_es) == ("0.300 vs 0.400 (SP)", "0.150 vs 0.100 (GradDiff)")
    # SP, the lowest baseline in ES, is collapsed before the attack (0.05 < 0.15): named, FRP is not
    assert retain.verdict == ("holds; utility collapsed: Model Utility before the attack below 0.5 x the target's "
                              "(0.150), SP 0.050")
    assert retain.what_follows.startswith("at 135M FRP resists this attack best")
    # a margin inside the attack seeds' spread is named: ΔES 0.050 vs 0.100 at a spread of 0.06, ES 0.1 is not
    spread = A.table1_claims(table1, target_model_utility=0.3, seed_spread=0.06).set_index("attack")
    assert spread.loc["retain", "verdict"] == (
        "holds for ES; not resolved for ΔES (margin 0.050, inside the attack-seed spread 0.060); utility collapsed: "
        "Model Utility before the attack below 0.5 x the target's (0.150), SP 0.050")
    assert spread.loc["retain", "what_follows"].startswith("at 135M the attack's seeds cannot tell FRP")
    assert short_verdict(spread.loc["retain", "verdict"]) == "holds for ES; not resolved for ΔES; utility collapsed"
    both = A.table1_claims(table1, target_model_utility=0.3, seed_spread=0.2).set_index("attack")
    assert both.loc["retain", "verdict"].startswith(  # ES 0.300 vs 0.400, ΔES 0.050 vs 0.100: both inside 0.2
        "not resolved (margin ES 0.100 and ΔES 0.050, inside the attack-seed spread 0.200); ")
    assert both.loc["retain", "what_follows"].startswith("at 135M the attack's seeds cannot tell FRP")
    # forget: ES 0.300 vs 0.200 (0.1 above, outside 0.06), ΔES 0.450 vs 0.100: a baseline keeps less, resolved
    assert spread.loc["forget", "verdict"] == "does not hold"
    assert both.loc["forget", "verdict"] == (  # at 0.2 the ES margin is inside, the ΔES margin 0.35 is not
        "not resolved for ES (margin 0.100, inside the attack-seed spread 0.200); does not hold for ΔES")
    assert both.loc["forget", "what_follows"].startswith("at 135M a baseline keeps less")
    assert forget.verdict == "does not hold" and forget.what_follows.startswith("at 135M a baseline keeps less")
    assert fr.verdict.startswith("holds for ES; does not hold for ΔES; ")
    # FRP collapsed before the attack: its lower ES is not called robustness, whatever the utility after it
    frp_collapsed = table1.assign(mu_before=np.where(table1.model.eq("FRP (P 0)"), 0.0, 0.3))
    c = A.table1_claims(frp_collapsed, target_model_utility=0.3)
    assert c.iloc[0].verdict == ("holds; utility collapsed: Model Utility before the attack below 0.5 x the target's "
                                 "(0.150), FRP (P 0) 0.000")
    assert c.iloc[0].what_follows.startswith("FRP's lowest ES and ΔES comes with a collapsed model")
    # ... nor a lower ΔES inside the seeds' spread: only what holds is named
    c = A.table1_claims(frp_collapsed, target_model_utility=0.3, seed_spread=0.06)
    assert c.iloc[0].what_follows.startswith("FRP's lowest ES comes with a collapsed model")
    assert c.iloc[0].frp_model_utility == 0.0
    only_delta = table1.assign(forget_es=np.where(table1.model.eq("FRP (P 0)"), 0.9, table1.forget_es),
                               forget_delta_es=np.where(table1.model.eq("FRP (P 0)"), 0.01, table1.forget_delta_es))
    assert A.table1_claims(only_delta, 0.3).iloc[1].verdict == "does not hold for ES; holds for ΔES"
    # a baseline's average missing (a split not recorded): no verdict for that attack only
    missing = table1.copy()
    missing.loc[missing.model.eq("RMU"), "retain_es"] = np.nan
    assert list(A.table1_claims(missing, 0.3).verdict.str[:6]) == ["not me", "does n", "holds "]
    assert (A.table1_claims(pd.DataFrame(), 0.3).verdict == "not measured yet").all()
    # the other precision's rows alone: its FRP against its baselines, none of the bf16 numbers
    moved = table1[table1.weights.eq("bf16")].assign(weights="fp32", retain_es=lambda t: t.retain_es + 0.01)
    fp32 = A.table1_claims(pd.concat([table1[table1.model.ne("FRP (P 0)")], moved]), 0.3, weights="fp32")
    assert (fp32.weights == "fp32").all() and fp32.iloc[0].ours_es == "0.310 vs 0.410 (SP)"
    assert (A.table1_claims(table1, 0.3, weights="fp32").verdict == "not measured yet").all()  # no fp32 baseline


# -- intervals and p-values that respect how the checkpoints were made -------------------------------

def _clustered(method_effect: bool, seed: int = 0):
    """Six methods of six checkpoints each. With ``method_effect`` every method shifts x and ΔES
    together (its checkpoints sit in one clump), so the pooled ρ is six clumps' worth of evidence;
    without, the checkpoints are independent pairs with the same ρ, the method labels arbitrary."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(list("ABCDEF"), 6)
    if method_effect:
        offset = rng.normal(size=6)
        x = np.repeat(offset, 6) + 0.05 * rng.normal(size=36)
        y = np.repeat(offset + 0.6 * rng.normal(size=6), 6) + 0.05 * rng.normal(size=36)
    else:
        x = rng.normal(size=36)
        y = 0.8 * x + 0.6 * rng.normal(size=36)
    return x, y, groups


def test_resampling_methods_widens_the_interval_when_checkpoints_of_a_method_are_not_independent():
    x, y, groups = _clustered(method_effect=True)
    flat = S.bootstrap_spearman(x, y, n_boot=2000, seed=1)
    nested = S.bootstrap_spearman(x, y, n_boot=2000, seed=1, groups=groups)
    assert flat["rho"] == nested["rho"] and nested["n_groups"] == 6 and flat["n_groups"] == 36
    assert nested["high"] - nested["low"] > 2.5 * (flat["high"] - flat["low"]), (flat, nested)
    gap_flat = S.bootstrap_spearman_gap(x, -x + 0.01 * y, y, n_boot=1000, seed=1)
    gap_nested = S.bootstrap_spearman_gap(x, -x + 0.01 * y, y, n_boot=1000, seed=1, groups=groups)
    assert gap_nested["high"] - gap_nested["low"] > gap_flat["high"] - gap_flat["low"]


def test_resampling_methods_leaves_the_interval_alone_when_checkpoints_are_independent():
    x, y, groups = _clustered(method_effect=False)
    flat = S.bootstrap_spearman(x, y, n_boot=3000, seed=1)
    nested = S.bootstrap_spearman(x, y, n_boot=3000, seed=1, groups=groups)
    ratio = (nested["high"] - nested["low"]) / (flat["high"] - flat["low"])
    assert 0.75 < ratio < 1.35, ratio


def test_resampling_without_groups_draws_exactly_as_before():
    """groups=None keeps the checkpoint-level resamples (the committed Table 3's intervals)."""
    x, y, _ = _clustered(method_effect=False)
    rng = np.random.default_rng(4)
    rhos = []
    for _ in range(200):
        idx = rng.integers(0, 36, 36)
        rhos.append(stats.spearmanr(x[idx], y[idx]).statistic)
    res = S.bootstrap_spearman(x, y, n_boot=200, seed=4)
    assert np.allclose((res["low"], res["high"]), np.quantile(rhos, [0.025, 0.975]), rtol=0, atol=1e-12)


def _p_by_hand(stat_null, observed):
    null = np.abs(np.asarray(stat_null))
    return float(np.mean(null >= abs(observed) - 1e-12))


def test_permutation_p_values_equal_an_exhaustive_enumeration_on_a_small_case():
    import itertools

    x = np.array([0.3, 1.2, 0.1, 2.5, 1.9, 0.7])
    y = np.array([0.9, 0.4, 0.8, 0.1, 0.5, 0.3])
    rho = stats.spearmanr(x, y).statistic
    null = [stats.spearmanr(x, y[list(p)]).statistic for p in itertools.permutations(range(6))]
    res = S.permutation_spearman(x, y, n_perm=1000)
    assert res["exact"] and res["n_perm"] == 720
    assert res["rho"] == pytest.approx(rho) and res["p"] == pytest.approx(_p_by_hand(null, rho))
    # within strata: y reordered only inside each method (3! x 3! ways), the stratified ρ as statistic
    groups = ["a", "a", "a", "b", "b", "b"]

    def strat(yy):
        return (stats.spearmanr(x[:3], yy[:3]).statistic + stats.spearmanr(x[3:], yy[3:]).statistic) / 2
    null = [strat(y[list(p) + [3 + i for i in q]]) for p in itertools.permutations(range(3))
            for q in itertools.permutations(range(3))]
    res = S.permutation_spearman(x, y, n_perm=1000, strata=groups)
    assert res["exact"] and res["n_perm"] == 36
    assert res["rho"] == pytest.approx(strat(y)) and res["p"] == pytest.approx(_p_by_hand(null, strat(y)))


def test_random_permutations_approach_the_exact_p_value():
    rng = np.random.default_rng(2)
    x = rng.normal(size=7)
    y = 0.5 * x + rng.normal(size=7)
    exact = S.permutation_spearman(x, y, n_perm=5040)
    sampled = S.permutation_spearman(x, y, n_perm=4000, seed=3)
    assert exact["exact"] and not sampled["exact"] and sampled["n_perm"] == 4000
    assert abs(exact["p"] - sampled["p"]) < 0.03
    assert 0 < sampled["p"] <= 1


def test_the_stratified_rho_is_the_weighted_mean_of_the_within_method_rhos():
    """Within each method the stronger updates that x scores higher recover less (ρ < 0), while the
    methods themselves line up the other way: the pooled ρ is positive, the stratified one negative."""
    x = np.array([1, 2, 3, 4, 11, 12, 13, 21, 22, 23], float)
    y = np.array([0.4, 0.3, 0.35, 0.1, 0.7, 0.6, 0.5, 0.95, 0.8, 0.9])
    groups = ["a"] * 4 + ["b"] * 3 + ["c"] * 3
    res = S.stratified_spearman(x, y, groups, n_boot=500, seed=0)
    per = {g: stats.spearmanr(x[np.array(groups) == g], y[np.array(groups) == g]).statistic for g in "abc"}
    assert res["rho"] == pytest.approx((4 * per["a"] + 3 * per["b"] + 3 * per["c"]) / 10)
    assert {g: r for g, (r, _) in res["per_group"].items()} == pytest.approx(per)
    assert res["rho"] < 0 < S.spearman(x, y) and res["n_groups"] == 3
    assert res["low"] <= res["rho"] <= res["high"]
    # a method of two checkpoints has no within-method ρ: it counts in n, not in ρ
    two = S.stratified_spearman(np.r_[x, 30, 31], np.r_[y, 0.1, 0.2], groups + ["d", "d"], n_boot=50)
    assert two["rho"] == pytest.approx(res["rho"]) and two["n"] == 12 and np.isnan(two["per_group"]["d"][0])


def test_the_within_method_rho_is_taken_on_one_split_while_the_interval_draws_methods_whole():
    """Two methods, each on two forget splits. Within each (method, split) cell x ranks y perfectly
    (ρ +1), but the forget05 cells sit at lower y with higher x, so a ρ taken over a method's two
    splits together mixes the splits' scales and comes out negative."""
    x = np.array([1, 2, 3, 11, 12, 13, 4, 5, 6, 14, 15, 16], float)
    y = np.array([0.5, 0.6, 0.7, 0.1, 0.2, 0.3, 0.55, 0.65, 0.75, 0.15, 0.25, 0.35])
    methods = ["a"] * 6 + ["b"] * 6
    splits = (["forget10"] * 3 + ["forget05"] * 3) * 2
    cells = [f"{m} {s}" for m, s in zip(methods, splits)]
    mixed = S.stratified_spearman(x, y, methods, n_boot=300, seed=0)
    by_cell = S.stratified_spearman(x, y, methods, n_boot=300, seed=0, cells=cells)
    assert mixed["rho"] < 0 and by_cell["rho"] == pytest.approx(1.0)
    assert set(by_cell["per_group"]) == set(cells) and by_cell["n_groups"] == 2  # two methods drawn, four cells
    # every resample draws whole methods and keeps their cells apart: each drawn cell still ranks
    # perfectly, so every ρ drawn is +1 (a resample of one or two distinct checkpoints per cell has none)
    assert by_cell["low"] == pytest.approx(1.0) and by_cell["high"] == pytest.approx(1.0)
    # the permutation null reorders within cells: 3!^4 = 1296 orders, exact; two-sided, the all-reversed
    # order is as extreme
    perm = S.permutation_spearman(x, y, n_perm=5000, strata=cells)
    assert perm["exact"] and perm["rho"] == pytest.approx(1.0) and perm["p"] == pytest.approx(2 / 6 ** 4)
    # cells equal to the methods are the method-level ρ, draw for draw
    same = S.stratified_spearman(x, y, methods, n_boot=300, seed=0, cells=methods)
    assert (same["rho"], same["low"], same["high"]) == (mixed["rho"], mixed["low"], mixed["high"])


def test_the_headline_puts_the_papers_printed_value_the_authors_recomputation_and_ours_side_by_side():
    rows = pd.DataFrame({"subset": ["all"] * 4 + ["w/o FRP"], "predictor": [*A.PAPER_TABLE3_PREDICTORS, "l2_all"],
                         "rho": [0.3, -0.2, 0.1, 0.05, 0.4], "low": [-0.1, -0.8, -0.5, -0.6, 0.0],
                         "high": [0.7, 0.5, 0.6, 0.6, 0.8], "n": [15] * 5, "methods": [5] * 4 + [4]})
    table = A.headline(A.table3_beside_authors(rows))
    assert list(table.columns) == ["predictor", "paper_1B", "authors_1B", "ours", "n"] and len(table) == 4
    t = table.set_index("predictor")
    # the paper prints "FRAG" at 1B as -0.92 (cos F alone); the authors' Eq. 5 gap recomputed is -0.66
    assert t.loc["FRAG gap (Eq. 5)", ["paper_1B", "authors_1B"]].tolist() == ["-0.92 (cos F)", "-0.66"]
    assert t.loc["global L2", "paper_1B"] == "-0.56" and t.loc["cos(F, ΔW²)", "paper_1B"] == "—"  # not printed
    assert t.loc["global L2", "ours"] == "+0.30 [-0.10, +0.70]" and t.loc["global L2", "n"] == "15 (5 methods)"
    assert list(A.headline(pd.DataFrame()).columns) == list(table.columns)  # nothing attacked yet: an empty table


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")  # scipy's rho of a constant resample: NaN
def test_the_vectorised_bootstrap_equals_the_resample_by_resample_definition():
    """Methods, then checkpoints within each, then seeds within each, drawn one resample at a time
    and scored with scipy's ρ: the fast path's interval (every resample scored at once, the draws
    shared by the predictors) is the same to rounding, for ρ, the gap and the stratified ρ."""
    rng = np.random.default_rng(0)
    groups = np.repeat(list("ABCD"), [2, 4, 3, 5])
    splits = np.array([0, 1] * 7)  # each method's checkpoints on two forget splits: the within-ρ's cells
    a, b = rng.normal(size=14), rng.normal(size=14)
    y = [rng.normal(size=k) for k in rng.integers(1, 4, 14)]  # one to three attack seeds each
    draw, members = np.random.default_rng(9), [np.flatnonzero(groups == g) for g in "ABCD"]
    rho_a, rho_b, within, within_cells = [], [], [], []
    for _ in range(300):
        picks = [members[k][draw.integers(0, len(members[k]), len(members[k]))] for k in draw.integers(0, 4, 4)]
        idx = np.concatenate(picks)
        # the seeds drawn, in order (the same seeds drawn in another order are the same mean: a tie)
        ys = np.array([np.sort(y[i][draw.integers(0, len(y[i]), len(y[i]))]).mean() if len(y[i]) > 1 else y[i][0]
                       for i in idx])
        rho_a.append(stats.spearmanr(a[idx], ys).statistic), rho_b.append(stats.spearmanr(b[idx], ys).statistic)
        ends = np.cumsum([len(p) for p in picks])
        per = [(stats.spearmanr(a[idx][e - len(p):e], ys[e - len(p):e]).statistic, len(p))
               for p, e in zip(picks, ends) if len(p) >= 3]
        per = [(r, w) for r, w in per if np.isfinite(r)]
        within.append(sum(r * w for r, w in per) / sum(w for _, w in per) if per else np.nan)
        # with cells: each drawn method's checkpoints of one split are a stratum of their own
        strata = [(a[idx][e - len(p):e][splits[p] == s], ys[e - len(p):e][splits[p] == s])
                  for p, e in zip(picks, ends) for s in (0, 1)]
        per = [(stats.spearmanr(xs, yv).statistic, len(xs)) for xs, yv in strata if len(xs) >= 3]
        per = [(r, w) for r, w in per if np.isfinite(r)]
        within_cells.append(sum(r * w for r, w in per) / sum(w for _, w in per) if per else np.nan)

    def interval(values):
        values = np.asarray(values)
        return np.quantile(values[~np.isnan(values)], [0.025, 0.975])

    res = S.bootstrap_spearman(a, y, n_boot=300, seed=9, groups=groups)
    gap = S.bootstrap_spearman_gap(a, b, y, n_boot=300, seed=9, groups=groups)
    strat = S.stratified_spearman(a, y, groups, n_boot=300, seed=9)
    assert np.allclose([res["low"], res["high"]], interval(rho_a), atol=1e-12)
    assert np.allclose([gap["low"], gap["high"]], interval(np.subtract(rho_b, rho_a)), atol=1e-12)
    assert np.allclose([strat["low"], strat["high"]], interval(within), atol=1e-12)
    cells = [f"{g}{s}" for g, s in zip(groups, splits)]
    by_split = S.stratified_spearman(a, y, groups, n_boot=300, seed=9, cells=cells)
    assert np.allclose([by_split["low"], by_split["high"]], interval(within_cells), atol=1e-12)
    assert not np.allclose([by_split["low"], by_split["high"]], [strat["low"], strat["high"]])  # the cells matter


def test_equal_seeds_are_an_equal_mean_and_nothing_left_is_no_rho():
    """A checkpoint whose attack seeds agree has one mean in every resample, however its seeds are
    drawn (a sum in one order): five such checkpoints of one value leave every resample constant (no
    ρ). With every checkpoint dropped there is nothing to resample: NaN, not an error."""
    v, x = 0.7530302077021779, [1.0, 2, 3, 4, 5]
    flat = S.bootstrap_spearman(x, [[v, v, v]] * 5, n_boot=50)
    assert np.isnan(flat["low"]) and flat["n_degenerate"] == 50
    for w in np.random.default_rng(0).random(50):
        _, idx, ys, _ = S._resampled([np.array([w, w, w]), np.array([0.5, 0.1, 0.5])], 20, 0, None)
        assert len(set(ys[idx == 0])) == 1
    for res in (S.bootstrap_spearman([1.0, 2.0], [np.nan, np.nan], n_boot=5),
                S.bootstrap_spearman_gap([1.0, 2.0], [1.0, 2.0], [np.nan, np.nan], n_boot=5)):
        assert np.isnan(res["low"]) and res["n"] == 0 and res["n_dropped"] == 2
    with pytest.raises(ValueError, match="seed an integer"):
        S.bootstrap_spearman(x, [0.1, 0.3, 0.2, 0.5, 0.4], seed=None)


def test_the_frontier_reads_each_split_alone_only_when_several_are_attacked():
    df = pd.DataFrame({"method": ["ga", "frp", "sp", "npo"],
                       "forget_split": ["forget10", "forget10", "forget05", "forget05"]})
    subsets = A.frontier_subsets(df)
    assert list(subsets) == ["all", "w/o FRP", "pruning", "dense", "forget10", "forget05"]
    assert subsets["forget05"].tolist() == [False, False, True, True]
    assert list(A.frontier_subsets(df.assign(forget_split="forget10"))) == ["all", "w/o FRP", "pruning", "dense"]


def test_the_frontier_reads_the_papers_seven_methods_alone_only_when_others_join_them():
    df = pd.DataFrame({"method": ["ga", "frp", "simnpo", "wga", "sp"], "forget_split": ["forget10"] * 5})
    subsets = A.frontier_subsets(df)
    assert list(subsets) == ["all", "w/o FRP", "pruning", "dense", "paper's 7"]
    assert subsets["paper's 7"].tolist() == [True, True, False, False, True]
    assert "paper's 7" not in A.frontier_subsets(df[df.method.isin(A.PAPER_METHODS)])
