import json
import os
import shutil
import subprocess
import sys
import types

import fake_papermill
import pytest

from frag_utils import cache, cli, parameters, paths, runs
from frag_utils.runs import RunError


def test_every_notebook_parameter_is_declared_and_parsed():
    for nb in sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        if nb.stem == "00_index":
            continue
        declared = parameters.declared_parameters(nb)
        assert {"profile", "run_name"} <= set(declared), nb.name


def test_a_kernel_reads_the_parameters_its_runner_parsed_without_importing_papermill(tmp_path):
    """The runner's parse of a notebook's parameters cell is kept in the cache under the notebook's sha256, so a
    kernel's ``current_params`` does not import papermill; an edited notebook is parsed again."""
    env = {**os.environ, "FRAG_CACHE_DIR": str(tmp_path / "cache")}
    code = ("import sys, json; from frag_utils import parameters; d = parameters.declared_parameters(parameters."
            "resolve_notebook(sys.argv[1])); print(json.dumps([d, 'papermill' in sys.modules]))")
    nb = json.loads((paths.NOTEBOOKS_DIR / "04_frag.ipynb").read_text())
    edited = tmp_path / "04_frag.ipynb"
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    cell["source"] = "".join(cell["source"]).replace("gamma: float = 1.0", "gamma: float = 2.0")
    edited.write_text(json.dumps(nb))
    seen = []
    for notebook in ("04_frag", "04_frag", str(edited)):
        out = subprocess.run([sys.executable, "-c", code, notebook], env=env, capture_output=True, text=True,
                             check=True)
        seen.append(json.loads(out.stdout.strip().splitlines()[-1]))
    (first, parsed), (again, imported), (other, parsed_other) = seen
    assert parsed and not imported and again == first == parameters.declared_parameters(
        parameters.resolve_notebook("04_frag"))
    assert parsed_other and other["gamma"]["default"] == 2.0 != first["gamma"]["default"]


def test_unparseable_parameter_line_is_refused(tmp_path):
    nb = json.loads((paths.NOTEBOOKS_DIR / "01_data.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    cell["source"] = "".join(cell["source"]) + '\nextra: int = 3  # a comment with = inside\n'
    bad = tmp_path / "01_bad.ipynb"
    bad.write_text(json.dumps(nb))
    with pytest.raises(RunError, match="cannot parse .*extra"):
        parameters.declared_parameters(bad)


def test_unknown_names_and_wrong_types_are_refused():
    nb = parameters.resolve_notebook("02_target_and_gold")
    with pytest.raises(RunError, match=r"Unknown parameter\(s\) \['learning_rate'\].*Declared parameters: .*lr"):
        parameters.check_parameters(nb, {"learning_rate": 1e-4})
    with pytest.raises(RunError, match="'epochs' .* must be float, got str"):
        parameters.check_parameters(nb, {"epochs": "five"})
    with pytest.raises(RunError, match="'bf16' .* must be bool"):
        parameters.check_parameters(nb, {"bf16": 1})
    assert parameters.check_parameters(nb, {"epochs": 3}) == {"epochs": 3.0}  # ints widen to float
    with pytest.raises(RunError, match="No notebook 'nope'"):
        parameters.resolve_notebook("nope")
    with pytest.raises(RunError, match="not found"):
        parameters.load_params_file("no_such_file.yaml")
    with pytest.raises(RunError, match="Unknown profile"):
        runs.grid("no_such_profile")


def test_every_profile_file_matches_its_notebook():
    for profile in ("tiny", "smol", "paper"):
        specs = runs.grid(profile)
        assert specs and all(s.params["profile"] == profile for s in specs)
        assert all(s.name.startswith(profile) for s in specs)


def test_run_names_are_built_from_parameters():
    specs = runs.plan_run("02_target_and_gold", "smol/02_target_and_gold.yaml", {"lr": 1e-4, "epochs": 3})
    assert specs[0].name == "smol__epochs=3__lr=0.0001"
    assert specs[0].params["run_name"] == specs[0].name
    assert parameters.parse_cli_value("1e-4") == 1e-4 and parameters.parse_cli_value("3") == 3
    assert parameters.parse_cli_value("true") is True and parameters.parse_cli_value("forget05") == "forget05"


def test_a_collector_planned_without_a_file_is_its_profiles_file_run_not_one_on_the_notebooks_defaults():
    # notebook 09's defaults are a smoke run's (200 resamples); run as `frag run 09_figures`, they must not
    # plan a second "smol" collection that would overwrite the recorded one (its file: 2000)
    for profile in ("smol", "tiny"):
        (own,) = runs.plan_run("09_figures", f"{profile}/09_figures.yaml")
        (bare,) = runs.plan_run("09_figures", None, {"profile": profile} if profile != "smol" else None)
        assert bare.name == own.name == profile and bare.params == own.params and bare.params["n_boot"] == 2000
    assert parameters.notebook_defaults(parameters.resolve_notebook("09_figures"))["n_boot"] < 2000


def test_list_files_name_runs_by_what_varies(tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text("- {profile: tiny, forget_split: forget01}\n- {profile: tiny, forget_split: forget05}\n")
    names = [s.name for s in runs.plan_run("02_target_and_gold", f)]
    assert names == ["tiny__forget_split=forget01", "tiny__forget_split=forget05"]


def test_a_run_name_too_long_for_a_folder_is_refused_before_anything_runs(tmp_path):
    f = tmp_path / "grid.yaml"
    long = "x" * 200  # a value this long names a run past the file system's 255 with its suffixes
    f.write_text(f"- {{profile: tiny, unlearned_run: a{long}, lr: 1.0e-4}}\n"
                 f"- {{profile: tiny, unlearned_run: b{long}, lr: 2.0e-4}}\n")
    with pytest.raises(parameters.RunError, match=r"characters long, more than 220.*lr, unlearned_run.*split the file"):
        runs.plan_run("06_attacks", f)
    short = long[:60]
    f.write_text(f"- {{profile: tiny, unlearned_run: a{short}}}\n- {{profile: tiny, unlearned_run: b{short}}}\n")
    assert all(len(s.name) <= parameters.MAX_RUN_NAME for s in runs.plan_run("06_attacks", f))


def test_run_names_hold_only_the_parameters_that_apply_to_the_run(tmp_path):
    grid = ("- &b {profile: tiny, method: frp, sparsity: 0.01, lr: 5.0e-5, rmu_coeff: 2.0}\n"
            "- {<<: *b, method: rmu, sparsity: 0.0, lr: 1.0e-3, rmu_coeff: 200.0}\n"
            "- {<<: *b, method: sp, sparsity: 0.02}\n")
    f = tmp_path / "05_unlearn.grid.yaml"
    f.write_text(grid)
    names = [s.name for s in runs.plan_run("05_unlearn", f)]
    assert names == ["tiny.grid__method=frp__sparsity=0.01", "tiny.grid__lr=0.001__method=rmu__rmu_coeff=200",
                     "tiny.grid__method=sp__sparsity=0.02"]
    # every run still carries all its parameters; only the name is shorter
    assert runs.plan_run("05_unlearn", f)[1].params["sparsity"] == 0.0
    # an explicit override always names the run, applicable or not
    assert runs.plan_run("05_unlearn", f, {"sparsity": 0.05})[1].name.endswith("__sparsity=0.05")
    assert parameters.applies("05_unlearn", "frp_veto", {"method": "frp", "frp_variant": "released"})
    assert not parameters.applies("05_unlearn", "frp_veto", {"method": "frp", "frp_variant": "eq6"})
    assert parameters.applies("06_attacks", "lr", {})
    # the same run whatever an inapplicable parameter says; not so for an applicable one
    frp = {"method": "frp", "frp_variant": "released", "sparsity": 0.03, "lr": 1e-5}
    key = parameters.params_key(frp, notebook="05_unlearn")
    assert key == parameters.params_key({**frp, "lr": 5e-5}, notebook="05_unlearn")
    assert key != parameters.params_key({**frp, "sparsity": 0.01}, notebook="05_unlearn")
    assert parameters.params_key(frp) != parameters.params_key({**frp, "lr": 5e-5})  # without the notebook: every key


def test_applicability_names_declared_parameters_only():
    for stem, rules in parameters.APPLIES.items():
        assert set(rules) <= set(parameters.declared_parameters(parameters.resolve_notebook(stem))), stem


def test_completeness_needs_notebook_record_and_same_parameters(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path)
    spec = runs.plan_run("01_data", None, {"profile": "x"})[0]
    assert not spec.is_complete()
    spec.out_dir.mkdir(parents=True)
    spec.executed.write_text("{}")
    assert not spec.is_complete()  # no results yet: a killed run is redone
    (spec.out_dir / paths.RESULTS_FILE).write_text(json.dumps({"provenance": {"params": spec.params}}))
    assert spec.is_complete()
    other = runs.plan_run("01_data", None, {"profile": "x", "check_regeneration": False})[0]
    other_same_dir = runs.RunSpec(other.notebook, other.params, spec.name)
    assert not other_same_dir.is_complete()


def test_grid_takes_suffixed_parameter_files_and_refuses_duplicate_names(tmp_path, monkeypatch):
    folder = tmp_path / "prof"
    folder.mkdir()
    (folder / "01_data.yaml").write_text("- {profile: prof, data_source: a}\n- {profile: prof, data_source: b}\n")
    # a run another file already lists with the same parameters is run once, under its first name;
    # the main file of a notebook comes first
    (folder / "01_data.more.yaml").write_text("- {profile: prof, data_source: c}\n- {profile: prof, data_source: b}\n"
                                             "- {profile: prof, data_source: a, check_regeneration: false}\n")
    monkeypatch.setattr(runs.paths, "PARAMS_DIR", tmp_path)
    specs = runs.grid("prof")
    assert [s.name for s in specs] == ["prof__data_source=a", "prof__data_source=b",
                                       "prof.more__check_regeneration=True__data_source=c",
                                       "prof.more__check_regeneration=False__data_source=a"]
    # the same name for different parameters is refused (two values that make the same folder name)
    (folder / "01_data.more.yaml").write_text("- {profile: prof, data_source: x/y}\n"
                                              "- {profile: prof, data_source: x--y}\n")
    with pytest.raises(RunError, match="defined twice with different parameters"):
        runs.grid("prof")
    (folder / "01_data.more.yaml").write_text("- {profile: prof, data_source: c}\n"
                                             "- {profile: prof, data_source: c, check_regeneration: false}\n")
    names = [s.name for s in runs.grid("prof")]
    assert len(names) == 4 and len(set(names)) == 4 and all(s.notebook.stem == "01_data" for s in runs.grid("prof"))


def test_a_parameter_added_later_at_its_default_keeps_older_records_complete(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path)
    spec = runs.plan_run("01_data", None, {"profile": "x"})[0]
    spec.out_dir.mkdir(parents=True)
    spec.executed.write_text("{}")
    older = {k: v for k, v in spec.params.items() if k != "check_regeneration"}  # written before it existed
    (spec.out_dir / paths.RESULTS_FILE).write_text(json.dumps({"provenance": {"params": older}}))
    assert spec.is_complete()
    changed = runs.plan_run("01_data", None, {"profile": "x", "check_regeneration": False})[0]
    assert not runs.RunSpec(changed.notebook, changed.params, spec.name).is_complete()  # not at its default
    defaults = {k: v["default"] for k, v in parameters.declared_parameters(spec.notebook).items()}
    assert parameters.params_key(older, defaults) == parameters.params_key(spec.params, defaults)
    assert parameters.params_key(older) != parameters.params_key(spec.params)


@pytest.fixture()
def fake_grid(tmp_path, monkeypatch):
    """A small grid (02 -> three 05 runs -> a 06 run on two of them) whose notebooks are run by a
    fake papermill (tests/fake_papermill.py), here and in every process Snakemake starts."""
    import papermill

    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(paths, "PARAMS_DIR", tmp_path / "params")
    env = {"FRAG_CACHE_DIR": tmp_path / "cache", "FRAG_RUNS_DIR": tmp_path / "runs", "FRAG_THREADS": 1,
           "FRAG_FAKE_PARAMS": tmp_path / "params", "FRAG_FAKE_PAPERMILL": tmp_path / "fake.json",
           "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT / "tests" / "fake_site"),
                                          os.environ.get("PYTHONPATH", "")])}
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    folder = tmp_path / "params" / "t"
    folder.mkdir(parents=True)
    (folder / "02_target_and_gold.yaml").write_text("{profile: t}\n")
    (folder / "05_unlearn.yaml").write_text("- {profile: t, original: profile-target, method: ga}\n"
                                            "- {profile: t, original: profile-target, method: npo}\n"
                                            "- {profile: t, original: profile-target, method: gold}\n")
    (folder / "06_attacks.yaml").write_text("- {profile: t, unlearned_run: t__method=npo}\n"
                                            "- {profile: t, unlearned_run: t__method=gold}\n")
    monkeypatch.setattr(papermill, "execute_notebook", papermill.execute_notebook)  # put back after the test
    monkeypatch.setattr(runs, "train_models", runs.train_models)
    state = fake_papermill.State(tmp_path / "fake.json")
    fake_papermill.install(state)
    return state


def _make(select=None, force=False, chosen=None, specs=None):
    """What the workflow does with grid "t", here and in plan order: :func:`runs.plan`, then each
    job through ``frag run-one`` (a failed job raises its RunError). Returns the jobs."""
    universe = runs.dependency_grid(chosen) if chosen else runs.grid("t")
    chosen = [s for s in chosen or universe if not select or select in f"{s.notebook.stem}/{s.name}"]
    jobs = runs.plan(chosen, universe, force)
    extra = ["--specs", str(cli.write_specs(chosen, specs))] if specs else []
    for job in jobs:
        args = [f"{job.spec.notebook.stem}/{job.spec.name}", *extra, *(["--remake"] if job.remake else []),
                *(["--roles", "+".join(job.roles)] if job.roles else [])]
        ns = cli.build_parser().parse_args(["run-one", *args, *(["--force"] if job.force else [])])
        ns.func(ns)
    return jobs


def _records(root):
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _keys(jobs):
    return [j.key for j in jobs]


def test_the_grid_through_snakemake_with_two_jobs_killed_midway_and_rerun_ends_with_the_records_of_an_uninterrupted_one(
        fake_grid, tmp_path, capfd):
    import shutil

    _make()  # uninterrupted (here, in plan order): the reference
    reference = _records(paths.RUNS_DIR)
    assert len(fake_grid["calls"]) == 6 and runs.plan(runs.grid("t"), runs.grid("t")) == []
    shutil.rmtree(paths.RUNS_DIR), shutil.rmtree(tmp_path / "cache")
    fake_grid.update(calls=[], kill_at=3)  # one of the 05 runs, killed while its Trainer wrote a checkpoint
    with pytest.raises(RunError, match="snakemake stopped"):
        cli.workflow({"profile": "t"}, jobs=2)
    killed = fake_grid["calls"][2]
    assert fake_grid["calls"][0] == "02_target_and_gold/t" and killed.startswith("05_unlearn/")
    assert not (paths.RUNS_DIR / killed / paths.RESULTS_FILE).exists()
    assert "not done (failed, or not reached" in capfd.readouterr().err
    fake_grid.update(calls=[], kill_at=None)
    cli.workflow({"profile": "t"}, jobs=2)  # the fake refuses to start beside a torn checkpoint
    calls = fake_grid["calls"]
    assert killed in calls and "02_target_and_gold/t" not in calls and len(calls) == len(set(calls))
    assert f"runs: {len(calls)} done, 0 remade, 0 skipped (complete)" in capfd.readouterr().err
    leftovers = {k for k in _records(paths.RUNS_DIR) if k.rsplit("/", 1)[-1].startswith(".")}
    assert {k: v for k, v in _records(paths.RUNS_DIR).items() if k not in leftovers} == reference


def test_a_checkpoint_two_jobs_need_is_remade_once_as_a_job_of_its_own(fake_grid, tmp_path, capfd):
    import shutil

    _make(chosen=[s for s in runs.grid("t") if s.notebook.stem != "06_attacks"])
    shutil.rmtree(tmp_path / "cache")  # a fresh machine: records committed, cache empty
    fake_grid.update(calls=[])
    # the profile's attacks at another rate, through Snakemake: the npo model's remake needs notebook
    # 02's target only, the gold attack its gold model only; each is made alone, once, before its reader
    specs = runs.plan_run("06_attacks", "t/06_attacks.yaml", {"lr": 1e-4})
    assert [(j.key, j.needs) for j in runs.plan(specs, runs.dependency_grid(specs))] == [
        ("remade/02_target_and_gold/t@target", ()),
        ("remade/05_unlearn/t__method=npo", ("remade/02_target_and_gold/t@target",)),
        ("06_attacks/t__lr=0.0001__unlearned_run=t__method=npo", ("remade/05_unlearn/t__method=npo",)),
        ("remade/02_target_and_gold/t@gold", ()),
        ("06_attacks/t__lr=0.0001__unlearned_run=t__method=gold", ("remade/02_target_and_gold/t@gold",))]
    assert cli.main(["run", "06_attacks", "-f", "t/06_attacks.yaml", "-p", "lr", "1e-4", "--jobs", "2"]) == 0
    calls = fake_grid["calls"]
    assert calls.index("02_target_and_gold/t@target") < calls.index("05_unlearn/t__method=npo") < calls.index(
        "06_attacks/t__lr=0.0001__unlearned_run=t__method=npo")
    gold = "06_attacks/t__lr=0.0001__unlearned_run=t__method=gold"
    assert calls.index("02_target_and_gold/t@gold") < calls.index(gold)
    assert len(calls) == 5 and "02_target_and_gold/t" not in calls  # the notebook itself is not run again
    assert "runs: 2 done, 3 remade, 0 skipped (complete)" in capfd.readouterr().err
    # two jobs asking for it at once, outside one workflow (two machines sharing the cache): made once
    shutil.rmtree(tmp_path / "cache" / "checkpoints" / "t" / "unlearned--t__method=npo")
    fake_grid.update(calls=[])
    command = [sys.executable, "-m", "frag_utils", "run-one", "05_unlearn/t__method=npo", "--remake"]
    both = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    out = "".join(p.communicate()[0] for p in both)
    assert [p.returncode for p in both] == [0, 0] and fake_grid["calls"] == ["05_unlearn/t__method=npo"]
    assert "its checkpoints are current (remade by another job)" in out


def test_a_run_whose_inputs_are_recorded_but_not_cached_remakes_them_first(fake_grid, tmp_path, capsys):
    import shutil

    specs = runs.grid("t")
    _make(chosen=[s for s in specs if s.notebook.stem != "06_attacks"])
    shutil.rmtree(tmp_path / "cache")  # a fresh machine: records committed, cache empty
    fake_grid.update(calls=[])
    jobs = _make(select="06_attacks/t__unlearned_run=t__method=npo")
    # the attack needs the npo checkpoint, which needs the target: remade in that order, ga untouched
    assert fake_grid["calls"] == ["02_target_and_gold/t@target", "05_unlearn/t__method=npo",
                                  "06_attacks/t__unlearned_run=t__method=npo"]  # the gold model is not trained
    assert "not in the cache" in jobs[1].reason and jobs[1].key == "remade/05_unlearn/t__method=npo"
    assert runs.plan([s for s in specs if "method=npo" in s.name and s.notebook.stem == "06_attacks"], specs) == []
    # the whole grid: 02 and 05 are recorded; the gold run's checkpoint is notebook 02's gold model, made alone
    shutil.rmtree(tmp_path / "cache")
    shutil.rmtree(paths.RUNS_DIR / "06_attacks")
    assert _keys(runs.plan(specs, specs)) == [
        "remade/02_target_and_gold/t@target", "remade/05_unlearn/t__method=npo",
        "06_attacks/t__unlearned_run=t__method=npo", "remade/02_target_and_gold/t@gold",
        "06_attacks/t__unlearned_run=t__method=gold"]


def test_a_remake_that_differs_prints_its_drift_goes_on_and_keeps_the_committed_record(fake_grid, tmp_path, capsys):
    import shutil

    specs = runs.grid("t")
    _make(chosen=[s for s in specs if s.notebook.stem != "06_attacks"])
    before = _records(paths.RUNS_DIR)
    shutil.rmtree(tmp_path / "cache")  # a fresh machine, whose training comes out otherwise
    fake_grid.update(calls=[], target_es=0.8)
    capsys.readouterr()
    _make(select="06_attacks/t__unlearned_run=t__method=npo")
    printed = capsys.readouterr().out
    # the target alone, without notebook 02 (nothing evaluated): its other weights are named
    assert "02_target_and_gold/t: made its target only" in printed
    assert "target: not the recorded weights" in printed and "make verify RUN=02_target_and_gold/t" in printed
    assert not (tmp_path / "cache" / "remade" / "02_target_and_gold" / "t").exists()
    assert "05_unlearn/t__method=npo: remade, within tolerance" in printed
    # the committed records are kept; the remade ones lie in the cache beside the checkpoints
    assert {k: v for k, v in _records(paths.RUNS_DIR).items() if k in before} == before
    remade = json.loads((tmp_path / "cache" / "remade" / "05_unlearn" / "t__method=npo" / paths.RESULTS_FILE)
                        .read_text())
    assert remade["results"]["evaluated_on"] == "target 0.8"
    # the attack was made from the remade npo model, which was made from the remade target
    attack = json.loads((paths.RUNS_DIR / "06_attacks" / "t__unlearned_run=t__method=npo" / paths.RESULTS_FILE)
                        .read_text())
    assert attack["results"]["before"] == "npo of target 0.8"


def test_a_checkpoint_made_by_other_code_is_remade_before_a_run_reads_it(fake_grid, tmp_path, monkeypatch):
    specs = runs.grid("t")
    _make(chosen=[s for s in specs if s.notebook.stem != "06_attacks"])
    assert all(runs.checkpoints_current(s) for s in specs if s.notebook.stem != "06_attacks")
    fake_grid.update(calls=[])
    monkeypatch.setattr(cache, "source_hash", lambda: "edited")  # an equation of the package edited
    assert not runs.checkpoints_current(specs[0])
    _make(select="06_attacks/t__unlearned_run=t__method=gold")
    # the gold run's checkpoint is notebook 02's gold model: current again once it is made, so 05/gold is not
    assert fake_grid["calls"] == ["02_target_and_gold/t@gold", "06_attacks/t__unlearned_run=t__method=gold"]
    assert runs.checkpoints_current(specs[0], ("gold",)) and not runs.checkpoints_current(specs[0])
    fake_grid.update(calls=[])
    _make(select="06_attacks/t__unlearned_run=t__method=npo")  # npo was made from the old code, and its target
    assert fake_grid["calls"] == ["02_target_and_gold/t@target", "05_unlearn/t__method=npo",
                                  "06_attacks/t__unlearned_run=t__method=npo"]
    assert runs.checkpoints_current(specs[0])


def test_a_remake_killed_midway_changes_no_record_and_is_remade_next_time(fake_grid, tmp_path):
    import shutil

    specs = runs.grid("t")
    _make(chosen=[s for s in specs if s.notebook.stem != "06_attacks"])
    before = _records(paths.RUNS_DIR)
    shutil.rmtree(tmp_path / "cache")
    fake_grid.update(calls=[], kill_at=2)  # killed in the remake of npo, after the target's
    with pytest.raises(fake_papermill.Killed):
        _make(select="06_attacks/t__unlearned_run=t__method=npo")
    assert _records(paths.RUNS_DIR) == before
    fake_grid.update(calls=[], kill_at=None)
    _make(select="06_attacks/t__unlearned_run=t__method=npo")  # the torn trainer checkpoint is gone first
    assert fake_grid["calls"] == ["05_unlearn/t__method=npo", "06_attacks/t__unlearned_run=t__method=npo"]
    assert {k: v for k, v in _records(paths.RUNS_DIR).items() if k in before} == before


def test_runs_read_for_their_record_only_are_run_when_unrecorded_and_hub_ids_are_not_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(paths, "PARAMS_DIR", tmp_path / "params")
    folder = tmp_path / "params" / "t"
    folder.mkdir(parents=True)
    (folder / "05_unlearn.yaml").write_text("{profile: t, method: frp}\n")  # run "t"
    (folder / "05_unlearn.m.yaml").write_text("{profile: t, method: sp, match_l2_run: t}\n")
    specs = runs.grid("t")
    matched = next(s for s in specs if s.params["match_l2_run"])
    assert [(d.name, reads) for d, reads in runs.needed_runs(matched, specs)] == [("t", ())]  # its record only
    assert [(j.key, j.needs) for j in runs.plan([matched], specs)] == [
        ("05_unlearn/t", ()), ("05_unlearn/t.m", ("05_unlearn/t",))]
    assert runs._made({"unlearned": "org/some-gold-model"}, "05_unlearn") == {}  # a hub id is not a local checkpoint


def test_a_failed_run_without_a_record_leaves_no_run_folder_and_names_its_error(fake_grid, tmp_path):
    spec = runs.grid("t")[0]  # 02_target_and_gold/t, never run
    fake_grid["fail_at"] = 1
    with pytest.raises(RunError) as err:
        _make(select="02_target_and_gold")
    kept = paths.cache_dir() / "failed" / "02_target_and_gold" / "t.ipynb"
    message = str(err.value)
    assert message.startswith("02_target_and_gold/t failed in cell [3]: FileNotFoundError: The checkpoint of "
                              "05_unlearn/x is not in the cache. Run it. The partial executed notebook is kept at ")
    assert str(kept) in message and "\n" not in message and "was removed" in message
    assert json.loads(kept.read_text()) == {"partial": True}
    assert not spec.out_dir.exists() and not (paths.RUNS_DIR / "02_target_and_gold").exists()
    fake_grid["fail_at"] = None
    _make(select="02_target_and_gold")  # the next attempt starts clean
    assert spec.is_complete()


def test_a_kernel_that_imports_another_checkouts_package_is_refused_before_the_run_starts(fake_grid, tmp_path,
                                                                                            monkeypatch):
    other = tmp_path / "other_checkout"  # a worktree sharing this checkout's .venv sees the reverse of this
    (other / "frag_utils").mkdir(parents=True)
    (other / "frag_utils" / "__init__.py").write_text("")
    spec = runs.grid("t")[0]
    monkeypatch.setenv("PYTHONPATH", str(other))  # the kernel inherits it
    runs.check_kernel_package.cache_clear()
    try:
        with pytest.raises(RunError) as err:
            runs.execute(spec)
        message = str(err.value)
        assert f"imports frag_utils from {other / 'frag_utils' / '__init__.py'}, not from this checkout" in message
        assert f"PYTHONPATH={paths.REPO_ROOT}" in message
        assert not spec.out_dir.exists()  # refused before anything was written
        monkeypatch.delenv("PYTHONPATH")
        runs.check_kernel_package.cache_clear()
        runs.check_kernel_package()  # this checkout's own kernel
    finally:
        runs.check_kernel_package.cache_clear()


def test_a_failed_rerun_of_a_recorded_run_keeps_its_folder_and_the_partial_notebook_beside_it(fake_grid, tmp_path):
    spec = runs.grid("t")[0]
    _make(select="02_target_and_gold")
    executed = spec.executed.read_text()
    fake_grid.update(calls=[], fail_at=1)
    with pytest.raises(RunError, match=r"02_target_and_gold/t failed in cell \[3\]: FileNotFoundError: .* kept at "
                                       r".*02_target_and_gold/t/02_target_and_gold\.failed\.ipynb\. .*git checkout"):
        _make(select="02_target_and_gold", force=True)
    assert sorted(p.name for p in spec.out_dir.iterdir()) == ["02_target_and_gold.failed.ipynb",
                                                              "02_target_and_gold.ipynb"]
    assert spec.executed.read_text() == executed  # the runner deletes only results.json before a rerun
    fake_grid["fail_at"] = None
    _make(select="02_target_and_gold", force=True)  # a successful rerun takes the failed notebook away
    assert sorted(p.name for p in spec.out_dir.iterdir()) == ["02_target_and_gold.ipynb", paths.RESULTS_FILE]


def test_a_run_of_one_notebook_remakes_the_runs_it_reads_from_the_profile_grid(fake_grid, tmp_path):
    import shutil

    # a 06 run outside the grid (another learning rate): what it reads is looked up in the profile's grid
    specs = runs.plan_run("06_attacks", None, {"profile": "t", "unlearned_run": "t__method=npo", "lr": 1e-4})
    universe = runs.dependency_grid(specs)
    assert universe[0].name == specs[0].name and len(universe) == len(runs.grid("t")) + 1
    _make(chosen=specs, specs=tmp_path / "specs.json")  # nothing recorded yet: 02 and 05 run first
    assert fake_grid["calls"] == ["02_target_and_gold/t", "05_unlearn/t__method=npo",
                                  "06_attacks/t__lr=0.0001__unlearned_run=t__method=npo"]
    shutil.rmtree(tmp_path / "cache")  # recorded, but not cached
    fake_grid.update(calls=[])
    jobs = _make(chosen=specs, specs=tmp_path / "specs.json", force=True)
    assert fake_grid["calls"] == ["02_target_and_gold/t@target", "05_unlearn/t__method=npo",
                                  "06_attacks/t__lr=0.0001__unlearned_run=t__method=npo"]
    assert [j.remake for j in jobs] == [True, True, False] and "not in the cache" in jobs[1].reason
    without = runs.plan_run("06_attacks", None, {"profile": "t", "unlearned_run": "t__method=nope"})
    with pytest.raises(RunError, match=r"reads from 05_unlearn/t__method=nope, which has no record .* is in no "
                                       r"parameter file of profile 't'"):
        runs.plan(without, runs.dependency_grid(without))


def test_current_params_checks_the_types_papermill_does_not():
    namespace = {"profile": "tiny", "gamma": "abc", "n_calib": 16, "np": object()}
    with pytest.raises(RunError, match=r"Parameter 'gamma' of 04_frag.ipynb must be float, got str 'abc'\. "
                                       r"papermill injects parameters without checking"):
        parameters.current_params("04_frag", namespace)
    namespace["gamma"] = 0  # an int for a float is fine, and recorded as given
    assert parameters.current_params("04_frag", namespace) == {"profile": "tiny", "gamma": 0, "n_calib": 16}
    with pytest.raises(RunError, match="'n_calib' .* must be int, got float 16.5"):
        parameters.current_params("04_frag", {**namespace, "n_calib": 16.5})
    with pytest.raises(RunError, match="'n_calib' .* must be int, got bool True"):
        parameters.current_params("04_frag", {**namespace, "n_calib": True})
    # papermill -p gama 0.5: a name the notebook does not declare, which would leave gamma at its default
    with pytest.raises(RunError, match=r"does not declare the parameter\(s\) 'gama' \(did you mean 'gamma'\?\)"):
        parameters.current_params("04_frag", {**namespace, "gama": 0.5})
    # what a kernel holds besides the parameters is not taken for one: modules, constants, IPython's names
    import json as some_module

    quiet = {**namespace, "NOTEBOOK": "04_frag", "json": some_module, "In": [""], "Out": {}, "_i1": "x", "_": None}
    assert parameters.current_params("04_frag", quiet) == {"profile": "tiny", "gamma": 0, "n_calib": 16}


def test_profiles_are_the_folders_of_the_parameter_files():
    assert {"tiny", "smol", "paper"} <= set(runs.profiles())


def test_a_collector_is_rerun_only_when_its_inputs_change(fake_grid, tmp_path):
    """Notebook 09 regenerated from unchanged records changes no file: it is no job."""
    (tmp_path / "params" / "t" / "09_figures.yaml").write_text("{profile: t}\n")
    jobs = _make()
    assert fake_grid["calls"][-1] == "09_figures/t" and len(jobs[-1].needs) == 6  # after every other run
    collected = _records(paths.RUNS_DIR / "09_figures")
    assert (paths.RUNS_DIR / "09_figures" / "t" / runs.INPUTS_FILE).is_file()
    fake_grid.update(calls=[])
    assert _make() == [] and fake_grid["calls"] == []
    assert _records(paths.RUNS_DIR / "09_figures") == collected
    record = paths.RUNS_DIR / "05_unlearn" / "t__method=ga" / paths.RESULTS_FILE
    rec = json.loads(record.read_text())
    record.write_text(json.dumps({**rec, "results": {**rec["results"], "es": 0.5}}))  # a number changed
    assert _keys(_make()) == ["09_figures/t"] and fake_grid["calls"] == ["09_figures/t"]  # collected again
    # a collector planned because another run is, whose records come out the same, is not rerun
    assert runs.execute(runs.grid("t")[-1])["status"] == "skipped (complete)"


def test_records_name_no_machine_path_and_read_back_into_this_cache(tmp_path, monkeypatch):
    from frag_utils import records

    cache = tmp_path / "cache"
    monkeypatch.setenv("FRAG_CACHE_DIR", str(cache))
    run = tmp_path / "run"
    run.mkdir()
    ckpt = paths.checkpoint_dir("smol", "unlearned_forget10--x")
    records.write_json(run / paths.RESULTS_FILE, {"unlearned": str(ckpt), "n": 3,
                                                 "notebook": str(paths.NOTEBOOKS_DIR / "05_unlearn.ipynb")}, {})
    (run / "05_unlearn.ipynb").write_text(json.dumps({"metadata": {"papermill": {"output_path": str(run)}},
                                                      "cells": [{"text": f"saved to {ckpt}"}]}))
    (run / "weights.bin").write_bytes(str(cache).encode())  # not a text record: left alone
    changed = paths.make_portable(run)
    assert sorted(f.name for f in changed) == ["05_unlearn.ipynb", paths.RESULTS_FILE]
    text = (run / paths.RESULTS_FILE).read_text() + (run / "05_unlearn.ipynb").read_text()
    assert str(cache) not in text and str(paths.REPO_ROOT) + "/" not in text
    stored = json.loads((run / paths.RESULTS_FILE).read_text())["results"]
    assert stored["unlearned"] == "$FRAG_CACHE_DIR/checkpoints/smol/unlearned_forget10--x"
    assert stored["notebook"] == "notebooks/05_unlearn.ipynb"
    # another machine (another cache root) reads the record as pointing into its own cache
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert records.read_json(run / paths.RESULTS_FILE)["results"]["unlearned"] == str(
        tmp_path / "elsewhere" / "checkpoints" / "smol" / "unlearned_forget10--x")
    assert paths.make_portable(run) == []  # idempotent


MODEL_NOTEBOOKS = ("02_target_and_gold", "03_calibration", "04_frag", "05_unlearn", "06_attacks", "07_ablations",
                   "10_sharpness")
FP32_ONLY = ("10_sharpness",)  # measures the attack's loss in fp32, as the attack trains: no dtype to choose


def test_every_notebook_that_loads_a_model_takes_device_and_dtype_and_passes_them_on():
    import re

    for stem in MODEL_NOTEBOOKS:
        nb_file = parameters.resolve_notebook(stem)
        declared = parameters.declared_parameters(nb_file)
        assert declared["device"] == {"type": "str", "default": "auto"}, stem
        assert declared.get("dtype") == (None if stem in FP32_ONLY else {"type": "str", "default": "auto"}), stem
        code = "\n".join("".join(c["source"]) for c in json.loads(nb_file.read_text())["cells"]
                         if c["cell_type"] == "code" and "parameters" not in c["metadata"].get("tags", []))
        assert "numerics.resolve_device(device)" in code, stem
        assert ("numerics.resolve_dtype(dtype, dev)" in code) == (stem not in FP32_ONLY), stem
        # every model the notebook loads goes to the run's device
        loads = re.findall(r"models\.load_model\(([^()]*(?:\([^()]*\))?[^()]*)\)", code)
        assert loads, stem
        assert all("device=dev" in call for call in loads), (stem, loads)
        # and every package call that builds, evaluates or scores a model on its own gets it too
        for call in ("evaluate_model_cached", "score_pair", "prune_checkpoint", "UnlearnConfig", "AttackConfig",
                     "TrainConfig"):
            for m in re.finditer(call + r"\(", code):
                depth, i = 1, m.end()
                while depth:
                    depth += {"(": 1, ")": -1}.get(code[i], 0)
                    i += 1
                assert "device=dev" in code[m.end():i], (stem, call)


def test_a_device_this_machine_lacks_is_refused_before_the_kernel_starts(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    nb = parameters.resolve_notebook("05_unlearn")
    with pytest.raises(RunError, match="'device'.*no usable CUDA device.*use cpu or auto"):
        parameters.check_parameters(nb, {"device": "cuda"})
    with pytest.raises(RunError, match="not a device"):
        parameters.check_parameters(nb, {"device": "gpu0"})
    assert parameters.check_parameters(nb, {"device": "cpu"}) == {"device": "cpu"}


@pytest.mark.parametrize("profile", runs.profiles())
def test_every_run_of_every_committed_grid_finds_the_runs_it_reads(profile):
    """A run listed by two files is run once under its first name: a notebook-06 file that names
    the other file's run (here once, the Table 1 attacks and a strength pilot) would find no such
    run and stop the grid midway. Every read must resolve in the grid as planned."""
    specs = runs.grid(profile)
    for spec in specs:
        for needed, _ in runs.needed_runs(spec, specs):
            assert needed.name


def test_an_attack_of_the_target_itself_reads_the_profiles_notebook_02_run_and_an_attack_of_a_named_model_none(
        tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(paths, "PARAMS_DIR", tmp_path / "params")
    folder = tmp_path / "params" / "t"
    folder.mkdir(parents=True)
    (folder / "02_target_and_gold.yaml").write_text("{profile: t}\n")
    (folder / "06_attacks.yaml").write_text("- {profile: t, model: profile-target, seed: 42}\n"
                                            "- {profile: t, model: some/hub-model, seed: 1}\n")
    specs = runs.grid("t")
    target, named = [s for s in specs if s.notebook.stem == "06_attacks"]
    assert [(d.notebook.stem, d.name, reads) for d, reads in runs.needed_runs(target, specs)] == [
        ("02_target_and_gold", "t", ("target",))]  # its target: made first where missing
    assert runs.needed_runs(named, specs) == []
    assert [(j.key, j.needs) for j in runs.plan([target], specs)] == [
        ("02_target_and_gold/t", ()), (f"06_attacks/{target.name}", ("02_target_and_gold/t",))]


def test_a_long_run_says_every_so_often_how_long_it_has_run_and_which_cell_it_is_in(tmp_path, capsys):
    import time

    def cell(kind, source, status):
        return {"cell_type": kind, "source": source, "metadata": {"papermill": {"status": status}}}

    nb = tmp_path / ".02_target_and_gold.running.ipynb"
    assert runs.where(nb) == ""  # papermill has not saved it yet
    nb.write_text(json.dumps({"cells": [cell("markdown", ["## Train the target\n", "on every record"], "completed"),
                                        cell("code", "x = 1", "completed"), cell("code", "train()", "running"),
                                        cell("markdown", "## Gold", "pending"), cell("code", "y", "pending")]}))
    assert runs.where(nb) == "cell 3 of 5: Train the target"
    with runs.heartbeat("02_target_and_gold/smol", nb, every=0.05):
        time.sleep(0.3)
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line == "02_target_and_gold/smol: running for 0 min, cell 3 of 5: Train the target"
                         for line in lines)


def test_a_model_made_alone_drops_a_half_written_trainer_checkpoint_first_and_a_gold_run_reads_seed_42s(
        fake_grid, tmp_path):
    import shutil

    specs = runs.grid("t")
    _make(chosen=[s for s in specs if s.notebook.stem != "06_attacks"])
    shutil.rmtree(tmp_path / "cache")
    torn = paths.checkpoint_dir("t", "target.work") / "checkpoint-3"  # a killed job's, no trainer_state.json
    torn.mkdir(parents=True)
    fake_grid.update(calls=[])
    _make(select="06_attacks/t__unlearned_run=t__method=npo")
    assert fake_grid["calls"][0] == "02_target_and_gold/t@target" and not torn.exists()
    # a gold run reads notebook 02's seed-42 gold model (gold_<split>), not another seed's
    (tmp_path / "params" / "t" / "02_target_and_gold.seeds.yaml").write_text("{profile: t, seed: 43}\n")
    specs = runs.grid("t")
    gold = next(s for s in specs if s.name == "t__method=gold")
    assert [(d.name, reads) for d, reads in runs.needed_runs(gold, specs)] == [("t", ("gold", "target"))]


def test_roles_are_refused_without_a_remake_or_outside_notebook_02s_models(fake_grid):
    for args in (["02_target_and_gold/t", "--roles", "target"], ["02_target_and_gold/t", "--remake", "--roles", "x"]):
        ns = cli.build_parser().parse_args(["run-one", *args])
        with pytest.raises(RunError, match="--roles .*with --remake of a notebook-02 run"):
            ns.func(ns)


def test_notebook_08_is_collected_before_notebook_09_which_reads_its_record(fake_grid, tmp_path):
    """Two collectors: 08 reads the grid's records, 09 reads those and 08's. 09 runs after 08; a change to 08's
    record makes 09 a job, and 09's own record never makes 08 one."""
    for nb in ("08_predictors", "09_figures"):
        (tmp_path / "params" / "t" / f"{nb}.yaml").write_text("{profile: t}\n")
    jobs = _make()
    assert _keys(jobs)[-2:] == ["08_predictors/t", "09_figures/t"] and "08_predictors/t" in jobs[-1].needs
    assert _make() == []
    (spec_08,) = [s for s in runs.grid("t") if s.notebook.stem == "08_predictors"]
    (spec_09,) = [s for s in runs.grid("t") if s.notebook.stem == "09_figures"]
    before_08, before_09 = runs.collector_inputs(spec_08), runs.collector_inputs(spec_09)
    record_09 = spec_09.out_dir / paths.RESULTS_FILE
    record_09.write_text(record_09.read_text() + " ")
    assert runs.collector_inputs(spec_08) == before_08  # a later collector's record is not an input
    record_08 = spec_08.out_dir / paths.RESULTS_FILE
    record_08.write_text(record_08.read_text() + " ")
    assert runs.collector_inputs(spec_08) == before_08 and runs.collector_inputs(spec_09) != before_09
    assert _keys(_make()) == ["09_figures/t"]
    # 09 chosen alone (make reproduce SELECT=09_figures) after 08's inputs changed: 08 is made first
    record_05 = paths.RUNS_DIR / "05_unlearn" / "t__method=ga" / paths.RESULTS_FILE
    record_05.write_text(record_05.read_text() + " ")
    assert _keys(_make(select="09_figures")) == ["08_predictors/t", "09_figures/t"]


def test_each_job_computes_on_the_kernel_path_of_the_records_its_run_extends(fake_grid, tmp_path, monkeypatch):
    """A new attack of an AVX2 record, on an AVX-512 CPU with an empty cache: the attack, the unlearned model's
    remake and the target's (made for it) all carry the AVX2 caps; --kernels native gives none; the records of a
    run's own file count before those it reads."""
    from frag_utils import kernel_paths

    _make()
    npo = paths.RUNS_DIR / "05_unlearn" / "t__method=npo" / paths.RESULTS_FILE
    rec = json.loads(npo.read_text())
    npo.write_text(json.dumps({**rec, "provenance": {**rec["provenance"], "environment": {"cpu_capability": "AVX2"}}}))
    shutil.rmtree(tmp_path / "cache")
    monkeypatch.setattr(kernel_paths, "native", lambda *a, **k: "AVX512")
    (new,) = runs.plan_run("06_attacks", None, {"profile": "t", "unlearned_run": "t__method=npo", "lr": 3e-4})
    assert runs.extends(new, runs.dependency_grid([new])) == [json.loads(npo.read_text())]  # no file: what it reads
    jobs = runs.plan([new], runs.dependency_grid([new]))
    assert [j.key for j in jobs] == ["remade/02_target_and_gold/t@target", "remade/05_unlearn/t__method=npo",
                                     f"06_attacks/{new.name}"]
    assert all(j.kernels.caps == kernel_paths.CAPS["AVX2"] and j.kernels.flag == "AVX2" for j in jobs)
    native = runs.plan([new], runs.dependency_grid([new]), kernels="native")
    assert all(j.kernels.caps == {} and j.kernels.flag == "" for j in native)  # the environment as it stands
    # records of a path this CPU cannot take: its own, said in the plan's line
    rec = json.loads(npo.read_text())
    on = {"environment": {"cpu_capability": "AVX512"}}
    npo.write_text(json.dumps({**rec, "provenance": {**rec["provenance"], **on}}))
    monkeypatch.setattr(kernel_paths, "native", lambda *a, **k: "AVX2")
    refused = runs.plan([new], runs.dependency_grid([new]))
    assert all(j.kernels.caps == {} and j.kernels.flag == "AVX2" for j in refused)
    assert "the AVX512 path of the records is not available here" in refused[-1].kernels.line
    # a run of a parameter file extends its file's records: the 06 file's attack of the gold model, made on AVX512
    gold_attack = next((paths.RUNS_DIR / "06_attacks").glob("t__unlearned_run=t__method=gold*")) / paths.RESULTS_FILE
    rec = json.loads(gold_attack.read_text())
    gold_attack.write_text(json.dumps({**rec, "provenance": {**rec["provenance"],
                                                              "environment": {"cpu_capability": "AVX512"}}}))
    sibling = runs.RunSpec(new.notebook, new.params, "t__unlearned_run=t__method=npo__lr=0.0003")
    assert kernel_paths.of_records(runs.extends(sibling, runs.grid("t"))) == {"AVX512"}


def test_a_target_made_on_another_path_than_its_record_is_judged_by_the_records_on_its_path(fake_grid):
    """Notebook 02's record was made on AVX512; the target remade on AVX2 for the AVX2 records is compared with the
    weights those records read, not with notebook 02's."""

    for i, (name, sha, capability) in enumerate((("a", "s1", "AVX2"), ("b", "s1", "AVX2"), ("c", "s2", "AVX512"))):
        folder = paths.RUNS_DIR / "05_unlearn" / f"t.frontier__m={name}"
        folder.mkdir(parents=True)
        (folder / paths.RESULTS_FILE).write_text(json.dumps({
            "provenance": {"environment": {"cpu_capability": capability}},
            "results": {"method": "npo", "checkpoint_sha256": {"original": sha, "unlearned": f"u{i}"}}}))
    assert runs.read_by({"target": "s1"}, "AVX2") == {"target": ["05_unlearn/t.frontier__m=a",
                                                                 "05_unlearn/t.frontier__m=b"]}
    assert runs.read_by({"target": "s2"}, "AVX2") == {"target": []}
    assert runs.read_by({"target": "s2"}, "AVX512") == {"target": ["05_unlearn/t.frontier__m=c"]}


def test_the_workflow_gives_each_job_its_path_in_its_stamp_and_its_command(fake_grid, tmp_path, capfd):
    """A job step on a cluster node parses the Snakefile without the plan: the path travels in the job's stamp and
    so in its command (``--kernels``), as the plan chose it."""
    from frag_utils import kernel_paths

    _make()
    npo = paths.RUNS_DIR / "05_unlearn" / "t__method=npo" / paths.RESULTS_FILE
    rec = json.loads(npo.read_text())
    npo.write_text(json.dumps({**rec, "provenance": {**rec["provenance"], "environment": {"cpu_capability": "AVX2"}}}))
    shutil.rmtree(tmp_path / "cache")
    (new,) = runs.plan_run("06_attacks", None, {"profile": "t", "unlearned_run": "t__method=npo", "lr": 3e-4})
    capfd.readouterr()
    cli.workflow({"force": 0}, [new], extra=["-n", "-p"])
    out = capfd.readouterr()
    flag = kernel_paths.choose({"AVX2"}).flag
    commands = [line for line in out.out.splitlines() if "frag_utils run-one" in line]
    assert len(commands) == 3 and all(f"--kernels {flag}" in c for c in commands), commands
    assert f".{flag}.done" in out.out


def test_a_measurement_of_a_checkpoint_reads_every_checkpoint_of_its_notebook_05_run_and_of_the_target_its_model():
    specs = runs.grid("smol")
    measures = [s for s in specs if s.notebook.stem == "10_sharpness"]
    checkpoint = next(s for s in measures if s.params["unlearned_run"])
    target = next(s for s in measures if s.params["model"] == "profile-target")
    assert [(d.notebook.stem, d.name, reads) for d, reads in runs.needed_runs(checkpoint, specs)] == [
        ("05_unlearn", checkpoint.params["unlearned_run"], None)]
    assert [(d.notebook.stem, reads) for d, reads in runs.needed_runs(target, specs)] == [
        ("02_target_and_gold", ("target",))]
    # a run is named by what it measures: the model only where no notebook-05 run is named
    assert "model=" not in checkpoint.name and "unlearned_run=" not in target.name
    assert len({s.name for s in measures}) == len(measures)


def _record_05(tmp_path, name, **params):
    folder = tmp_path / "runs" / "05_unlearn" / name
    folder.mkdir(parents=True)
    p = {"profile": "t", "original": "profile-target", "forget_split": "forget10", **params}
    results = {"method": p.get("method", "frp"), "unlearned": str(tmp_path / "ckpt" / name), "frag": {"l2_all": 2.5}}
    (folder / paths.RESULTS_FILE).write_text(json.dumps({"provenance": {"params": p}, "results": results}))


def test_a_controls_update_norm_is_the_matched_runs_l2_and_a_mismatch_is_refused_in_words(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    _record_05(tmp_path, "frp_run")
    _record_05(tmp_path, "other_split", forget_split="forget05")
    mine = {"profile": "t", "original": "profile-target", "forget_split": "forget10", "noise_scale": 2.0}
    assert runs.matched_l2("frp_run", {**mine, "method": "sp"}) == 2.5
    assert runs.matched_l2("frp_run", {**mine, "method": "noise"}) == 5.0  # noise_scale times the run's L2
    assert runs.matched_l2("", {**mine, "method": "frp"}) is None
    with pytest.raises(ValueError, match="method noise scales its noise"):
        runs.matched_l2("", {**mine, "method": "noise"})
    with pytest.raises(ValueError, match="setting of the controls"):
        runs.matched_l2("frp_run", {**mine, "method": "ga"})
    with pytest.raises(ValueError, match="unlearned profile-target on forget05"):
        runs.matched_l2("other_split", {**mine, "method": "sp"})


def test_notebook_07_scores_the_named_checkpoints_or_every_one_of_its_split_but_gold_models(tmp_path, monkeypatch):
    from frag_utils import models

    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(models, "is_checkpoint", lambda path: not str(path).endswith("missing"))
    _record_05(tmp_path, "a")
    _record_05(tmp_path, "b_forget05", forget_split="forget05")
    _record_05(tmp_path, "c_seed43", original="profile-target-seed43")
    _record_05(tmp_path, "gold", method="gold")
    _record_05(tmp_path, "missing")
    mine = ("t", "forget10", "profile-target")
    assert list(runs.unlearned_checkpoints("a, gold", *mine)) == ["a"]
    for other in ("b_forget05", "c_seed43"):  # an update of another split or target: not against this W0
        with pytest.raises(ValueError, match=f"05_unlearn/{other} unlearned .*name runs of the same original"):
            runs.unlearned_checkpoints(f"a,{other}", *mine)
    with pytest.raises(FileNotFoundError, match="05_unlearn/missing is not in the cache.*FORCE=1"):
        runs.unlearned_checkpoints("all", *mine)
    monkeypatch.setattr(models, "is_checkpoint", lambda path: True)
    assert list(runs.unlearned_checkpoints("all", *mine)) == ["a", "missing"]  # its split and target, no gold


def test_which_model_tells_two_models_of_one_name_apart_by_their_weights_and_kernels(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import save_file

    from frag_utils import models

    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    made = {}
    for name, value, capability in (("faithful", 1.0, "AVX512"), ("frontier", 2.0, "AVX2")):
        folder = tmp_path / name
        folder.mkdir()
        save_file({"w": torch.full((2, 3), value)}, str(folder / "model.safetensors"))
        caps = {"ONEDNN_MAX_CPU_ISA": "AVX2"} if capability == "AVX2" else {}
        (folder / models.RECORD_FILE).write_text(json.dumps({"cache": {"kernels": {"cpu_capability": capability,
                                                                                    **caps}}}))
        made[name] = folder
    record = tmp_path / "runs" / "02_target_and_gold" / "smol" / paths.RESULTS_FILE
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"results": {"checkpoint_sha256": {
        "target": models.weights_sha256(made["faithful"]), "gold": "0" * 64}}}))
    faithful, frontier = (runs.which_model(str(made[n])) for n in ("faithful", "frontier"))
    assert faithful["weights sha256"] == models.weights_sha256(made["faithful"])[:12] != frontier["weights sha256"]
    assert faithful["made on kernels"] == "AVX512" and frontier["made on kernels"] == "AVX2, capped by the environment"
    assert faithful["recorded by notebook 02"] == "02_target_and_gold/smol (target)"
    assert frontier["recorded by notebook 02"].startswith("none")
    (made["frontier"] / models.RECORD_FILE).write_text(json.dumps({"cache": {"kernels": {"gpu": "NVIDIA H100",
                                                                                      "cuda": "12.4"}}}))
    assert runs.which_model(str(made["frontier"]))["made on kernels"] == "NVIDIA H100 (CUDA 12.4)"


def test_an_executed_notebook_is_injected_only_what_its_run_changes_and_its_record_holds_every_value():
    (spec,) = runs.plan_run("05_unlearn", None, {"profile": "tiny", "method": "frp", "sparsity": 0.01, "seed": 42})
    declared = parameters.declared_parameters(spec.notebook)
    assert declared["method"]["default"] == "frp" and declared["seed"]["default"] == 42  # both left at the default
    shown = runs.injected(spec)
    assert shown == {"run_name": spec.name, "profile": "tiny", "sparsity": 0.01}
    # the notebook's parameters cell sets the rest: defaults, then the injected values, are the run's parameters
    assert parameters.notebook_defaults(spec.notebook) | shown == spec.params
    # a value equal to the default but of another type (0 for 0.0) is passed: the notebook would see its own type
    assert declared["sparsity"]["default"] == 0.0 and isinstance(declared["sparsity"]["default"], float)
    assert runs.injected(types.SimpleNamespace(notebook=spec.notebook, params={**spec.params, "sparsity": 0}))[
        "sparsity"] == 0


def test_a_run_pinned_to_a_kernel_path_computes_there_and_refuses_any_other(fake_grid, tmp_path, monkeypatch):
    """Parameter ``kernels`` pins a run to a CPU path: the plan gives its job and the remakes it needs that path
    under any mode; the notebook stops before it makes anything on another; a path that is none, or a pinned run
    off the CPU, is refused before a kernel starts."""
    import torch

    from frag_utils import kernel_paths, parameters

    _make()
    shutil.rmtree(tmp_path / "cache")
    monkeypatch.setattr(kernel_paths, "native", lambda *a, **k: "AVX512")
    (pinned,) = runs.plan_run("03_calibration", None, {"profile": "t", "original": "profile-target", "device": "cpu",
                                                       "kernels": "AVX2"})
    for mode in ("records", "native"):  # the faithful records are this CPU's own: the pin wins over both
        jobs = runs.plan([pinned], runs.dependency_grid([pinned]), kernels=mode)
        assert [j.key for j in jobs] == ["remade/02_target_and_gold/t@target", f"03_calibration/{pinned.name}"]
        assert all(j.kernels.flag == "AVX2" and j.kernels.caps == kernel_paths.CAPS["AVX2"] for j in jobs)
        assert jobs[-1].kernels.line.startswith("kernels: AVX2, as its parameter kernels")
    notebook = parameters.resolve_notebook("03_calibration")
    with pytest.raises(RunError, match="must be a CPU kernel path"):
        parameters.check_parameters(notebook, {"kernels": "AVX3", "device": "cpu"})
    with pytest.raises(RunError, match="set device: cpu"):
        parameters.check_parameters(notebook, {"kernels": "AVX2"})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    with pytest.raises(RunError, match="pinned to the AVX2 kernel path .* computes on AVX512"):
        parameters.check_kernel_path({"kernels": "AVX2", "device": "cpu"})
    parameters.check_kernel_path({"kernels": "AVX512", "device": "cpu"})  # on its path: nothing to say
    parameters.check_kernel_path({"kernels": ""})


def test_a_run_pinned_to_a_kernel_path_reads_the_target_recorded_on_that_path():
    """smol's notebook-03 and 04 runs on the frontier's target (AVX2) read notebook 02's run pinned to AVX2, so the
    runner records it first; the faithful grid's read the unpinned one."""
    specs = runs.grid("smol")
    reads = {(s.notebook.stem, s.name): [f"{d.notebook.stem}/{d.name}" for d, _ in runs.needed_runs(s, specs)]
             for s in specs if s.notebook.stem in ("03_calibration", "04_frag")}
    assert reads[("03_calibration", "smol.frontier_target")] == ["02_target_and_gold/smol.frontier_target"]
    assert reads[("04_frag", "smol.frontier_target")] == ["02_target_and_gold/smol.frontier_target"]
    assert reads[("03_calibration", "smol")] == reads[("04_frag", "smol")] == ["02_target_and_gold/smol"]
