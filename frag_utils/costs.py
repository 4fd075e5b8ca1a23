"""What a grid costs: notebook time per notebook, from the executed records themselves.

Every executed notebook carries papermill's ``duration`` (seconds of the whole run, kernel start
to end) in its metadata; summed over a profile's recorded runs it is the notebook time a rerun of
the grid needs on the recording machine (issue 17 asks for it in the README).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def run_duration(executed: str | Path) -> float | None:
    """Seconds papermill recorded for one executed notebook, or None if it has none."""
    meta = json.loads(Path(executed).read_text()).get("metadata", {}).get("papermill", {})
    return meta.get("duration")


def notebook_times(specs: list) -> pd.DataFrame:
    """Per notebook: recorded runs, total hours and median minutes per run, over the complete runs
    of ``specs`` (:class:`frag_utils.runs.RunSpec`), with a last row ``all``."""
    rows = []
    from .runs import COLLECTORS

    for s in specs:
        if s.notebook.stem not in COLLECTORS and s.is_complete():
            d = run_duration(s.executed)
            if d is not None:
                rows.append({"notebook": s.notebook.stem, "seconds": float(d)})
    df = pd.DataFrame(rows, columns=["notebook", "seconds"])
    table = df.groupby("notebook").seconds.agg(["count", "sum", "median"]).reset_index()
    table = table.rename(columns={"count": "runs"}).assign(hours=lambda t: t["sum"] / 3600,
                                                          median_minutes=lambda t: t["median"] / 60)
    table = table[["notebook", "runs", "hours", "median_minutes"]]
    total = pd.DataFrame([{"notebook": "all", "runs": int(table.runs.sum()), "hours": float(table.hours.sum()),
                           "median_minutes": float(df.seconds.median() / 60) if len(df) else float("nan")}])
    return pd.concat([table, total], ignore_index=True)
