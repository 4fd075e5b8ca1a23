"""Provenance that cannot go missing: a table never given its runs is refused; each name is declared
once. That every table and figure notebook 09 writes lists the runs it was built from, each a record
that exists, is checked on the notebook's own output (tests/test_regenerate.py)."""
import json

import pandas as pd
import pytest

from frag_utils import records
from frag_utils.report import book, families


def test_each_table_and_figure_is_declared_once():
    tables = families.tables()
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
