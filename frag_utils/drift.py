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
import re
from pathlib import Path
from typing import Any

import yaml

from . import paths

TOLERANCE_FILE = paths.REPO_ROOT / "papermill_runs" / "tolerance.yaml"
# What differs between any two runs of one notebook with the same parameters: wall times (keys
# ending in "seconds"), whether something came from the cache (keys ending in "cached"), the time
# of writing, the traces of an interrupted run, the cache key (it names the code's hash), whether
# FRAG streamed the original from disk (it does when both calibrations are cached; the numbers are
# the same either way), and the provenance a model's record carries into the run's (the commit and
# machine that made it: a remake is made by another; its kernel path is compared on its own)
VOLATILE_KEYS = ("written_at", "resumed_from", "reused", "cache_key", "original_streamed", "provenance")


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


def _judged(path: str, recorded: float, remade: float, drift: float,
            tolerance: dict[str, tuple[float, float]]) -> dict | None:
    """One row of a drift table: the number at ``path`` judged by the tolerance of its last key (a
    NaN on both sides is no drift), or None where the tolerance file does not name it."""
    name = path.rsplit("/", 1)[-1]
    if name not in tolerance:
        return None
    allowed = tolerance[name][0] + tolerance[name][1] * abs(recorded)
    ok = drift <= allowed or (math.isnan(recorded) and math.isnan(remade))
    return {"metric": path, "recorded": recorded, "remade": remade, "drift": drift, "tolerance": allowed,
            "ok": bool(ok)}


def compare(recorded_file: Path, remade_file: Path, tolerance: dict[str, tuple[float, float]] | None = None) -> dict:
    """The drift of a remade record against the recorded one.

    Returns:
        ``verdict`` (``bit-identical``: every number and weight hash equal; ``within tolerance``;
        ``outside tolerance``), ``rows`` (per judged number: ``metric``, ``recorded``, ``remade``,
        ``drift``, ``tolerance``, ``ok``), ``weights`` (role -> ``identical`` or ``other bits``), ``kernels``
        (the kernel paths that made the record and the remake) and ``differences`` (where the two
        differ at all: :func:`record_differences`).
    """
    tolerance = load_tolerance() if tolerance is None else tolerance
    from .kernel_paths import of_records

    both = [json.loads(Path(f).read_text()) for f in (recorded_file, remade_file)]
    recorded, remade = (r["results"] for r in both)
    ours, theirs = _numbers(recorded), _numbers(remade)
    rows = [row for path in sorted(set(ours) & set(theirs))
            if (row := _judged(path, ours[path], theirs[path], abs(theirs[path] - ours[path]), tolerance))]
    hashes = recorded.get("checkpoint_sha256", {}), remade.get("checkpoint_sha256", {})
    weights = {k: "identical" if hashes[0].get(k) == hashes[1].get(k) else "other bits"
               for k in sorted(set(hashes[0]) | set(hashes[1]))}
    differences = record_differences(recorded, remade)
    verdict = ("bit-identical" if not differences else
               "within tolerance" if all(r["ok"] for r in rows) else "outside tolerance")
    kernels = [", ".join(sorted(of_records([r]))) or "?" for r in both]  # the paths that made each
    return {"verdict": verdict, "rows": rows, "weights": weights, "kernels": kernels, "differences": differences}


def remade_dir(notebook: str, run: str) -> Path:
    """Where the runner remakes a recorded run (:func:`frag_utils.runs.remake`): ``<cache>/remade/<notebook>/<run>``,
    in the cache of the kernel path the process runs on."""
    return paths.cache_dir() / "remade" / notebook / run


def of_remade(notebook: str, run: str, role: str, sha256: str | None) -> dict | None:
    """How far the remake of the recorded run ``notebook``/``run`` that made the weights ``sha256`` of ``role`` landed
    from that run's record: the remake the runner wrote (:func:`remade_dir`), judged by :func:`compare`. A run that
    reads a checkpoint remade on another CPU's kernels (other bits) records this, so that a reader can tell whether
    the weights it measured stand in for the recorded ones.

    Returns:
        ``verdict`` of :func:`compare` (``unjudged`` where the bits differ and no number has a tolerance),
        ``kernels``, ``judged`` (how many numbers a tolerance judged), ``outside`` (the metrics outside tolerance)
        and ``largest`` (the judged number whose drift is the largest share of its tolerance: ``metric``, ``drift``,
        ``tolerance``); None where the cache holds no remake of the run that made those weights.
    """
    recorded = paths.RUNS_DIR / notebook / run / paths.RESULTS_FILE
    remade = remade_dir(notebook, run) / paths.RESULTS_FILE
    if not (sha256 and recorded.is_file() and remade.is_file()):
        return None
    if json.loads(remade.read_text())["results"].get("checkpoint_sha256", {}).get(role) != sha256:
        return None  # remade again since, or these weights came from elsewhere
    report = compare(recorded, remade)
    rows = report["rows"]

    def share(r: dict) -> float:  # of its tolerance; NaN on both sides is no drift, on one side outside any
        d = r["drift"]
        if math.isnan(d):
            return 0.0 if r["ok"] else math.inf
        return d / r["tolerance"] if r["tolerance"] else 0.0 if d == 0 else math.inf

    largest = max(rows, key=share, default=None)
    verdict = "unjudged" if report["verdict"] != "bit-identical" and not rows else report["verdict"]
    return {"verdict": verdict, "kernels": report["kernels"], "judged": len(rows),
            "outside": [r["metric"] for r in rows if not r["ok"]],
            "largest": largest and {k: largest[k] for k in ("metric", "drift", "tolerance")}}


_SHOWN = 5  # differences named under a drift table


def format_report(run: str, report: dict) -> str:
    """The drift table of one run, as the runner and ``make verify`` print it."""
    relation = "to" if report["verdict"] == "bit-identical" else "of"
    kernels = report.get("kernels")
    if kernels and "?" in kernels:  # a GPU's record, or one from before paths were recorded: nothing to name
        kernels = None
    on = (f"kernels: {kernels[0]}, as the record; " if kernels and kernels[0] == kernels[1] else
          f"kernels: the record's {kernels[0]}, this remake's {kernels[1]}; " if kernels else "")
    lines = [f"{run}: remade, {report['verdict']} {relation} its record "
             f"({on}tolerances: papermill_runs/tolerance.yaml)"]
    if report["verdict"] != "bit-identical":
        lines.append(f"  {'metric':<44} {'recorded':>10} {'remade':>10} {'drift':>9} {'tolerance':>9}")
        for r in report["rows"]:
            lines.append(f"  {r['metric']:<44} {r['recorded']:>10.4f} {r['remade']:>10.4f} {r['drift']:>9.4f} "
                         f"{r['tolerance']:>9.4f}{'' if r['ok'] else '  OUTSIDE'}")
        if report["weights"]:
            lines.append("  weights: " + ", ".join(f"{k} {v}" for k, v in report["weights"].items()))
        differences = report.get("differences", [])
        if differences:  # the table's four decimals can hide them; say where the bits differ
            shown = "; ".join(d if len(d) <= 120 else d[:117] + "..." for d in differences[:_SHOWN])
            more = f"; {len(differences) - _SHOWN} more" if len(differences) > _SHOWN else ""
            lines.append(f"  differs from the record at: {shown}{more}")
    return "\n".join(lines)


_ROW = re.compile(r"^\s+(/.*?)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)(\s+OUTSIDE)?\s*$")
_HEADER = re.compile(r"^(\S+): remade, (bit-identical|within tolerance|outside tolerance) ")


def rejudge(printed: str, run: str, tolerance: dict[str, tuple[float, float]] | None = None) -> dict:
    """``run``'s drift table as :func:`format_report` printed it (another machine's ``make verify``,
    kept in a file such as ``docs/verify/*.md``, one table per run of the chain) judged again by the
    tolerance file as it stands: the numbers and drifts stay the ones printed (to four decimals),
    the verdict follows today's tolerances.

    Returns:
        :func:`compare`'s report (a table printed as bit-identical stays so; otherwise ``within
        tolerance`` or ``outside tolerance``).
    Raises:
        ValueError: ``printed`` holds no table of ``run``, or more than one.
    """
    tolerance = load_tolerance() if tolerance is None else tolerance
    blocks: list[tuple[str, str, list[str]]] = []
    for line in printed.splitlines():
        header = _HEADER.match(line)
        if header:
            blocks.append((header[1], header[2], []))
        elif blocks:
            blocks[-1][2].append(line)
    mine = [b for b in blocks if b[0] == run]
    if len(mine) != 1:
        found = ", ".join(b[0] for b in blocks) or "none"
        raise ValueError(f"{'no' if not mine else 'more than one'} drift table of {run} found (tables found: {found}): "
                         "give a file holding what make verify printed for that run.")
    _, verdict, lines = mine[0]
    if verdict == "bit-identical":
        return {"verdict": verdict, "rows": [], "weights": {}}
    rows, weights = [], {}
    for line in lines:
        if line.strip().startswith("weights:"):
            pairs = [w.strip().split(" ", 1) for w in line.split(":", 1)[1].split(",")]
            weights = {p[0]: p[1] for p in pairs if len(p) == 2}
        row = _ROW.match(line)
        if not row:
            continue
        try:
            recorded, remade, drift = float(row[2]), float(row[3]), float(row[4])
        except ValueError:  # the column names
            continue
        if judged := _judged(row[1], recorded, remade, drift, tolerance):
            rows.append(judged)
    if not rows:
        raise ValueError(f"the drift table of {run} holds no row with a tolerance in the tolerance file.")
    return {"verdict": "within tolerance" if all(r["ok"] for r in rows) else "outside tolerance",
            "rows": rows, "weights": weights}


# -- tolerances from the measured spread of the target's training seed (issue 43) ----------------
# The evaluation numbers of notebook 02 whose spread over training seeds sets their tolerance: the
# last key of a number's path (the three utility sets share probability, rouge and truth_ratio).
SEED_METRICS = ("es", "es_retain", "model_utility", "forget_probability", "forget_rouge", "forget_truth_ratio",
                "probability", "rouge", "truth_ratio")
# the same quantities measured on the unlearned and attacked models take the tolerance of their kind
SAME_KIND = {"es_before": "es", "es_after": "es", "model_utility_before": "model_utility",
             "model_utility_after": "model_utility"}
SEED_FLOOR = 0.02  # a number that barely moves between seeds still moves by kernel rounding on another CPU


def seed_spread(evaluations: list[dict], roles: tuple[str, ...] = ("target", "gold")) -> dict[str, dict]:
    """How far each evaluation number of notebook 02 moves with the training seed alone.

    Args:
        evaluations: the ``results["evaluation"]`` of notebook-02 records that differ only in the
            training seed (made on one machine).
    Returns:
        Metric (:data:`SEED_METRICS`) -> ``{"range": the largest max − min over seeds of any number
        of that metric (each role, each utility set), "where": that number's path}``.
    Raises:
        ValueError: fewer than two evaluations.
    """
    if len(evaluations) < 2:
        raise ValueError(f"a spread needs two or more seeds' evaluations, got {len(evaluations)}.")
    out: dict[str, dict] = {}
    numbers = seed_numbers(evaluations, roles)
    for role in roles:
        for path in sorted(p for p in numbers if p.startswith(f"/{role}/")):
            metric, values = path.rsplit("/", 1)[-1], numbers[path]
            spread = max(values) - min(values)
            if spread >= out.get(metric, {}).get("range", -1.0):
                out[metric] = {"range": spread, "where": path}
    return out


def seed_numbers(evaluations: list[dict], roles: tuple[str, ...] = ("target", "gold")) -> dict[str, list[float]]:
    """Each number of :data:`SEED_METRICS` that every one of ``evaluations`` (notebook 02's, one per
    training seed) holds, by path (``/target/es``; roles in order, paths in the first evaluation's
    order), with its value in each evaluation."""
    out: dict[str, list[float]] = {}
    for role in roles:
        numbers = [_numbers(ev[role], f"/{role}") for ev in evaluations]
        for path in numbers[0] if numbers else {}:
            if path.rsplit("/", 1)[-1] in SEED_METRICS and all(path in n for n in numbers):
                out[path] = [n[path] for n in numbers]
    return out


def derive_tolerances(spread: dict[str, dict], floor: float = SEED_FLOOR) -> dict[str, float]:
    """The tolerance of each metric of ``spread`` (:func:`seed_spread`) and of its kind
    (:data:`SAME_KIND`): the larger of the three seeds' range and ``floor``, rounded up to 0.01.
    A remake on another CPU then passes where it lands as far from its record as another training
    seed would."""
    derived = {m: math.ceil(max(s["range"], floor) * 100 - 1e-9) / 100 for m, s in spread.items()}
    return {**derived, **{k: derived[v] for k, v in SAME_KIND.items() if v in derived}}


# the notebook-02 runs of the smol profile that differ only in the training seed (42, 43, 44)
SEED_RUNS = ("smol", "smol.seeds__seed=43", "smol.seeds__seed=44")


def recorded_seed_evaluations(runs_dir: Path | None = None) -> dict[str, dict]:
    """The evaluations of :data:`SEED_RUNS` that are recorded, by run name."""
    root = (runs_dir or paths.RUNS_DIR) / "02_target_and_gold"
    return {name: json.loads((root / name / paths.RESULTS_FILE).read_text())["results"]["evaluation"]
            for name in SEED_RUNS if (root / name / paths.RESULTS_FILE).is_file()}


def target_shifts(second_target) -> dict[str, dict]:
    """How far the target's training seed moves what is measured on its unlearned and attacked
    models: from notebook 09's ``second_target`` (each checkpoint beside its twin from the other
    target), per metric (``es_before``, ``delta_es``, ``es_after`` = the two summed) the largest
    shift between twins and the checkpoint (``model``) where it is."""
    out: dict[str, dict] = {}
    for _, r in second_target.iterrows():
        shifts = {"es_before": r.es_before_43 - r.es_before_42, "delta_es": r.delta_es_43 - r.delta_es_42,
                  "es_after": (r.es_before_43 + r.delta_es_43) - (r.es_before_42 + r.delta_es_42)}
        for metric, shift in shifts.items():
            if abs(shift) >= out.get(metric, {}).get("range", -1.0):
                out[metric] = {"range": abs(shift), "where": r.model}
    return out


def attack_seed_range(delta_es: list[list[float]]) -> float:
    """The largest range (max − min) of ΔES over the attack seeds of one checkpoint."""
    return max((max(d) - min(d) for d in delta_es if len(d) > 1), default=float("nan"))
