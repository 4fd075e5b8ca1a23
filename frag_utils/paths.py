"""Every path the project uses, anchored at this file (papermill and nbval run from other folders).

Checkpoints and model caches never live in git: they go under :func:`cache_dir`, which is
``$FRAG_CACHE_DIR`` when set and ``~/.cache/frag_utils`` otherwise.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
DATA_DIR = REPO_ROOT / "data"
SYNTHETIC_DIR = DATA_DIR / "synthetic"
REFUSALS_FILE = DATA_DIR / "refusals" / "idk.txt"  # IdkDPO's preferred answers, one per line
# Where run records and figures are written: the repository's folders, or others named by
# FRAG_RUNS_DIR / FRAG_FIGURES_DIR (the paper dry run writes its records outside the repository;
# the kernels it starts inherit the variables). Parameter files are always the repository's.
FIGURES_DIR = Path(os.environ.get("FRAG_FIGURES_DIR") or REPO_ROOT / "figures")
RUNS_DIR = Path(os.environ.get("FRAG_RUNS_DIR") or REPO_ROOT / "papermill_runs")
PARAMS_DIR = REPO_ROOT / "papermill_runs" / "params"
BENCH_RESULTS_DIR = REPO_ROOT / "bench" / "results"

RESULTS_FILE = "results.json"  # every run's record, beside its executed notebook

_SAFE = re.compile(r"[^A-Za-z0-9._=+-]+")


def safe_name(text: str) -> str:
    """Make ``text`` usable as one path component (slashes of hub ids become ``--``)."""
    return _SAFE.sub("-", text.replace("/", "--")).strip("-") or "unnamed"


# The capped kernel path a process computes on (set with the caps by frag_utils.kernel_paths): its cache is a folder
# of its own, as a checkpoint's folder holds one path's weights (the AVX2 target beside the AVX-512 one)
KERNELS_ENV = "FRAG_KERNELS"


def cache_dir() -> Path:
    """Everything large and regenerable: model copies, checkpoints, calibration norms, evaluations,
    scratch runs. ``FRAG_CACHE_DIR``, default ``~/.cache/frag_utils``; a process on a capped kernel path
    (:data:`KERNELS_ENV`, e.g. ``AVX2``) uses its ``kernels-avx2/`` folder. What is in it is reused only
    under its key (:mod:`frag_utils.cache`), which names the code that made it."""
    root = Path(os.environ.get("FRAG_CACHE_DIR", Path.home() / ".cache" / "frag_utils"))
    if os.environ.get(KERNELS_ENV):
        root = root / f"kernels-{safe_name(os.environ[KERNELS_ENV].lower())}"
    root.mkdir(parents=True, exist_ok=True)
    return root


# Where the embedded models' safetensors copies are kept, when not in the cache's ``models/``: a copy is
# the pip package's GGUF converted, the same in every cache, so caches made to start empty (make verify,
# the dry run, the tests) can share one instead of converting it again (about 30 s each)
MODELS_DIR_ENV = "FRAG_MODELS_DIR"


def models_dir() -> Path:
    """``FRAG_MODELS_DIR``, default ``<cache>/models``: where the embedded models' copies are kept."""
    return Path(os.environ.get(MODELS_DIR_ENV) or cache_dir() / "models")


def model_cache_dir(name: str) -> Path:
    """Where the safetensors copy of an embedded model is kept."""
    return models_dir() / safe_name(name)


def checkpoint_dir(profile: str, name: str) -> Path:
    """Where a checkpoint trained under ``profile`` is kept (e.g. ``smol``/``target``)."""
    return cache_dir() / "checkpoints" / safe_name(profile) / safe_name(name)


# The training seed of a profile's target and gold models whose folders carry no seed (``target``,
# ``gold_forget10``): the one every record before the seed repeats names. Another seed's target is
# ``target_seed<N>``, read by notebooks 03 to 07 as ``original: profile-target-seed<N>``.
TARGET_SEED = 42
_PROFILE_TARGET = re.compile(r"profile-target(?:-seed(\d+))?")


def trained_name(role: str, seed: int = TARGET_SEED, forget_split: str | None = None) -> str:
    """The cache folder name of notebook 02's ``role`` at ``seed``: ``target`` (one for every split), or
    ``gold_<forget_split>`` for the gold model of ``forget_split`` (``_seed<N>`` added at another seed).
    The one place these names are spelled: notebook 02 writes them, the runner cleans them, notebook 05
    reads the gold."""
    if role not in ("target", "gold") or (role == "gold" and not forget_split):
        raise ValueError(f"trained_name({role!r}, forget_split={forget_split!r}): the role is 'target', "
                         "or 'gold' with its forget split")
    name = "target" if role == "target" else f"gold_{forget_split}"
    return name if seed == TARGET_SEED else f"{name}_seed{seed}"


def target_seed(original: str) -> int | None:
    """The training seed ``original`` names (``profile-target``: :data:`TARGET_SEED`,
    ``profile-target-seed<N>``: N), or None for a checkpoint given by path or hub id."""
    m = _PROFILE_TARGET.fullmatch(original)
    return None if m is None else int(m[1] or TARGET_SEED)


def original_dir(profile: str, original: str) -> str:
    """The model an unlearning run starts from: ``profile-target`` (or ``profile-target-seed<N>``)
    is notebook 02's target of ``profile`` (at seed N); anything else is a path or hub id, as given."""
    seed = target_seed(original)
    return original if seed is None else str(checkpoint_dir(profile, trained_name("target", seed)))


# Set by the runner while it remakes a recorded run: where that run writes its record instead
RECORD_TO_ENV = "FRAG_RECORD_TO"


def run_dir(notebook: str, run_name: str) -> Path:
    """Where a notebook run writes its results.

    Args:
        notebook: notebook stem, e.g. ``02_target_and_gold``.
        run_name: the run's name built from its parameters; empty for a smoke run (nbval),
            which writes to a scratch folder in the cache instead of the committed record.
    Returns:
        The folder, created.
    """
    if os.environ.get(RECORD_TO_ENV):  # a recorded run remade by the runner: its committed record stays
        base = Path(os.environ[RECORD_TO_ENV])
    else:
        base = RUNS_DIR / notebook / safe_name(run_name) if run_name else cache_dir() / "scratch" / notebook
    base.mkdir(parents=True, exist_ok=True)
    return base


# How a record names a place in the cache: the cache root differs between machines (and between
# runs with FRAG_CACHE_DIR set), so records store paths under it relative to this token, and
# paths in the repository relative to the repository (make_portable writes them so;
# records.read_json expands the token again).
CACHE_TOKEN = "$FRAG_CACHE_DIR"


def portable_text(text: str) -> str:
    """``text`` with this machine's cache root written as :data:`CACHE_TOKEN` and paths inside the
    repository made relative to it."""
    return text.replace(str(cache_dir()), CACHE_TOKEN).replace(f"{REPO_ROOT}/", "")


def expand_cached(value: Any) -> Any:
    """A record's value with :data:`CACHE_TOKEN` replaced by this machine's cache root (in every
    string of a nested dict or list)."""
    if isinstance(value, str):
        return str(cache_dir()) + value[len(CACHE_TOKEN):] if value.startswith(CACHE_TOKEN) else value
    if isinstance(value, dict):
        return {k: expand_cached(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_cached(v) for v in value]
    return value


PORTABLE_SUFFIXES = (".ipynb", ".json", ".md", ".csv", ".tex")


def make_portable(folder: Path) -> list[Path]:
    """Rewrite a run's files so that no path names the machine: the cache root as
    :data:`CACHE_TOKEN`, paths in the repository relative to it (papermill's own metadata,
    the records' checkpoint paths, what cells printed). Returns the files changed."""
    changed = []
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.suffix in PORTABLE_SUFFIXES:
            text = f.read_text()
            new = portable_text(text)
            if new != text:
                f.write_text(new)
                changed.append(f)
    return changed
