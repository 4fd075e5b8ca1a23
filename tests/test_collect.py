"""Notebook 09's collection of records (frag_utils.collect), checked against the committed smol
records read the slow way (json files, one by one), and on a copy of them where a record is
changed the way a redo or a user's rerun changes it."""
import json
import math
import shutil

import pytest

from frag_utils import collect, paths, runs

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


PRECISION_GA = "smol.precision__method=ga__weights=bf16"  # a deterministic record: it names the target it read


def test_a_record_made_from_earlier_weights_of_its_input_is_stale_and_made_again(copied_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))  # not this machine's cache, whatever it holds
    specs = runs.grid("smol")
    spec = next(s for s in specs if s.name == PRECISION_GA)
    old_npo = next(s for s in specs if s.name == "smol__method=npo")  # recorded before records named hashes
    assert runs.stale_inputs(spec, specs) == [] and runs.stale_inputs(old_npo, specs) == []
    assert f"05_unlearn/{PRECISION_GA}" not in collect.Collection("smol").stale_methods
    # the target is made again (other bits): what was unlearned from the old one is stale
    file = copied_runs / "02_target_and_gold" / "smol" / "results.json"
    rec = json.loads(file.read_text())
    read = json.loads((copied_runs / "05_unlearn" / PRECISION_GA / "results.json").read_text())
    assert rec["results"]["checkpoint_sha256"]["target"] == read["results"]["checkpoint_sha256"]["original"]
    rec["results"]["checkpoint_sha256"]["target"] = "0" * 64
    file.write_text(json.dumps(rec))
    assert runs.stale_inputs(spec, specs) == ["02_target_and_gold/smol"]
    assert runs.stale_inputs(old_npo, specs) == []  # no hash in its record: not judged
    grid = collect.Collection("smol")
    assert f"05_unlearn/{PRECISION_GA}" in grid.stale_methods and PRECISION_GA not in grid.method_by_run
    # the runner makes it again (forced) instead of skipping it as complete
    calls = []

    def fake_execute(s, force=False):
        calls.append((s.notebook.stem, s.name, force))
        return {"run": f"{s.notebook.stem}/{s.name}", "status": "done", "seconds": 0.0}

    monkeypatch.setattr(runs, "execute", fake_execute)
    monkeypatch.setattr(runs, "_missing", lambda dep: [])  # its input's checkpoint is in the cache
    log = runs.run_grid([spec], universe=specs)
    assert calls == [("05_unlearn", PRECISION_GA, True)]
    assert log[-1]["reason"] == "its inputs were made again"


def test_a_gold_run_is_stale_when_its_gold_model_was_made_again_and_not_for_another_checkpoint(copied_runs):
    """A gold run's output is notebook 02's gold model: made again (other hash), the gold run and
    its attacks describe a model the grid no longer has. Its target hash alone decides nothing."""
    specs = runs.grid("smol")
    gold = next(s for s in specs if s.name == "smol__method=gold")
    two = json.loads((copied_runs / "02_target_and_gold" / "smol" / "results.json").read_text())
    hashes = two["results"]["checkpoint_sha256"]
    file = copied_runs / "05_unlearn" / gold.name / "results.json"
    rec = json.loads(file.read_text())
    rec["results"]["checkpoint_sha256"] = {"original": hashes["target"], "unlearned": hashes["gold"]}
    file.write_text(json.dumps(rec))
    assert runs.stale_inputs(gold, specs) == []
    rec["results"]["checkpoint_sha256"]["unlearned"] = "1" * 64  # made from an earlier gold model
    file.write_text(json.dumps(rec))
    assert runs.stale_inputs(gold, specs) == ["02_target_and_gold/smol"]
    # the target's hash stands for the target only: a record whose "original" is the gold model's is stale
    precision = next(s for s in specs if s.name == PRECISION_GA)
    file = copied_runs / "05_unlearn" / PRECISION_GA / "results.json"
    rec = json.loads(file.read_text())
    rec["results"]["checkpoint_sha256"]["original"] = hashes["gold"]
    file.write_text(json.dumps(rec))
    assert runs.stale_inputs(precision, specs) == ["02_target_and_gold/smol"]


def test_a_run_made_from_weights_remade_here_is_the_users_never_the_grids(copied_runs, tmp_path, monkeypatch):
    """frag run --keep-remade: the 05 model was remade on this machine and differs from its record;
    an attack of the remade weights is of this machine's lineage, even at the grid's own settings."""
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))
    specs = runs.grid("smol")
    ga = next(s for s in specs if s.name == PRECISION_GA)
    remade = _record("05_unlearn", PRECISION_GA, copied_runs)
    remade["results"]["checkpoint_sha256"]["unlearned"] = "a" * 64
    runs.remade_record_dir(ga).mkdir(parents=True)
    (runs.remade_record_dir(ga) / "results.json").write_text(json.dumps(remade))
    cached = {"a" * 64}  # the weights hash of what the cache holds now
    monkeypatch.setattr(runs, "_checkpoint_sha256", lambda folder: next(iter(cached)))
    source = copied_runs / "06_attacks" / _attack_folders("smol__method=npo", copied_runs)["forget_retain"]
    for folder, lr in (("mine_lr_1e-4", 1e-4), ("mine_grid_lr", None)):
        shutil.copytree(source, copied_runs / "06_attacks" / folder)
        rec = _record("06_attacks", folder, copied_runs)
        rec["provenance"]["params"].update(unlearned_run=PRECISION_GA, **({"lr": lr} if lr else {}))
        rec["results"]["row"].update(unlearned_run=PRECISION_GA, **({"lr": lr} if lr else {}))
        rec["results"]["checkpoint_sha256"] = {"attacked": "a" * 64}
        (copied_runs / "06_attacks" / folder / "results.json").write_text(json.dumps(rec))
    grid = collect.Collection("smol")
    mine = {"06_attacks/mine_lr_1e-4", "06_attacks/mine_grid_lr"}
    assert grid.remade == {run: [f"05_unlearn/{PRECISION_GA}"] for run in mine}
    assert not mine & {r["run"] for r in grid.all_attacks.values()} and not mine & set(grid.stale)
    grid.main_attacks()
    attacks_, _ = grid.other_runs(grid.sources["attacks"])
    assert set(attacks_.run) == mine and set(attacks_.made_from) == {f"remade 05_unlearn/{PRECISION_GA}"}
    # the recorded weights back in the cache: the remade record is gone, and the runs made from the
    # remade weights are stale (they read weights the grid does not have)
    unlearned = paths.expand_cached(remade["results"]["unlearned"])
    paths.Path(unlearned).mkdir(parents=True)
    (paths.Path(unlearned) / "model.safetensors").write_text("the recorded weights")
    recorded = _record("05_unlearn", PRECISION_GA, copied_runs)["results"]["checkpoint_sha256"]["unlearned"]
    cached.clear(), cached.add(recorded)
    grid = collect.Collection("smol")
    assert runs.remade_results(ga) is None
    assert grid.remade == {} and not runs.remade_record_dir(ga).exists()
    attacks_, _ = grid.other_runs([])
    assert len(attacks_) == 0  # stale now: left out of every table
