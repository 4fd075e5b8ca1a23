"""What a grid costs, from the executed records: papermill's ``duration`` of each run (kernel start to
end, on the machine that made it). A run not recorded yet is estimated by the median recorded run
of its kind (:func:`run_kind`), an attack of e epochs at e times one epoch of its kind, else by its
notebook's median; a notebook with no recorded run has no estimate.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from . import paths


def run_duration(executed: str | Path) -> float | None:
    """Seconds papermill recorded for one executed notebook, or None if it has none."""
    meta = json.loads(Path(executed).read_text()).get("metadata", {}).get("papermill", {})
    return meta.get("duration")


def run_kind(notebook: str, params: dict) -> str:
    """What decides a run's cost within its notebook: the unlearning method (pruning takes
    seconds, training minutes), the attack's data (30 records or 300) and whether it measures
    Model Utility after."""
    if notebook == "05_unlearn":
        return str(params.get("method"))
    if notebook == "06_attacks":
        return f"{params.get('attack_data')}|{params.get('eval_utility', True)}|{params.get('epochs', 1)}"
    return notebook


def _estimator(df: pd.DataFrame):
    """``estimate(notebook, kind)`` from ``df`` (``notebook, kind, seconds``) by the module's rule; None
    where ``df`` has no recorded run of the notebook."""
    by_kind = df.groupby(["notebook", "kind"]).seconds.median()
    by_notebook = df.groupby("notebook").seconds.median()

    def estimate(notebook: str, kind: str) -> float | None:
        if pd.notna(by_kind.get((notebook, kind))):
            return float(by_kind[(notebook, kind)])
        if notebook == "06_attacks" and not kind.endswith("|1"):  # e epochs: e times one epoch of its data
            data, utility, epochs = kind.rsplit("|", 2)
            one = by_kind.get((notebook, f"{data}|{utility}|1"))
            return None if pd.isna(one) else float(one) * int(epochs)
        found = by_notebook.get(notebook)
        return None if found is None or pd.isna(found) else float(found)
    return estimate


def _durations(specs: list) -> pd.DataFrame:
    """``notebook, kind, seconds`` of each spec but collectors (NaN where it has no complete record)."""
    from .runs import COLLECTORS

    rows = [{"notebook": s.notebook.stem, "kind": run_kind(s.notebook.stem, s.params),
             "seconds": run_duration(s.executed) if s.is_complete() else None}
            for s in specs if s.notebook.stem not in COLLECTORS]
    return pd.DataFrame(rows, columns=["notebook", "kind", "seconds"]).astype({"seconds": float})


def notebook_times(specs: list) -> pd.DataFrame:
    """Per notebook of ``specs`` (:class:`frag_utils.runs.RunSpec`, collectors left out), and ``all``:
    runs listed and recorded, recorded hours, median minutes, estimated hours of the whole list, and
    the runs with nothing to be estimated from (``not_estimated``), which that estimate leaves out."""
    df = _durations(specs)
    estimate = _estimator(df)
    fill = [estimate(n, k) for n, k in zip(df.notebook, df.kind)]
    df["estimated"] = df.seconds.fillna(pd.Series(fill, index=df.index, dtype=float))
    table = df.groupby("notebook").agg(runs=("kind", "size"), recorded=("seconds", "count"),
                                       hours=("seconds", "sum"), median=("seconds", "median"),
                                       estimated=("estimated", lambda e: e.sum(min_count=1)),
                                       not_estimated=("estimated", lambda e: int(e.isna().sum()))).reset_index()
    total = pd.DataFrame([{"notebook": "all", "runs": len(df), "recorded": int(df.seconds.count()),
                           "hours": df.seconds.sum(), "median": df.seconds.median(),
                           "estimated": table.estimated.sum(min_count=1),
                           "not_estimated": int(table.not_estimated.sum())}])
    table = pd.concat([table, total], ignore_index=True)
    table["hours"] = table["hours"] / 3600
    table["median_minutes"] = table.pop("median") / 60
    table["estimated_hours"] = table.pop("estimated") / 3600
    return table[["notebook", "runs", "recorded", "hours", "median_minutes", "estimated_hours", "not_estimated"]]


def job_seconds(jobs: list, universe: list) -> list[float | None]:
    """About how long each job (:class:`frag_utils.runs.Job`) of a plan takes where the records were
    made: a recorded run as long as its record took (a remake of some of notebook 02's models, as
    long as their training took), another by the module's rule over ``universe``."""
    stems = {j.spec.notebook.stem for j in jobs}
    estimate = _estimator(_durations([s for s in universe if s.notebook.stem in stems]))
    out = []
    for j in jobs:
        own = run_duration(j.spec.executed) if j.spec.executed.is_file() else None
        if own is not None and j.roles:  # a remake of some of notebook 02's models: their training
            training = json.loads((j.spec.out_dir / paths.RESULTS_FILE).read_text())["results"]["training"]
            own = sum(training[r].get("summary", {}).get("train_seconds", 0) for r in j.roles)
        out.append(float(own) if own is not None else estimate(j.spec.notebook.stem,
                                                               run_kind(j.spec.notebook.stem, j.spec.params)))
    return out


def minutes(seconds: float | None) -> str:
    """A duration as a plan shows it: ``about 27 min``, ``about 2.1 h``; ``no estimate`` for None."""
    if seconds is None:
        return "no estimate"
    return f"about {seconds / 3600:.1f} h" if seconds >= 5400 else f"about {max(1, round(seconds / 60))} min"
