"""Notebook parameters: declared in each notebook's ``parameters`` cell, checked, and named.

* Every passed parameter name is checked against the notebook's ``parameters`` cell (papermill
  itself only warns on a typo), and every value against the declared type.
* Run names are built from parameter values (:func:`run_name`); which parameters apply to which
  runs (:data:`APPLIES`) decides what names a run and what makes two runs the same (:func:`params_key`).
"""
from __future__ import annotations

import ast
import copy
import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from . import numerics, paths

_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


class RunError(ValueError):
    """A run that cannot start: unknown notebook or parameter, wrong type, missing file."""


def resolve_notebook(name: str) -> Path:
    """``02_target_and_gold``, ``02_target_and_gold.ipynb`` or a path -> the notebook file."""
    candidates = [Path(name), paths.NOTEBOOKS_DIR / name, paths.NOTEBOOKS_DIR / f"{name}.ipynb"]
    for c in candidates:
        if c.is_file() and c.suffix == ".ipynb":
            return c.resolve()
    known = sorted(p.stem for p in paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    raise RunError(f"No notebook '{name}'. Known notebooks: {', '.join(known)}.")


def declared_parameters(notebook: Path) -> dict[str, dict]:
    """The notebook's parameters: ``{name: {"type": "int"|..., "default": value}}``.

    Read from the cell tagged ``parameters``, which holds annotated literals only; parsed once per
    notebook content (planning a profile's grid asks for each run's notebook).
    """
    text = Path(notebook).read_text()
    return copy.deepcopy(_declared(Path(notebook), hashlib.sha256(text.encode()).hexdigest()))


@functools.lru_cache(maxsize=64)
def _declared(notebook: Path, content: str) -> dict[str, dict]:
    """:func:`declared_parameters` of ``notebook`` as it reads with the sha256 ``content``."""
    params = _inspected(notebook, content)
    if not params:
        raise RunError(f"{notebook.name} has no cell tagged 'parameters'.")
    # papermill skips, with only a log line, a parameter line it cannot parse (e.g. an '=' in
    # the comment); such a parameter could then never be passed. Refuse the notebook instead.
    nb = json.loads(notebook.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    assigned = re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=]*)?=", source, flags=re.M)
    unparsed = sorted(set(assigned) - set(params))
    if unparsed:
        raise RunError(f"papermill cannot parse parameter line(s) {unparsed} of {notebook.name}; "
                       "write them as 'name: type = literal  # comment' without '=' in the comment.")
    out = {}
    for name, (type_name, default) in params.items():
        try:
            value = ast.literal_eval(default)
        except (ValueError, SyntaxError):
            raise RunError(f"Parameter '{name}' of {notebook.name} is not a literal: {default!r}.") from None
        out[name] = {"type": type_name, "default": value}
    return out


def _inspected(notebook: Path, content: str) -> dict[str, list[str]]:
    """papermill's reading of the parameters cell, ``{name: [type name, default as written]}``, kept in the
    cache under the notebook's sha256 ``content`` and papermill's version: a notebook's kernel reads what the
    runner that started it parsed, without importing papermill (about 4 s on a 2-core Zen 3: nbformat's
    schema checks)."""
    from importlib.metadata import version

    kept = paths.cache_dir() / "parameters" / f"{content}-papermill-{version('papermill')}.json"
    if kept.is_file():
        return json.loads(kept.read_text())
    import papermill

    out = {k: [v["inferred_type_name"], v["default"]] for k, v in papermill.inspect_notebook(str(notebook)).items()}
    try:
        kept.parent.mkdir(exist_ok=True)
        tmp = kept.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(out))
        tmp.replace(kept)  # whole or absent, when two processes parse it at once
    except OSError:  # a read-only cache: parsed again next time
        pass
    return out


def _check_value(notebook: Path, name: str, value: Any, declared: str) -> Any:
    expected = _TYPES.get(declared)
    if expected is None:  # an annotation we do not check (e.g. a union)
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is not bool and isinstance(value, bool) or not isinstance(value, expected):
        raise RunError(f"Parameter '{name}' of {notebook.name} must be {declared}, got "
                       f"{type(value).__name__} {value!r}.")
    return value


def check_parameters(notebook: Path, params: dict) -> dict:
    """Refuse unknown names and wrong types; returns the parameters with ints widened to floats."""
    declared = declared_parameters(notebook)
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise RunError(f"Unknown parameter(s) {unknown} for {notebook.name}. "
                       f"Declared parameters: {', '.join(sorted(declared))}.")
    checked = {k: _check_value(notebook, k, v, declared[k]["type"]) for k, v in params.items()}
    if checked.get("device", "auto") != "auto":  # before a kernel starts: cuda on a machine without it
        try:
            numerics.resolve_device(checked["device"])
        except numerics.NumericsError as err:
            raise RunError(f"Parameter 'device' of {notebook.name}: {err}") from None
    if checked.get("kernels"):
        _check_pinned(notebook, checked)
    return checked


def _check_pinned(notebook: Path, params: dict) -> None:
    """A run pinned to a CPU kernel path (parameter ``kernels``): a path :mod:`frag_utils.kernel_paths` knows, on the
    CPU (``device`` cpu: a GPU computes on none of them)."""
    from . import kernel_paths

    if params["kernels"] not in kernel_paths.NEEDS:
        raise RunError(f"Parameter 'kernels' of {notebook.name} must be a CPU kernel path "
                       f"({' | '.join(kernel_paths.NEEDS)}) or \"\" (the runner's choice), got {params['kernels']!r}.")
    if params.get("device", "auto") != "cpu":
        raise RunError(f"Parameter 'kernels' of {notebook.name} pins the CPU kernel path {params['kernels']}, so the "
                       f"run must compute on the CPU: set device: cpu (it is {params.get('device', 'auto')!r}), "
                       "or leave kernels blank.")


def check_kernel_path(params: dict) -> None:
    """Inside a notebook: a run pinned to a kernel path (``kernels``) computes on it, or stops before it makes
    anything. The runner starts such a run on its path (``frag run``, ``make reproduce``); papermill or Jupyter
    started by hand do not.

    Raises:
        RunError: this process computes on another path, with how to start it on the pinned one.
    """
    if not params.get("kernels"):
        return
    import torch

    here = torch.backends.cpu.get_cpu_capability()
    if here != params["kernels"]:
        raise RunError(f"This run is pinned to the {params['kernels']} kernel path (parameter kernels), but this "
                       f"process computes on {here}: start it through the runner, which sets the caps before torch "
                       f"loads (make reproduce SELECT=<run>, or python -m frag_utils run-one <notebook>/<run> "
                       f"--kernels {params['kernels']}), or leave kernels blank.")


def parse_cli_value(text: str) -> Any:
    """A ``-p NAME VALUE`` value as YAML reads it (``3`` int, ``1e-4`` float, ``true`` bool)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in ".eE") and value[0].isdigit() else value
        except ValueError:
            return value
    return value


def load_params_file(path: str | Path) -> list[dict]:
    """A YAML parameter file: one mapping (one run) or a list of mappings (several runs)."""
    path = Path(path)
    if not path.is_file():
        alt = paths.PARAMS_DIR / path
        if not alt.is_file():
            raise RunError(f"Parameter file '{path}' not found (also looked in {paths.PARAMS_DIR}).")
        path = alt
    data = yaml.safe_load(path.read_text())
    runs = data if isinstance(data, list) else [data]
    if not runs or not all(isinstance(r, dict) for r in runs):
        raise RunError(f"{path} must hold a mapping of parameters or a list of such mappings.")
    return runs


_GRADIENT = ("ga", "graddiff", "npo", "rmu", "simnpo", "idkdpo", "undial", "wga")  # unlearn.METHODS (a test holds it)


def _methods(*names: str):
    return lambda p: p.get("method") in names


def _frp(*variants: str):
    return lambda p: p.get("method") == "frp" and p.get("frp_variant") in variants


# Which runs a notebook parameter applies to (a parameter not listed applies to every run). Read by
# run_name: a key that varies across a parameter file names only the runs it applies to.
APPLIES = {
    "05_unlearn": {
        "gold": _methods("gold"),
        "sparsity": _methods("frp", "sp"), "prune_precision": _methods("frp", "sp"),
        # SP as released calibrates on its own 500 sequences
        "prune_n_calib": lambda p: p.get("method") == "frp" or (p.get("method") == "sp"
                                                                 and p.get("sp_variant") != "released"),
        "frp_variant": _methods("frp"), "frp_lam": _frp("released", "eq6"),
        "frp_veto": _frp("released"), "frp_beta": _frp("eq6"),
        "sp_variant": _methods("sp"), "match_l2_run": _methods("sp", "noise"), "noise_scale": _methods("noise"),
        **{k: _methods(*_GRADIENT) for k in ("lr", "epochs", "batch_size", "grad_accum", "warmup_epochs", "bf16")},
        "npo_beta": _methods("npo"), "simnpo_beta": _methods("simnpo"), "simnpo_delta": _methods("simnpo"),
        "dpo_beta": _methods("idkdpo"), "undial_beta": _methods("undial"), "wga_beta": _methods("wga"),
        **{k: _methods("rmu") for k in ("rmu_layer", "rmu_coeff", "rmu_alpha", "rmu_trainable")},
    },
    "06_attacks": {
        "lora_targets": lambda p: p.get("lora_rank", 0) > 0,
        "mc_shots": lambda p: bool(p.get("eval_mc")),
    },
    "10_sharpness": {  # a checkpoint measured is a notebook-05 run's, else the model named
        "unlearned_run": lambda p: bool(p.get("unlearned_run")), "model": lambda p: not p.get("unlearned_run"),
    },
}


def applies(notebook: str, key: str, params: dict) -> bool:
    """Whether parameter ``key`` of ``notebook`` (its stem) matters to a run with ``params``."""
    rule = APPLIES.get(notebook, {}).get(key)
    return rule is None or bool(rule(params))


_KERNEL_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}  # IPython's own variables


# Parameters that say how a run is evaluated, scored or named, not what it makes (``device`` stays:
# a checkpoint trained on a GPU has other weights than one trained on the CPU)
NOT_MAKING = ("run_name", "dtype", "eval_limit", "eval_batch_size", "max_new_tokens", "gamma",
              "frag_n_calib", "retrain", "gold")


def making(notebook: str, params: dict) -> dict:
    """The parameters that determine what a run of ``notebook`` makes (its checkpoint's key): those
    that apply to it (:data:`APPLIES`), less :data:`NOT_MAKING`."""
    return {k: v for k, v in sorted(params.items()) if k not in NOT_MAKING and applies(notebook, k, params)}


def notebook_defaults(notebook: str | Path) -> dict:
    """Each declared parameter of ``notebook`` (a stem or a path) with its default value."""
    return {k: v["default"] for k, v in declared_parameters(resolve_notebook(notebook)).items()}


def current_params(notebook: str, namespace: dict) -> dict:
    """Inside a notebook: the values of its declared parameters, for the record.

    Args:
        notebook: the notebook's stem (the kernel does not know its own file name).
        namespace: ``globals()`` of the notebook.
    Returns:
        ``{name: value}`` of the declared parameters found in ``namespace``.
    Raises:
        RunError: a value of the wrong type (e.g. ``-p gamma abc`` passed to papermill directly,
            which injects it as a string); ints for floats are accepted.
    """
    nb = resolve_notebook(notebook)
    declared = declared_parameters(nb)
    # papermill injects any -p name as a variable, declared or not: a misspelt one would leave the
    # declared parameter at its default without a word. Such a name is a lowercase variable of a
    # literal type that the notebook does not declare (imports, constants and IPython's own names
    # are not).
    injected = sorted(k for k, v in namespace.items()
                      if not k.startswith("_") and k not in declared and k not in _KERNEL_NAMES and not k.isupper()
                      and isinstance(v, (bool, int, float, str, list, dict, type(None))))
    if injected:
        import difflib

        hints = [f"'{k}'" + (f" (did you mean '{m[0]}'?)" if (m := difflib.get_close_matches(k, declared, 1)) else "")
                 for k in injected]
        raise RunError(f"{nb.name} does not declare the parameter(s) {', '.join(hints)}, so papermill's value would be "
                       f"ignored. Declared parameters: {', '.join(sorted(declared))}.")
    # a parameter missing from the namespace was added to the notebook file after this kernel
    # started (the run executes the version it read); it is left out of the record
    values = {k: namespace[k] for k in declared if k in namespace}
    for k, v in values.items():  # the runner checked these already; papermill used directly did not
        try:
            _check_value(nb, k, v, declared[k]["type"])
        except RunError as err:
            raise RunError(f"{err} papermill injects parameters without checking them (its -p reads a value "
                           "that is not a number, true/false or None as a string); 'frag run' checks every "
                           "parameter before the notebook starts.") from None
    check_kernel_path(values)
    # the values as given, not widened: the record holds what the notebook ran with
    return values


def _fmt(value: Any) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


# the longest run name: what is named after a run must fit the file system's 255 characters, the
# longest being an unlearned checkpoint's temporary folder (unlearned_<split>--<name>.tmp-<pid>)
MAX_RUN_NAME = 220


def run_name(params: dict, overrides: dict, tag: str = "") -> str:
    """``<profile>`` (``<profile>.<tag>`` for a suffixed parameter file) plus ``__name=value``
    for each override, sorted."""
    base = str(params.get("profile", "custom")) + (f".{tag}" if tag else "")
    extra = [f"{k}={_fmt(v)}" for k, v in sorted(overrides.items()) if k not in ("profile", "run_name")]
    name = paths.safe_name("__".join([base, *extra]))
    if len(name) > MAX_RUN_NAME:
        naming = ", ".join(sorted(k for k in overrides if k != "run_name"))
        raise RunError(f"The run name {name[:80]}... is {len(name)} characters long, more than {MAX_RUN_NAME}: the "
                       f"folders and files named after a run (its record, its checkpoint, their temporary "
                       f"copies) must fit the file system's 255. It names every parameter that varies across its "
                       f"file or is given on the command line ({naming}): "
                       "split the file so that fewer vary in each, or shorten the values that name the runs.")
    return name


def params_key(params: dict, defaults: dict | None = None, notebook: str | None = None) -> str:
    """What makes two runs of one notebook the same run: every parameter but ``run_name``.

    With the notebook's ``defaults``, parameters at their default value are left out, so a record
    written before a parameter was added to the notebook (whose default keeps the old behaviour,
    as every added parameter's must) matches a run planned after. With ``notebook`` (its stem),
    parameters that do not apply to the run (:data:`APPLIES`) are left out too: an FRP run is the
    same run whatever learning rate its file gives the gradient methods.
    """
    defaults = defaults or {}
    kept = {k: v for k, v in params.items() if k != "run_name" and not (k in defaults and v == defaults[k])
            and (notebook is None or applies(notebook, k, params))}
    return json.dumps(kept, sort_keys=True, default=str)


# Why a run's parameter differs from its notebook's default or the paper's protocol: (notebook or "*", parameter) ->
# the reason, with the section of docs/choices.md that argues it (an anchor of that page)
CHOICES = "docs/choices.md"
_SMOL = "choices-for-the-smol-profile"
_FRONTIER = "the-healthy-frontier"
_MEASURED = "which-attack-free-signal-ranks-relearning"
_VARIANTS = "the-attack-variants"
_TWIN = "the-frontiers-target-recorded-on-its-own-path"
KERNEL_PINNABLE = ("02_target_and_gold", "03_calibration", "04_frag")  # the notebooks with a parameter kernels
REASONS: dict[tuple[str, str], tuple[str, str]] = {
    ("*", "data_source"): ("the synthetic TOFU stand-in the package carries (30 authors x 10 questions): nothing "
                           "downloads", _SMOL),
    ("*", "prompt_template"): ("OpenUnlearning's system prompt, as the paper profile uses", _SMOL),
    ("*", "original"): ("this profile's target, notebook 02's", _SMOL),
    ("*", "model"): ("this profile's model (SmolLM2-135M-Instruct) or its target, notebook 02's", _SMOL),
    ("*", "eval_limit"): ("every record of every evaluation set (0: no limit)", _SMOL),
    ("*", "max_new_tokens"): ("the synthetic answers are under 40 tokens (OpenUnlearning cuts at 200)", _SMOL),
    ("*", "bf16"): ("the CPU computes in fp32; bf16 storage is the parameter `weights`", _SMOL),
    ("*", "frag_n_calib"): ("calibration sequences for FRAG's activation norms, sized for the CPU", _SMOL),
    ("*", "n_calib"): ("calibration sequences for the activation norms, sized for the CPU", _SMOL),
    ("02_target_and_gold", "lr"): ("the 135M model learns the forget set at 2e-4 in 8 epochs; at 1e-5 it barely "
                                   "moves", _SMOL),
    ("02_target_and_gold", "epochs"): ("at 8 epochs forget ES is 0.89, at 6 0.77 (AVX-512 kernels; the AVX2 "
                                       "path's target reaches 0.95)", _SMOL),
    ("06_attacks", "lr"): ("the attack is this profile's fine-tuning recipe for one epoch: the reference's lr 1e-5 at "
                           "batch 32 is sized for TOFU's 4,000 records and brought nothing back on these 300", _SMOL),
    ("06_attacks", "batch_size"): ("this profile's fine-tuning recipe: batch 16 (the reference's 8 x 4 on 4,000 "
                                   "records)", _SMOL),
    ("06_attacks", "grad_accum"): ("this profile's fine-tuning recipe: batch 16 (the reference's 8 x 4 on 4,000 "
                                   "records)", _SMOL),
    ("06_attacks", "seed"): ("each healthy checkpoint is attacked at seeds 42 (attack.sh's) and 1", _FRONTIER),
    ("05_unlearn", "seed"): ("this profile's one seed, 42, for every stage (OpenUnlearning's unlearning default: 0)",
                             _SMOL),
    ("05_unlearn", "weights"): ("the frontier stores its weights in fp32: bf16 storage barely moves the dense methods "
                                "at these rates", _FRONTIER),
    ("05_unlearn", "prune_precision"): ("the frontier prunes fp32 weights", _FRONTIER),
    ("05_unlearn", "sparsity"): ("one of the frontier's strengths, set before any was attacked", _FRONTIER),
    ("05_unlearn", "lr"): ("one of the frontier's strengths, set before any was attacked", _FRONTIER),
    ("05_unlearn", "grad_accum"): ("the frontier's gradient methods step on every batch of 16", _FRONTIER),
    ("*", "unlearned_run"): ("the notebook-05 run whose checkpoint this run reads", _FRONTIER),
    ("*", "unlearned_runs"): ("the frontier's checkpoints of the paper's methods on this split", _FRONTIER),
    ("*", "gold"): ("this profile's gold model, notebook 02's (the paper reads OpenUnlearning's)", _SMOL),
    ("02_target_and_gold", "base_model"): ("the embedded SmolLM2-135M-Instruct (the paper: Llama-3.2-1B)", _SMOL),
    ("02_target_and_gold", "batch_size"): ("the target's recipe: batch 16", _SMOL),
    ("02_target_and_gold", "grad_accum"): ("the target's recipe: batch 16", _SMOL),
    ("02_target_and_gold", "scheduler"): ("the target's recipe: half an epoch of warmup, then constant", _SMOL),
    ("02_target_and_gold", "warmup_epochs"): ("the target's recipe: half an epoch of warmup, then constant", _SMOL),
    ("02_target_and_gold", "group_by_length"): ("length-grouped batches: 1.08 padded tokens a token, not 1.31", _SMOL),
    ("02_target_and_gold", "save_bf16"): ("saved bf16-representable, as OpenUnlearning's released checkpoints", _SMOL),
    ("02_target_and_gold", "target_checkpoint"): ("trained here (the paper reads OpenUnlearning's released one)",
                                                  _SMOL),
    ("02_target_and_gold", "gold_checkpoint"): ("trained here (the paper reads OpenUnlearning's released one)", _SMOL),
    ("02_target_and_gold", "train_limit"): ("every record (0: no limit)", _SMOL),
    ("08_predictors", "n_boot"): ("2,000 resamples for every recorded interval (a smoke run's 200)", _MEASURED),
    ("09_figures", "grid_05"): ("this profile's faithful grid: its Table 1 files", _SMOL),
    ("09_figures", "grid_06"): ("this profile's faithful grid: its Table 1 files", _SMOL),
    ("09_figures", "seeds_06"): ("this profile's attack seed repeats of Table 1", _SMOL),
    ("*", "forget_split"): ("the forget split this run studies", _SMOL),
    **{(nb, k): reason for nb in KERNEL_PINNABLE for k, reason in {  # set only by the frontier's target's runs
        "kernels": ("the frontier's target is the AVX2 path's: this run is of that target, the one notebooks 05 to "
                    "10 read", _TWIN),
        "device": ("a run pinned to a CPU kernel path computes on the CPU", _TWIN)}.items()},
    ("05_unlearn", "rmu_layer"): ("the paper's layer 7 of Llama's 16 at the same relative depth of this model's 30",
                                  _SMOL),
    **{("06_attacks", k): ("one of the appendix's attack variants: one change of the grid's attack", _VARIANTS)
       for k in ("epochs", "eval_epochs", "lora_rank", "eval_mc", "weights", "optimizer", "attack_data")},
    ("10_sharpness", "probe_lr"): ("the probe steps at the attack's peak rate, this profile's 2e-4", _MEASURED),
    ("10_sharpness", "batch_size"): ("the attack's batch, 16", _MEASURED),
}


def paper_protocol(notebook: str, params: dict) -> dict:
    """The paper profile's value of each parameter for a run like ``params``: from the paper profile's file of
    ``notebook`` (``papermill_runs/params/paper/<notebook>.yaml``), the runs of the same ``method`` and
    ``attack_data``, where they agree; else the notebook's default; {} where the paper profile has no such file."""
    file = paths.PARAMS_DIR / "paper" / f"{notebook}.yaml"
    if not file.is_file():
        return {}
    entries = load_params_file(file)
    alike = [e for e in entries if all(e.get(k, params.get(k)) == params.get(k) for k in ("method", "attack_data"))]
    alike = alike or entries
    defaults = notebook_defaults(notebook)
    out = {}
    for k, default in defaults.items():
        values = {repr(e.get(k, default)) for e in alike}
        if len(values) == 1:
            out[k] = alike[0].get(k, default)
    return out


def differences(notebook: str, params: dict) -> list[dict]:
    """The parameters of a run of ``notebook`` that differ from the notebook's default or from the paper's protocol
    (:func:`paper_protocol`), each with this run's value, both references and the reason (:data:`REASONS`, the
    smol profile's: text and the anchor of docs/choices.md; empty where none is recorded). Parameters that do not
    apply to the run (:func:`applies`) and bookkeeping (``run_name``, ``profile``) are left out."""
    defaults, paper = notebook_defaults(notebook), paper_protocol(notebook, params)
    rows = []
    for k, v in params.items():
        if k in ("run_name", "profile") or k not in defaults or not applies(notebook, k, params):
            continue
        if v != defaults[k] or (k in paper and v != paper[k]):
            why, anchor = REASONS.get((notebook, k)) or REASONS.get(("*", k)) or ("", "")
            if k in paper and v == paper[k]:
                why, anchor = "the paper's protocol", ""
            elif params.get("profile") == "tiny":  # the reasons are the smol profile's
                why, anchor = ("the tiny smoke run: the notebook's default, small and fast" if v == defaults[k] else
                               "set for this smoke run", "")
            elif f"{k}=" in str(params.get("run_name", "")) and not why:  # a value its parameter file varies
                why, anchor = "what this run studies: its parameter file varies it (the file's header says why)", ""
            rows.append({"parameter": k, "this run": v, "default": defaults[k], "paper": paper.get(k, "(none)"),
                         "why": why, "anchor": anchor})
    return rows


def show_differences(notebook: str, params: dict, where: str | Path | None = None) -> Any:
    """:func:`differences` as a Markdown table for a notebook's output, each reason linked into docs/choices.md
    relative to ``where`` (the executed notebook's folder; default the notebooks' folder)."""
    import os

    from IPython.display import Markdown

    rows = differences(notebook, params)
    if not rows:
        return Markdown("Every parameter of this run is the notebook's default" + (
            " and the paper's." if paper_protocol(notebook, params) else " (the paper profile has no run of it)."))
    link = os.path.relpath(paths.REPO_ROOT / CHOICES, Path(where or paths.NOTEBOOKS_DIR).resolve())
    lines = ["| parameter | this run | default | paper | why |", "|---|---|---|---|---|"]
    for r in rows:
        why = f"{r['why']} ([choices]({link}#{r['anchor']}))" if r["anchor"] else r["why"] or "(no reason recorded)"
        lines.append(f"| `{r['parameter']}` | {_fmt(r['this run'])} | {_fmt(r['default'])} | {_fmt(r['paper'])} | "
                     f"{why} |")
    return Markdown("\n".join(lines))
