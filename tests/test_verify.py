"""make verify: a recorded run remade from an empty cache lands within the tolerances of its
record (papermill_runs/tolerance.yaml) on any machine, and bit for bit on the machine that made
it. The tiny target's record is committed as the fixture."""
import json

import pytest

from frag_utils import drift, paths, runs

TINY = paths.RUNS_DIR / "02_target_and_gold" / "tiny" / paths.RESULTS_FILE


def test_the_tiny_target_remade_from_an_empty_cache_lands_within_tolerance_and_each_model_made_alone_is_the_same(
        tmp_path, capsys):
    """make verify remakes notebook 02 whole. A run that reads only the target (or only the gold
    model) has it made without the notebook (runs.remake_models): it must be the weights the
    notebook makes on this machine, and the other model is not trained."""
    from frag_utils import models

    recorded = json.loads(TINY.read_text())
    assert recorded["results"]["checkpoint_sha256"]["target"]  # the record names its weights
    report = runs.verify("02_target_and_gold/tiny", workdir=tmp_path / "notebook")
    printed = capsys.readouterr().out
    assert [e["run"] for e in report] == ["02_target_and_gold/tiny"]
    assert report[0]["verdict"] in ("bit-identical", "within tolerance"), printed
    judged = {r["metric"] for r in report[0]["rows"]}
    assert "/evaluation/target/es" in judged and "/evaluation/gold/model_utility" in judged
    assert "02_target_and_gold/tiny: remade" in printed
    assert json.loads(TINY.read_text()) == recorded  # the committed record is untouched

    spec, folders = runs.find_run("02_target_and_gold/tiny"), {"target": "target", "gold": "gold_forget10"}
    with runs.environment(FRAG_CACHE_DIR=str(tmp_path / "notebook")):
        by_notebook = {r: models.weights_sha256(paths.checkpoint_dir("tiny", f)) for r, f in folders.items()}
    for role, other in (("target", "gold"), ("gold", "target")):
        with runs.environment(FRAG_CACHE_DIR=str(tmp_path / role)):
            alone = runs.remake(spec, f"a reader of the {role}", once=True, roles=(role,))
            assert models.weights_sha256(paths.checkpoint_dir("tiny", folders[role])) == by_notebook[role]
            assert not paths.checkpoint_dir("tiny", folders[other]).exists()  # the other model not trained,
            assert not (tmp_path / role / "remade" / "02_target_and_gold" / "tiny").exists()  # no notebook run
            assert runs.checkpoints_current(spec, (role,)) and not runs.checkpoints_current(spec)
            assert runs.remake(spec, "again", once=True, roles=(role,)) == {"verdict": "already current"}
        # bit for bit against the record exactly where this machine's notebook gives the record's bits
        same = by_notebook[role] == recorded["results"]["checkpoint_sha256"][role]
        assert alone["verdict"] == ("bit-identical" if same else "other weights")
    printed = capsys.readouterr().out
    assert "02_target_and_gold/tiny: made its target only" in printed and "made its gold only" in printed


def test_verify_refuses_unknown_runs():
    with pytest.raises(runs.RunError, match="No run"):
        runs.verify("02_target_and_gold/nonexistent")


def test_upstream_lists_what_an_attack_reads_before_it():
    """A smol attack reads its unlearned model, which reads the profile's target."""
    attack = next(s for s in runs.grid("smol") if s.notebook.stem == "06_attacks")
    spec = runs.find_run(f"06_attacks/{attack.name}")
    chain = [f"{s.notebook.stem}/{s.name}" for s in runs.upstream(spec, runs.dependency_grid([spec]))]
    assert chain == ["02_target_and_gold/smol", f"05_unlearn/{attack.params['unlearned_run']}"]


def _record(tmp_path, name, results):
    file = tmp_path / name / paths.RESULTS_FILE
    file.parent.mkdir(parents=True)
    file.write_text(json.dumps({"provenance": {}, "results": results}))
    return file


def test_drift_is_judged_per_metric_by_the_tolerance_file_and_bits_are_named(tmp_path):
    tolerance = {"es": (0.05, 0.0), "rouge": (0.1, 0.0), "l2_all": (0.0, 0.05)}
    recorded = {"evaluation": {"target": {"es": 0.80, "retain_perturbed/rouge": 0.5, "per_example": {"es": [0.1]}}},
                "frag": {"l2_all": 100.0}, "train_seconds": 10.0, "checkpoint_sha256": {"target": "a"}}
    a = _record(tmp_path, "a", recorded)
    assert drift.compare(a, a, tolerance)["verdict"] == "bit-identical"
    near = {**recorded, "evaluation": {"target": {"es": 0.84, "retain_perturbed/rouge": 0.45,
                                                   "per_example": {"es": [0.9]}}},
            "frag": {"l2_all": 104.0}, "train_seconds": 99.0, "checkpoint_sha256": {"target": "b"}}
    report = drift.compare(a, _record(tmp_path, "b", near), tolerance)
    assert report["verdict"] == "within tolerance" and report["weights"] == {"target": "other bits"}
    rows = {r["metric"]: r for r in report["rows"]}
    # per-example lists and wall times are not judged; a relative tolerance scales with the record
    assert set(rows) == {"/evaluation/target/es", "/evaluation/target/retain_perturbed/rouge", "/frag/l2_all"}
    assert rows["/evaluation/target/es"]["drift"] == pytest.approx(0.04) and rows["/frag/l2_all"]["tolerance"] == 5.0
    far = {**near, "frag": {"l2_all": 106.0}}
    report = drift.compare(a, _record(tmp_path, "c", far), tolerance)
    assert report["verdict"] == "outside tolerance"
    table = drift.format_report("02_target_and_gold/x", report)
    assert "/frag/l2_all" in table and table.count("OUTSIDE") == 1
    # below the table's four decimals, the report still says where the bits differ
    tiny = {**recorded, "frag": {"l2_all": 100.00001}, "run": "streamed"}
    report = drift.compare(a, _record(tmp_path, "d", tiny), tolerance)
    assert report["verdict"] == "within tolerance"
    assert drift.format_report("05_unlearn/x", report).splitlines()[-1] == (
        "  differs from the record at: /frag/l2_all: 100.0 against 100.00001; /run: only in the second")


def test_a_remake_read_by_a_later_run_is_judged_against_its_record_only_for_the_weights_it_made(tmp_path,
                                                                                                  monkeypatch):
    """A run that measured remade weights (another CPU's bits) records the drift of the remake that made them;
    a remake of other weights, or none, tells it nothing."""
    runs_dir, cache = tmp_path / "runs", tmp_path / "cache"
    monkeypatch.setattr(paths, "RUNS_DIR", runs_dir)
    monkeypatch.setenv("FRAG_CACHE_DIR", str(cache))
    monkeypatch.setenv(paths.KERNELS_ENV, "AVX2")  # a job on the records' kernel path: its cache's own folder
    recorded = {"evaluation": {"unlearned": {"es": 0.30, "model_utility": 0.40}},
                "checkpoint_sha256": {"unlearned": "a"}}
    _record(runs_dir / "05_unlearn", "run", recorded)
    assert drift.of_remade("05_unlearn", "run", "unlearned", "b") is None  # nothing remade
    remade = {"evaluation": {"unlearned": {"es": 0.33, "model_utility": 0.41}},
              "checkpoint_sha256": {"unlearned": "b"}}
    _record(drift.remade_dir("05_unlearn", "run").parent, "run", remade)  # where runs.remake writes it
    assert drift.remade_dir("05_unlearn", "run") == cache / "kernels-avx2" / "remade" / "05_unlearn" / "run"
    tolerance = {"es": (0.05, 0.0), "model_utility": (0.02, 0.0)}
    monkeypatch.setattr(drift, "load_tolerance", lambda: tolerance)
    got = drift.of_remade("05_unlearn", "run", "unlearned", "b")
    assert got["verdict"] == "within tolerance" and got["judged"] == 2 and got["outside"] == []
    # the largest drift as a share of its tolerance: ES 0.03 of 0.05 against Model Utility 0.01 of 0.02
    assert got["largest"] == {"metric": "/evaluation/unlearned/es", "drift": pytest.approx(0.03), "tolerance": 0.05}
    assert drift.of_remade("05_unlearn", "run", "unlearned", "c") is None  # other weights than the remake's
    assert drift.of_remade("05_unlearn", "run", "unlearned", None) is None
    monkeypatch.setattr(drift, "load_tolerance", lambda: {"es": (0.01, 0.0), "model_utility": (0.02, 0.0)})
    got = drift.of_remade("05_unlearn", "run", "unlearned", "b")
    assert got["verdict"] == "outside tolerance" and got["outside"] == ["/evaluation/unlearned/es"]
    # a number NaN on one side only is the largest drift; no number a tolerance names: other bits, unjudged
    remade["evaluation"]["unlearned"]["model_utility"] = float("nan")
    (drift.remade_dir("05_unlearn", "run") / paths.RESULTS_FILE).write_text(json.dumps({"results": remade}))
    assert drift.of_remade("05_unlearn", "run", "unlearned", "b")["largest"]["metric"] == (
        "/evaluation/unlearned/model_utility")
    monkeypatch.setattr(drift, "load_tolerance", lambda: {})
    assert drift.of_remade("05_unlearn", "run", "unlearned", "b")["verdict"] == "unjudged"


def test_a_tolerance_file_with_a_bad_entry_says_which(tmp_path):
    bad = tmp_path / "tolerance.yaml"
    bad.write_text("es: 0.05\nmodel_utility: lots\n")
    with pytest.raises(ValueError, match="model_utility"):
        drift.load_tolerance(bad)


def test_record_differences_leave_out_wall_times_and_name_each_difference():
    a = {"x": [1, 2.0, float("nan")], "train_seconds": 3, "written_at": "t1", "y": {"z": "a"}}
    b = {"x": [1, 2.5, float("nan")], "train_seconds": 4, "written_at": "t2", "y": {"z": "a", "w": 1}}
    assert drift.record_differences(a, b) == ["/x[1]: 2.0 against 2.5", "/y/w: only in the second"]
    assert drift.record_differences(a, a) == [] and drift.record_differences([1], [1, 2]) == [": 1 items against 2"]
    # whether a part came from the cache is not a difference of the run (a remake on a fresh cache)
    assert drift.record_differences({"t": {"calibration_forget_cached": True, "n": 1}},
                                    {"t": {"calibration_forget_cached": False, "n": 1}}) == []
    # nor is whether FRAG streamed the original from disk (it does when those calibrations are cached)
    assert drift.record_differences({"t": {"original_streamed": False}}, {"t": {"original_streamed": True}}) == []
    # nor the commit and machine that made a model the run read (a remake's are its own)
    made = {"made": {"provenance": {"git": {"commit": "9354b04"}}, "pruned": 6336}}
    remade = {"made": {"provenance": {"git": {"commit": "9de3838"}}, "pruned": 6336}}
    assert drift.record_differences(made, remade) == []
    other = {"made": {"provenance": {}, "pruned": 6144}}
    assert drift.record_differences(made, other) == ["/made/pruned: 6336 against 6144"]
    # checkpoints in two caches are the same place; other strings are compared
    assert drift.record_differences({"ckpt": "/cache/a/target"}, {"ckpt": "/other/b/target"}) == []
    assert drift.record_differences({"m": "npo"}, {"m": "ga"}) == ["/m: 'npo' against 'ga'"]


def test_the_seed_spread_and_the_tolerances_derived_from_it_on_a_constructed_case():
    evals = [{"target": {"es": es, "model_utility": mu, "retain_perturbed/rouge": r1, "world_facts_perturbed/rouge": r2,
                         "per_example": {"es": [es]}},
              "gold": {"es": g, "model_utility": mu, "retain_perturbed/rouge": 0.9, "world_facts_perturbed/rouge": 0.5}}
             for es, mu, r1, r2, g in ((0.89, 0.33, 0.99, 0.55, 0.17), (0.95, 0.36, 0.98, 0.64, 0.20),
                                       (0.91, 0.335, 0.99, 0.60, 0.16))]
    spread = drift.seed_spread(evals)
    assert spread["es"]["range"] == pytest.approx(0.06) and spread["es"]["where"] == "/target/es"
    assert spread["rouge"]["range"] == pytest.approx(0.09)
    assert spread["rouge"]["where"] == "/target/world_facts_perturbed/rouge"
    assert spread["model_utility"]["range"] == pytest.approx(0.03)
    derived = drift.derive_tolerances(spread)
    # the larger of the range and the floor, rounded up to 0.01; the same kind of number measured elsewhere too
    assert derived["es"] == derived["es_before"] == derived["es_after"] == 0.06
    assert derived["rouge"] == 0.09 and derived["model_utility"] == derived["model_utility_after"] == 0.03
    assert drift.derive_tolerances({"es": {"range": 0.001, "where": ""}})["es"] == drift.SEED_FLOOR
    with pytest.raises(ValueError, match="two or more"):
        drift.seed_spread(evals[:1])


def test_the_tolerance_file_covers_the_recorded_spread():
    """No tolerance is narrower than what the records show a seed alone moves: ΔES over the three
    attack seeds of a Table 3 checkpoint, each evaluation number over the target's training seeds
    (once two or more of them are recorded), and ES before and after the attack and ΔES between a
    checkpoint and its twin from the seed-43 target."""
    from frag_utils.report import book, paper, targets

    tolerance = drift.load_tolerance()
    smol = book.Book("smol", n_boot=1)
    smol.chapter(paper, display=False)
    checkpoints = smol.table3_checkpoints
    assert tolerance["delta_es"][0] >= drift.attack_seed_range(list(checkpoints.delta_es))
    # and the shifts between the two targets' twins, read slowly
    second = targets.second_target(smol.records, checkpoints)
    for _, r in second.iterrows():
        assert tolerance["es_before"][0] >= abs(r.es_before_43 - r.es_before_42), r.model
        assert tolerance["delta_es"][0] >= abs(r.delta_es_43 - r.delta_es_42), r.model
        assert tolerance["es_after"][0] >= abs(r.es_before_43 + r.delta_es_43 - r.es_before_42 - r.delta_es_42), r.model
    evaluations = drift.recorded_seed_evaluations()
    if len(evaluations) >= 2:
        for metric, s in drift.seed_spread(list(evaluations.values())).items():
            assert tolerance[metric][0] >= s["range"], (metric, s)


def test_a_printed_drift_table_is_judged_again_by_another_tolerance_file(tmp_path):
    """Another machine's make verify output, kept as text, re-read: the same rows to four decimals,
    the verdict from the tolerances given now (a wider ES tolerance turns OUTSIDE into within); the
    run's own table of several, a path with spaces, a NaN on both sides."""
    recorded = {"evaluation": {"target": {"es": 0.8867, "model_utility": 0.3348, "retain_perturbed/rouge": 0.55}},
                "scores": {"FRP prune (forget-targeted)": {"frag": 0.10, "a_f": float("nan")}},
                "checkpoint_sha256": {"target": "a", "base": "b"}}
    remade = {"evaluation": {"target": {"es": 0.9470, "model_utility": 0.3595, "retain_perturbed/rouge": 0.6389}},
              "scores": {"FRP prune (forget-targeted)": {"frag": 0.25, "a_f": float("nan")}},
              "checkpoint_sha256": {"target": "c", "base": "b"}}
    narrow = {"es": (0.05, 0.0), "model_utility": (0.05, 0.0), "rouge": (0.1, 0.0), "frag": (0.02, 0.0),
              "a_f": (0.02, 0.0)}
    report = drift.compare(_record(tmp_path, "a", recorded), _record(tmp_path, "b", remade), narrow)
    other = drift.compare(_record(tmp_path, "c", recorded), _record(tmp_path, "d", recorded), narrow)
    printed = "\n".join(["# a header line", "```", drift.format_report("02_target_and_gold/smol", report),
                         drift.format_report("05_unlearn/x", other), "weights: a line of prose", "```"])
    again = drift.rejudge(printed, "02_target_and_gold/smol", narrow)
    assert again["verdict"] == report["verdict"] == "outside tolerance"
    assert [(r["metric"], r["ok"]) for r in again["rows"]] == [(r["metric"], r["ok"]) for r in report["rows"]]
    assert "/scores/FRP prune (forget-targeted)/frag" in {r["metric"] for r in again["rows"] if not r["ok"]}
    assert [r["drift"] for r in again["rows"]] == pytest.approx([r["drift"] for r in report["rows"]], abs=1e-4,
                                                                nan_ok=True)
    assert again["weights"] == {"base": "identical", "target": "other bits"}
    wider = drift.rejudge(printed, "02_target_and_gold/smol", {**narrow, "es": (0.07, 0.0), "frag": (0.2, 0.0)})
    assert wider["verdict"] == "within tolerance"  # the NaN on both sides is no drift, as compare has it
    assert {r["metric"]: r["tolerance"] for r in wider["rows"]}["/evaluation/target/es"] == 0.07
    assert drift.rejudge(printed, "05_unlearn/x", narrow)["verdict"] == "bit-identical"
    with pytest.raises(ValueError, match="no drift table of 06_attacks/y"):
        drift.rejudge(printed, "06_attacks/y", narrow)
    with pytest.raises(ValueError, match="more than one"):
        drift.rejudge(printed + "\n" + printed, "02_target_and_gold/smol", narrow)


def test_the_zen3_remake_of_the_smol_target_reads_back_as_printed():
    """The committed Zen 3 table (docs/verify): every judged number of the target, gold and base
    models, and under the tolerances it was printed with, one outside: the target's forget ES."""
    text = (paths.REPO_ROOT / "docs" / "verify" / "02_target_and_gold_smol_zen3.md").read_text()
    printed_with = {"es": (0.05, 0.0), "es_retain": (0.05, 0.0), "model_utility": (0.05, 0.0),
                    "forget_probability": (0.05, 0.0), "forget_rouge": (0.1, 0.0), "forget_truth_ratio": (0.05, 0.0),
                    "probability": (0.05, 0.0), "rouge": (0.1, 0.0), "truth_ratio": (0.05, 0.0)}
    report = drift.rejudge(text, "02_target_and_gold/smol", printed_with)
    assert len(report["rows"]) == 45  # 15 numbers of each of base, gold and target
    assert [r["metric"] for r in report["rows"] if not r["ok"]] == ["/evaluation/target/es"]
    assert report["weights"] == {"base": "identical", "gold": "other bits", "target": "other bits"}


def test_notebook_02_folder_names_are_those_of_existing_caches():
    """The names every cache made so far holds (renaming one would remake every target): spelled once."""
    assert [paths.trained_name("target"), paths.trained_name("target", 43)] == ["target", "target_seed43"]
    assert paths.trained_name("target", forget_split="forget05") == "target"  # one target for every split
    assert paths.trained_name("gold", forget_split="forget05") == "gold_forget05"
    assert paths.trained_name("gold", 43, "forget10") == "gold_forget10_seed43"
    for role, split in (("gold", None), ("retain", "forget10")):
        with pytest.raises(ValueError, match="the role is 'target'"):
            paths.trained_name(role, forget_split=split)


def test_the_intel_remakes_read_back_as_the_page_says():
    """docs/verify/intel_xeon.md under today's tolerance file: the frontier's FRP checkpoint remade with the
    AVX2 caps within tolerance, the faithful grid's bf16 NPO checkpoint remade natively outside it, on the
    target's forget ES, the unlearned model's ES and forget probability and the update's L2 (the page says
    so; a tolerance widened to admit them must change the page too)."""
    text = (paths.REPO_ROOT / "docs" / "verify" / "intel_xeon.md").read_text()
    frp = drift.rejudge(text, "05_unlearn/smol.frontier__forget_split=forget10__frp_veto=0__method=frp__sparsity=0.005")
    assert frp["verdict"] == "within tolerance" and len(frp["rows"]) == 43
    assert frp["weights"] == {"original": "other bits", "unlearned": "other bits"}
    npo = drift.rejudge(text, "05_unlearn/smol.table1__forget_split=forget10__grad_accum=1__lr=5e-05__method=npo"
                              "__weights=bf16")
    assert npo["verdict"] == "outside tolerance"
    assert [r["metric"] for r in npo["rows"] if not r["ok"]] == [
        "/evaluation/target/es", "/evaluation/unlearned/es", "/evaluation/unlearned/forget_probability",
        "/frag/l2_all", "/frag/l2_scored", "/row/es", "/row/l2_all", "/row/l2_scored"]


def test_the_recipe_typed_in_a_new_shell_reads_back_as_the_page_says():
    """docs/verify/recipe_zen4.md: the README's recipe with no cap in the shell planned every job on the AVX2 path of
    the records it extends, and its FRP checkpoint came back with both weights identical and no number moved."""
    text = (paths.REPO_ROOT / "docs" / "verify" / "recipe_zen4.md").read_text()
    plan = [line for line in text.splitlines() if line.startswith("  ") and "kernels:" in line]
    assert len(plan) == 3 and all("kernels: AVX2, as the records" in line for line in plan)
    frp = drift.rejudge(text, "05_unlearn/smol.frontier__forget_split=forget10__frp_veto=0__method=frp__sparsity=0.005")
    assert frp["verdict"] == "within tolerance" and all(r["drift"] == 0 for r in frp["rows"])
    assert frp["weights"] == {"original": "identical", "unlearned": "identical"}
    assert "the weights the AVX2 records read, bit for bit" in text
