"""Notebook 09's collection of records (frag_utils.collect), checked against the committed smol
records of the faithful grid read the slow way (json files, one by one), and on a copy of them
where a record is changed the way a redo or a user's rerun changes it."""
import json
import shutil

import pytest
import yaml

from frag_utils import collect, paths

PARAMS = paths.PARAMS_DIR / "smol"
NPO = "smol.table1__forget_split=forget10__grad_accum=1__lr=5e-05__method=npo__weights=bf16"


def _record(notebook, name, root=None):
    return json.loads(((root or paths.RUNS_DIR) / notebook / name / "results.json").read_text())


def _attack_records(root=None, attack_data=None):
    """Every committed attack record of the grid's attack file (slow: every 06 record opened and its
    parameters compared with the file's entries, defaults of the notebook aside)."""
    wanted = [{k: v for k, v in e.items()} for e in yaml.safe_load((PARAMS / collect.GRID_06).read_text())]
    found = []
    for file in sorted(((root or paths.RUNS_DIR) / "06_attacks").glob("smol.table1__*/results.json")):
        rec = json.loads(file.read_text())
        p = rec["provenance"]["params"]
        if any(all(p.get(k) == v for k, v in e.items()) and p.get("seed") == 42 for e in wanted):
            if attack_data in (None, p["attack_data"]):
                found.append({"folder": file.parent.name, **rec})
    return found


@pytest.fixture(scope="module")
def smol():
    return collect.Collection("smol")


def test_the_models_table_is_the_grid_files_records(smol):
    table = smol.models()
    recorded = [d.name for d in sorted((paths.RUNS_DIR / "05_unlearn").glob("smol.table1__*"))
                if (d / "results.json").is_file()]
    assert sorted(table.run) == sorted(f"05_unlearn/{n}" for n in recorded) and len(table)
    for _, row in table.iterrows():
        rec = _record(*row.run.split("/"))
        for k in ("es", "model_utility", "l2_all", "FRAG_x100", "A_f_x100", "A_r_x100"):
            assert row[k] == rec["results"]["row"][k]
        assert row.weights == rec["provenance"]["params"]["weights"]
    frp = table[table.method.eq("frp")]
    assert set(frp.model) <= {"FRP (P 0)", "FRP (P 0.15)"} and len(frp)


def test_table1_per_split_holds_each_attacks_delta_es_as_recorded(smol):
    t1 = smol.table1(n_boot=20)
    per_split = t1["per_split"].set_index(["weights", "forget_split", "model"])
    found = _attack_records()
    assert len(t1["rows"]) == len(found) and len(found)
    for rec in found:
        row, model_run = rec["results"]["row"], rec["provenance"]["params"]["unlearned_run"]
        model = collect.short_label({"run": f"05_unlearn/{model_run}", **_record("05_unlearn", model_run)})
        weights = _record("05_unlearn", model_run)["provenance"]["params"]["weights"]
        got = per_split.loc[(weights, row["forget_split"], model), f"{row['attack_data']}_delta_es"]
        assert got == pytest.approx(row["es_after"] - row["es_before"], abs=1e-12)


def test_table3_takes_the_papers_five_methods_and_the_extended_set_leaves_out_gold_and_collapsed(smol):
    t1 = smol.table1(n_boot=20)
    chosen = t1["table3_checkpoints"]
    fr = _attack_records(attack_data="forget_retain")
    if len(chosen):
        assert set(chosen.method) <= {"graddiff", "npo", "rmu", "sp", "frp"}
        assert not chosen.duplicated(["weights", "method", "forget_split"]).any()
        assert set(chosen[chosen.method.eq("frp")].model) <= {"FRP (P 0)"}
    listing = t1["table3_extended_checkpoints"]
    for rec in fr:
        row = rec["results"]["row"]
        model = _record("05_unlearn", row["unlearned_run"])["results"]["row"]
        in_listing = listing[listing.run.eq(f"06_attacks/{rec['folder']}")]
        if model["method"] == "gold":
            assert not len(in_listing)
            continue
        healthy = row["model_utility_before"] >= 0.5 * model["target_model_utility"]
        assert list(in_listing.reason) == (["included"] if healthy else ["Model Utility below 0.5 x target's"])


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
    attacked = {f"06_attacks/{r['folder']}" for r in _attack_records(copied_runs)
                if r["provenance"]["params"]["unlearned_run"] == NPO}
    assert attacked
    assert not set(collect.Collection("smol").stale) & attacked
    file = copied_runs / "05_unlearn" / NPO / "results.json"
    rec = json.loads(file.read_text())
    rec["results"]["row"]["l2_all"] += 1.0  # the redone model's weights moved elsewhere
    file.write_text(json.dumps(rec))
    grid = collect.Collection("smol")
    assert attacked <= set(grid.stale)
    assert not set(grid.table1(n_boot=20)["rows"].run) & attacked


def test_a_rerun_with_other_parameters_is_the_users_and_a_copy_of_a_grid_run_is_not(copied_runs):
    attacks_, methods = collect.Collection("smol").other_runs()
    assert len(attacks_) == 0 and len(methods) == 0  # the committed records are all the grid's
    folder = next(r["folder"] for r in _attack_records(copied_runs, "forget_retain")
                  if r["provenance"]["params"]["unlearned_run"] == NPO)
    source = copied_runs / "06_attacks" / folder
    copy = copied_runs / "06_attacks" / "mine_same_params"  # the grid's run under another name
    shutil.copytree(source, copy)
    rerun = copied_runs / "06_attacks" / "mine_lr_1e-4"  # the README's rerun: another learning rate
    shutil.copytree(source, rerun)
    rec = json.loads((rerun / "results.json").read_text())
    rec["provenance"]["params"]["lr"] = 1e-4
    rec["results"]["row"].update(lr=1e-4, delta_es=0.5)
    (rerun / "results.json").write_text(json.dumps(rec))
    attacks_, _ = collect.Collection("smol").other_runs()
    assert list(attacks_.run) == ["06_attacks/mine_lr_1e-4"]
    mine = attacks_.iloc[0]
    assert mine.delta_es == 0.5 and mine.lr == 1e-4 and mine.model == "NPO"
    assert mine.grid_delta_es == _record("06_attacks", folder, copied_runs)["results"]["row"]["delta_es"]


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
