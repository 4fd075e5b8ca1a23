"""Regenerating the tables from unchanged records changes no file (issue 20): notebook 09 run on
the committed smol records, with the committed run's parameters, writes every table (Markdown,
LaTeX, CSV) byte for byte as ``figures/smol/`` holds it, bootstrap intervals included (the draws
are seeded): the committed tables are current with the records, and regenerating them is
deterministic from one process and day to the next. Derived files name no machine, time or path.
(One run, not two: notebook 09 costs about a minute, and the committed run is the first.)"""
import json
import shutil

from frag_utils import paths, runs


def _collect(out: str, params: dict) -> None:
    import papermill

    papermill.execute_notebook(str(paths.NOTEBOOKS_DIR / "09_figures.ipynb"), out, parameters=params,
                               kernel_name=runs.KERNEL, cwd=str(paths.NOTEBOOKS_DIR), progress_bar=False,
                               log_output=False, extra_arguments=["--IPKernelApp.log_level=ERROR"])


def test_notebook_09_writes_the_committed_tables_byte_for_byte_and_no_machine_time_or_path(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))  # the smoke run writes to its scratch
    scratch = paths.cache_dir() / "scratch" / "09_figures"
    committed = paths.FIGURES_DIR / "smol"
    recorded = json.loads((committed / "table1.provenance.json").read_text())["provenance"]["params"]
    _collect(str(tmp_path / "09.ipynb"), {**recorded, "run_name": ""})  # a smoke run: into its scratch
    written = sorted(p.name for p in scratch.iterdir() if p.name != paths.RESULTS_FILE)
    assert any(n.endswith(".png") for n in written) and any(n.endswith(".provenance.json") for n in written)
    assert written == sorted(p.name for p in committed.iterdir()), "tables or figures added or missing"
    for n in written:  # the run's own record (results.json) carries the machine and time; no derived file may
        text = (scratch / n).read_text(errors="ignore") if not n.endswith(".png") else ""
        assert "written_at" not in text and "cpu_model" not in text and str(paths.REPO_ROOT) not in text, n
    tables = [n for n in written if n.endswith((".csv", ".md", ".tex"))]
    stale = [n for n in tables if (scratch / n).read_bytes() != (committed / n).read_bytes()]
    assert not stale, (f"figures/smol is not what notebook 09 makes of the records: {stale}; "
                       "run make reproduce SELECT=09_figures")
    _every_one_lists_its_source_runs_and_each_exists(scratch)
    shutil.rmtree(scratch)


def _every_one_lists_its_source_runs_and_each_exists(out) -> None:
    """Provenance that cannot go missing: each table and figure names the runs it was built from (the
    writer turns each into the sha256 of its results.json, None where there is none)."""
    from frag_utils.report import grid

    for file in sorted(out.glob("*.provenance.json")):
        runs_ = json.loads(file.read_text())["provenance"]["source_runs"]
        name = file.name.split(".")[0]
        if isinstance(runs_, str):  # a rule in words where no list can say it: what the grid costs
            assert runs_ and name == grid.GRID_TIMES.name, name
            continue
        assert runs_, f"{name} lists no source runs"
        missing = [run for run, sha in runs_.items() if sha is None]
        assert not missing, f"{name} lists runs that do not exist: {missing[:3]}"
        assert all((paths.RUNS_DIR / run / paths.RESULTS_FILE).is_file() for run in runs_), name
