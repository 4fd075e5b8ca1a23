"""Notebook 09's families of tables (frag_utils.report: one module per family, the records read by
frag_utils.report.recorded), checked against the committed smol records of the faithful grid read the
slow way (json files, one by one), and on a copy of them where a record is changed the way a redo or a
user's rerun changes it."""
import importlib.util
import json
import re
import shutil

import pandas as pd
import pytest
import yaml

from frag_utils import parameters, paths
from frag_utils.report import analysis, book, controls, frontier, paper, recorded, stats, targets, variants
from frag_utils.report import grid as grid_chapter
from frag_utils.report.recorded import Records

PARAMS = paths.PARAMS_DIR / "smol"
NPO = "smol.table1__forget_split=forget10__grad_accum=1__lr=5e-05__method=npo__weights=bf16"


def _record(notebook, name, root=None):
    return json.loads(((root or paths.RUNS_DIR) / notebook / name / "results.json").read_text())


def _complete(folder, notebook):
    return (folder / "results.json").is_file() and (folder / f"{notebook}.ipynb").is_file()


def _attack_records(root=None, attack_data=None):
    """Every committed attack record of the grid's attack file (slow: every 06 record the runner named
    after the file opened, and its parameters compared with the file's entries, defaults of the
    notebook aside: another file's attack of the same model with one more setting matches an entry
    too)."""
    wanted = yaml.safe_load((PARAMS / recorded.GRID_06).read_text())
    found = []
    for folder in sorted(((root or paths.RUNS_DIR) / "06_attacks").glob("smol.table1__*")):
        if not _complete(folder, "06_attacks"):
            continue
        rec = json.loads((folder / "results.json").read_text())
        p = rec["provenance"]["params"]
        if any(all(p.get(k) == v for k, v in e.items()) and p.get("seed") == 42 for e in wanted):
            if attack_data in (None, p["attack_data"]):
                found.append({"folder": folder.name, **rec})
    return found


def _script(name):
    """One of scripts/ as a module (the planning scripts write parameter files from the records)."""
    spec = importlib.util.spec_from_file_location(name, paths.REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _book(*families, n_boot=20):
    """A fresh read of the smol records with ``families``' chapters built, in order."""
    smol = book.Book("smol", n_boot=n_boot)
    for family in families:
        smol.chapter(family, display=False)
    return smol


def _table1_claims():
    rec = Records("smol")
    return paper.table1_claims(rec, paper.grid_rows(rec)[0])


@pytest.fixture(scope="module")
def smol():
    return _book(paper)


def test_the_models_table_is_the_grid_files_records(smol):
    table = smol.built[paper.UNLEARNED_MODELS]
    recorded = [d.name for d in sorted((paths.RUNS_DIR / "05_unlearn").glob("smol.table1__*"))
                if _complete(d, "05_unlearn")]
    assert sorted(table.run) == sorted(f"05_unlearn/{n}" for n in recorded) and len(table)
    for _, row in table.iterrows():
        rec = _record(*row.run.split("/"))
        for k in ("es", "model_utility", "l2_all", "FRAG_x100", "A_f_x100", "A_r_x100"):
            assert row[k] == rec["results"]["row"][k]
        assert row.weights == rec["provenance"]["params"]["weights"]
    frp = table[table.method.eq("frp")]
    assert set(frp.model) <= {"FRP (P 0)", "FRP (P 0.15)"} and len(frp)


def test_table1_per_split_holds_each_attacks_delta_es_as_recorded(smol):
    per_split = smol.built[paper.TABLE1_PER_SPLIT].set_index(["weights", "forget_split", "model"])
    found = _attack_records()
    assert len(smol.grid_rows) == len(found) and len(found)
    for rec in found:
        row, model_run = rec["results"]["row"], rec["provenance"]["params"]["unlearned_run"]
        model = recorded.short_label({"run": f"05_unlearn/{model_run}", **_record("05_unlearn", model_run)})
        weights = _record("05_unlearn", model_run)["provenance"]["params"]["weights"]
        got = per_split.loc[(weights, row["forget_split"], model), f"{row['attack_data']}_delta_es"]
        assert got == pytest.approx(row["es_after"] - row["es_before"], abs=1e-12)


def test_table1_claims_hold_the_bf16_rows_and_the_fp32_rows_of_the_attacks_recorded_in_fp32(smol, copied_runs):
    claims = _table1_claims()
    fp32_attacks = {r["provenance"]["params"]["attack_data"] for r in _attack_records()
                    if _record("05_unlearn", r["provenance"]["params"]["unlearned_run"])["provenance"]["params"][
                        "weights"] == "fp32"}
    assert list(claims.weights) == ["bf16"] * 3 + ["fp32"] * len(fp32_attacks)
    assert list(claims.attack[3:]) == [a for a in ("retain", "forget", "forget_retain") if a in fp32_attacks]
    # without any fp32 attack recorded: the three bf16 rows alone
    for r in _attack_records(copied_runs):
        if "weights=fp32" in r["provenance"]["params"]["unlearned_run"]:
            shutil.rmtree(copied_runs / "06_attacks" / r["folder"])
    assert list(_table1_claims().weights) == ["bf16"] * 3


def test_table3_takes_the_papers_five_methods_and_the_extended_set_leaves_out_gold_and_collapsed(smol):
    fr = _attack_records(attack_data="forget_retain")
    bf16 = []
    for rec in fr:
        model = _record("05_unlearn", rec["results"]["row"]["unlearned_run"])
        veto = model["results"].get("made", {}).get("veto")
        if model["provenance"]["params"]["weights"] == "bf16" and model["results"]["row"]["method"] in (
                "graddiff", "npo", "rmu", "sp", "frp") and not veto:
            bf16.append(f"06_attacks/{rec['folder']}")
    chosen = smol.table3_checkpoints
    assert len(bf16) >= 4  # the committed records hold a bf16 Table 3
    assert sorted(chosen[chosen.weights.eq("bf16")].run) == sorted(bf16)
    listing = smol.built[paper.TABLE3_EXTENDED_CHECKPOINTS]
    for rec in fr:
        row = rec["results"]["row"]
        model = _record("05_unlearn", row["unlearned_run"])["results"]["row"]
        in_listing = listing[listing.run.eq(f"06_attacks/{rec['folder']}")]
        if model["method"] == "gold":
            assert not len(in_listing)
            continue
        healthy = row["model_utility_before"] >= 0.5 * model["target_model_utility"]
        assert list(in_listing.reason) == (["included"] if healthy else ["Model Utility below 0.5 x target's"])
    extended = smol.built[paper.TABLE3_EXTENDED]
    for weights, g in listing.groupby("weights"):
        included = int(g.reason.eq("included").sum())
        rows = extended[extended.weights.eq(weights) & extended.subset.eq("all")] if len(extended) else extended
        assert list(rows.n.unique()) == ([included] if included >= 4 else [])


def test_the_share_recovered_is_each_seeds_delta_over_what_was_forgotten_read_from_the_records(smol):
    chosen = smol.table3_checkpoints
    chosen = chosen[chosen.weights.eq("bf16")]
    # every forget+retain attack of a checkpoint, at any seed, straight from the 06 records
    shares = {}
    for folder in sorted((paths.RUNS_DIR / "06_attacks").glob("smol.table1*")):
        if not _complete(folder, "06_attacks"):
            continue
        rec = json.loads((folder / "results.json").read_text())
        row = rec["results"]["row"]
        if row["attack_data"] != "forget_retain":
            continue
        target_es = _record("05_unlearn", row["unlearned_run"])["results"]["row"]["target_es"]
        shares.setdefault(row["unlearned_run"], []).append(
            (row["es_after"] - row["es_before"]) / (target_es - row["es_before"]))
    assert len(chosen) >= 4
    for r in chosen.itertuples():
        assert sorted(r.recovered_seeds) == pytest.approx(sorted(shares[r.unlearned_run]), abs=1e-12)
    means = [sum(shares[u]) / len(shares[u]) for u in chosen.unlearned_run]
    got = smol.built[paper.TABLE3_RECOVERED].set_index(["weights", "subset", "predictor"])
    got = got.loc[("bf16", "all", "FRAG_x100")]
    assert got.rho == pytest.approx(stats.spearman(list(chosen.FRAG_x100), means))


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
    assert not set(Records("smol").stale) & attacked
    file = copied_runs / "05_unlearn" / NPO / "results.json"
    rec = json.loads(file.read_text())
    rec["results"]["row"]["l2_all"] += 1.0  # the redone model's weights moved elsewhere
    file.write_text(json.dumps(rec))
    rec = Records("smol")
    assert attacked <= set(rec.stale)
    assert not set(paper.grid_rows(rec)[0].run) & attacked


def test_a_rerun_with_other_parameters_is_the_users_and_a_copy_of_a_grid_run_is_not(copied_runs):
    attacks_, methods = grid_chapter.other_runs(Records("smol")).values()
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
    unlearned = copied_runs / "05_unlearn" / "mine_lr_1e-4"  # and an unlearning run at another rate
    shutil.copytree(copied_runs / "05_unlearn" / NPO, unlearned)
    rec = json.loads((unlearned / "results.json").read_text())
    rec["provenance"]["params"]["lr"] = 1e-4
    (unlearned / "results.json").write_text(json.dumps(rec))
    built = grid_chapter.other_runs(Records("smol"))
    attacks_, methods = built.values()
    assert list(attacks_.run) == ["06_attacks/mine_lr_1e-4"] and list(methods.run) == ["05_unlearn/mine_lr_1e-4"]
    mine = attacks_.iloc[0]
    assert mine.delta_es == 0.5 and mine.lr == 1e-4 and mine.model == "NPO"
    assert mine.grid_delta_es == _record("06_attacks", folder, copied_runs)["results"]["row"]["delta_es"]
    for table, frame in built.items():  # as notebook 09 writes them: the README's recipe ends there
        shown, _ = book.for_the_eye(frame, table)
        assert len(shown.columns) <= book.MAX_COLUMNS and "lr" in shown and "model" in shown


def test_a_seed_repeat_must_be_the_same_attack_at_a_new_seed():
    _same_attack_but_the_seed = paper.same_attack_but_the_seed

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


def _fake_record(root, notebook, spec, source_folder, row=None, made=None):
    """A record of a planned run, made from a committed one: the run's own parameters, the source's
    executed notebook, and the given row and ``made`` values over the source's."""
    src = json.loads((root / notebook / source_folder / "results.json").read_text())
    src["provenance"]["params"] = dict(spec.params)
    src["results"]["row"].update(row or {})
    if "unlearned_run" in src["results"]:
        src["results"]["unlearned_run"] = spec.params.get("unlearned_run", "")
    if made is not None:
        src["results"]["made"] = {**src["results"].get("made", {}), **made}
    folder = root / notebook / spec.name
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(src))
    shutil.copy(root / notebook / source_folder / f"{notebook}.ipynb", folder / f"{notebook}.ipynb")


FRP = "smol.table1__forget_split=forget10__frp_veto=0__method=frp__prune_precision=fp32__weights=bf16"


def test_ablations_and_controls_set_each_model_beside_the_grids_frp(copied_runs):
    from frag_utils import runs

    # the ablations' and controls' own records (committed as the grid lands) out, the test's in
    for notebook, name in (("05_unlearn", recorded.ABLATIONS_05), ("05_unlearn", recorded.CONTROLS_05),
                           ("06_attacks", recorded.ABLATIONS_06), ("06_attacks", recorded.CONTROLS_06)):
        for spec in runs.plan_run(notebook, PARAMS / name):
            shutil.rmtree(copied_runs / notebook / spec.name, ignore_errors=True)
    assert all(not len(t) for t in controls.ablations(Records("smol")).values())  # nothing of their own yet
    planned = runs.plan_run("05_unlearn", PARAMS / recorded.ABLATIONS_05)

    def ablation(**params):
        return next(s for s in planned if all(s.params[k] == v for k, v in params.items()))

    sparse, lam, magnitude = (ablation(sparsity=0.01), ablation(frp_lam=0.1, sparsity=0.0),
                              ablation(frp_variant="magnitude"))
    _fake_record(copied_runs, "05_unlearn", sparse, FRP, row={"es": 0.5, "l2_all": 100.0}, made={"sparsity": 0.01})
    _fake_record(copied_runs, "05_unlearn", lam, FRP, made={"lam": 0.1})
    _fake_record(copied_runs, "05_unlearn", magnitude, FRP, made={"lam": None, "variant": "magnitude"})
    attack = next(s for s in runs.plan_run("06_attacks", PARAMS / recorded.ABLATIONS_06)
                  if s.params["unlearned_run"] == sparse.name)
    frp_attack = next(r["folder"] for r in _attack_records(copied_runs, "forget_retain")
                      if r["provenance"]["params"]["unlearned_run"] == FRP)
    _fake_record(copied_runs, "06_attacks", attack, frp_attack,
                 row={"unlearned_run": sparse.name, "attack_data": "retain", "delta_es": 0.123, "l2_all": 100.0})
    tables = controls.ablations(Records("smol"))
    t = tables[controls.SPARSITY_]
    assert list(t.sparsity) == [0.01, 0.03] and list(t.es) == [0.5, _record("05_unlearn", FRP)["results"]["row"]["es"]]
    assert t.delta_es.iloc[0] == 0.123 and t.attack_run.iloc[0] == f"06_attacks/{attack.name}"
    assert list(tables[controls.LAMBDA]["lambda"]) == [0.05, 0.1]  # the centre, then the sweep's run
    assert list(tables[controls.SCORING].variant) == ["magnitude", "released"]  # alphabetical

    planned_controls = runs.plan_run("05_unlearn", PARAMS / recorded.CONTROLS_05)
    noise = next(s for s in planned_controls if s.params["method"] == "noise" and s.params["noise_scale"] == 1.0)
    at_budget = next(s for s in planned_controls if s.params["method"] == "sp" and not s.params["match_l2_run"])
    assert noise.params["match_l2_run"] == FRP and at_budget.params["sparsity"] == 0.025
    _fake_record(copied_runs, "05_unlearn", noise, FRP, row={"method": "noise", "FRAG_x100": 0.01})
    tables = controls.controls(Records("smol"))
    table = tables[controls.NOISE]
    assert list(table.model) == ["FRP (P 0)", "noise (1x FRP's L2)"]
    grid_attack = _record("06_attacks", frp_attack, copied_runs)["results"]["row"]
    assert table.forget_retain_delta_es.iloc[0] == grid_attack["delta_es"]
    assert table.forget_retain_delta_es.isna().iloc[1]
    assert not len(tables[controls.MATCHED])  # no FRP of the sweep at the grid SP's 5 % yet
    budget = ablation(frp_lam=0.05, sparsity=0.05)
    _fake_record(copied_runs, "05_unlearn", budget, FRP, row={"l2_all": 300.0}, made={"sparsity": 0.05})
    matched = controls.controls(Records("smol"))[controls.MATCHED]
    sp = _record("05_unlearn", "smol.table1__forget_split=forget10__method=sp__prune_precision=bf16__weights=bf16",
                 copied_runs)["results"]["row"]
    assert list(matched.matched) == ["sparsity"] and matched.frp_sparsity.iloc[0] == matched.sp_sparsity.iloc[0] == 0.05
    assert matched.l2_gap_pct.iloc[0] == pytest.approx(100 * (sp["l2_all"] / 300.0 - 1))


def test_the_attack_precision_table_sets_each_fp32_attack_beside_the_same_models_bf16_attacks(copied_runs):
    from frag_utils import runs

    planned = [s for f in recorded.ATTACK_PRECISION_06 for s in runs.plan_run("06_attacks", PARAMS / f)]
    for spec in planned:  # the files' own records (committed as they land) out, the test's in
        shutil.rmtree(copied_runs / "06_attacks" / spec.name, ignore_errors=True)
    assert not len(controls.attack_precision(Records("smol")))
    assert all(s.params["weights"] == "fp32" and s.params["attack_data"] == "forget_retain" for s in planned)
    assert sorted(s.params["forget_split"] for s in planned) == sorted(["forget01", "forget05", "forget10"] * 7)
    npo = next(s for s in planned if s.params["unlearned_run"] == NPO)
    grid = {r["provenance"]["params"]["unlearned_run"]: r for r in _attack_records(copied_runs, "forget_retain")}
    _fake_record(copied_runs, "06_attacks", npo, grid[NPO]["folder"],
                 row={"delta_es": 0.456, "model_utility_after": 0.2})
    t = controls.attack_precision(Records("smol")).set_index(["forget_split", "model"])
    methods = ["GA", "GradDiff", "NPO", "RMU", "SP", "FRP (P 0)", "FRP (P 0.15)"]
    assert list(t.loc["forget10"].index) == list(t.loc["mean"].index) == methods
    assert t.loc[("forget10", "NPO"), "delta_es_fp32"] == 0.456
    assert t.loc[("forget10", "NPO"), "model_utility_after_fp32"] == 0.2
    assert t.delta_es_fp32.notna().sum() == 1  # the one fp32 attack recorded; no mean over one split of three
    # the bf16 column: the grid's own attack of the model; its seeds: that one and every repeat, read slowly
    bf16 = grid[NPO]["results"]["row"]
    assert t.loc[("forget10", "NPO"), "delta_es_bf16"] == bf16["delta_es"]
    repeats = [json.loads(f.read_text())["results"]["row"]["delta_es"]
               for f in sorted((copied_runs / "06_attacks").glob("smol.table1_seeds*/results.json"))
               if json.loads(f.read_text())["provenance"]["params"]["unlearned_run"] == NPO]
    assert repeats and t.loc[("forget10", "NPO"), "delta_es_bf16_seeds"] == [round(d, 3) for d in [bf16["delta_es"],
                                                                                                 *repeats]]
    # every row: the grid's own bf16 attack of its model, and the fp32 set's model of the same split,
    # method and veto (its name with the fp32 settings) under its own attack, read slowly
    rows = t.drop(index="mean", level="forget_split")
    assert len(rows) == 21
    for run, bf16_delta, twin_delta in zip(rows.run, rows.delta_es_bf16, rows.fp32_set_delta_es):
        name = run.split("/", 1)[1]
        twin = name.replace("weights=bf16", "weights=fp32").replace("prune_precision=bf16", "prune_precision=fp32")
        assert bf16_delta == grid[name]["results"]["row"]["delta_es"]
        assert twin_delta == grid[twin]["results"]["row"]["delta_es"]
    # a mean over the three splits, read slowly from each split's bf16 attack
    rmu_runs = [u for u in grid if "method=rmu__rmu_coeff=200__weights=bf16" in u]
    assert len(rmu_runs) == 3
    assert t.loc[("mean", "RMU"), "delta_es_bf16"] == pytest.approx(
        sum(grid[u]["results"]["row"]["delta_es"] for u in rmu_runs) / 3)
    # a split whose bf16 attack is not recorded leaves its row blank and the method's mean blank
    shutil.rmtree(copied_runs / "06_attacks" / grid[rmu_runs[0]]["folder"])
    t = controls.attack_precision(Records("smol")).set_index(["forget_split", "model"])
    split = grid[rmu_runs[0]]["provenance"]["params"]["forget_split"]
    assert pd.isna(t.loc[(split, "RMU"), "delta_es_bf16"]) and pd.isna(t.loc[("mean", "RMU"), "delta_es_bf16"])


def test_the_frontier_chooses_its_attacks_by_the_unlearning_records_and_collects_them(copied_runs, tmp_path,
                                                                                       monkeypatch):
    """The healthy rules read off each checkpoint's record by hand, the attack plan holds exactly the
    healthy ones at both seeds, and the collected table sets each checkpoint's seeds beside it."""
    from frag_utils import metrics, runs
    params = tmp_path / "params"
    shutil.copytree(paths.PARAMS_DIR, params)
    monkeypatch.setattr(paths, "PARAMS_DIR", params)
    every = runs.plan_run("05_unlearn", params / "smol" / recorded.FRONTIER_05)
    planned = [s for s in every if s.params["forget_split"] == "forget10"]
    for spec in every:  # the file's own records, every split's (committed as they land), out; the test's in
        shutil.rmtree(copied_runs / "05_unlearn" / spec.name, ignore_errors=True)
    for folder in (copied_runs / "06_attacks").glob("smol.frontier*"):  # and their attacks
        shutil.rmtree(folder)
    source = {"ga": "smol.table1__forget_split=forget10__grad_accum=1__lr=5e-05__method=ga__weights=fp32",
              "sp": "smol.table1__forget_split=forget10__method=sp__prune_precision=fp32__weights=fp32",
              "frp": "smol.table1__forget_split=forget10__frp_veto=0__method=frp__prune_precision=fp32__weights=fp32"}
    target = _record("05_unlearn", source["ga"], copied_runs)["results"]["evaluation"]["target"]
    target_mu = target["model_utility"]
    # (method, es, a scale for every utility part, the fragile part's value)
    cases = [("ga", 0.30, 1.0, None), ("ga", 0.85, 1.0, None),  # healthy; forgets too little (target ES 0.887)
             ("sp", 0.40, 1.0, 0.0), ("frp", 0.20, 0.2, None),  # fragile part 0: healthy by parts only; collapsed
             ("frp", 0.35, 0.9, None), ("sp", 0.50, 1.1, None), ("ga", 0.25, 1.05, None)]
    chosen = []
    for method, es, scale, fragile in cases:
        spec = next(s for s in planned if s.params["method"] == method and s not in chosen)
        chosen.append(spec)
        src = json.loads((copied_runs / "05_unlearn" / source[method] / "results.json").read_text())
        parts = {k: min(1.0, target[k] * scale) for k in analysis.UTILITY_PARTS}
        if fragile is not None:
            parts[analysis.FRAGILE_PART] = fragile
        src["results"]["evaluation"]["unlearned"].update(parts)
        src["results"]["row"].update(es=es, model_utility=metrics.harmonic_mean(list(parts.values())))
        src["provenance"]["params"] = dict(spec.params)
        folder = copied_runs / "05_unlearn" / spec.name
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(src))
        shutil.copy(copied_runs / "05_unlearn" / source[method] / "05_unlearn.ipynb", folder)
    models = frontier.candidates(Records("smol")).set_index("run")
    for spec, (_, es, scale, fragile) in zip(chosen, cases):
        m = models.loc[f"05_unlearn/{spec.name}"]
        forgets = es <= target["es"] - 0.1
        mu_ok = metrics.harmonic_mean([min(1.0, target[k] * scale) if k != analysis.FRAGILE_PART or fragile is None
                                       else fragile for k in analysis.UTILITY_PARTS]) >= 0.5 * target_mu
        wo = [k for k in analysis.UTILITY_PARTS if k != analysis.FRAGILE_PART]
        parts_ok = (metrics.harmonic_mean([min(1.0, target[k] * scale) for k in wo])
                    >= 0.5 * metrics.harmonic_mean([target[k] for k in wo]))
        assert (m.forgets, m.healthy_paper, m.healthy_parts) == (forgets, forgets and mu_ok, forgets and parts_ok)
    mine = models.loc[[f"05_unlearn/{s.name}" for s in chosen]]
    assert list(mine.healthy_paper) == [True, False, False, False, True, True, True]
    assert list(mine.healthy_parts) == [True, False, True, False, True, True, True]

    plan = _script("plan_frontier_attacks").frontier_attacks(Records("smol"), "forget10")
    healthy = [s.name for s in planned if s in chosen and models.loc[f"05_unlearn/{s.name}", "healthy_parts"]]
    assert [(e["unlearned_run"], e["seed"]) for e in plan] == [(n, s) for s in (42, 1) for n in healthy]
    grid_attack = yaml.safe_load((params / "smol" / recorded.GRID_06).read_text())[0]
    assert all(e["lr"] == grid_attack["lr"] and e["attack_data"] == "forget_retain" for e in plan)
    (params / "smol" / recorded.FRONTIER_06[0]).write_text(yaml.safe_dump(plan))
    attack_source = next(r["folder"] for r in _attack_records(copied_runs, "forget_retain"))
    deltas = {}
    for i, spec in enumerate(runs.plan_run("06_attacks", params / "smol" / recorded.FRONTIER_06[0])):
        deltas.setdefault(spec.params["unlearned_run"], []).append(0.1 + 0.05 * i)
        unlearned = _record("05_unlearn", spec.params["unlearned_run"], copied_runs)["results"]["row"]
        _fake_record(copied_runs, "06_attacks", spec, attack_source,
                     row={"unlearned_run": spec.params["unlearned_run"], "delta_es": 0.1 + 0.05 * i,
                          "FRAG_x100": unlearned["FRAG_x100"], "l2_all": unlearned["l2_all"]})
    out = book.Book("smol", n_boot=50).chapter(frontier, display=False)
    listing = out["frontier_models"].set_index("run")
    for name, ds in deltas.items():
        row = listing.loc[f"05_unlearn/{name}"]
        es = models.loc[f"05_unlearn/{name}", "es"]
        assert row.delta_es == [round(d, 3) for d in ds] and row.attack_seeds == 2
        assert row.recovered == pytest.approx(sum(ds) / 2 / (target["es"] - es))
    assert listing.attack_seeds.sum() == 2 * len(healthy)
    t3 = out["frontier_table3"]
    assert set(t3.rule) == {"paper", "parts"}
    assert t3[t3.rule.eq("parts") & t3.subset.eq("all")].n.eq(len(healthy)).all()
    assert t3[t3.rule.eq("paper") & t3.subset.eq("all")].n.eq(len(healthy) - 1).all()
    # the share recovered in place of ΔES: ρ against each checkpoint's mean share over its seeds
    rec = out["frontier_recovered"].set_index(["rule", "subset", "predictor"]).loc[("parts", "all", "l2_all")]
    share = {n: sum(ds) / 2 / (target["es"] - models.loc[f"05_unlearn/{n}", "es"]) for n, ds in deltas.items()}
    l2 = {n: _record("05_unlearn", n, copied_runs)["results"]["row"]["l2_all"] for n in deltas}
    assert rec.rho == pytest.approx(stats.spearman([l2[n] for n in deltas], [share[n] for n in deltas]))
    parts = out["frontier_utility_parts"]
    assert parts.model.iloc[0] == "target" and len(parts) == 1 + len(cases)
    import matplotlib.pyplot as plt

    from frag_utils.report import plots

    fig = plots.frontier_panels(out["frontier_models"], t3)  # FRAG's gap and global L2, the paper's rule
    paper = t3[t3.rule.eq("paper") & t3.subset.eq("all")].set_index("predictor")
    assert len(fig.axes) == 2 and f"ρ {paper.loc['FRAG_x100'].rho:+.2f}" in fig.axes[0].get_title()
    assert f"{len(healthy) - 1} checkpoints" in fig.texts[0].get_text()  # the suptitle
    plt.close(fig)
    said = out["headline_verdict"]  # the README's answer: the same numbers, in words
    assert said.startswith("**Not resolved:**") == (paper.loc["FRAG_x100"].low <= 0 <= paper.loc["FRAG_x100"].high)
    assert f"{paper.loc['FRAG_x100'].rho:+.2f} [{paper.loc['FRAG_x100'].low:+.2f}" in said
    # ρ(L2) − ρ(FRAG) over the paper-healthy checkpoints, the slow way: each ρ against the mean ΔES over seeds
    chosen = [n for n in deltas if models.loc[f"05_unlearn/{n}", "healthy_paper"]]
    frag_x100 = {n: _record("05_unlearn", n, copied_runs)["results"]["row"]["FRAG_x100"] for n in chosen}
    mean = [sum(deltas[n]) / len(deltas[n]) for n in chosen]
    gap = (stats.spearman([_record("05_unlearn", n, copied_runs)["results"]["row"]["l2_all"] for n in chosen], mean)
           - stats.spearman([frag_x100[n] for n in chosen], mean))
    assert f"FRAG's advantage, ρ(L2) − ρ(FRAG), is {gap:+.2f} [" in said

    # notebook 07 over the attacked checkpoints (scripts/plan_frontier_attacks.py's file): the barrier
    # table counts each family's bumps, and FRAG with each importance term gets Table 3's intervals
    assert not len(out["frontier_lmc"]) and not len(out["frontier_importance"])  # no 07 record yet
    attacked = list(deltas)
    (params / "smol" / recorded.FRONTIER_07[0]).write_text(yaml.safe_dump([  # as plan_frontier_attacks.py writes it
        {"profile": "smol", **_script("plan_frontier_attacks").FRONTIER_ABLATION, "forget_split": "forget10",
         "unlearned_runs": ",".join(attacked)}]))
    (spec_07,) = runs.plan_run("07_ablations", params / "smol" / recorded.FRONTIER_07[0])
    method = {n: _record("05_unlearn", n, copied_runs)["results"]["row"]["method"] for n in attacked}
    barrier = {n: (0.2 + 0.1 * i if method[n] == "sp" else 1e-5 * i) for i, n in enumerate(attacked)}
    frag_05 = {n: _record("05_unlearn", n, copied_runs)["results"]["row"]["FRAG_x100"] for n in attacked}
    scores = [{"unlearned_run": n, "importance": kind, "FRAG_x100": value}
              for n in attacked for kind, value in (("activation", frag_05[n]), ("fisher", -frag_05[n]))]
    spec_07.out_dir.mkdir(parents=True)
    (spec_07.out_dir / "results.json").write_text(json.dumps({
        "provenance": {"params": dict(spec_07.params)},
        "results": {"scores": scores, "barrier": [{"unlearned_run": n, "barrier": b} for n, b in barrier.items()]}}))
    shutil.copy(paths.NOTEBOOKS_DIR / "07_ablations.ipynb", spec_07.executed)
    out = book.Book("smol", n_boot=50).chapter(frontier, display=False)
    lmc = out["frontier_lmc"].set_index("family")
    family = {n: "SP" if m == "sp" else "FRP" if m == "frp" else "dense" for n, m in method.items()}
    for name in set(family.values()):
        mine = [barrier[n] for n in attacked if family[n] == name]
        assert lmc.loc[name, "checkpoints"] == len(mine)
        assert lmc.loc[name, "with_a_bump"] == sum(b > analysis.BARRIER_BUMP for b in mine)
        assert lmc.loc[name, "barrier_max"] == pytest.approx(max(mine))
    imp = out["frontier_importance"].set_index(["rule", "subset", "importance"])
    assert set(imp.score) == {"FRAG gap (Eq. 5)"}  # the constructed records carry FRAG alone
    frag_rows = t3.set_index(["rule", "subset", "predictor"])
    for (rule, subset, kind), row in imp.iterrows():
        # activation: the 05 FRAG itself; fisher: its negative
        same = frag_rows.loc[(rule, subset, "FRAG_x100")]
        assert row.rho == pytest.approx(same.rho if kind == "activation" else -same.rho)
        assert row.requires == ("forward" if kind == "activation" else "backward")
    assert set(imp.index.get_level_values("importance")) == {"activation", "fisher"}


def test_the_second_target_sets_each_table3_checkpoint_beside_its_twin_from_the_other_target(copied_runs):
    """The target's training seed, read slowly: the seeds' spread of each judged number of notebook 02, and each
    forget10 Table 3 checkpoint beside the same method unlearned from the seed-43 target."""
    from frag_utils import drift, runs

    for name in ("smol.seeds__seed=43", "smol.seeds__seed=44"):  # the seeds' own records (as they land) out
        shutil.rmtree(copied_runs / "02_target_and_gold" / name, ignore_errors=True)
    planned_05 = runs.plan_run("05_unlearn", PARAMS / recorded.SECOND_TARGET_05)
    planned_06 = runs.plan_run("06_attacks", PARAMS / recorded.SECOND_TARGET_06)
    for notebook, specs in (("05_unlearn", planned_05), ("06_attacks", planned_06)):
        for spec in specs:
            shutil.rmtree(copied_runs / notebook / spec.name, ignore_errors=True)
    checkpoints = _book(paper, n_boot=1).table3_checkpoints
    assert not len(targets.target_seeds(Records("smol")))  # one seed: no spread

    # two more seeds of notebook 02: the seed-42 record with the target's forget ES moved
    base = _record("02_target_and_gold", "smol", copied_runs)
    es = {42: base["results"]["evaluation"]["target"]["es"], 43: 0.95, 44: 0.90}
    for seed in (43, 44):
        folder = copied_runs / "02_target_and_gold" / f"smol.seeds__seed={seed}"
        folder.mkdir()
        rec = json.loads(json.dumps(base))
        rec["results"]["evaluation"]["target"]["es"] = es[seed]
        (folder / "results.json").write_text(json.dumps(rec))
    # the five checkpoints from the seed-43 target: the seed-42 ones' records with their numbers moved
    files = sorted((copied_runs / "05_unlearn").glob("smol.table1__forget_split=forget10__*/results.json"))
    grid_05 = {r["provenance"]["params"]["method"]: r
               for r in (json.loads(f.read_text()) | {"folder": f.parent.name} for f in files)
               if r["provenance"]["params"].get("weights") == "bf16"
               and r["provenance"]["params"].get("frp_veto") != 0.15}
    grid_06 = {r["provenance"]["params"]["unlearned_run"]: r for r in _attack_records(copied_runs, "forget_retain")}
    assert len(planned_05) == len(planned_06) == 5
    for i, (spec, attack) in enumerate(zip(planned_05, planned_06)):
        assert attack.params["unlearned_run"] == spec.name
        twin = grid_05[spec.params["method"]]
        moved = {"target_es": 0.95, "FRAG_x100": twin["results"]["row"]["FRAG_x100"] + 1.0,
                 "l2_all": twin["results"]["row"]["l2_all"] * 1.1}
        _fake_record(copied_runs, "05_unlearn", spec, twin["folder"], row=moved)
        _fake_record(copied_runs, "06_attacks", attack, grid_06[twin["folder"]]["folder"],
                     row={**moved, "unlearned_run": spec.name, "delta_es": 0.1 * i})
    seeds = targets.target_seeds(Records("smol")).set_index("number")
    row = seeds.loc["/target/es"]
    assert [row.seed_42, row.seed_43, row.seed_44] == [es[42], 0.95, 0.90]
    assert row["range"] == pytest.approx(0.95 - min(es.values()))
    assert row.sd == pytest.approx(pd.Series(list(es.values())).std())
    def judged(value, path):  # every number of the record under path whose last key the tolerance file judges
        if isinstance(value, dict):
            return [p for k, v in value.items() for p in judged(v, f"{path}/{k}")]
        return [path] if isinstance(value, float) and path.rsplit("/", 1)[-1] in drift.SEED_METRICS else []
    evaluation = base["results"]["evaluation"]
    assert list(seeds.index) == judged(evaluation["target"], "/target") + judged(evaluation["gold"], "/gold")
    assert seeds.loc["/gold/model_utility", "range"] == 0  # the gold model's numbers did not move

    second = targets.second_target(Records("smol"), checkpoints).set_index("model")
    assert list(second.index) == ["GradDiff", "NPO", "RMU", "SP", "FRP (P 0)"]  # the files' order
    # paired by method, not by position: without NPO's seed-43 attack the others keep their twins
    shutil.rmtree(copied_runs / "06_attacks" / planned_06[1].name)
    fewer = targets.second_target(Records("smol"), checkpoints).set_index("model")
    assert list(fewer.index) == ["GradDiff", "RMU", "SP", "FRP (P 0)"]
    assert fewer.drop(columns=[]).equals(second.drop(index="NPO"))
    repeats = [json.loads(f.read_text())
               for f in sorted((copied_runs / "06_attacks").glob("smol.table1_seeds*/results.json"))]
    for i, (spec, model) in enumerate(zip(planned_05, second.index)):
        twin = grid_05[spec.params["method"]]
        first = grid_06[twin["folder"]]["results"]["row"]["delta_es"]
        all_seeds = [first, *[r["results"]["row"]["delta_es"] for r in repeats
                              if r["provenance"]["params"]["unlearned_run"] == twin["folder"]
                              and r["provenance"]["params"]["attack_data"] == "forget_retain"]]
        got = second.loc[model]
        assert got.delta_es_42 == first and got.delta_es_43 == pytest.approx(0.1 * i)
        assert got.delta_es_shift == pytest.approx(0.1 * i - first)
        assert got.attack_seeds_42 == len(all_seeds) == 3
        assert got.attack_seed_range_42 == pytest.approx(max(all_seeds) - min(all_seeds))
        assert got.target_es_43 == 0.95 and got.target_es_42 == twin["results"]["row"]["target_es"]
        assert got.FRAG_x100_43 == pytest.approx(twin["results"]["row"]["FRAG_x100"] + 1.0)
        assert got.l2_all_42 == twin["results"]["row"]["l2_all"]
    sources = targets.second_target(Records("smol"), checkpoints).attrs["source_runs"]
    assert len(sources) == 4 * (2 + 3 + 1) and len(set(sources)) == len(sources)  # two 05 runs, 3 + 1 attacks
    assert {s for s in sources if s.startswith("06_attacks/smol.table1_seeds")} == {
        f"06_attacks/{f.parent.name}" for f in (copied_runs / "06_attacks").glob("smol.table1_seeds*/results.json")
        if json.loads(f.read_text())["provenance"]["params"]["unlearned_run"] in
        {grid_05[s.params["method"]]["folder"] for s in planned_05 if s.params["method"] != "npo"}
        and json.loads(f.read_text())["provenance"]["params"]["attack_data"] == "forget_retain"}


def test_the_attack_variants_run_on_one_healthy_checkpoint_per_method_at_matched_utility(copied_runs, tmp_path,
                                                                                        monkeypatch):
    """The checkpoints chosen the slow way (per method, the healthy one nearest the median utility
    fraction), each plan entry one change of the protocol, and the collected table's means, ranges,
    horizon epochs and worst attack within the utility bound read back from constructed records."""
    import numpy as np

    from frag_utils import runs

    params = tmp_path / "params"
    shutil.copytree(paths.PARAMS_DIR, params)
    monkeypatch.setattr(paths, "PARAMS_DIR", params)
    rec = Records("smol")
    models = frontier.candidates(rec)
    # the paper's methods only: the methods added later leave the variants' choice as it was
    healthy = models[models.healthy_paper & models.forget_split.eq("forget10") & models.method.isin(
        frontier.PAPER_METHODS)]
    assert len(healthy) >= 2
    plan_attack_variants = _script("plan_attack_variants")
    chosen = plan_attack_variants.variant_checkpoints(rec, "forget10")
    median = float(np.median(healthy.model_utility / healthy.target_model_utility))
    for label in set(healthy.model):
        part = [r for r in healthy.itertuples() if r.model == label]
        best = min(part, key=lambda r: abs(r.model_utility / r.target_model_utility - median))  # first on a tie
        assert chosen[label] == best.run.split("/", 1)[1]
    assert list(chosen)[0] == "gold" and "method=gold" in chosen["gold"] and len(chosen) == 1 + len(set(healthy.model))

    plans = plan_attack_variants.attack_variants(rec, "forget10")
    protocol = yaml.safe_load((params / "smol" / recorded.GRID_06).read_text())[0]
    # the target's own protocol attack with multiple choice, at each seed, in a file of its own
    target_plan = plans.pop(variants.MC_TARGET)
    assert [e["seed"] for e in target_plan] == list(plan_attack_variants.SEEDS)
    for e in target_plan:
        assert "unlearned_run" not in e and {k: v for k, v in e.items() if protocol.get(k) != v} == {
            "model": "profile-target", "weights": "fp32", "seed": e["seed"], "eval_mc": True}
    (params / "smol" / variants.variants_file(variants.MC_TARGET, "forget10")).write_text(yaml.safe_dump(target_plan))
    for family, plan in plans.items():
        changes = list(variants.ATTACK_VARIANTS[family]) + ([{}] if family == "attack_lr" else [])  # and the protocol
        # the frontier checkpoints' protocol attacks are the frontier file's, at both seeds: not planned again
        left_to_frontier = len(plan_attack_variants.SEEDS) * (len(chosen) - 1) if family == "attack_lr" else 0
        assert len(plan) == len(plan_attack_variants.SEEDS) * len(chosen) * len(changes) - left_to_frontier
        for e in plan:
            base = {**protocol, "unlearned_run": e["unlearned_run"], "attack_data": "forget_retain", "seed": e["seed"],
                    **({"weights": "fp32"} if e["unlearned_run"] == chosen["gold"] else {})}
            changed = {k: v for k, v in e.items() if base.get(k) != v}
            assert changed in changes, changed
        (params / "smol" / variants.variants_file(family, "forget10")).write_text(yaml.safe_dump(plan))
    assert set(plans) == set(variants.ATTACK_VARIANTS)
    gold = [e for family in plans.values() for e in family if e["unlearned_run"] == chosen["gold"]]
    gold_protocol = [e for e in plans["attack_lr"] if e in gold and e["lr"] == protocol["lr"]]
    assert sorted(e["seed"] for e in gold_protocol) == sorted(plan_attack_variants.SEEDS)
    assert all(e["weights"] == "fp32" for e in gold)  # the grid's gold is stored in bf16: attacked in fp32
    defaults = parameters.notebook_defaults("06_attacks")
    others = {parameters.params_key(s.params, defaults) for f in sorted((params / "smol").glob("06_attacks.*.yaml"))
              if f.name.split(".")[1].split("_forget")[0] not in variants.ATTACK_VARIANTS
              for s in runs.plan_run("06_attacks", f)}
    mine_keys = [parameters.params_key(e, defaults) for family in plans.values() for e in family]
    assert not set(mine_keys) & others and len(set(mine_keys)) == len(mine_keys)  # no run planned twice

    # the variants recorded so far out: this test fakes its own
    for family in [*variants.ATTACK_VARIANTS, variants.MC_TARGET]:
        for folder in (copied_runs / "06_attacks").glob(f"smol.{family}_forget10__*"):
            shutil.rmtree(folder)
    attacked_at_42 = {json.loads(f.read_text())["results"]["unlearned_run"]: f.parent.name
                      for f in (copied_runs / "06_attacks").glob("smol.frontier_forget10*/results.json")
                      if json.loads(f.read_text())["provenance"]["params"]["seed"] == 42}
    label = next(k for k, v in chosen.items() if k != "gold" and v in attacked_at_42)  # a source to copy
    run = chosen[label]
    source = attacked_at_42[run]
    target_mu = _record("05_unlearn", run, copied_runs)["results"]["row"]["target_model_utility"]
    variant_specs = [s for family in plans for s in runs.plan_run(
        "06_attacks", params / "smol" / variants.variants_file(family, "forget10")) if s.params["unlearned_run"] == run]
    defaults = parameters.notebook_defaults("06_attacks")

    def spec_of(seed, change):  # the planned run of one change at one seed
        base = {**defaults, **protocol, "unlearned_run": run, "attack_data": "forget_retain", "seed": seed}
        (spec,) = [s for s in variant_specs if s.params["seed"] == seed
                   and {k: v for k, v in s.params.items() if k != "run_name" and base.get(k) != v} == change]
        return spec

    made = {  # (seed, change) -> (ES after, Model Utility after): lr 4e-4 recovers most but costs the utility
        (42, ("lr", 5e-5)): (0.50, target_mu), (1, ("lr", 5e-5)): (0.60, target_mu),
        (42, ("lr", 4e-4)): (0.99, 0.4 * target_mu), (42, ("optimizer", "adagrad")): (0.70, 0.9 * target_mu)}
    es_before = _record("06_attacks", source, copied_runs)["results"]["row"]["es_before"]
    for (seed, (key, value)), (es, mu) in made.items():
        _fake_record(copied_runs, "06_attacks", spec_of(seed, {key: value}), source,
                     row={"es_after": es, "delta_es": es - es_before, "model_utility_after": mu})
    horizon = spec_of(42, {"epochs": 10, "eval_epochs": "1,2,3,5,10"})
    _fake_record(copied_runs, "06_attacks", horizon, source, row={"es_after": 0.9, "model_utility_after": target_mu})
    rec = json.loads((horizon.out_dir / "results.json").read_text())
    curve = {1: 0.3, 2: 0.4, 3: 0.5, 5: 0.6, 10: 0.9}
    rec["results"]["epochs"] = {str(e): {"es": v, "model_utility": target_mu} for e, v in curve.items()}
    (horizon.out_dir / "results.json").write_text(json.dumps(rec))

    mc = {"mc_forget_acc_before": 0.30, "mc_forget_acc_after": 0.55, "mc_delta_forget_acc": 0.25,
          "mc_utility_acc_before": 0.40, "mc_utility_acc_after": 0.45}
    for seed, shift in ((42, 0.0), (1, 0.1)):  # the protocol's attack again, with multiple choice
        _fake_record(copied_runs, "06_attacks", spec_of(seed, {"eval_mc": True}), source,
                     row={k: v + shift for k, v in mc.items()})
    (target_42, _) = runs.plan_run("06_attacks",
                                   params / "smol" / variants.variants_file(variants.MC_TARGET, "forget10"))
    _fake_record(copied_runs, "06_attacks", target_42, source,  # the target: no 05 run, one seed recorded
                 row={"unlearned_run": "", "method": "target", **{k: v + 0.2 for k, v in mc.items()}})

    out = book.Book("smol").chapter(variants, display=False)
    choice = out["multiple_choice"].set_index("model")
    assert list(choice.index)[0] == "target" and choice.loc["target", "seeds"] == 1
    assert all(choice.loc["target", k] == pytest.approx(v + 0.2) for k, v in mc.items())
    choice = choice.loc[label]
    assert choice.seeds == 2 and choice.chance == 0.25
    assert all(choice[k] == pytest.approx(v + 0.05) for k, v in mc.items())
    table = out["attack_variants"]
    assert not table.family.eq("multiple_choice").any()
    mine = table[table.model.eq(label)].set_index(["family", "variant"])
    row = mine.loc[("attack_lr", "lr 5e-05")]
    assert (row.seeds, row.es_after, row.es_after_range) == (2, pytest.approx(0.55), pytest.approx(0.10))
    assert row.delta_es == pytest.approx(0.55 - es_before)
    protocol_runs = [json.loads(f.read_text()) for f in (copied_runs / "06_attacks").glob("smol.frontier_forget10*/"
                                                                                          "results.json")]
    protocol_es = [r["results"]["row"]["es_after"] for r in protocol_runs if r["results"]["unlearned_run"] == run]
    protocol_row = mine.loc[("attack_lr", "protocol")]
    assert protocol_row.seeds == len(protocol_es) and protocol_row.es_after == pytest.approx(np.mean(protocol_es))
    protocol_retain = [r["results"]["row"]["es_retain_after"] for r in protocol_runs
                       if r["results"]["unlearned_run"] == run]  # retain ES after, the mean over seeds too
    assert protocol_row.es_retain_after == pytest.approx(np.mean(protocol_retain))
    assert mine.loc[("attack_lr", "before the attack")].es_after == pytest.approx(es_before)
    assert mine.loc[("attack_lr", "before the attack")].es_retain_after == pytest.approx(
        _record("06_attacks", source, copied_runs)["results"]["before"]["es_retain"])
    for epoch, es in curve.items():
        row = mine.loc[("attack_horizon", f"epochs 10, after epoch {epoch}")]
        assert row.es_after == pytest.approx(es) and row.delta_es == pytest.approx(es - es_before)
        assert row.seeds == 1 and np.isnan(row.es_after_range)
    # the worst attack within the bound, the slow way: lr 4e-4 (0.99) costs too much utility
    candidates = {"lr 5e-05": 0.55, "optimizer adagrad": 0.70,
                  **{f"epochs 10, after epoch {e}": v for e, v in curve.items()}}
    protocol_mu = [r["results"]["row"]["model_utility_after"] for r in protocol_runs
                   if r["results"]["unlearned_run"] == run]
    if np.mean(protocol_mu) >= variants.UTILITY_BOUND * target_mu:
        candidates["protocol"] = float(np.mean(protocol_es))
    worst = out["attack_worst"].set_index("model").loc[label]
    assert worst.variant == max(candidates, key=candidates.get)
    assert worst.es_after == pytest.approx(max(candidates.values()))
    # the protocol, the horizon's epochs, lr 5e-5, Adagrad and lr 4e-4
    assert worst.attacks_within_bound == len(candidates) and worst.attacks == 1 + len(curve) + 3
    others = out["attack_worst"].set_index("model").drop(index=label)  # the frontier's protocol attacks only
    attacked_runs = {r["results"]["unlearned_run"] for r in protocol_runs}
    assert set(others.index) == {k for k, v in chosen.items() if k != label and v in attacked_runs}
    assert others.attacks.eq(1).all()
    assert others.variant.isin(["protocol", None]).all()
    assert ("attack_lr", "lr 0.0004") in mine.index and mine.loc[("attack_lr", "lr 0.0004")].es_after == 0.99


def test_table3s_checkpoints_get_the_barrier_and_each_importance_term_from_their_07_run(copied_runs):
    """The paper's importance_variants on its 15 checkpoints: a constructed notebook-07 record of the
    forget10 file scores the five forget10 checkpoints (activation: the 05 record's FRAG; fisher: its
    negative); the ρ against each checkpoint's mean ΔES over its seeds, computed here from the 06
    records, and the barrier table, read slowly."""
    from frag_utils import runs

    checkpoints = _book(paper).table3_checkpoints
    no_07 = controls.table3_ablations(Records("smol"), checkpoints, n_boot=20)
    assert not any(len(t) for t in no_07.values())  # no 07 record yet
    (spec,) = runs.plan_run("07_ablations", PARAMS / recorded.TABLE3_07[0])
    scored = spec.params["unlearned_runs"].split(",")
    rows = {n: _record("05_unlearn", n, copied_runs)["results"]["row"] for n in scored}
    assert len(scored) == 5 and {r["forget_split"] for r in rows.values()} == {"forget10"}
    assert {r["method"] for r in rows.values()} == {"graddiff", "npo", "rmu", "sp", "frp"}
    barrier = {n: (0.3 if rows[n]["method"] == "sp" else 1e-6) for n in scored}
    spec.out_dir.mkdir(parents=True)
    (spec.out_dir / "results.json").write_text(json.dumps({
        "provenance": {"params": dict(spec.params)},
        "results": {"scores": [{"unlearned_run": n, "importance": kind, "FRAG_x100": sign * rows[n]["FRAG_x100"],
                                "A_f_x100": sign * rows[n]["A_f_x100"]}
                               for n in scored for kind, sign in (("activation", 1), ("fisher", -1))],
                    "barrier": [{"unlearned_run": n, "barrier": b} for n, b in barrier.items()]}}))
    shutil.copy(paths.NOTEBOOKS_DIR / "07_ablations.ipynb", spec.executed)
    out = controls.table3_ablations(Records("smol"), checkpoints, n_boot=20)
    # each checkpoint's ΔES at every seed of its forget+retain attacks, straight from the 06 records
    deltas = {}
    for folder in sorted((copied_runs / "06_attacks").glob("smol.table1*")):
        row = json.loads((folder / "results.json").read_text())["results"]["row"]
        if row["attack_data"] == "forget_retain" and row["unlearned_run"] in rows:
            deltas.setdefault(row["unlearned_run"], []).append(row["es_after"] - row["es_before"])
    mean = {n: sum(d) / len(d) for n, d in deltas.items()}
    imp = out[controls.TABLE3_IMPORTANCE].set_index(["subset", "score", "importance"])
    for subset, names in (("all", scored), ("w/o FRP", [n for n in scored if rows[n]["method"] != "frp"])):
        for column, score in analysis.IMPORTANCE_SCORES.items():  # the FRAG gap and cos(F, ΔW²) alone
            rho = stats.spearman([rows[n][column] for n in names], [mean[n] for n in names])
            assert imp.loc[(subset, score, "activation"), "rho"] == pytest.approx(rho)
            assert imp.loc[(subset, score, "fisher"), "rho"] == pytest.approx(-rho)
            assert imp.loc[(subset, score, "activation"), "n"] == len(names)
    assert imp.loc[("all", "cos(F, ΔW²)", "fisher"), "requires"] == "backward"
    assert imp.loc[("all", "FRAG gap (Eq. 5)", "activation"), "paper_1B"] == analysis.PAPER_IMPORTANCE_RHO["activation"]
    lmc = out[controls.TABLE3_LMC].set_index("family")
    assert lmc.loc["SP", "with_a_bump"] == 1 and lmc.loc["dense", "checkpoints"] == 3
    assert lmc.loc["dense", "with_a_bump"] == lmc.loc["FRP", "with_a_bump"] == 0


def test_table1s_claims_take_each_attack_at_the_mean_over_its_seeds(copied_runs):
    """The claim rows' attacks repeated at seed 1 (06_attacks.table1_margin_seeds.yaml), FRP's with
    ΔES 0.2 higher and GradDiff's 0.04 lower: in the claims each is the mean over the two seeds (0.1
    above and 0.02 below seed 42's average over the splits), the seed spread widens to FRP's 0.2,
    and the claims say how many seeds FRP has (three for forget+retain: Table 3's repeats)."""
    from frag_utils import runs

    grid_specs = {(s.params["unlearned_run"], s.params["attack_data"]): s
                  for s in runs.plan_run("06_attacks", PARAMS / recorded.GRID_06)}
    for spec in runs.plan_run("06_attacks", PARAMS / recorded.MARGIN_SEEDS_06):  # the recorded ones out: seed 42 alone
        shutil.rmtree(copied_runs / "06_attacks" / spec.name, ignore_errors=True)
    before = _table1_claims().set_index(["weights", "attack"])
    repeated = [s for s in runs.plan_run("06_attacks", PARAMS / recorded.MARGIN_SEEDS_06) if s.params["seed"] == 1]
    assert len(repeated) == 12 and {s.params["attack_data"] for s in repeated} == {"retain", "forget"}
    for spec in repeated:
        source = grid_specs[(spec.params["unlearned_run"], spec.params["attack_data"])].name
        row = _record("06_attacks", source, copied_runs)["results"]["row"]
        shift = 0.2 if "method=frp" in spec.params["unlearned_run"] else -0.04
        _fake_record(copied_runs, "06_attacks", spec, source,
                     row={"delta_es": row["delta_es"] + shift, "es_after": row["es_after"] + shift})
    after = _table1_claims().set_index(["weights", "attack"])
    for attack in ("retain", "forget"):
        frp_before, rest_before = before.loc[("bf16", attack), "ours_delta_es"].split(" vs ")
        frp_after, rest_after = after.loc[("bf16", attack), "ours_delta_es"].split(" vs ")
        assert float(frp_after) == pytest.approx(float(frp_before) + 0.1, abs=1.5e-3)
        assert rest_before.endswith("(GradDiff)") and rest_after.endswith("(GradDiff)")
        assert float(rest_after.split()[0]) == pytest.approx(float(rest_before.split()[0]) - 0.02, abs=1.5e-3)
        assert after.loc[("bf16", attack), "frp_attack_seeds"] == 2
        # the ΔES margin, about 0.1, is named inside the spread (with ES's where that is inside too)
        assert re.search(r"not resolved (for ΔES )?\(margin (ES [.0-9]+ and ΔES )?0\.10\d, inside",
                         after.loc[("bf16", attack), "verdict"])
        assert "inside the attack-seed spread 0.200)" in after.loc[("bf16", attack), "verdict"]
    assert after.loc[("bf16", "forget_retain"), "frp_attack_seeds"] == 3
    same = ("bf16", "forget_retain")
    assert after.loc[same, "ours_delta_es"] == before.loc[same, "ours_delta_es"]


def test_every_notebook_07_record_scores_with_the_activation_norms_what_notebook_05_recorded():
    """Notebook 07 rebuilds FRAG from the original, the calibration and each checkpoint; with the
    activation norms and the calibration notebook 05 used (the same original, split, data, number,
    length and batch of calibration sequences, gamma), it must give every checkpoint the FRAG,
    cos(F, ΔW²), cos(R, ΔW²) and global L2 of that checkpoint's 05 record (read the slow way, json
    by json): to the bit where both ran at one commit on one kernel path, else within the tolerance
    file (a remade checkpoint). The ablation's activation row is the FRAG the tables rank."""
    from frag_utils import calibration, drift

    tolerance = drift.load_tolerance()
    compared = 0
    for folder in sorted((paths.RUNS_DIR / "07_ablations").glob("smol.*")):
        if not _complete(folder, "07_ablations"):
            continue
        rec = json.loads((folder / "results.json").read_text())
        p7, prov7 = rec["provenance"]["params"], rec["provenance"]
        for score in (s for s in rec["results"]["scores"] if s["importance"] == "activation"):
            unl = _record("05_unlearn", score["unlearned_run"])
            p5, prov5 = unl["provenance"]["params"], unl["provenance"]
            same = {"original": p5["original"], "forget_split": p5["forget_split"], "data_source": p5["data_source"],
                    "n_calib": p5["frag_n_calib"], "max_len": p5["max_len"], "gamma": p5["gamma"],
                    "batch_size": calibration.CalibConfig().batch_size}  # 05 scores with the default batch
            if any(p7[k] != v for k, v in same.items()):  # another calibration: another FRAG, by design
                continue
            one_path = (prov7["git"]["commit"] == prov5["git"]["commit"]
                        and not prov7["git"]["dirty"] and not prov5["git"]["dirty"]
                        and prov7["environment"].get("cpu_capability") == prov5["environment"].get("cpu_capability"))
            row = unl["results"]["row"]
            for key in ("FRAG_x100", "A_f_x100", "A_r_x100", "l2_all"):
                absolute, relative = (0.0, 1e-9) if one_path else tolerance[key]
                assert abs(score[key] - row[key]) <= absolute + relative * abs(row[key]), (
                    folder.name, key, score["unlearned_run"], one_path)
            compared += 1
    if (paths.RUNS_DIR / "07_ablations" / "smol.frontier_forget05" / "results.json").is_file():
        assert compared >= 26  # forget05's frontier: every checkpoint it scored
    elif not compared:
        pytest.skip("no notebook-07 record scores a checkpoint with its 05 record's calibration")


def test_a_variants_file_takes_new_runs_but_no_plan_that_drops_or_renames_one_of_its_runs(tmp_path):
    kept = _script("plan_attack_variants").kept
    base = {"profile": "smol", "unlearned_run": "x", "seed": 42}
    entries = [{**base, "optimizer": "sgd_momentum"}, {**base, "optimizer": "adagrad"}]
    file = tmp_path / "06_attacks.attack_optim_forget10.yaml"
    file.write_text(yaml.safe_dump(entries))
    assert kept(file, [*entries, {**base, "optimizer": "sgd"}])  # a change added: the runs keep their names
    assert not kept(file, entries[:1])  # one dropped
    assert not kept(file, [*entries, {**base, "optimizer": "sgd", "lr": 1e-4}])  # lr now varies: every name changes
