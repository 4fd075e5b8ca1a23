"""Notebook 08's steps (frag_utils.report.predictors) against their definitions computed the slow way, and the
authors' per-checkpoint rows against their printed Table 3."""
import json
import types

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from frag_utils import paths, runs
from frag_utils.report import analysis
from frag_utils.report import predictors as P
from frag_utils.report import stats as S


def _slow_partial(x, z, y):
    r = {k: stats.spearmanr(a, b).statistic for k, (a, b) in {"xy": (x, y), "xz": (x, z), "yz": (y, z)}.items()}
    return (r["xy"] - r["xz"] * r["yz"]) / np.sqrt((1 - r["xz"] ** 2) * (1 - r["yz"] ** 2))


def test_the_partial_rho_and_its_interval_equal_the_resample_by_resample_definition():
    """Methods, then checkpoints of each, then seeds of each, drawn one resample at a time as stats._draws draws
    them: the partial ρ of every resample, from scipy's three ρ, gives the same interval; the point is the formula."""
    rng = np.random.default_rng(1)
    groups = np.repeat(list("ABCDE"), [3, 4, 2, 5, 4])
    n = len(groups)
    z = rng.normal(size=n)
    x = z + rng.normal(size=n)
    y = [z[i] + rng.normal(size=k) for i, k in enumerate(rng.integers(1, 4, n))]
    res = S.bootstrap_partial_spearman(x, z, y, n_boot=300, seed=4, groups=groups)
    means = np.array([v.mean() for v in y])
    assert res["rho"] == pytest.approx(_slow_partial(x, z, means), abs=1e-12)
    draw, members, slow = np.random.default_rng(4), [np.flatnonzero(groups == g) for g in "ABCDE"], []
    for _ in range(300):
        picks = [members[k][draw.integers(0, len(members[k]), len(members[k]))] for k in draw.integers(0, 5, 5)]
        idx = np.concatenate(picks)
        ys = np.array([np.sort(y[i][draw.integers(0, len(y[i]), len(y[i]))]).mean() if len(y[i]) > 1 else y[i][0]
                       for i in idx])
        slow.append(_slow_partial(x[idx], z[idx], ys))
    slow = np.asarray(slow)
    assert np.allclose([res["low"], res["high"]], np.quantile(slow[np.isfinite(slow)], [0.025, 0.975]), atol=1e-12)
    # a signal given itself adds nothing: no resample has a partial ρ
    assert S.bootstrap_partial_spearman(x, x, y, n_boot=50)["n_degenerate"] == 50


def test_the_size_gap_compares_rho_whatever_its_sign():
    rng = np.random.default_rng(2)
    y = [list(rng.normal(size=2)) for _ in range(20)]
    means = [np.mean(v) for v in y]
    a, b = rng.normal(size=20), -np.asarray(means) + 0.01 * rng.normal(size=20)  # b ranks y well, negatively
    gap = S.bootstrap_spearman_gap(a, b, y, n_boot=300, absolute=True)
    assert gap["gap"] == pytest.approx(abs(S.spearman(b, means)) - abs(S.spearman(a, means)))
    assert gap["low"] > 0  # b ranks better in size; the signed difference says the opposite
    assert S.bootstrap_spearman_gap(a, b, y, n_boot=300)["high"] < 0


def _frontier(seed=0):
    """A frontier-like table: four methods (one pruning) on two splits, three strengths each, two seeds."""
    rng = np.random.default_rng(seed)
    rows = []
    for m, method in (("GA", "ga"), ("NPO", "npo"), ("RMU", "rmu"), ("SP", "sp")):
        for split in ("forget10", "forget05"):
            for k in range(3):
                es = rng.uniform(0.05, 0.6)
                d = [0.8 - es + rng.normal(0, 0.05) for _ in range(2)]
                rows.append({"model": m, "method": method, "forget_split": split, "strength": k + 1,
                             "l2_all": rng.uniform(1, 10), "FRAG_x100": rng.normal(), "A_f_x100": rng.normal(),
                             "A_r_x100": rng.normal(), "es": es, "forget_probability": es + rng.normal(0, .05),
                             "forget_rouge": rng.uniform(), "forget_truth_ratio": rng.uniform(), "es_retain": .9,
                             "model_utility": rng.uniform(.2, .4), "pruning": int(method == "sp"),
                             "forget_authors": 3 if split == "forget10" else 2, "strength_rank": k + 1.0,
                             "delta_es_seeds": d, "es_after_seeds": [es + v for v in d],
                             "recovered_seeds": [v / (0.9 - es) for v in d], "run": f"05_unlearn/{m}{split}{k}"})
    df = pd.DataFrame(rows)
    return df.assign(**{o: df[f"{o}_seeds"].map(np.mean) for o in P.OUTCOMES})


def test_each_row_of_the_rank_table_is_the_bootstrap_of_its_signal_and_outcome():
    df = _frontier()
    table = P.rank_table(df, n_boot=100)
    assert set(table.split) == {"both", "forget10", "forget05"} and set(table.outcome) == set(P.OUTCOMES)
    assert "retain ES" not in set(table.words)  # constant: no ρ, no row (es_retain is 0.9 everywhere)
    row = table[table.split.eq("both") & table.outcome.eq("es_after") & table.signal.eq("forget_probability")].iloc[0]
    ref = S.bootstrap_spearman(df.forget_probability, list(df.es_after_seeds), n_boot=100, groups=list(df.model))
    assert (row.rho, row.low, row.high, row.n, row.methods) == (ref["rho"], ref["low"], ref["high"], 24, 4)
    slow = stats.spearmanr(df.forget_probability, df.es_after_seeds.map(np.mean)).statistic
    assert row.rho == pytest.approx(slow) and row.ranks == (row.low > 0 or row.high < 0)
    # within a method on a split: the mean of the eight strata's ρ (each of three checkpoints)
    strata = [stats.spearmanr(g.forget_probability, g.es_after).statistic
              for _, g in df.groupby(["model", "forget_split"])]
    assert row.within_rho == pytest.approx(np.mean(strata))
    # between: ρ over the eight method-and-split means
    cells = df.groupby(["model", "forget_split"])[["forget_probability", "es_after"]].mean()
    assert row.between_rho == pytest.approx(stats.spearmanr(cells.forget_probability, cells.es_after).statistic)
    # |ρ(FRAG)| − |ρ|, and FRAG against itself is exactly 0
    frag = table[table.split.eq("both") & table.outcome.eq("es_after") & table.signal.eq(P.FRAG)].iloc[0]
    assert row.frag_beats_by == pytest.approx(abs(frag.rho) - abs(row.rho))
    assert (frag.frag_beats_by, frag.frag_beats_low, frag.frag_beats_high) == (0, 0, 0)


def test_the_best_pre_attack_signal_is_chosen_on_the_discovery_split_and_the_partial_rho_given_it():
    df = _frontier(3)
    table = P.rank_table(df, n_boot=50, outcomes=("delta_es",))
    part = table[table.split.eq("forget10") & table.signal.isin(P.PRE_ATTACK)]
    best = P.best_pre_attack(table, "delta_es", "forget10")
    assert best == part.loc[part.rho.abs().idxmax(), "signal"] and best in ("es", "forget_probability")
    assert P.best_pre_attack(table, "delta_es", "forget05") in P.PRE_ATTACK
    partial = P.partial_table(df, table, n_boot=50)
    row = partial[partial.split.eq("forget05") & partial.signal.eq(P.FRAG)].iloc[0]
    sub = df[df.forget_split.eq("forget05")]
    assert row.given == best  # chosen on forget10, used on every split
    assert row.rho == pytest.approx(_slow_partial(sub.FRAG_x100, sub[best], sub.delta_es))
    with pytest.raises(ValueError, match="no pre-attack signal"):
        P.best_pre_attack(table, "es_after")


def test_the_views_for_the_eye_keep_each_signal_and_leave_out_what_has_no_value():
    df = _frontier()
    ranks = P.rank_table(df, n_boot=50)
    pooled = P.pooled_view(ranks)
    assert len(pooled) == ranks[ranks.split.eq("both")].signal.nunique() and len(pooled.columns) <= 12
    frag = pooled[pooled.signal.eq("FRAG's gap")].iloc[0]
    assert frag["FRAG vs it, ΔES"] == "—"  # not against itself
    assert pooled[pooled.signal.eq("pruning (vs gradient)")]["within, ΔES"].iloc[0] == "—"  # constant in a method
    assert "forget-set size (authors)" not in set(P.splits_view(ranks).signal)  # constant on each split
    # a measured signal recorded on forget10 only: its forget05 cells say there is no row
    df["grad_norm_forget"] = np.where(df.forget_split.eq("forget10"), df.es * 3, np.nan)
    row = P.splits_view(P.rank_table(df, n_boot=50)).set_index("signal").loc["‖∇ forget loss‖"]
    assert row["ΔES, forget05"] == row["ES after, forget05"] == "—" and row["ΔES, forget10"].startswith(("+", "-"))


def test_the_authors_rows_give_their_printed_table3_to_two_decimals():
    authors = P.authors_checkpoints()
    assert len(authors) == 42 and set(authors.scale) == {"1B", "3B"}
    recomputed = P.authors_against_printed(P.authors_table3(authors))
    printed = recomputed.dropna(subset=["authors_csv"])
    assert len(printed) == 24 and (printed.rho.round(2) == printed.authors_csv).all()
    # the same ρ the slow way, for one cell: 1B without FRP, the FRAG gap
    rows = authors[authors.scale.eq("1B") & authors.method.isin(["graddiff", "npo", "rmu", "sp"])]
    assert len(rows) == 12
    cell = recomputed.set_index(["scale", "subset", "predictor"]).loc[("1B", "w/o FRP", "frag_gap")]
    assert cell.rho == pytest.approx(stats.spearmanr(rows.frag_gap, rows.delta_es).statistic)
    # the pruning indicator is SP and FRP of any veto, never a gradient method
    assert set(authors[authors.pruning.eq(1)].method) == {"sp", "frp_p0", "frp_p0.15", "frp_p0.05"}
    assert set(authors.method) - set(authors[authors.pruning.eq(1)].method) <= set(analysis.AUTHORS_PREDICTOR) | {
        "ga", "graddiff", "npo", "rmu"}


def test_the_verdicts_say_what_the_intervals_say():
    df = _frontier()
    ranks = P.rank_table(df, n_boot=50)
    partial = P.partial_table(df, ranks, n_boot=50)
    best = {o: P.best_pre_attack(ranks, o) for o in P.OUTCOMES}
    text = P.verdict(ranks, partial, best)
    for outcome in P.OUTCOMES:
        b = ranks[ranks.outcome.eq(outcome) & ranks.split.eq("both") & ranks.signal.eq(best[outcome])].iloc[0]
        assert f"is the {b.words}; on forget05, its test," in text
        assert f"|ρ(FRAG)| − |ρ({b.words})| is {b.frag_beats_by:+.2f}" in text
        said = "FRAG ranks better" if b.frag_beats_low > 0 else "FRAG ranks worse" if b.frag_beats_high < 0 \
            else "not resolved"
        assert f"[{b.frag_beats_low:+.2f}, {b.frag_beats_high:+.2f}], {said}" in text
    short = P.headline(ranks, best)
    d = ranks[ranks.outcome.eq("delta_es") & ranks.split.eq("both") & ranks.signal.eq(best["delta_es"])].iloc[0]
    assert short.startswith(f"[Before any attack](docs/results/what-ranks-relearning.md), the {d.words} ranks ΔES "
                            f"at {d.rho:+.2f} [")


def test_the_shared_term_table_is_each_signals_partial_rho_given_es_before():
    df = _frontier(5)
    shared = P.shared_term(df, n_boot=50).set_index("signal")
    assert "es" not in shared.index  # ES before given itself has no partial ρ
    row = shared.loc["FRAG_x100"]
    assert row.rho_es_before == pytest.approx(stats.spearmanr(df.FRAG_x100, df.es).statistic)
    assert row.partial == pytest.approx(_slow_partial(df.FRAG_x100, df.es, df.delta_es))
    # a signal that is ES before plus noise ranks ΔES through the shared term: given ES before, far less
    prob = shared.loc["forget_probability"]
    assert abs(prob.rho) > 0.5 and abs(prob.partial) < abs(prob.rho)
    # a measured signal recorded on some checkpoints only: each ρ over those, not NaN
    df["grad_norm_forget"] = np.where(np.arange(len(df)) % 3, df.es * 2 + df.FRAG_x100 / 10, np.nan)
    row = P.shared_term(df, n_boot=50).set_index("signal").loc["grad_norm_forget"]
    on = df.dropna(subset=["grad_norm_forget"])
    assert row.rho_es_before == pytest.approx(stats.spearmanr(on.grad_norm_forget, on.es).statistic)
    assert row.rho == pytest.approx(stats.spearmanr(on.grad_norm_forget, on.delta_es).statistic)
    assert (row.n, len(on)) == (16, 16)


def test_a_measurement_joins_its_checkpoint_only_from_the_frontier_file_and_of_the_weights_its_05_run_names(
        tmp_path, monkeypatch):
    """Or of a remake of them within tolerance of the 05 record (another CPU's bits), which its status says."""
    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    (tmp_path / "params").mkdir()
    file = tmp_path / "params" / P.FRONTIER_10
    file.write_text("- {profile: t, unlearned_run: a}\n- {profile: t, unlearned_run: b}\n"
                    "- {profile: t, unlearned_run: b, probe_lr: 0.002}\n"
                    "- {profile: t, unlearned_run: c}\n- {profile: t, unlearned_run: d}\n"
                    "- {profile: t, unlearned_run: e}\n- {profile: t, unlearned_run: f}\n"
                    "- {profile: t, unlearned_run: f, probe_lr: 0.002}\n- {profile: t, model: profile-target}\n")
    planned = runs.plan_run(P.MEASURES_NOTEBOOK, file)
    # the 05 record's weights when each was measured: b's first measurement is of weights its 05 run no longer names
    shas = {"a": "sha-a", "b": "sha-b-then", "c": "sha-c", "d": "sha-d", "e": "sha-e", "f": "sha-f", "": None}
    remade = {"c": None, "d": "within tolerance", "e": "outside tolerance"}  # measured on other bits than the record's
    # a second, complete run of a's checkpoint with another setting: not the frontier file's run, never read
    other = runs.plan_run(P.MEASURES_NOTEBOOK, None, {"profile": "t", "unlearned_run": "a", "probe_lr": 1e-3})[0]
    for spec in [*planned, other]:
        u, again = spec.params["unlearned_run"], spec.params.get("probe_lr") == 0.002
        spec.out_dir.mkdir(parents=True)
        spec.executed.write_text("{}")
        sha = "sha-b-now" if (u, again) == ("b", True) else shas[u]
        measured = f"{sha}-remade" if u in remade else sha
        results = {"unlearned_run": u, "checkpoint_sha256": {"measured": measured, "recorded": sha},
                   "weights_as_recorded": u not in remade, "row": dict.fromkeys(P.MEASURED, 2.0 if again else 1.0),
                   **({"checkpoint_drift": remade[u] and {"verdict": remade[u]}} if u in remade else {})}
        (spec.out_dir / paths.RESULTS_FILE).write_text(json.dumps({"provenance": {"params": spec.params},
                                                                   "results": results}))
    rec = types.SimpleNamespace(profile="t", planned=lambda nb, f: runs.plan_run(nb, tmp_path / "params" / f),
                                method_by_run={run: {"results": {"checkpoint_sha256": {"unlearned": sha}}} for run, sha
                                               in (("a", "sha-a"), ("b", "sha-b-now"), ("c", "sha-c"), ("d", "sha-d"),
                                                   ("e", "sha-e"), ("f", "sha-f"))})
    every = P.measurements(rec)
    assert len(every) == 8 and every.run.value_counts()[["05_unlearn/b", "05_unlearn/f"]].tolist() == [2, 2]
    table = P.measured_weights(rec).set_index("run")
    # b's first measurement predates its 05 run's remake, its second reads the weights it names now; c measured other
    # weights than its record's, with no remake's drift to judge them by; e's remake landed outside tolerance; f was
    # measured twice on weights that count; the target belongs to no 05 run
    assert table.weights.to_dict() == {"05_unlearn/a": "recorded", "05_unlearn/b": "recorded",
                                       "05_unlearn/c": "unjudged", "05_unlearn/d": "within tolerance",
                                       "05_unlearn/e": "outside tolerance", "05_unlearn/f": "measured twice"}
    read = table[table.weights.isin(P.READ)]
    assert read[list(P.MEASURED)].to_dict("index") == {"05_unlearn/a": dict.fromkeys(P.MEASURED, 1.0),
                                                 "05_unlearn/b": dict.fromkeys(P.MEASURED, 2.0),
                                                 "05_unlearn/d": dict.fromkeys(P.MEASURED, 1.0)}
    assert table.drop(read.index)[list(P.MEASURED)].isna().all(axis=None)  # a measurement not read gives no number
    assert set(table.weights) - set(P.READ) <= set(P.NOT_READ)  # the page can say why each is not read
    nb = json.loads((paths.NOTEBOOKS_DIR / "10_sharpness.ipynb").read_text())
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert all(f'"{s}":' in code for s in P.MEASURED)  # notebook 10's row holds every measured signal by its name


def test_a_checkpoint_is_placed_by_its_seed_mean_recovery_and_its_rank_among_notebook_08s_checkpoints():
    run = "smol.frontier__forget_split=forget10__frp_veto=0__method=frp__sparsity=0.005"
    table, figure, n, said = P.place("smol", run)
    record = json.loads((paths.RUNS_DIR / "08_predictors" / "smol" / paths.RESULTS_FILE).read_text())["results"]
    assert n == record["checkpoints"] == len(record["runs"])
    # ΔES: the mean over its two recorded forget+retain attacks (seeds 42 and 1), read from their records
    attacks = [json.loads((paths.RUNS_DIR / "06_attacks" / f"smol.frontier_forget10__seed={seed}__unlearned_run={run}"
                           / paths.RESULTS_FILE).read_text())["results"]["row"]["delta_es"] for seed in (42, 1)]
    delta = table.set_index("").loc["ΔES"]
    assert delta["this checkpoint"] == pytest.approx(np.mean(attacks))
    frag = table.set_index("").loc["FRAG's gap"]
    unlearned = json.loads((paths.RUNS_DIR / "05_unlearn" / run / paths.RESULTS_FILE).read_text())["results"]["row"]
    others = [json.loads((paths.RUNS_DIR / r / paths.RESULTS_FILE).read_text())["results"]["row"]["FRAG_x100"]
              for r in record["runs"]]
    assert frag["this checkpoint"] == unlearned["FRAG_x100"]
    assert frag[f"rank of {n}"] == 1 + sum(f > unlearned["FRAG_x100"] for f in others)  # 1 the largest
    assert P.place("smol", "no such run") is None and P.place("tiny", run) is None
    pooled = pd.DataFrame(record["ranks"]).query("split == 'both' and outcome == 'delta_es' and signal == 'FRAG_x100'")
    (rho, low, high), = pooled[["rho", "low", "high"]].to_numpy()
    assert f"FRAG's gap ranks ΔES at ρ {rho:+.2f} [{low:+.2f}, {high:+.2f}] (" + (
        "not resolved" if low <= 0 <= high else "the interval excludes 0") in said
    # notebook 07's recovery: the same checkpoints and seed-mean ΔES that notebook 08 ranks
    recovered = P.recovery("smol")
    assert sorted(recovered.index) == sorted(r.split("/", 1)[1] for r in record["runs"])
    assert recovered[run] == pytest.approx(np.mean(attacks))
    assert P.recovery("tiny").empty  # no recorded frontier attack


def test_a_measured_signal_joins_the_tables_only_once_recorded_on_half_the_checkpoints():
    df = pd.DataFrame({"FRAG_x100": np.arange(10.0), "es": np.arange(10.0)[::-1],
                       "grad_norm_forget": [1.0, 2.0, 3.0, 4.0] + [np.nan] * 6,  # 4 of 10
                       "probe_es": [1.0, 2.0, 3.0, 4.0, 5.0] + [np.nan] * 5})  # 5 of 10
    assert P.signals(df) == ["FRAG_x100", "es", "probe_es"]  # an evaluation signal needs four; a measured one half


def test_a_measured_signal_recorded_on_most_of_one_split_but_not_half_the_frontier_is_ranked_on_no_split():
    df = _frontier()
    on = df.forget_split.eq("forget10") & df.strength.le(2)  # 8 of forget10's 12 checkpoints: 8 of the 24
    df["grad_norm_forget"] = np.where(on, df.es * 2, np.nan)
    assert "grad_norm_forget" in P.signals(df[df.forget_split.eq("forget10")])
    assert "grad_norm_forget" not in P.signals(df)
    assert "grad_norm_forget" not in set(P.rank_table(df, n_boot=20, outcomes=("delta_es",)).signal)
    df["grad_norm_forget"] = np.where(df.strength.le(2), df.es * 2, np.nan)  # 16 of the 24: every split's rows
    assert set(P.rank_table(df, n_boot=20, outcomes=("delta_es",)).query("signal == 'grad_norm_forget'").split) == {
        "both", "forget10", "forget05"}


def test_the_page_says_on_how_many_checkpoints_a_measured_signal_is_recorded_until_it_joins():
    said = P.coverage({"grad_norm_forget": 12, "probe_es": 12, "sharpness_sam": 50}, 80)
    assert "‖∇ forget loss‖, ES after one attack step on 12 of the 80" in said and "once recorded on 40" in said
    assert "SAM" not in said and P.coverage({"probe_es": 40}, 80) == ""


def _measured_case():
    """Notebook 08's tables for three measured signals, each reading's case once: on ΔES the gradient norm ranks it
    (and moves with ES before), FRAG ranks worse than it, better than SAM sharpness, and against the probe it is not
    resolved; the gradient norm adds rank information, SAM sharpness does not, the probe has no partial ρ. On ES after
    nothing is resolved."""
    def rank(outcome, signal, rho, low, high, beats, beats_low, beats_high):
        return {"split": "both", "outcome": outcome, "signal": signal, "family": "measured",
                "words": P.SIGNALS[signal][1], "rho": rho, "low": low, "high": high, "n": 80,
                "ranks": low > 0 or high < 0, "frag_beats_by": beats,
                "frag_beats_low": beats_low, "frag_beats_high": beats_high}
    ranks = pd.DataFrame([rank("delta_es", "grad_norm_forget", -0.6, -0.8, -0.3, -0.3, -0.5, -0.1),
                          rank("delta_es", "sharpness_sam", 0.1, -0.2, 0.4, 0.2, 0.05, 0.4),
                          rank("delta_es", "probe_es", 0.0, -0.2, 0.2, 0.0, -0.2, 0.2),
                          *[rank("es_after", s, 0.1, -0.3, 0.5, 0.0, -0.3, 0.3)
                            for s in ("grad_norm_forget", "sharpness_sam", "probe_es")],
                          {**rank("delta_es", P.FRAG, 0.2, -0.2, 0.5, 0, 0, 0), "family": "weight space"}])
    def part(outcome, signal, rho, low, high):
        return {"outcome": outcome, "split": "both", "signal": signal, "rho": rho, "low": low, "high": high,
                "adds": low > 0 or high < 0}
    partial = pd.DataFrame([part("delta_es", "grad_norm_forget", -0.4, -0.6, -0.1),
                            part("delta_es", "sharpness_sam", 0.1, -0.2, 0.3),
                            *[part("es_after", s, 0.0, -0.3, 0.3) for s in ("grad_norm_forget", "sharpness_sam",
                                                                            "probe_es")]])
    shared = pd.DataFrame([{"signal": "grad_norm_forget", "rho_es_before": 0.8, "partial": -0.2, "partial_low": -0.5,
                            "partial_high": 0.1}])
    return ranks, partial, shared, {"delta_es": "es", "es_after": "forget_probability"}


def test_the_page_reads_the_measured_signals_that_joined_by_the_readings_fixed_beforehand():
    ranks, partial, shared, best = _measured_case()
    head, lines = P.measured(ranks, partial, best, shared).split("\n\n")
    assert head == ("**Measured at the unlearned weights.** 3 signals of notebook 10 (the probe takes one step of the "
                    "attack), on 80 of the 80 checkpoints; each ρ, and each comparison with FRAG, is over the "
                    "checkpoints it is recorded on.")
    delta, after = lines.split("\n")
    assert delta == (
        "- ΔES: ranked by ‖∇ forget loss‖ -0.60 [-0.80, -0.30] (ρ with the forget ES before +0.80; given it, "
        "-0.20 [-0.50, +0.10], not resolved: it ranks ΔES through the term −ES before, and the claim rests on the "
        "forget ES after). FRAG ranks better than SAM sharpness (|ρ(FRAG)| − |ρ| +0.20 [+0.05, +0.40]). "
        "FRAG ranks worse than ‖∇ forget loss‖ (|ρ(FRAG)| − |ρ| -0.30 [-0.50, -0.10]). |ρ(FRAG)| − |ρ| is not "
        "resolved for ES after one attack step. Given the forget ES, partial ρ: ‖∇ forget loss‖ -0.40 [-0.60, -0.10]; "
        "SAM sharpness +0.10 [-0.20, +0.30]; ‖∇ forget loss‖ adds rank information. No partial ρ recorded for ES "
        "after one attack step.")
    assert after == (
        "- Forget ES after: no measured signal ranks it. |ρ(FRAG)| − |ρ| is not resolved for any of them. Given the "
        "forget probability, partial ρ: ‖∇ forget loss‖ +0.00 [-0.30, +0.30]; SAM sharpness +0.00 [-0.30, +0.30]; ES "
        "after one attack step +0.00 [-0.30, +0.30]; none adds rank information that this n resolves.")
    # a partial ρ given ES before whose interval clears 0: no shared-term reading
    clear = shared.assign(partial_high=-0.05)
    assert "(ρ with the forget ES before +0.80; given it, -0.20 [-0.50, -0.05])." in P.measured(ranks, partial, best,
                                                                                                 clear)
    assert P.measured(ranks[ranks.signal.eq(P.FRAG)], partial, best, shared) == ""  # none joined: nothing said
    # measured on remakes within tolerance of their records (another CPU's bits): the page says on how many
    assert P.measured(ranks, partial, best, shared, remade=5).split("\n\n")[0] == head + (
        " On 5 checkpoints the weights measured are a remake on another CPU's kernels, within tolerance of the record "
        "rather than its bits.")
    # and those measured on weights that do not stand in for the record's are counted, with why
    assert P.measured(ranks, partial, best, shared, remade=1, not_read={"outside tolerance": 2, "redone": 0}).split(
        "\n\n")[0] == head + (" On 1 checkpoint the weights measured are a remake on another CPU's kernels, within "
                              "tolerance of the record rather than its bits. Of the checkpoints measured, 2 are not "
                              "read: 2 on a remake outside tolerance of its record.")


def test_the_verdict_reads_the_measured_signals_once_and_says_which_are_not_yet_in_the_tables():
    df = _frontier()
    df["grad_norm_forget"] = df.es * 3 + np.random.default_rng(1).normal(0, 0.05, len(df))
    ranks = P.rank_table(df, n_boot=50)
    partial = P.partial_table(df, ranks, n_boot=50)
    shared = P.shared_term(df, n_boot=50)
    best = {o: P.best_pre_attack(ranks, o) for o in P.OUTCOMES}
    text = P.verdict(ranks, partial, best, measured_on={"grad_norm_forget": 24, "probe_es": 3}, n=24, shared=shared)
    assert P.measured(ranks, partial, best, shared) in text
    assert text.count("**Measured at the unlearned weights.**") == 1
    assert text.endswith("Notebook 10 has recorded ES after one attack step on 3 of the 24 checkpoints; each joins "
                         "these tables once recorded on 12.")
    # before any measured signal joins, the page still says which measurements it does not read
    alone = P.verdict(ranks[~ranks.signal.isin(P.MEASURED)], partial, best, measured_on={"probe_es": 3}, n=24,
                      shared=shared, not_read={"unjudged": 1})
    assert alone.endswith("once recorded on 12. Of the checkpoints measured, 1 is not read: 1 on other weights than "
                          "its record's, with no remake's drift recorded.")
    # recorded on one split only: the page says so, and that split's partial ρ alone is taken
    df["grad_norm_forget"] = np.where(df.forget_split.eq("forget10"), df.grad_norm_forget, np.nan)
    ranks10 = P.rank_table(df, n_boot=50)
    partial10 = P.partial_table(df, ranks10, n_boot=50)
    assert "on 12 of the 24 checkpoints (12 of forget10's 12, 0 of forget05's 12);" in P.measured(
        ranks10, partial10, best, shared)
    mine = partial10[partial10.signal.eq("grad_norm_forget")]
    assert set(mine.split) == {"both", "forget10"}
    assert (P.partial_view(partial10).query("signal == '‖∇ forget loss‖'").forget05 == "—").all()
    g = shared.set_index("signal").loc["grad_norm_forget"]
    assert f"(ρ with the forget ES before {g.rho_es_before:+.2f}; given it, {g.partial:+.2f} [" in text


def test_what_the_results_page_says_of_the_sharpness_numbers_is_what_notebook_10_recorded():
    """The page's reading of SAM and random sharpness at the fixed radius (the loss at the SAM point against a
    uniform guess, ln |V| of SmolLM2's vocabulary; the random rises' sign) counts every recorded smol run of
    notebook 10: a record added without rereading it fails here."""
    import math
    import re

    rows = [json.loads(f.read_text())["results"]["row"]
            for f in sorted((paths.RUNS_DIR / P.MEASURES_NOTEBOOK).glob(f"smol*/{paths.RESULTS_FILE}"))]
    at_sam = np.array([r["loss_forget"] + r["sharpness_sam"] for r in rows])
    rises = np.array([r["sharpness_random"] for r in rows])
    text = " ".join((paths.REPO_ROOT / "docs" / "results" / "what-ranks-relearning.md").read_text().split())
    said = re.search(r"the forget loss is (\d+) to (\d+) nats per token on all (\d+) models notebook 10 measured, "
                     r"above ln \|V\| = ([\d.]+)", text)
    assert said, "the page no longer says what the loss at the SAM point is"
    assert (int(said[1]), int(said[2]), int(said[3])) == (round(at_sam.min()), round(at_sam.max()), len(rows))
    assert float(said[4]) == round(math.log(49152), 1) and (at_sam > math.log(49152)).all()
    negative = re.search(r"negative on (\d+) of the (\d+) \(median (−?[\d.]+)\)", text)
    assert negative and (int(negative[1]), int(negative[2])) == (int((rises < 0).sum()), len(rows))
    assert float(negative[3].replace("−", "-")) == round(float(np.median(rises)), 3)
