"""How far a rerun landed from its record, judged by ``papermill_runs/tolerance.yaml``.

One machine reproduces its own runs bit for bit (a fixed thread count); another machine's kernels
round differently, and training amplifies that into other weights. A rerun is therefore judged by
its numbers, each against an absolute tolerance per metric (the last key of the number's path in
``results.json``: ``es``, ``model_utility``, ``a_f``, ...), set from measured drift. Numbers whose
key has no tolerance (per-example lists, losses, wall times) are not judged.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import yaml

from . import paths

TOLERANCE_FILE = paths.REPO_ROOT / "papermill_runs" / "tolerance.yaml"
# What differs between any two runs of one notebook with the same parameters: wall times (keys
# ending in "seconds"), whether something came from the cache (keys ending in "cached"), the time
# of writing, the traces of an interrupted run, and the cache key (it names the code's hash)
VOLATILE_KEYS = ("written_at", "resumed_from", "reused", "cache_key")


def load_tolerance(file: Path = TOLERANCE_FILE) -> dict[str, tuple[float, float]]:
    """Metric name -> ``(absolute, relative)`` tolerance (a number in the file is absolute,
    ``{relative: r}`` a fraction of the recorded value)."""
    table = yaml.safe_load(Path(file).read_text())
    out = {}
    for name, value in (table.items() if isinstance(table, dict) else []):
        rel = value.get("relative") if isinstance(value, dict) and set(value) == {"relative"} else None
        if not (isinstance(value, (int, float)) and value >= 0 or isinstance(rel, (int, float)) and rel >= 0):
            raise ValueError(f"{file}: the tolerance of {name!r} must be a number >= 0 (absolute) or "
                             f"{{relative: r}} with r >= 0, got {value!r}.")
        out[str(name)] = (0.0, float(rel)) if rel is not None else (float(value), 0.0)
    if not out:
        raise ValueError(f"{file} must map metric names to tolerances, e.g. 'es: 0.05'.")
    return out


def record_differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two records (JSON values) differ, volatile keys (``VOLATILE_KEYS``, ``*seconds``, ``*cached``) left
    out; numbers exactly (NaN equals NaN); two absolute paths count as the same (two caches)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k.endswith(("seconds", "cached")) or k in VOLATILE_KEYS:
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'the first' if k in a else 'the second'}")
            else:
                out += record_differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items against {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in record_differences(x, y, f"{path}[{i}]")]
    same = a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b) or (
        isinstance(a, str) and isinstance(b, str) and os.path.isabs(a) and os.path.isabs(b))
    return [] if same else [f"{path}: {a!r} against {b!r}"]


def _numbers(value: Any, path: str = "") -> dict[str, float]:
    """Every number of a record outside lists, by its path (``/evaluation/target/es``)."""
    if isinstance(value, dict):
        return {p: v for k, sub in value.items() for p, v in _numbers(sub, f"{path}/{k}").items()}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {path: float(value)}
    return {}


def compare(recorded_file: Path, remade_file: Path, tolerance: dict[str, tuple[float, float]] | None = None) -> dict:
    """The drift of a remade record against the recorded one.

    Returns:
        ``verdict`` (``bit-identical``: every number and weight hash equal; ``within tolerance``;
        ``outside tolerance``), ``rows`` (per judged number: ``metric``, ``recorded``, ``remade``,
        ``drift``, ``tolerance``, ``ok``) and ``weights`` (role -> ``identical`` or ``other bits``).
    """
    tolerance = load_tolerance() if tolerance is None else tolerance
    recorded = json.loads(Path(recorded_file).read_text())["results"]
    remade = json.loads(Path(remade_file).read_text())["results"]
    ours, theirs = _numbers(recorded), _numbers(remade)
    rows = []
    for path in sorted(set(ours) & set(theirs)):
        name = path.rsplit("/", 1)[-1]
        if name in tolerance:
            drift = abs(theirs[path] - ours[path])
            allowed = tolerance[name][0] + tolerance[name][1] * abs(ours[path])
            ok = drift <= allowed or (math.isnan(ours[path]) and math.isnan(theirs[path]))
            rows.append({"metric": path, "recorded": ours[path], "remade": theirs[path], "drift": drift,
                         "tolerance": allowed, "ok": bool(ok)})
    hashes = recorded.get("checkpoint_sha256", {}), remade.get("checkpoint_sha256", {})
    weights = {k: "identical" if hashes[0].get(k) == hashes[1].get(k) else "other bits"
               for k in sorted(set(hashes[0]) | set(hashes[1]))}
    verdict = ("bit-identical" if not record_differences(recorded, remade) else
               "within tolerance" if all(r["ok"] for r in rows) else "outside tolerance")
    return {"verdict": verdict, "rows": rows, "weights": weights}


def format_report(run: str, report: dict) -> str:
    """The drift table of one run, as the runner and ``make verify`` print it."""
    relation = "to" if report["verdict"] == "bit-identical" else "of"
    lines = [f"{run}: remade, {report['verdict']} {relation} its record (tolerances: papermill_runs/tolerance.yaml)"]
    if report["verdict"] != "bit-identical":
        lines.append(f"  {'metric':<44} {'recorded':>10} {'remade':>10} {'drift':>9} {'tolerance':>9}")
        for r in report["rows"]:
            lines.append(f"  {r['metric']:<44} {r['recorded']:>10.4f} {r['remade']:>10.4f} {r['drift']:>9.4f} "
                         f"{r['tolerance']:>9.4f}{'' if r['ok'] else '  OUTSIDE'}")
        if report["weights"]:
            lines.append("  weights: " + ", ".join(f"{k} {v}" for k, v in report["weights"].items()))
    return "\n".join(lines)
