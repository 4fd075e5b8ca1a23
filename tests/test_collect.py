"""Notebook 09's collection of records (frag_utils.collect), checked against the committed smol
records read the slow way (json files, one by one), and on a copy of them where a record is
changed the way a redo or a user's rerun changes it."""
import json
import math
import shutil

import pytest

from frag_utils import collect, paths

SMOL_ATTACKS = paths.PARAMS_DIR / "smol" / "06_attacks.yaml"


def _record(notebook, name, root=None):
    return json.loads(((root or paths.RUNS_DIR) / notebook / name / "results.json").read_text())


def _attack_folders(unlearned_run, root=None):
    """The committed attack records of one model with the main grid's settings, by attack data (slow:
    every 06 record opened and compared with the main file's settings)."""
    import yaml

    main = yaml.safe_load(SMOL_ATTACKS.read_text())[0]
    settings = {k: v for k, v in main.items() if k not in ("unlearned_run", "attack_data")}
    found = {}
    for file in sorted(((root or paths.RUNS_DIR) / "06_attacks").glob("smol*/results.json")):
        p = json.loads(file.read_text())["provenance"]["params"]
        if (p["unlearned_run"] == unlearned_run and p["attack_data"] in ("retain", "forget", "forget_retain")
                and all(p.get(k) == v for k, v in settings.items())
                and p.get("forget_split", "forget10") == "forget10" and p.get("seed") == 42
                and p.get("epochs") == 1 and p.get("optimizer") == "adamw" and p.get("lora_rank") == 0
                and p.get("eval_utility") is True and not p.get("eval_mc")):
            found.setdefault(p["attack_data"], file.parent.name)
    return found


@pytest.fixture(scope="module")
def smol():
    return collect.Collection("smol")


def test_knobs_blank_what_a_method_does_not_use(smol):
    rmu_run = "smol.strength__frp_variant=paper__lr=0.001__method=rmu__rmu_coeff=200__sparsity=0"
    rmu = collect.knobs(smol.method_by_run[rmu_run])
    assert rmu["lr"] == "0.001" and rmu["rmu_coeff"] == "200"
    assert rmu["sparsity"] == rmu["frp_variant"] == rmu["frp_lam"] == ""
    frp = collect.knobs(smol.method_by_run["smol.frp_released__frp_lam=0.05__frp_veto=0.15"])
    assert frp["lr"] == "" and frp["rmu_coeff"] == "" and frp["frp_veto"] == "0.15" and frp["frp_lam"] == "0.05"
    assert frp["frp_beta"] == ""  # beta is Eq. 6's only
    assert smol.label("smol__method=gold") == "gold"


def test_main_attack_table_matches_the_records_read_one_by_one(smol):
    import yaml

    table, effectiveness = smol.main_attacks()
    models = list(dict.fromkeys(m["unlearned_run"] for m in yaml.safe_load(SMOL_ATTACKS.read_text())))
    assert len(table) == len(models)
    for model, (_, row) in zip(models, table.iterrows()):
        folders = _attack_folders(model)
        rows = {a: _record("06_attacks", f)["results"]["row"] for a, f in folders.items()}
        assert row.model == smol.label(model)
        assert row.es_before == rows["forget_retain"]["es_before"]
        for attack, r in rows.items():
            assert row[f"{attack}_delta_es"] == pytest.approx(r["es_after"] - r["es_before"], abs=1e-12)
        if len(rows) == 3:
            assert row.avg_delta_es == pytest.approx(sum(r["delta_es"] for r in rows.values()) / 3)
        else:
            assert math.isnan(row.avg_delta_es)
    # the paper's rule: an attack is effective when some model's ΔES reaches 0.10
    for _, e in effectiveness.iterrows():
        assert e.effective == bool(table[f"{e.attack}_delta_es"].max() >= 0.10)


def test_checkpoints_are_the_forget_retain_attacks_at_the_main_settings(smol):
    checkpoints = smol.checkpoints(pool_splits=False)
    assert len(checkpoints) and set(checkpoints.forget_split) == {"forget10"}
    for _, c in checkpoints.iterrows():
        rec = _record(*c.run.split("/"))
        assert rec["provenance"]["params"]["attack_data"] == "forget_retain"
        assert rec["provenance"]["params"]["lr"] == 5e-5 and rec["provenance"]["params"]["seed"] == 42
        assert c.delta_es == rec["results"]["row"]["delta_es"]


@pytest.fixture
def copied_runs(tmp_path, monkeypatch):
    """A copy of the committed 05 and 06 records the tests may change (the repository's stay as they are)."""
    root = tmp_path / "papermill_runs"
    for notebook in ("02_target_and_gold", "05_unlearn", "06_attacks"):
        shutil.copytree(paths.RUNS_DIR / notebook, root / notebook,
                        ignore=shutil.ignore_patterns("*.png", "*.tex", "*.md", "*.csv"))
    monkeypatch.setattr(paths, "RUNS_DIR", root)
    return root


def test_an_attack_whose_unlearned_model_was_redone_is_left_out_as_stale(copied_runs):
    npo = "smol__method=npo"
    attacked = set(_attack_folders(npo, copied_runs).values())
    assert attacked
    assert not set(collect.Collection("smol").stale) & {f"06_attacks/{f}" for f in attacked}
    file = copied_runs / "05_unlearn" / npo / "results.json"
    rec = json.loads(file.read_text())
    rec["results"]["row"]["l2_all"] += 1.0  # the redone model's weights moved elsewhere
    file.write_text(json.dumps(rec))
    grid = collect.Collection("smol")
    assert {f"06_attacks/{f}" for f in attacked} <= set(grid.stale)
    table, _ = grid.main_attacks()
    assert grid.label(npo) not in set(table.model)


def test_a_rerun_with_other_parameters_is_the_users_and_a_copy_of_a_grid_run_is_not(copied_runs):
    grid = collect.Collection("smol")
    attacks_, methods = grid.other_runs(grid.sources.get("attacks", []))
    assert len(attacks_) == 0 and len(methods) == 0  # the committed records are all the grid's
    folder = _attack_folders("smol__method=npo", copied_runs)["forget_retain"]
    source = copied_runs / "06_attacks" / folder
    copy = copied_runs / "06_attacks" / "mine_same_params"  # the grid's run under another name
    shutil.copytree(source, copy)
    rerun = copied_runs / "06_attacks" / "mine_lr_1e-4"  # the README's rerun: another learning rate
    shutil.copytree(source, rerun)
    rec = json.loads((rerun / "results.json").read_text())
    rec["provenance"]["params"]["lr"] = 1e-4
    rec["results"]["row"].update(lr=1e-4, delta_es=0.5)
    (rerun / "results.json").write_text(json.dumps(rec))
    grid = collect.Collection("smol")
    grid.main_attacks()
    attacks_, _ = grid.other_runs(grid.sources["attacks"])
    assert list(attacks_.run) == ["06_attacks/mine_lr_1e-4"]
    mine = attacks_.iloc[0]
    assert mine.delta_es == 0.5 and mine.lr == 1e-4
    assert mine.grid_delta_es == _record("06_attacks", folder, copied_runs)["results"]["row"]["delta_es"]


def test_seeds_table_gives_each_models_spread():
    import pandas as pd

    from frag_utils import tables

    rows = pd.DataFrame([{"model": m, "seed": s, "es_before": 0.2, "delta_es": d}
                         for m, ds in (("a", (0.1, 0.3, 0.2)), ("b", (0.0, 0.0, 0.6))) for s, d in zip((1, 2, 3), ds)])
    t = tables.seeds_table(rows).set_index("model")
    assert t.loc["a", "mean"] == pytest.approx(0.2) and t.loc["a", "std"] == pytest.approx(0.1)
    assert t.loc["b", "range"] == pytest.approx(0.6) and t.loc["b", "seeds"] == 3
    assert t.loc["a", "seed 2"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="one seed"):
        tables.seeds_table(pd.concat([rows, rows.iloc[:1]]))


def test_mark_not_effective_heads_only_fully_measured_columns_under_the_threshold():
    import pandas as pd

    from frag_utils import tables

    t = pd.DataFrame({"model": ["a", "b"], "x": [0.05, 0.09], "y": [0.05, 0.2], "z": [0.01, float("nan")]})
    assert list(tables.mark_not_effective(t).columns) == ["model", "x (not effective)", "y", "z"]




def test_a_seed_repeat_must_be_the_same_attack_at_a_new_seed():
    from frag_utils.collect import _same_attack_but_the_seed

    def rec(run, seed, lr=2e-4, unlearned="u"):
        return {"run": run, "provenance": {"params": {"run_name": run, "unlearned_run": unlearned, "seed": seed,
                                                      "attack_data": "forget_retain", "lr": lr}}}
    attacks = [rec("06/a", 42), rec("06/b", 42, unlearned="v")]
    _same_attack_but_the_seed([rec("06/a1", 1), rec("06/a2", 2)], attacks)  # what the seeds file holds
    with pytest.raises(ValueError, match=r"differs in \['lr'\]"):
        _same_attack_but_the_seed([rec("06/a1", 1, lr=1e-4)], attacks)
    with pytest.raises(ValueError, match="already run with \\(42\\)"):
        _same_attack_but_the_seed([rec("06/a42", 42)], attacks)
    with pytest.raises(ValueError, match="already run with \\(1\\)"):
        _same_attack_but_the_seed([rec("06/a1", 1), rec("06/a1bis", 1)], attacks)
