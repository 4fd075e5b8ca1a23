"""The families of tables notebook 09 builds, in chapter order (each module declares its tables with
:class:`.book.Table`; :mod:`.book` only defines, so that nothing imports in a circle)."""
from __future__ import annotations

from . import controls, frontier, grid, paper, predictors, targets, variants
from .book import Table

FAMILIES = (frontier, predictors, paper, targets, controls, variants, grid)


def tables() -> list[Table]:
    """Every declared table and figure, in chapter order."""
    return [t for family in FAMILIES for t in family.DECLARED]
