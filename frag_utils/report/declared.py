"""What a table or figure of notebook 09 is, declared once, and how it is written.

Each family module declares its tables and figures (:class:`Table`: the name, how it is written,
the docs block it fills) beside the function that builds them (``build(book)``), and each table
or figure it builds carries the runs it read (:func:`sourced`): the writer reads them from the
object, so a name cannot drop them. :data:`FAMILIES` (:mod:`frag_utils.report.book`) orders the
families; :func:`frag_utils.report.book.declared` lists every declaration, for the writer and
:mod:`frag_utils.readme`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths, records

SOURCES = "source_runs"


@dataclass(frozen=True)
class Table:
    """One table (or, with ``figure``, one figure) notebook 09 writes under ``name``.

    Attributes:
        formats: per column (of those the table has), the format of its Markdown and LaTeX cells.
        provenance: more provenance written with it, the same on every run.
        block: whether ``readme`` fills the docs block ``smol-<name>`` from its Markdown file.
    """

    name: str
    formats: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    provenance: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    block: bool = True
    figure: bool = False


def sourced(obj: Any, runs: list[str] | Any, **provenance: Any) -> Any:
    """``obj`` (a table or a figure) carrying the runs it was built from (a rule in words where no
    list can say it) and ``provenance`` (the rules that chose its rows)."""
    obj.attrs = {SOURCES: list(runs) if not isinstance(runs, str) else runs, "provenance": provenance}
    return obj


def sources(obj: Any) -> list[str]:
    """The runs ``obj`` was built from (:func:`sourced`); a table that was never given them is refused."""
    attrs = getattr(obj, "attrs", {})
    if SOURCES not in attrs:
        raise ValueError("a table or figure without its source runs: build it with declared.sourced")
    return attrs[SOURCES]


def write(out_dir: Path, prov: dict, built: dict[Table, Any]) -> list[str]:
    """Write each non-empty table (Markdown, LaTeX, CSV, and provenance naming its source runs) and
    each figure (PNG, provenance) to ``out_dir``, the tables first, and remove every other table or
    figure there (no stale file: a table that came out empty, a figure not drawn, one this code no
    longer makes). Returns the names written."""
    written = []
    for table, obj in built.items():
        if table.figure or not len(obj):
            continue
        formats = {k: f for k, f in table.formats.items() if k in obj}
        records.write_table(obj, out_dir / table.name, {**prov, SOURCES: sources(obj), **table.provenance,
                                                        **obj.attrs["provenance"]}, formats=formats or None)
        written.append(table.name)
    for table, fig in built.items():
        if table.figure and fig is not None:
            records.write_figure(fig, out_dir / table.name, {**prov, SOURCES: sources(fig)})
            written.append(table.name)
    for f in out_dir.iterdir():
        if f.name.split(".")[0] not in written and f.suffix in (".md", ".csv", ".tex", ".png", ".json") \
                and f.name != paths.RESULTS_FILE:
            f.unlink()
    return written
