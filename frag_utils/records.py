"""Seeding, provenance, and the one writer every result and table goes through.

Each artifact is written atomically (temporary file, then rename) so a crash never leaves a
half-written record, and carries its provenance: source notebook, parameters, seed, git commit,
package versions, device and threads.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import numerics, paths

TRACKED_PACKAGES = ("torch", "transformers", "accelerate", "peft", "datasets", "safetensors",
                    "numpy", "scipy", "pandas", "rouge-score", "papermill", "lm_eval")


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy and torch (CPU and every accelerator) as ``transformers.set_seed``
    does (the same generator states, ``tests/test_records.py``), without importing it: it lives in
    ``transformers.trainer_utils``, which imports peft and the Trainer's dependencies (about 4 s on a 2-core
    Zen 3) into every notebook that seeds and never trains.

    String hash randomisation (``PYTHONHASHSEED``) is not seeded: it is fixed when the interpreter
    starts, so it can only be set in the environment of the process before it starts.
    """
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # every device's generator
    torch.cuda.manual_seed_all(seed)  # as set_seed does; lazy, and a no-op without CUDA


# What runs write (records, collected tables, benchmark results): a change there is an output, not
# a change of the code that made it. Rerunning a recorded run deletes its own tracked results first,
# which would otherwise mark every rerun dirty. Parameter files (papermill_runs/params) do count.
# A record read by a later run (a 05 record read by 06, 07, 09) is then an input that "dirty" does
# not cover; the reading run lists it among its sources, each with its own provenance.
OUTPUT_PATHSPECS = (":(exclude,glob)papermill_runs/[0-9]*/**", ":(exclude)figures", ":(exclude)bench/results")


# Set by the runner before a notebook starts (``<commit>:<1|0|?>``): a record names the code the run
# started from, not whatever HEAD is when it ends hours later.
RUN_COMMIT_ENV = "FRAG_RUN_COMMIT"


def git_commit(root: str | os.PathLike | None = None) -> dict:
    """The repository's HEAD commit and whether tracked files other than outputs had uncommitted
    changes (``dirty``; see ``OUTPUT_PATHSPECS``); both ``None`` where git cannot tell (no git, not
    a repository).

    Args:
        root: the repository (default: this one).
    """
    if root is None and os.environ.get(RUN_COMMIT_ENV):  # a run of the runner: the code it started with
        commit, _, dirty = os.environ[RUN_COMMIT_ENV].partition(":")
        return {"commit": commit or None, "dirty": {"1": True, "0": False}.get(dirty)}

    def git(*args):  # a failing git (no repository, a rejected pathspec) must not read as "clean"
        return subprocess.run(["git", *args], cwd=root or paths.REPO_ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    try:
        return {"commit": git("rev-parse", "HEAD") or None,
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", *OUTPUT_PATHSPECS))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far.

    On Linux the high-water mark of /proc/self/status (``VmHWM``): ``ru_maxrss`` would carry over
    the peak of the process that started this one (the kernel keeps it across fork and exec)."""
    import re
    import resource

    status = Path("/proc/self/status")
    if status.is_file():
        found = re.search(r"VmHWM:\s+(\d+) kB", status.read_text())
        if found:
            return int(found.group(1)) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS reports bytes, Linux KiB


def environment() -> dict:
    """Versions, device and thread count, for the record."""
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": sys.version.split()[0], "platform": platform.platform(), "packages": versions,
        "device": "cuda:" + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), **cpu_description(),
        "frag_threads": numerics.threads(),
    }


# CPU features that change which kernels torch's bf16 (autocast) matmuls run on, and so their
# rounding: the same code on two CPUs trains to different weights (README, "Reproducibility")
BF16_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_description() -> dict:
    """The CPU's model name, torch's CPU capability (the kernels it dispatches to) and the
    bf16-relevant flags, where the machine tells (Linux ``/proc/cpuinfo``)."""
    out = {"cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return out
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), None)
    flags = next((set(line.split(":", 1)[1].split()) for line in info.splitlines() if line.startswith("flags")), set())
    return {**out, "cpu_model": model, "cpu_flags": [f for f in BF16_FLAGS if f in flags]}


def provenance(source: str, params: dict | None = None, seed: int | None = None) -> dict:
    """Everything needed to say where an artifact came from."""
    return {"source": source, "params": params or {}, "seed": seed, "git": git_commit(),
            "environment": environment(),
            "written_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def derived_provenance(source: str, params: dict | None = None) -> dict:
    """Provenance for an artifact derived from run records (notebook 09's tables and figures):
    only what determines it. Add ``source_runs`` (``["<notebook>/<run>", ...]``); when written,
    each becomes the sha256 of its ``results.json`` and the commits those records were made at
    are listed. No machine, time or checkout: regenerating from unchanged records at the same
    code rewrites the same bytes (the collector's own run record keeps the machine details)."""
    return {"source": source, "params": params or {}, "derived": True}


def _finish_derived(prov: dict) -> dict:
    import hashlib

    if not prov.get("derived"):
        return prov
    runs_ = prov.get("source_runs")
    if not isinstance(runs_, list):
        return prov
    hashes, commits = {}, set()
    for run in runs_:
        file = paths.RUNS_DIR / run / "results.json"
        if file.is_file():
            data = file.read_bytes()
            hashes[run] = hashlib.sha256(data).hexdigest()
            commits.add(json.loads(data)["provenance"].get("git", {}).get("commit") or "unknown")
        else:
            hashes[run] = None
    return {**prov, "source_runs": hashes, "record_commits": sorted(commits)}


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_json(path: str | Path, results: Any, prov: dict) -> Path:
    """Write ``{"provenance": prov, "results": results}`` as JSON, atomically."""
    payload = {"provenance": _finish_derived(prov), "results": _to_jsonable(results)}
    return atomic_write_text(path, json.dumps(payload, indent=1, sort_keys=True, allow_nan=True) + "\n")


def read_json(path: str | Path) -> dict:
    """Read a record written by :func:`write_json`; returns the whole payload, with the paths a
    record stores under the cache token (:data:`paths.CACHE_TOKEN`) pointing into this machine's
    cache."""
    return paths.expand_cached(json.loads(Path(path).read_text()))


def read_run(notebook: str, run: str, profile: str = "") -> dict:
    """The record of a recorded run (:func:`read_json` of ``papermill_runs/<notebook>/<run>/results.json``).

    Raises:
        FileNotFoundError: the run has no record, with the command that makes it.
    """
    file = paths.RUNS_DIR / notebook / run / paths.RESULTS_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{notebook}/{run} has no record ({file}); run it first, e.g. "
                                f"`make reproduce PROFILE={profile or '<profile>'} SELECT={notebook}/{run}`.")
    return read_json(file)


def write_table(df: Any, stem: str | Path, prov: dict, sort_by: list[str] | None = None,
                floatfmt: str = ".3f", formats: dict[str, str] | None = None) -> dict[str, Path]:
    """Write a pandas table as Markdown, LaTeX and CSV, with a provenance file next to them.

    Args:
        df: the table.
        stem: path without suffix, e.g. ``papermill_runs/02_target_and_gold/smol/table``.
        sort_by: columns giving a complete sort key (rows are sorted before saving).
        floatfmt: format of float cells in Markdown and LaTeX; ``formats`` overrides it per column
            (e.g. ``{"lr": "g"}``).
    Returns:
        The paths written, by format.
    """
    stem = Path(stem)
    if sort_by:
        df = df.sort_values(sort_by, kind="stable").reset_index(drop=True)
    formats = formats or {}
    unknown = sorted(set(formats) - set(df.columns))
    if unknown:
        raise ValueError(f"formats names columns {unknown} that the table does not have.")
    md_fmt = tuple(formats.get(c, floatfmt) for c in df.columns) if formats else floatfmt
    latex_formatters = {c: (lambda fmt: lambda x: format(x, fmt) if isinstance(x, (int, float)) else str(x))(f)
                        for c, f in formats.items()}  # text cells (e.g. blanks) pass through
    out = {
        "md": atomic_write_text(stem.with_suffix(".md"), df.to_markdown(index=False, floatfmt=md_fmt) + "\n"),
        "csv": atomic_write_text(stem.with_suffix(".csv"), df.to_csv(index=False, float_format="%.6g")),
        "tex": atomic_write_text(stem.with_suffix(".tex"),
                                 df.to_latex(index=False, float_format=lambda x: format(x, floatfmt),
                                             formatters=latex_formatters or None)),
    }
    write_json(stem.with_suffix(".provenance.json"), {"files": [p.name for p in out.values()]}, prov)
    return out


def write_figure(fig: Any, stem: str | Path, prov: dict) -> Path:
    """Save a matplotlib figure as ``<stem>.png`` (atomically) with ``<stem>.provenance.json`` next to it."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    png = stem.with_suffix(".png")
    tmp = png.with_name(f".{png.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", metadata={"Software": None})
    os.replace(tmp, png)
    write_json(stem.with_suffix(".provenance.json"), {"files": [png.name]}, prov)
    return png
