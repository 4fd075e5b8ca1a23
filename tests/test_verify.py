"""make verify: a recorded run remade from an empty cache lands within the tolerances of its
record (papermill_runs/tolerance.yaml) on any machine, and bit for bit on the machine that made
it. The tiny target's record is committed as the fixture."""
import json

import pytest

from frag_utils import drift, paths, runs

TINY = paths.RUNS_DIR / "02_target_and_gold" / "tiny" / paths.RESULTS_FILE


def test_the_tiny_target_remade_from_an_empty_cache_lands_within_tolerance_of_its_record(tmp_path, capsys):
    recorded = json.loads(TINY.read_text())
    assert recorded["results"]["checkpoint_sha256"]["target"]  # the record names its weights
    report = runs.verify("02_target_and_gold/tiny", workdir=tmp_path)
    printed = capsys.readouterr().out
    assert [e["run"] for e in report] == ["02_target_and_gold/tiny"]
    assert report[0]["verdict"] in ("bit-identical", "within tolerance"), printed
    judged = {r["metric"] for r in report[0]["rows"]}
    assert "/evaluation/target/es" in judged and "/evaluation/gold/model_utility" in judged
    assert "02_target_and_gold/tiny: remade" in printed
    assert not (tmp_path / "remade").exists() or (tmp_path / "remade" / "02_target_and_gold" / "tiny").is_dir()
    assert json.loads(TINY.read_text()) == recorded  # the committed record is untouched


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
    tolerance = drift.load_tolerance()
    assert tolerance["es"] == (0.05, 0.0) and tolerance["l2_all"] == (0.0, 0.05)
    recorded = {"evaluation": {"target": {"es": 0.80, "retain_perturbed/rouge": 0.5, "per_example": {"es": [0.1]}}},
                "frag": {"l2_all": 100.0}, "train_seconds": 10.0, "checkpoint_sha256": {"target": "a"}}
    a = _record(tmp_path, "a", recorded)
    assert drift.compare(a, a)["verdict"] == "bit-identical"
    near = {**recorded, "evaluation": {"target": {"es": 0.84, "retain_perturbed/rouge": 0.45,
                                                   "per_example": {"es": [0.9]}}},
            "frag": {"l2_all": 104.0}, "train_seconds": 99.0, "checkpoint_sha256": {"target": "b"}}
    report = drift.compare(a, _record(tmp_path, "b", near))
    assert report["verdict"] == "within tolerance" and report["weights"] == {"target": "other bits"}
    rows = {r["metric"]: r for r in report["rows"]}
    # per-example lists and wall times are not judged; a relative tolerance scales with the record
    assert set(rows) == {"/evaluation/target/es", "/evaluation/target/retain_perturbed/rouge", "/frag/l2_all"}
    assert rows["/evaluation/target/es"]["drift"] == pytest.approx(0.04) and rows["/frag/l2_all"]["tolerance"] == 5.0
    far = {**near, "frag": {"l2_all": 106.0}}
    report = drift.compare(a, _record(tmp_path, "c", far))
    assert report["verdict"] == "outside tolerance"
    table = drift.format_report("02_target_and_gold/x", report)
    assert "/frag/l2_all" in table and table.count("OUTSIDE") == 1


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
    # checkpoints in two caches are the same place; other strings are compared
    assert drift.record_differences({"ckpt": "/cache/a/target"}, {"ckpt": "/other/b/target"}) == []
    assert drift.record_differences({"m": "npo"}, {"m": "ga"}) == ["/m: 'npo' against 'ga'"]
