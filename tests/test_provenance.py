"""Provenance that cannot go missing: every table and figure notebook 09 writes lists the runs it was
built from, each a record that exists (the writer turns each into the sha256 of its results.json, or
None where there is none); a table never given its runs is refused; each name is declared once."""
import json

import pandas as pd
import pytest

from frag_utils import paths, records
from frag_utils.report import book, grid


def test_each_table_and_figure_is_declared_once():
    tables = book.tables()
    assert len({(t.name, t.figure) for t in tables}) == len(tables)
    # a table and a figure may share a name (the figure's provenance is written last), never two tables
    assert len({t.name for t in tables if not t.figure}) == len([t for t in tables if not t.figure])


def test_a_table_without_its_source_runs_is_not_written(tmp_path):
    table = book.Table("unsourced")
    with pytest.raises(ValueError, match="without its source runs"):
        book.write(tmp_path, {}, {table: pd.DataFrame({"a": [1]})})
    book.write(tmp_path, records.derived_provenance("test"), {table: book.sourced(pd.DataFrame({"a": [1]}),
                                                                                         [])})
    assert json.loads((tmp_path / "unsourced.provenance.json").read_text())["provenance"]["source_runs"] == {}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """What notebook 09's cells write from the committed smol records (few resamples: the provenance
    does not depend on them), as the notebook's last cell writes it."""
    out = tmp_path_factory.mktemp("figures")
    smol = book.Book("smol", n_boot=2)
    for family in book.families():
        smol.chapter(family, display=False)
    names = smol.write(out, records.derived_provenance("09_figures", {"profile": "smol"}))
    return out, names


def test_every_table_and_figure_lists_its_source_runs_and_each_exists(written):
    out, names = written
    assert names and sorted(set(names)) == sorted(p.name.split(".")[0] for p in out.glob("*.provenance.json"))
    for name in set(names):
        prov = json.loads((out / f"{name}.provenance.json").read_text())["provenance"]
        runs_ = prov["source_runs"]
        if isinstance(runs_, str):  # a rule in words where no list can say it: what the grid costs
            assert runs_ and name == grid.GRID_TIMES.name, name
            continue
        assert runs_, f"{name} lists no source runs"
        missing = [run for run, sha in runs_.items() if sha is None]
        assert not missing, f"{name} lists runs that do not exist: {missing[:3]}"
        assert all((paths.RUNS_DIR / run / paths.RESULTS_FILE).is_file() for run in runs_)
