"""Notebook 09 in one object: the records of a profile read once, each family of tables built and
shown by one call (a chapter), every table and figure written with the runs it was built from.

A family is a module with ``DECLARED`` (its :class:`declared.Table` s) and ``build(book)``, which may
read what an earlier chapter kept on the book (Table 3 and its checkpoints, the frontier's Table 3).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from . import controls, declared, frontier, grid, paper, plots, targets, variants
from .recorded import GRID_05, GRID_06, SEEDS_06, Records

FAMILIES = (frontier, paper, targets, controls, variants, grid)  # the chapters, in order


def tables() -> list[declared.Table]:
    """Every declared table and figure, in chapter order."""
    return [t for family in FAMILIES for t in family.DECLARED]


class Book:
    """``profile``'s tables and figures from its grid's parameter files, ``n_boot`` resamples for every
    interval, ``min_utility_fraction`` the extended set's utility floor."""

    def __init__(self, profile: str, grid_05: str = GRID_05, grid_06: str = GRID_06, seeds_06: str = SEEDS_06,
                 n_boot: int = 2000, min_utility_fraction: float = 0.5) -> None:
        self.records = Records(profile, grid_05, grid_06, seeds_06)
        self.n_boot, self.min_utility_fraction = n_boot, min_utility_fraction
        self.built: dict[declared.Table, Any] = {}
        # what a chapter keeps for later ones (the paper's Table 3, the frontier's): empty until it runs
        self.frontier_table3 = self.table3 = self.table3_checkpoints = declared.sourced(pd.DataFrame(), [])
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
        """Write every table and figure built (:func:`declared.write`), then close the figures."""
        written = declared.write(out_dir, prov, self.built)
        for fig in (obj for t, obj in self.built.items() if t.figure):
            plots.close(fig)
        return written

    def summary(self) -> dict:
        """Notebook 09's own record: each table's source runs and rows, the figures."""
        return {"sources": {t.name: declared.sources(obj) for t, obj in self.built.items()},
                "n_rows": {t.name: len(obj) for t, obj in self.built.items() if not t.figure},
                "figures": sorted(t.name for t in self.built if t.figure)}
