"""Cache keys: one function, :func:`key`, for every cached artefact (checkpoints, evaluations,
calibration norms, the resumable state of a training).

A key names everything that determines the artefact: its kind, the settings that made it, the
identity of the models it was made from (:func:`model_identity`: a cached checkpoint stands for its
own key, so keys chain), a hash of the package's computing code (:func:`source_hash`), and the
kernels that computed it (:func:`kernels`: the CPU kernel path, which moves the bits further than
the tolerance file allows). Editing an equation, a loss or a metric therefore makes every cached
artefact stale: a rerun remakes it instead of handing back what the old code made; so does a run
with the kernels capped at AVX2 on a cache an AVX-512 run made. The thread count is not in the key:
two jobs side by side (one thread each) read the checkpoints one job (two threads) made, and
their records land within the tolerance file, not bit for bit (docs/reproducibility.md).
Editing the runner or the command line (:data:`NOT_COMPUTING`), or a table or figure (the
reporting layer, :data:`REPORTING`), does not.

A cached checkpoint keeps its key, and what the key was computed from, in its ``frag_record.json``
(:func:`checkpoint`), so the runner can tell whether it is still current (:func:`is_current`)
without running the notebook that made it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from . import paths

# Modules that plan or run what the others compute, and the reporting layer (a subpackage of
# tables, statistics and figures): no cached artefact depends on their code, so editing a table,
# the runner or the command line keeps every cache (a grid that runs for sessions survives the work
# beside it). ``tests/test_cache.py`` holds that no other module imports one of them; a new
# top-level module counts as computing until it is named here, a module under REPORTING never does.
NOT_COMPUTING = frozenset({"__main__", "cli", "costs", "drift", "dryrun", "kernel_paths", "launch", "parameters",
                           "readme", "runs"})
REPORTING = "report"


@lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 of the package's computing code: every ``frag_utils/**.py`` (names and bytes) but
    :data:`NOT_COMPUTING` and the :data:`REPORTING` subpackage, read once per process."""
    digest = hashlib.sha256()
    for f in sorted(paths.PACKAGE_DIR.rglob("*.py")):
        part = f.relative_to(paths.PACKAGE_DIR).parts
        if (f.parent == paths.PACKAGE_DIR and f.stem in NOT_COMPUTING) or part[0] == REPORTING:
            continue
        digest.update(f"{f.relative_to(paths.PACKAGE_DIR)}\0".encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


# Environment variables that cap the instruction sets of oneDNN's and MKL's kernels (set before
# Python starts; ATEN_CPU_CAPABILITY, the third cap, shows in torch's own reported capability)
# (DNNL_MAX_CPU_ISA: oneDNN's older name; MKL_CBWR: MKL's conditional numerical reproducibility)
KERNEL_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


def kernels(environ: dict | None = None, capability: str | None = None) -> dict:
    """The kernel path that computes an artefact. On a machine without a usable CUDA device: torch's
    CPU kernel capability (``AVX512``, ``AVX2``, ...) and the caps of :data:`KERNEL_CAPS` (upper
    case, "" when unset). The smol target made with AVX2 kernels has forget ES 0.95 against 0.89
    with AVX-512's (docs/reproducibility.md), so two runs that differ here never stand in for each
    other's artefacts. On a CUDA machine: the GPU's name and the CUDA version, not the host CPU's
    (GPU nodes of one cluster with other host CPUs share a cache); a run forced onto the CPU there
    is keyed as that GPU's. ``environ`` and ``capability`` given: the path of a process started with them
    (the runner plans a job on the records' path before the job's process exists)."""
    import torch

    if torch.cuda.is_available():
        return {"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
    environ = os.environ if environ is None else environ
    return {"cpu_capability": capability or torch.backends.cpu.get_cpu_capability(),
            **{name: environ.get(name, "").upper() for name in KERNEL_CAPS}}


def model_identity(name_or_path: str | Path) -> str:
    """What stands for a model's weights in a key: a cached checkpoint's own key; for another folder
    its weight files (path, sizes, modification times); else the name (an embedded model, a hub id)."""
    folder = Path(name_or_path).expanduser()
    if not folder.is_dir():
        return str(name_or_path)
    record = _record(folder)
    if record.get("cache_key"):
        return record["cache_key"]
    files = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(folder.glob("*.safetensors"))]
    return json.dumps([str(folder.resolve()), files])


def key(kind: str, settings: dict, models: dict[str, str] | None = None, on: dict | None = None) -> str:
    """The cache key of an artefact.

    Args:
        kind: what it is (``target``, ``05_unlearn``, ``evaluation``, ``calibration``, ...).
        settings: every setting that determines it (JSON-able; data content as a digest).
        models: role -> name or path of each model it is made from.
        on: the kernel path (:func:`kernels`) of the process that makes it; default this one's.
    Returns:
        A sha256 hex digest.
    """
    payload = {"kind": kind, "settings": settings, "source": source_hash(), "kernels": on or kernels(),
               "models": {role: model_identity(m) for role, m in sorted((models or {}).items())}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def records_digest(records: Any) -> str:
    """sha256 of question/answer records (every field, in order): the data part of a key."""
    return hashlib.sha256(json.dumps(list(records or []), sort_keys=True, default=str).encode()).hexdigest()


def _record(folder: Path) -> dict:
    from .models import load_record  # models imports torch: only where a checkpoint is looked at

    return load_record(folder) or {}


def is_current(folder: str | Path, on: dict | None = None) -> bool:
    """Whether ``folder`` holds a complete checkpoint whose key, computed again now (this code, the
    models it was made from as they are now, the kernel path ``on``, default this process's), is the one
    it was saved under."""
    from .models import is_checkpoint

    record = _record(Path(folder)) if is_checkpoint(folder) else {}
    made = record.get("cache")
    return bool(made) and key(made["kind"], made["settings"], made["models"], on) == record.get("cache_key")


def work_dir(folder: str | Path, artefact_key: str) -> Path:
    """``<folder>.work``, the resumable state (trainer checkpoints) of the artefact ``artefact_key``
    being made into ``folder``: emptied when it holds another key's state, never resumed from."""
    work = Path(folder).with_name(Path(folder).name + ".work")
    stamp = work / "cache_key"
    if work.exists() and (not stamp.is_file() or stamp.read_text() != artefact_key):
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(artefact_key)
    return work


def checkpoint(folder: str | Path, kind: str, settings: dict, models: dict[str, str],
               make: Callable[[Path, Path], dict], remake: bool = False) -> dict:
    """The record of the checkpoint in ``folder`` made under these settings and models, made now
    unless it is cached under the same key.

    Args:
        make: ``make(folder, work)`` saves the checkpoint into ``folder`` (``work``: where to keep
            resumable state, see :func:`work_dir`) and returns its record (JSON-able).
        remake: make it even when it is cached.
    Returns:
        The record (``reused``: whether it came from the cache).
    """
    import fcntl

    from .models import is_checkpoint, write_record

    folder = Path(folder)
    artefact_key = key(kind, settings, models)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # one maker at a time (two jobs, or machines sharing a cache, that need the same checkpoint): the
    # second waits, then reuses what the first made under the same key
    with open(folder.with_name(f".{folder.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process dies
        record = _record(folder)
        if not remake and record.get("cache_key") == artefact_key and is_checkpoint(folder):
            return {**record, "reused": True}
        work = work_dir(folder, artefact_key)
        record = {**make(folder, work), "cache_key": artefact_key,
                  "cache": {"kind": kind, "settings": settings, "models": {r: str(m) for r, m in models.items()},
                            "kernels": kernels()}}
        write_record(folder, json.loads(json.dumps(record, default=str)))
        shutil.rmtree(work, ignore_errors=True)
    return {**record, "reused": False}


def cached_json(kind: str, settings: dict, models: dict[str, str], compute: Callable[[], Any]) -> Any:
    """``compute()``, kept in ``<cache>/<kind>/<key>.json`` and read back while the key holds."""
    from .records import atomic_write_text

    file = paths.cache_dir() / kind / f"{key(kind, settings, models)[:24]}.json"
    if file.is_file():
        return json.loads(file.read_text())
    value = compute()
    atomic_write_text(file, json.dumps(value, default=str))
    return value
