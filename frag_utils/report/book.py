"""Notebook 09 in one object. Each table or figure is declared once (:class:`Table`) beside the
function that builds it, in one module per family (``DECLARED`` and ``build(book)``, which may read
what an earlier chapter kept on the book); each carries the runs it was built from (:func:`sourced`)
to its provenance file; :class:`Book` reads the records once and builds a family per call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .. import paths, records
from .recorded import GRID_05, GRID_06, SEEDS_06, Records

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
        raise ValueError("a table or figure without its source runs: build it with book.sourced")
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


def families() -> tuple:
    """The families of tables, in chapter order (their modules import this one)."""
    from . import controls, frontier, grid, paper, targets, variants

    return frontier, paper, targets, controls, variants, grid


def tables() -> list[Table]:
    """Every declared table and figure, in chapter order."""
    return [t for family in families() for t in family.DECLARED]


class Book:
    """``profile``'s tables and figures from its grid's parameter files, ``n_boot`` resamples for every
    interval, ``min_utility_fraction`` the extended set's utility floor."""

    def __init__(self, profile: str, grid_05: str = GRID_05, grid_06: str = GRID_06, seeds_06: str = SEEDS_06,
                 n_boot: int = 2000, min_utility_fraction: float = 0.5) -> None:
        self.records = Records(profile, grid_05, grid_06, seeds_06)
        self.n_boot, self.min_utility_fraction = n_boot, min_utility_fraction
        self.built: dict[Table, Any] = {}
        # what a chapter keeps for later ones (the paper's Table 3, the frontier's): empty until it runs
        self.frontier_table3 = self.table3 = self.table3_checkpoints = sourced(pd.DataFrame(), [])
        print(f"{len(self.records.method_runs)} notebook-05 and {len(self.records.all_attacks)} notebook-06 records "
              f"of profile {profile!r}; stale attack records left out (their 05 run was redone or removed): "
              f"{self.records.stale or 'none'}")

    def chapter(self, family: Any, display: bool = True) -> dict[str, Any]:
        """Build one family, keep it for writing, show each table (a figure shows as the cell ends);
        returns them by name (a figure as ``<name>.png``)."""
        built = family.build(self)
        if set(built) - set(family.DECLARED):
            raise ValueError(f"{family.__name__} built tables it does not declare: {set(built) - set(family.DECLARED)}")
        self.built.update(built)
        if display:
            from IPython.display import Markdown, display

            for t, obj in built.items():
                if not t.figure:
                    display(Markdown(f"**`{t.name}`** ({len(obj)} rows)"), obj)
        return {f"{t.name}.png" if t.figure else t.name: obj for t, obj in built.items()}

    def write(self, out_dir: Path, prov: dict) -> list[str]:
        """Write every table and figure built (:func:`write`), then close the figures."""
        written = write(out_dir, prov, self.built)
        from .plots import close

        for fig in (obj for t, obj in self.built.items() if t.figure):
            close(fig)
        return written

    def summary(self) -> dict:
        """Notebook 09's own record: each table's source runs and rows, the figures."""
        return {"sources": {t.name: sources(obj) for t, obj in self.built.items()},
                "n_rows": {t.name: len(obj) for t, obj in self.built.items() if not t.figure},
                "figures": sorted(t.name for t in self.built if t.figure)}
