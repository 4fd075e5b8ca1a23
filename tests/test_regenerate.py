"""Regenerating the tables and figures from unchanged records changes no file (issue 20): notebook
09 run twice on the committed smol records writes the same bytes, provenance included; and what it
writes is what is committed in ``figures/smol/`` (every table, those with bootstrap intervals but
for the columns the bootstrap count moves, which the test lowers): the committed tables are
current with the records."""
import shutil

import pandas as pd

from frag_utils import paths, runs


def _collect(out: str, params: dict) -> None:
    import papermill

    papermill.execute_notebook(str(paths.NOTEBOOKS_DIR / "09_figures.ipynb"), out, parameters=params,
                               kernel_name=runs.KERNEL, cwd=str(paths.NOTEBOOKS_DIR), progress_bar=False,
                               log_output=False, extra_arguments=["--IPKernelApp.log_level=ERROR"])


def test_notebook_09_run_twice_writes_identical_tables_figures_and_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))  # the smoke run writes to its scratch
    scratch = paths.cache_dir() / "scratch" / "09_figures"
    params = {"profile": "smol", "run_name": "", "n_boot": 50}
    copies = []
    for i in range(2):
        _collect(str(tmp_path / f"09_{i}.ipynb"), params)
        copies.append(tmp_path / f"out{i}")
        shutil.copytree(scratch, copies[-1])
        shutil.rmtree(scratch)
    # the run's own record (results.json) carries the machine and time; every derived file must not
    written = sorted(p.name for p in copies[0].iterdir() if p.name != paths.RESULTS_FILE)
    assert any(n.endswith(".png") for n in written) and any(n.endswith(".provenance.json") for n in written)
    assert written == sorted(p.name for p in copies[1].iterdir() if p.name != paths.RESULTS_FILE)
    differ = [n for n in written if (copies[0] / n).read_bytes() != (copies[1] / n).read_bytes()]
    assert not differ, differ
    for n in written:
        text = (copies[0] / n).read_text(errors="ignore") if not n.endswith(".png") else ""
        assert "written_at" not in text and "cpu_model" not in text and str(paths.REPO_ROOT) not in text, n

    # the committed tables are what the code makes of the committed records (provenance differs
    # only by n_boot, and the tables with bootstrap intervals by their intervals)
    bootstrapped = ("table3_by_precision", "table3_recovered", "table3_extended", "claims", "claims_fp32",
                    "table3_panels", "frontier_table3", "frontier_panels", "headline")
    committed = paths.FIGURES_DIR / "smol"
    compared = [n for n in written if not n.endswith(".provenance.json") and n.split(".")[0] not in bootstrapped]
    assert sorted(compared) == sorted(p.name for p in committed.iterdir() if not p.name.endswith(".provenance.json")
                                      and p.name.split(".")[0] not in bootstrapped), "tables added or missing"
    stale = [n for n in compared if (copies[0] / n).read_bytes() != (committed / n).read_bytes()]
    # a bootstrapped table: every column but those the bootstrap count moves
    moved = ["low", "high", "within_low", "within_high", "degenerate_resamples", "verdict", "what_follows", "ours"]
    for name in bootstrapped:
        if (committed / f"{name}.csv").is_file():
            made, kept = (pd.read_csv(d / f"{name}.csv") for d in (copies[0], committed))
            drop = [*moved, "ours_fp32"] if name == "claims" else moved  # its fp32 cell holds an interval
            if not made.drop(columns=drop, errors="ignore").equals(kept.drop(columns=drop, errors="ignore")):
                stale.append(f"{name}.csv")
    assert not stale, (f"figures/smol is not what notebook 09 makes of the records: {stale}; "
                       "run make reproduce SELECT=09_figures")
