import math

import numpy as np
import pandas as pd
import pytest

from frag_utils.report import tables


def _rows(skip=()):
    """Two models in bf16, one in fp32, three splits, three attacks; ΔES = a known function."""
    rows = []
    for weights, models in (("bf16", ("gold", "npo (lr 5e-05)")), ("fp32", ("npo (lr 5e-05)",))):
        for m_i, model in enumerate(models):
            for s_i, split in enumerate(tables.SPLITS):
                for a_i, attack in enumerate(tables.ATTACKS):
                    if (weights, model, split, attack) in skip:
                        continue
                    before = 0.1 * (s_i + 1) + 0.01 * m_i + (0.3 if weights == "fp32" else 0.0)
                    delta = 0.05 * (a_i + 1) + 0.01 * s_i
                    rows.append({"model": model, "method": model.split()[0], "weights": weights, "forget_split": split,
                                 "attack_data": attack, "es_before": before, "es_after": before + delta,
                                 "delta_es": delta, "model_utility_before": 0.3 + 0.01 * s_i,
                                 "model_utility_after": 0.3 - delta / 10,
                                 # the forget attack of forget01 (40 records) takes 2 optimizer steps
                                 "optimizer_steps": 2 if (split, attack) == ("forget01", "forget") else 20,
                                 "few_steps": (split, attack) == ("forget01", "forget"),
                                 "run": f"06/{weights}-{model}-{split}-{attack}"})
    return pd.DataFrame(rows)


def test_table1_averages_each_attack_over_the_three_splits_per_precision_and_model():
    t = tables.table1(_rows())
    assert list(zip(t.weights, t.model)) == [("bf16", "gold"), ("bf16", "npo (lr 5e-05)"), ("fp32", "npo (lr 5e-05)")]
    npo = t.iloc[1]
    # slow: the mean over splits of the retain attack's ΔES = 0.05 + 0.01 * s
    assert npo.retain_delta_es == pytest.approx(sum(0.05 + 0.01 * s for s in range(3)) / 3)
    assert npo.es_before == pytest.approx(sum(0.1 * (s + 1) + 0.01 for s in range(3)) / 3)
    assert npo.mu_before == pytest.approx(0.31)  # the unlearned model of each split, averaged
    attacks = (npo.retain_delta_es, npo.forget_delta_es, npo.forget_retain_delta_es)
    assert npo.avg_delta_es == pytest.approx(sum(attacks) / 3)
    assert npo.splits_recorded == 3
    assert t.iloc[2].es_before == pytest.approx(sum(0.1 * (s + 1) for s in range(3)) / 3 + 0.3)  # its own row


def test_table1_leaves_an_average_blank_when_a_split_is_missing_and_says_how_many_splits():
    t = tables.table1(_rows(skip={("bf16", "gold", "forget01", "forget")}))
    gold = t.iloc[0]
    assert math.isnan(gold.forget_delta_es) and math.isnan(gold.avg_delta_es)
    assert not math.isnan(gold.retain_delta_es)
    t = tables.table1(_rows(skip={("bf16", "gold", "forget01", a) for a in tables.ATTACKS}))
    assert t.iloc[0].splits_recorded == 2 and math.isnan(t.iloc[0].es_before)


def test_table1_refuses_two_runs_of_one_attack_on_one_split():
    rows = _rows()
    with pytest.raises(ValueError, match="two retain attacks of gold"):
        tables.table1(pd.concat([rows, rows.iloc[:1]]))


def test_per_split_table_has_a_row_per_split_and_model_with_each_attack():
    t = tables.table1_per_split(_rows(skip={("fp32", "npo (lr 5e-05)", "forget10", "retain")}))
    assert len(t) == 3 * 3
    row = t[(t.weights == "bf16") & (t.forget_split == "forget05") & (t.model == "gold")].iloc[0]
    assert row.forget_retain_delta_es == pytest.approx(0.05 * 3 + 0.01)
    missing = t[(t.weights == "fp32") & (t.forget_split == "forget10")].iloc[0]
    assert math.isnan(missing.retain_delta_es) and not math.isnan(missing.forget_delta_es)
    # an attack of few optimizer steps is named beside its row, and only there
    flagged = t[t.few_step_attacks != ""]
    assert set(flagged.forget_split) == {"forget01"} and len(flagged) == 3
    assert set(flagged.few_step_attacks) == {"forget (2 steps)"}


def test_attack_rows_take_the_precision_and_label_from_the_unlearned_run():
    method_by_run = {"u1": {"provenance": {"params": {"weights": "bf16"}}, "results": {"row": {"method": "npo"}}},
                     "u0": {"provenance": {"params": {}}, "results": {"row": {"method": "ga"}}}}
    recs = [{"run": f"06_attacks/a{i}", "results": {"row": {
        "unlearned_run": u, "method": method_by_run[u]["results"]["row"]["method"], "forget_split": "forget10",
        "attack_data": "retain", "es_before": 0.5, "es_after": 0.6, "delta_es": 0.1, "model_utility_before": 0.3,
        "model_utility_after": 0.3}}} for i, u in enumerate(("u1", "u0"))]
    recs.append({"run": "06_attacks/orphan", "results": {"row": {"unlearned_run": "gone"}}})
    rows = tables.attack_rows(recs, method_by_run, lambda r: r["results"]["row"]["method"].upper())
    assert list(rows.weights) == ["bf16", "fp32"] and list(rows.model) == ["NPO", "GA"]
    assert list(rows.run) == ["06_attacks/a0", "06_attacks/a1"]


def test_seed_repeats_turn_each_checkpoint_delta_into_its_list_of_seeds_and_widen_nothing_else():
    from frag_utils.report import analysis, stats

    chosen = pd.DataFrame({"unlearned_run": ["a", "b", "c", "d"], "attack_data": "forget_retain",
                           "method": ["npo", "rmu", "sp", "frp"], "model": ["npo", "rmu", "sp", "frp"],
                           "l2_all": [1.0, 2.0, 3.0, 4.0],
                           "delta_es": [0.4, 0.3, 0.2, 0.1], "run": ["a42", "b42", "c42", "d42"]})
    repeats = pd.DataFrame({"unlearned_run": ["a", "a", "c"], "attack_data": "forget_retain",
                            "delta_es": [0.0, 0.2, 0.6], "run": ["a1", "a2", "c1"]})
    out = tables.with_seed_repeats(chosen, repeats)
    assert out.delta_es.tolist() == [[0.4, 0.0, 0.2], [0.3], [0.2, 0.6], [0.1]]
    assert out.attack_seeds.tolist() == [3, 1, 2, 1]
    # rho is taken against each checkpoint's mean over its seeds (0.2, 0.3, 0.4, 0.1), computed here by hand
    means = [0.2, 0.3, 0.4, 0.1]
    res = stats.bootstrap_spearman(out.l2_all, out.delta_es, n_boot=200)
    assert res["rho"] == pytest.approx(stats.spearman([1, 2, 3, 4], means)) and res["n_seeds"] == [3, 1, 2, 1]
    table = analysis.paper_table3(out, predictors=("l2_all",), n_boot=200)
    assert table.set_index("subset").attacks.to_dict() == {"all": 7, "w/o FRP": 6}
    # without repeats every checkpoint is a list of one: the plain pairs bootstrap
    assert tables.with_seed_repeats(chosen, repeats.iloc[:0]).delta_es.tolist() == [[0.4], [0.3], [0.2], [0.1]]


def test_recovery_is_the_share_of_the_forgotten_es_the_attack_brings_back():
    # target ES 0.9; a forgot 0.2 and got it all back (and 0.02 more) on average over three seeds,
    # b forgot 0.8 and got a quarter back: b's ΔES is the larger, a's recovery the larger
    checkpoints = pd.DataFrame({"es_before": [0.7, 0.1], "target_es": [0.9, 0.9],
                                "delta_es": [[0.2, 0.24, 0.22], [0.2]]})
    out = tables.recovery(checkpoints)
    assert out.es_after.tolist() == pytest.approx([0.92, 0.3])
    assert out.recovered.tolist() == pytest.approx([0.22 / 0.2, 0.25])
    assert out.recovered_seeds[0] == pytest.approx([1.0, 1.2, 1.1])
    # a checkpoint that forgot (almost) nothing has no share to recover
    nothing = tables.recovery(checkpoints.assign(es_before=[0.88, 0.1]))
    assert np.isnan(nothing.recovered[0]) and np.isnan(nothing.recovered_seeds[0]).all()



def test_seed_means_average_each_attack_over_its_own_seeds_and_a_missing_number_stays_missing():
    rows = pd.DataFrame({"unlearned_run": ["a", "a", "b"], "attack_data": ["retain", "forget", "retain"],
                         "es_after": [0.5, 0.6, 0.7], "delta_es": [0.1, 0.2, 0.3],
                         "model_utility_after": [0.3, 0.3, 0.3], "run": ["ar42", "af42", "br42"]})
    repeats = pd.DataFrame({"unlearned_run": ["a", "a", "b"], "attack_data": "retain",
                            "es_after": [0.7, 0.9, float("nan")], "delta_es": [0.3, 0.5, 0.1],
                            "model_utility_after": [0.2, 0.1, 0.3], "run": ["ar1", "ar2", "br1"]})
    out = tables.seed_means(rows, repeats)
    assert out.es_after.tolist()[:2] == pytest.approx([0.7, 0.6])  # a/retain over three seeds; a/forget alone
    assert out.delta_es.tolist() == pytest.approx([0.3, 0.2, 0.2])
    assert out.model_utility_after.tolist() == pytest.approx([0.2, 0.3, 0.3])
    assert out.attack_seeds.tolist() == [3, 1, 2]
    assert math.isnan(out.es_after.iloc[2])  # b's seed-1 ES is missing: no mean over a different set of seeds
    assert out.run.tolist() == rows.run.tolist()  # one row per attack, its seed-42 run named
    assert tables.seed_means(rows, repeats.iloc[:0]).attack_seeds.tolist() == [1, 1, 1]
