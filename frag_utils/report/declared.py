"""A table or figure of notebook 09, declared once beside the function that builds it (its name, how
it is written, whether it fills a docs block), and the writer. A built table or figure carries the
runs it read (:func:`sourced`), so no name can drop them on the way to its provenance file."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths, records

SOURCES = "source_runs"


@dataclass(frozen=True)
class Table:
    """Written as ``<name>.md/.tex/.csv`` (``formats``: per column, the Markdown and LaTeX cell format),
    or as ``<name>.png`` with ``figure``; ``block``: ``frag_utils.readme`` fills ``smol-<name>`` from it."""

    name: str
    formats: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    block: bool = True
    figure: bool = False


def sourced(obj: Any, runs: Any, **provenance: Any) -> Any:
    """``obj`` (a table or a figure) carrying the runs it was built from (or a rule in words, where
    no list can say it) and more ``provenance`` (the rules that chose its rows)."""
    obj.attrs = {SOURCES: runs if isinstance(runs, str) else list(runs), "provenance": provenance}
    return obj


def sources(obj: Any) -> list[str] | str:
    """The runs ``obj`` was built from; a table or figure never given them is refused."""
    if SOURCES not in getattr(obj, "attrs", {}):
        raise ValueError("a table or figure without its source runs: build it with declared.sourced")
    return obj.attrs[SOURCES]


def write(out_dir: Path, prov: dict, built: dict[Table, Any]) -> list[str]:
    """Write each non-empty table, then each figure, to ``out_dir`` with a provenance file naming
    its source runs, and remove every other table or figure there (one that came out empty, or
    that this code no longer makes). Returns the names written."""
    written = []
    for table, obj in sorted(built.items(), key=lambda item: item[0].figure):
        if table.figure:
            records.write_figure(obj, out_dir / table.name, {**prov, SOURCES: sources(obj)})
        elif len(obj):
            formats = {k: f for k, f in table.formats.items() if k in obj}
            records.write_table(obj, out_dir / table.name, {**prov, SOURCES: sources(obj), **obj.attrs["provenance"]},
                                formats=formats or None)
        else:
            continue
        written.append(table.name)
    for f in out_dir.iterdir():
        if f.name.split(".")[0] not in written and f.suffix in (".md", ".csv", ".tex", ".png", ".json") \
                and f.name != paths.RESULTS_FILE:
            f.unlink()
    return written
