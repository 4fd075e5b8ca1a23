"""The paper profile's dry run: every notebook the paper profile runs, with the paper's parameter
files, on stand-ins for the hub's models and data (issue 18). The quick one (every notebook once,
eight kernels, about three minutes); ``frag dry-run`` runs all 17 of its runs."""
import json

import pytest

from frag_utils import dryrun, paths, records, runs


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    root = tmp_path_factory.mktemp("dry")
    before = sorted(str(p) for p in [*paths.RUNS_DIR.glob("*/paper*"), *paths.FIGURES_DIR.glob("paper/*")])
    log = dryrun.dry_run(root, "cpu", quick=True)
    return root, log, before


def test_every_notebook_of_the_paper_profile_runs_end_to_end(dry):
    root, log, _ = dry
    assert log and all(e["status"] == "done" for e in log), log
    notebooks = {s.notebook.stem for s in runs.grid("paper")}
    made = {p.parent.parent.name for p in (root / "papermill_runs").glob(f"*/*/{paths.RESULTS_FILE}")}
    assert made == notebooks
    methods = {records.read_json(f)["results"]["method"]
               for f in (root / "papermill_runs" / "05_unlearn").glob(f"*/{paths.RESULTS_FILE}")}
    assert methods == {"npo"}
    assert (root / "figures" / "paper").is_dir() and any((root / "figures" / "paper").iterdir())
    # notebook 09 collects the paper profile's own grid files: the model made, and its attack per split
    assert "NPO" in (root / "figures" / "paper" / "unlearned_models.csv").read_text()
    assert "NPO" in (root / "figures" / "paper" / "table1_per_split.csv").read_text()
    # the whole dry run's runs (every method, every attack chosen) pass the parameter checks
    whole = dryrun.plan(root, "cpu")
    assert {s.params.get("method") for s in whole if s.notebook.stem == "05_unlearn"} == {
        "gold", "frp", "sp", "ga", "graddiff", "npo", "rmu"} and len(whole) == 17


def test_only_models_data_sizes_and_cpu_precision_differ_from_the_paper_files(dry):
    root, _, _ = dry
    replaced = {*dryrun.SIZES, "device", "bf16", "warmup_epochs", "unlearned_runs"}  # 07: the model made
    for spec in runs.grid("paper"):
        file = root / "papermill_runs" / spec.notebook.stem / spec.name / paths.RESULTS_FILE
        if not file.is_file():  # the quick dry run's: the other unlearned models and attacks
            assert spec.notebook.stem in ("05_unlearn", "06_attacks")
            continue
        ran = json.loads(file.read_text())["provenance"]["params"]
        for k, v in spec.params.items():
            if k in replaced:
                continue
            if v in dryrun.HUB_MODELS or v == dryrun.HUB_DATA:  # the hub ids, each a local folder in hub layout
                assert ran[k].endswith(f"hub/{v}"), (spec.name, k, ran[k])
            else:
                assert ran[k] == v, (spec.name, k, ran[k], v)
        assert not ran.get("bf16"), "bf16 autocast is refused on the CPU, which computes in fp32"


def test_the_standins_are_hub_layout_folders_and_nothing_lands_in_the_repository(dry):
    root, _, before = dry
    for hub_id in dryrun.HUB_MODELS:
        folder = root / "hub" / hub_id
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
        assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 16
    assert (root / "hub" / dryrun.HUB_DATA / "forget10_perturbed.json").is_file()
    assert sorted(str(p) for p in [*paths.RUNS_DIR.glob("*/paper*"), *paths.FIGURES_DIR.glob("paper/*")]) == before
    assert paths.RUNS_DIR == paths.REPO_ROOT / "papermill_runs"  # restored after the run
