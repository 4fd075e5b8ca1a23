"""The paper profile's dry run: every notebook of the paper profile, run by the runner with the
paper's own parameter files, on stand-ins for what a machine without the hub lacks.

Only three things are replaced, so that everything a GPU user runs is executed:

- **models**: each hub model the files name (Llama-3.2-1B-Instruct, OpenUnlearning's TOFU target
  and retain90 model) becomes a small random Llama saved in a local folder in hub layout
  (``config.json``, ``model.safetensors``, tokenizer files), one seed per model;
- **data**: ``locuslab/TOFU`` becomes a local folder of ``<config>.json`` files under TOFU's own
  config names (the embedded synthetic authors);
- **sizes**: records, tokens, calibration sequences, epochs and accumulation (:data:`SIZES`).

On the CPU, bf16 autocast (the files' ``bf16: true``) is turned off (CPU runs compute in fp32);
bf16 weight storage stays. On a GPU (``device='cuda'``) the files' precision is kept.
Records and figures go to a work folder (``FRAG_RUNS_DIR``, ``FRAG_FIGURES_DIR``), never into the
repository; the run names are the paper grid's own.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import parameters, paths, runs

PROFILE = "paper"
HUB_MODELS = {  # hub id -> seed of its stand-in
    "meta-llama/Llama-3.2-1B-Instruct": 1,
    "open-unlearning/tofu_Llama-3.2-1B-Instruct_full": 2,
    "open-unlearning/tofu_Llama-3.2-1B-Instruct_retain90": 3,
}
HUB_DATA = "locuslab/TOFU"
# What the dry run makes small, for every notebook that has the parameter (type as declared).
SIZES = {"train_limit": 16, "eval_limit": 3, "max_new_tokens": 6, "eval_batch_size": 4, "n_calib": 6,
         "frag_n_calib": 6, "prune_n_calib": 6, "max_len": 48, "epochs": 1, "grad_accum": 1, "batch_size": 4,
         "ig_steps": 1, "lmc_stride": 0.5}
# Attacks run (each kind of attack data is one code path; the model attacked changes no code):
# the three attacks on the gold model, and forget+retain on one unlearned model.
ATTACKED = {"paper__method=gold": ("retain", "forget", "forget_retain"), "paper__method=npo": ("forget_retain",)}
# The quick dry run (``make test``'s): every notebook once, on one unlearned model and its
# forget+retain attack (07 ablates that model alone); the other methods' code paths are the
# package tests', in process. The whole dry run costs about 2.5 times as much (17 kernels against 8).
QUICK_UNLEARNED = "paper__method=npo"


def hub_standins(root: Path) -> dict[str, str]:
    """Write the stand-ins under ``root`` (once) and return ``{hub id: local folder}``."""
    from . import models

    out = {}
    tokenizer = models.load_tokenizer(models.SMOLLM2)
    for hub_id, seed in HUB_MODELS.items():
        folder = root / "hub" / hub_id
        if not models.is_checkpoint(folder):
            # as narrow as ``tiny``, as deep as Llama-3.2-1B (16 blocks): the paper's RMU block 7 holds as written
            models.save_checkpoint(models.build_tiny_model(len(tokenizer), seed, blocks=16), tokenizer, folder)
        out[hub_id] = str(folder)
    data = root / "hub" / HUB_DATA
    if not data.is_dir():
        data.mkdir(parents=True)
        for f in sorted(paths.SYNTHETIC_DIR.glob("*.json")):
            shutil.copy(f, data / f.name)
    out[HUB_DATA] = str(data)
    return out


def plan(root: Path, device: str = "cpu", quick: bool = False) -> list[runs.RunSpec]:
    """The paper grid's runs (names unchanged) with models, data and sizes replaced; ``quick``:
    every notebook once (:data:`QUICK_UNLEARNED`, its attack, 07 on it alone)."""
    local = hub_standins(root)
    chosen = []
    for spec in runs.grid(PROFILE):
        p = spec.params
        if spec.notebook.stem == "06_attacks" and p["attack_data"] not in ATTACKED.get(p["unlearned_run"], ()):
            continue
        if quick and (spec.notebook.stem == "05_unlearn" and spec.name != QUICK_UNLEARNED
                      or spec.notebook.stem == "06_attacks" and p["unlearned_run"] != QUICK_UNLEARNED):
            continue
        declared = parameters.declared_parameters(spec.notebook)
        new = {k: local.get(v, v) if isinstance(v, str) else v for k, v in p.items()}
        for k, v in SIZES.items():
            if k in declared:
                new[k] = float(v) if declared[k]["type"] == "float" else v
        if "warmup_epochs" in new:
            new["warmup_epochs"] = min(new["warmup_epochs"], new.get("epochs", 1))
        if "device" in declared:
            new["device"] = device
        if device == "cpu" and new.get("bf16"):
            new["bf16"] = False  # CPU runs compute in fp32
        if quick and "unlearned_runs" in new:
            new["unlearned_runs"] = QUICK_UNLEARNED
        spec.params = parameters.check_parameters(spec.notebook, new)
        chosen.append(spec)
    return chosen


def dry_run(root: str | os.PathLike, device: str = "cpu", quick: bool = False) -> list[dict]:
    """Run the dry run in ``root``: records in ``root/papermill_runs``, figures in ``root/figures``,
    checkpoints in ``root/cache`` (which shares the embedded model's converted copy); ``quick``:
    every notebook once (:func:`plan`).

    Returns:
        One entry per run (:func:`frag_utils.runs.execute`).
    Raises:
        RunError: a run failed (the runner names the cell and keeps the partial notebook).
    """
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    old_dirs = paths.RUNS_DIR, paths.FIGURES_DIR
    # its checkpoints in a cache of its own (a stand-in is not the paper's model), sharing only the
    # embedded model's converted copy
    cache = root / "cache"
    cache.mkdir(exist_ok=True)
    paths.RUNS_DIR, paths.FIGURES_DIR = root / "papermill_runs", root / "figures"  # for this process
    try:  # and for the kernels
        with runs.environment(FRAG_CACHE_DIR=str(cache), FRAG_MODELS_DIR=str(paths.models_dir()),
                              FRAG_RUNS_DIR=str(root / "papermill_runs"), FRAG_FIGURES_DIR=str(root / "figures")):
            # every run is new here and the grid lists each before those that read it: run in order
            # (make reproduce PROFILE=paper schedules the real grid through Snakemake)
            log = []
            for spec in plan(root, device, quick):
                log.append(runs.execute(spec))
                print(f"{log[-1]['run']}: {log[-1]['status']} ({log[-1]['seconds']} s)", flush=True)
            return log
    finally:
        paths.RUNS_DIR, paths.FIGURES_DIR = old_dirs
