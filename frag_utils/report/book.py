"""Notebook 09 in one object: each family module declares its tables (``DECLARED``) and builds them
(``build(book)``, which may read what an earlier chapter kept on the book), each carrying the runs it was built
from (:func:`sourced`) to its provenance file; :class:`Book` reads the records once, builds a family per call."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .. import paths, records
from .recorded import GRID_05, GRID_06, SEEDS_06, Records

SOURCES = "source_runs"
# What the Markdown a page shows leaves to the CSV beside it (:func:`for_the_eye`): run paths, the
# bootstrap's bookkeeping, the authors' other model sizes, sentences of reasoning
HIDDEN = {"resampled", "degenerate_resamples", "p_perm", "within_p_perm", "within_strata", "requires", "authors_3B",
          "authors_pooled", "paper_3B", "paper_pooled", "what_follows", "target_utility_wo_fragile"}
MAX_COLUMNS = 12


@dataclass(frozen=True)
class Table:
    """Written as ``<name>.md/.tex/.csv`` (``formats``: per column, the Markdown and LaTeX cell format),
    as ``<name>.png`` with ``figure``, or as ``<name>.md`` alone with ``text`` (sentences built from
    other tables: :class:`Text`); ``block``: ``frag_utils.readme`` fills ``smol-<name>`` from it."""

    name: str
    formats: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    block: bool = True
    figure: bool = False
    text: bool = False
    shown: tuple[str, ...] = ()  # the columns its Markdown shows, where the rule of for_the_eye leaves too many
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # shorter Markdown headers


class Text(str):
    """Markdown sentences that carry their source runs like a table (:func:`sourced`)."""


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


def interval(point: float, low: float, high: float, fmt: str = "+.2f") -> str:
    """An estimate with its interval in one cell, ``+0.03 [-0.36, +0.58]``."""
    return f"{point:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def _is_run(df: pd.DataFrame, column: str) -> bool:
    """Whether ``column`` holds run paths (text), not a count of runs."""
    named = column in ("run", "runs") or column.endswith("_run") or column.startswith("attack_run")
    return named and not pd.api.types.is_numeric_dtype(df[column])


def short_verdict(text: Any) -> Any:
    """A verdict as a table shows it: no parentheses, a long clause cut at its first colon (the CSV keeps all)."""
    if not isinstance(text, str):
        return text
    clauses = [re.sub(r" \([^()]*(\([^()]*\)[^()]*)*\)", "", c).strip() for c in text.split("; ")]
    if len("; ".join(clauses)) > 60:  # "not resolved: the interval includes 0" -> "not resolved"
        clauses = [c.split(": ")[0] if len(c) > 30 else c for c in clauses]
    return "; ".join(clauses)


def for_the_eye(df: pd.DataFrame, table: Table) -> tuple[pd.DataFrame, dict[str, str]]:
    """The table as its Markdown shows it, and the formats of what is left: no run paths or :data:`HIDDEN`
    columns, each interval in one cell, at most :data:`MAX_COLUMNS` columns (``table.shown``)."""
    formats = dict(table.formats)
    out = df[[c for c in df.columns if not _is_run(df, c) and c not in HIDDEN]].copy()
    for prefix in ("", "within_"):
        low, high = f"{prefix}low", f"{prefix}high"
        points = [c for c in out.columns if c == f"{prefix}rho" or (not prefix and c.startswith("ours_"))]
        if low in out and high in out and points:
            fmt, point = formats.get(points[0], "+.2f"), out[points[0]]
            out[points[0]] = [x if not isinstance(x, (int, float)) or x != x else interval(x, lo, hi, fmt)
                              for x, lo, hi in zip(point, out[low], out[high])]
            formats.pop(points[0], None)
            out = out.drop(columns=[low, high])
    if "verdict" in out:
        out["verdict"] = out.verdict.map(short_verdict)
    if table.shown:
        out = out[list(table.shown)]
    out = out.rename(columns=table.labels)
    formats = {table.labels.get(k, k): f for k, f in formats.items()}
    if len(out.columns) > MAX_COLUMNS:
        raise ValueError(f"{table.name} shows {len(out.columns)} columns in Markdown: declare the {MAX_COLUMNS} "
                         "a reader compares (Table.shown)")
    return out, {k: f for k, f in formats.items() if k in out}


def markdown(df: pd.DataFrame, table: Table) -> str:
    """The table as a page shows it (:func:`for_the_eye`): the CSV and LaTeX keep every column."""
    shown, formats = for_the_eye(df, table)
    return shown.to_markdown(index=False, floatfmt=tuple(formats.get(c, ".3f") for c in shown.columns))


def write(out_dir: Path, prov: dict, built: dict[Table, Any]) -> list[str]:
    """Write each non-empty table, then each figure, to ``out_dir`` with a provenance file naming its
    source runs, remove every other one there (empty now, or no longer made); returns the names written."""
    written = []
    for table, obj in sorted(built.items(), key=lambda item: item[0].figure):
        if table.figure:
            records.write_figure(obj, out_dir / table.name, {**prov, SOURCES: sources(obj)})
        elif table.text and obj:
            md = records.atomic_write_text((out_dir / table.name).with_suffix(".md"), f"{obj}\n")
            records.write_json((out_dir / table.name).with_suffix(".provenance.json"), {"files": [md.name]},
                               {**prov, SOURCES: sources(obj)})
        elif len(obj):
            formats = {k: f for k, f in table.formats.items() if k in obj}
            records.write_table(obj, out_dir / table.name, {**prov, SOURCES: sources(obj), **obj.attrs["provenance"]},
                                formats=formats or None)
            records.atomic_write_text((out_dir / table.name).with_suffix(".md"), markdown(obj, table) + "\n")
        else:
            continue
        written.append(table.name)
    for f in out_dir.iterdir():
        if f.name.split(".")[0] not in written and f.suffix in (".md", ".csv", ".tex", ".png", ".json") \
                and f.name != paths.RESULTS_FILE:
            f.unlink()
    return written


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
        self.predictor_ranks, self.predictors_best = sourced(pd.DataFrame(), []), {}  # notebook 08's, once read
        print(f"{len(self.records.method_runs)} notebook-05 and {len(self.records.all_attacks)} notebook-06 records "
              f"of profile {profile!r}; stale attack records left out (their 05 run was redone or removed): "
              f"{self.records.stale or 'none'}")

    def chapter(self, family: Any, display: bool = True) -> dict[str, Any]:
        """Build one family and keep it for writing, show each table; returns them by name (a figure ``<name>.png``)."""
        built = family.build(self)
        if set(built) - set(family.DECLARED):
            raise ValueError(f"{family.__name__} built tables it does not declare: {set(built) - set(family.DECLARED)}")
        self.built.update(built)
        if display:
            from IPython.display import Markdown, display

            for t, obj in built.items():
                if t.text:
                    display(Markdown(obj))
                elif not t.figure:  # as its page shows it, whole: a wide frame would be cut in the record
                    shown = f"\n\n{markdown(obj, t)}" if len(obj) else ""
                    display(Markdown(f"**`{t.name}`** ({len(obj)} rows){shown}"))
        return {f"{t.name}.png" if t.figure else t.name: obj for t, obj in built.items()}

    def write(self, out_dir: Path, prov: dict) -> list[str]:
        """Write every table and figure built (:func:`write`), then close the figures."""
        written = write(out_dir, prov, self.built)
        import matplotlib.pyplot as plt

        for fig in (obj for t, obj in self.built.items() if t.figure):
            plt.close(fig)
        return written

    def summary(self) -> dict:
        """Notebook 09's own record: each table's source runs and rows, the figures."""
        return {"sources": {t.name: sources(obj) for t, obj in self.built.items()},
                "n_rows": {t.name: len(obj) for t, obj in self.built.items() if not (t.figure or t.text)},
                "figures": sorted(t.name for t in self.built if t.figure)}
