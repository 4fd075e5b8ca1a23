"""Run notebooks through papermill with checked parameters; resumable grids of such runs.

* Every passed parameter name is checked against the notebook's ``parameters`` cell (papermill
  itself only warns on a typo), and every value against the declared type.
* Output names are built from parameter values: ``papermill_runs/<notebook>/<run name>/``, the run
  name being the ``profile`` parameter plus any overrides, e.g. ``smol`` or ``smol__lr=0.0001``
  (``smol.sweep__lr=0.0001`` for a run of ``05_unlearn.sweep.yaml``).
* A run is complete when its executed notebook and ``results.json`` are both in place and the
  record's parameters equal the requested ones (a parameter the notebook gained later counts as
  equal at its default); complete runs are skipped, anything else is
  (re)done. The executed notebook is written to a temporary file and renamed at the end.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import numerics, paths
from .progress import progress

KERNEL = "frag"
RESULTS_FILE = "results.json"
# Notebooks that only collect other runs' records: redone on every grid run, since a complete
# record of theirs says nothing about whether the runs they collect have changed since.
COLLECTORS = ("09_figures",)
_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


class RunError(ValueError):
    """A run that cannot start: unknown notebook or parameter, wrong type, missing file."""


class RemadeDiffers(RunError):
    """A recorded run remade for its missing checkpoint came out different from its record."""


# What differs between any two runs of one notebook with the same parameters: wall times, the
# time of writing, and the traces of an interrupted run (the step a training resumed from,
# whether a checkpoint saved before the kill was reused).
VOLATILE_KEYS = ("written_at", "resumed_from", "reused")


def record_differences(a: Any, b: Any, path: str = "", any_location: bool = False) -> list[str]:
    """Where two records (JSON values) differ, volatile keys (``VOLATILE_KEYS``, ``*seconds``) left
    out; numbers are compared exactly (NaN equals NaN). Each difference: its path and both values.
    With ``any_location``, two absolute file paths count as the same (checkpoints in two caches)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k.endswith("seconds") or k in VOLATILE_KEYS:
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'the first' if k in a else 'the second'}")
            else:
                out += record_differences(a[k], b[k], f"{path}/{k}", any_location)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items against {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in record_differences(x, y, f"{path}[{i}]", any_location)]
    same = a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b) or (
        any_location and isinstance(a, str) and isinstance(b, str) and os.path.isabs(a) and os.path.isabs(b))
    return [] if same else [f"{path}: {a!r} against {b!r}"]


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

    Read from the cell tagged ``parameters``, which holds annotated literals only.
    """
    import papermill

    params = papermill.inspect_notebook(str(notebook))
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
    for name, info in params.items():
        try:
            default = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            raise RunError(f"Parameter '{name}' of {notebook.name} is not a literal: {info['default']!r}.") from None
        out[name] = {"type": info["inferred_type_name"], "default": default}
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
    return checked


def parse_cli_value(text: str) -> Any:
    """A ``-p NAME VALUE`` value as YAML reads it (``3`` int, ``1e-4`` float, ``true`` bool)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in ".eE") and value[0].isdigit() else value
        except ValueError:
            return value
    return value


NAMING = ("applicable", "every_varying")


def load_params_file(path: str | Path, with_naming: bool = False) -> list[dict] | tuple[list[dict], str]:
    """A YAML parameter file: one mapping (one run), a list of mappings (several runs), or
    ``{naming: applicable | every_varying, runs: [...]}``.

    ``naming`` says which keys name the runs of a list: ``applicable`` (the default) the keys whose
    values differ between runs and that apply to the run (``APPLIES``: an RMU run is not named by
    FRP's sparsity); ``every_varying`` every key that differs, applicable or not (the naming of the
    records made before 2026-11-25, kept so that they stay complete).
    """
    path = Path(path)
    if not path.is_file():
        alt = paths.PARAMS_DIR / path
        if not alt.is_file():
            raise RunError(f"Parameter file '{path}' not found (also looked in {paths.PARAMS_DIR}).")
        path = alt
    data = yaml.safe_load(path.read_text())
    naming = "applicable"
    if isinstance(data, dict) and "runs" in data:
        unknown = sorted(set(data) - {"runs", "naming"})
        naming = data.get("naming", naming)
        if unknown or naming not in NAMING:
            raise RunError(f"{path}: a file with 'runs:' takes only 'naming' ({' | '.join(NAMING)}) beside it; "
                           f"got keys {sorted(data)} and naming {naming!r}.")
        data = data["runs"]
    runs = data if isinstance(data, list) else [data]
    if not runs or not all(isinstance(r, dict) for r in runs):
        raise RunError(f"{path} must hold a mapping of parameters or a list of such mappings.")
    return (runs, naming) if with_naming else runs


_GRADIENT = ("ga", "graddiff", "npo", "rmu")


def _methods(*names: str):
    return lambda p: p.get("method") in names


def _frp(*variants: str):
    return lambda p: p.get("method") == "frp" and p.get("frp_variant") in variants


# Which runs a notebook parameter applies to (a parameter not listed applies to every run). Read by
# run_name: a key that varies across a parameter file names only the runs it applies to.
APPLIES = {
    "05_unlearn": {
        "gold": _methods("gold"),
        "sparsity": _methods("frp", "sp"), "prune_n_calib": _methods("frp", "sp"),
        "frp_variant": _methods("frp"), "frp_lam": _frp("released", "eq6", "paper"),
        "frp_veto": _frp("released"), "frp_beta": _frp("eq6", "paper"),
        "sp_variant": _methods("sp"), "match_l2_run": _methods("sp"),
        **{k: _methods(*_GRADIENT) for k in ("lr", "epochs", "batch_size", "grad_accum", "warmup_epochs", "bf16")},
        "npo_beta": _methods("npo"),
        **{k: _methods("rmu") for k in ("rmu_layer", "rmu_coeff", "rmu_alpha", "rmu_trainable")},
    },
    "06_attacks": {
        "lora_targets": lambda p: p.get("lora_rank", 0) > 0,
        "mc_shots": lambda p: bool(p.get("eval_mc")),
    },
}


def applies(notebook: str, key: str, params: dict) -> bool:
    """Whether parameter ``key`` of ``notebook`` (its stem) matters to a run with ``params``."""
    rule = APPLIES.get(notebook, {}).get(key)
    return rule is None or bool(rule(params))


_KERNEL_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}  # IPython's own variables


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
    # the values as given, not widened: the record holds what the notebook ran with
    return values


def _fmt(value: Any) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


def run_name(params: dict, overrides: dict, tag: str = "") -> str:
    """``<profile>`` (``<profile>.<tag>`` for a suffixed parameter file) plus ``__name=value``
    for each override, sorted."""
    base = str(params.get("profile", "custom")) + (f".{tag}" if tag else "")
    extra = [f"{k}={_fmt(v)}" for k, v in sorted(overrides.items()) if k not in ("profile", "run_name")]
    return paths.safe_name("__".join([base, *extra]))


@dataclass
class RunSpec:
    """One notebook run: the notebook, its full parameters and where it writes."""

    notebook: Path
    params: dict
    name: str
    extra: dict = field(default_factory=dict)

    @property
    def out_dir(self) -> Path:
        return paths.RUNS_DIR / self.notebook.stem / self.name

    @property
    def executed(self) -> Path:
        return self.out_dir / self.notebook.name

    def is_complete(self) -> bool:
        results = self.out_dir / RESULTS_FILE
        if not (self.executed.is_file() and results.is_file()):
            return False
        try:
            recorded = json.loads(results.read_text())["provenance"]["params"]
        except (json.JSONDecodeError, KeyError):
            return False
        defaults = notebook_defaults(self.notebook)
        stem = self.notebook.stem
        return params_key(recorded, defaults, stem) == params_key(self.params, defaults, stem)


def plan_run(notebook: str, params_file: str | Path | None = None, overrides: dict | None = None) -> list[RunSpec]:
    """Check and name the runs of one notebook (one per mapping in the parameter file)."""
    nb = resolve_notebook(notebook)
    overrides = dict(overrides or {})
    bases, naming = load_params_file(params_file, with_naming=True) if params_file else ([{}], "applicable")
    # runs of a suffixed file (05_unlearn.sweep.yaml) carry the suffix in their names, so that two
    # files naming their runs by the same varying keys never collide
    parts = Path(params_file).name.split(".") if params_file else []
    tag = ".".join(parts[1:-1]) if len(parts) > 2 and parts[0] == nb.stem else ""
    # in a list of runs, the keys whose values differ between runs go into the names (only those
    # that apply to the run, unless the file keeps the old naming)
    varying = {k for k in set().union(*bases) if len({repr(b.get(k)) for b in bases}) > 1}
    specs = []
    defaults = notebook_defaults(nb)
    for base in bases:
        params = {**defaults, **check_parameters(nb, {**base, **overrides})}
        named = {k: v for k, v in params.items()
                 if k in overrides or k in varying and (naming == "every_varying" or applies(nb.stem, k, params))}
        name = run_name(params, named, tag)
        params["run_name"] = name
        params = check_parameters(nb, params)
        specs.append(RunSpec(nb, params, name))
    return specs


def repo_relative(path: Path) -> str:
    """A path as messages show it: relative to the repository when inside it, else absolute."""
    return str(path.relative_to(paths.REPO_ROOT)) if path.is_relative_to(paths.REPO_ROOT) else str(path)


def failed_notebook_path(spec: RunSpec, had_record: bool) -> Path:
    """Where the partial executed notebook of a failed run is kept: next to the record it was
    to replace (``<notebook>.failed.ipynb``), or, for a run that had no record, in the cache's
    scratch folder ``failed/``, so that nothing in ``papermill_runs/`` looks like a run."""
    if had_record:
        return spec.out_dir / f"{spec.notebook.stem}.failed.ipynb"
    return paths.cache_dir() / "failed" / spec.notebook.stem / f"{spec.name}.ipynb"


def _failed(spec: RunSpec, tmp: Path, had_record: bool, err: Exception, remaking: bool = False) -> RunError:
    """Clear away a run that failed inside papermill and say what happened, in one paragraph."""
    kept = None
    if tmp.is_file():
        kept = failed_notebook_path(spec, had_record and not remaking)
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(tmp, kept)
    if not had_record:  # the folder held no record before: nothing of this attempt stays in it
        shutil.rmtree(spec.out_dir, ignore_errors=True)
        try:
            spec.out_dir.parent.rmdir()  # the notebook's folder, when this was its only run
        except OSError:
            pass
    if hasattr(err, "ename"):  # papermill's PapermillExecutionError: the error raised in a cell
        cell = f" in cell [{err.exec_count}]" if getattr(err, "exec_count", None) is not None else ""
        what = f"{cell}: {err.ename}: {' '.join(str(err.evalue).split())}"
    else:  # the kernel did not start, or papermill could not read or write a notebook
        what = f": {type(err).__name__}: {' '.join(str(err).split())}"
    where = (f"The partial executed notebook is kept at {repo_relative(kept)}." if kept else
             "papermill wrote no notebook.")
    if remaking:
        after = (f" It was being remade for its missing checkpoint; its committed record in "
                 f"{repo_relative(spec.out_dir)} is put back as it was.")
    elif had_record:
        after = (f" The run's earlier results.json was removed when it started, so its record is incomplete; "
                 f"'git checkout -- {repo_relative(spec.out_dir)}' restores a committed one.")
    else:
        after = f" Its run folder {repo_relative(spec.out_dir)} was removed (it held no record before)."
    return RunError(f"{spec.notebook.stem}/{spec.name} failed{what.rstrip('.')}. {where}{after}")


def execute(spec: RunSpec, force: bool = False, kernel: str = KERNEL, remaking: bool = False) -> dict:
    """Execute one run unless it is already complete; returns its status and timing. ``remaking``:
    a recorded run made again for its checkpoint, whose committed record the caller puts back.

    Raises:
        RunError: the notebook failed (an error in a cell, a kernel that did not start). Nothing of
            the attempt stays in ``papermill_runs/`` where the run had no record before; the
            partial executed notebook is kept (:func:`failed_notebook_path`) and named.
    """
    collector = spec.notebook.stem in COLLECTORS
    inputs = collector_inputs(spec) if collector else None
    if spec.is_complete() and not force and (not collector or _recorded_inputs(spec) == inputs):
        return {"run": f"{spec.notebook.stem}/{spec.name}", "status": "skipped (complete)", "seconds": 0.0}
    import papermill

    had_record = (spec.out_dir / RESULTS_FILE).is_file() or spec.executed.is_file()
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    (spec.out_dir / RESULTS_FILE).unlink(missing_ok=True)
    # hidden, ignored by git, and ending in .ipynb (papermill warns at every run about any other name)
    tmp = spec.out_dir / f".{spec.notebook.stem}.running.ipynb"
    os.environ["FRAG_PROGRESS"] = "0"  # the kernel inherits this: no progress bars in the record
    numerics.set_deterministic_env()  # and deterministic mode, also where the kernel spec lacks it
    from .records import RUN_COMMIT_ENV, git_commit

    previous_commit = os.environ.pop(RUN_COMMIT_ENV, None)
    start_git = git_commit()  # the record names the code this run starts from
    dirty = {True: "1", False: "0"}.get(start_git["dirty"], "?")
    os.environ[RUN_COMMIT_ENV] = f"{start_git['commit'] or ''}:{dirty}"
    start = time.time()
    try:
        # the kernel's own log stays at errors: ipykernel 7 warns at every start that its local TCP
        # sockets are unencrypted, a line per run in the runner's output that says nothing about it
        papermill.execute_notebook(str(spec.notebook), str(tmp), parameters=spec.params, kernel_name=kernel,
                                   cwd=str(paths.NOTEBOOKS_DIR), progress_bar=False, log_output=False,
                                   extra_arguments=["--IPKernelApp.log_level=ERROR"])
    except Exception as err:  # not a kill (KeyboardInterrupt): a later run resumes from what it left
        raise _failed(spec, tmp, had_record, err, remaking) from err
    finally:  # this process's own records name their own commit again
        if previous_commit is None:
            os.environ.pop(RUN_COMMIT_ENV, None)
        else:
            os.environ[RUN_COMMIT_ENV] = previous_commit
    os.replace(tmp, spec.executed)
    make_portable(spec.out_dir)
    failed_notebook_path(spec, True).unlink(missing_ok=True)  # an earlier failure's, now replaced
    if collector:
        (spec.out_dir / INPUTS_FILE).write_text(inputs + "\n")
    return {"run": f"{spec.notebook.stem}/{spec.name}", "status": "done", "seconds": round(time.time() - start, 1)}


PORTABLE_SUFFIXES = (".ipynb", ".json", ".md", ".csv", ".tex")


def make_portable(folder: Path) -> list[Path]:
    """Rewrite a run's files so that no path names the machine: the cache root as
    :data:`paths.CACHE_TOKEN`, paths in the repository relative to it (papermill's own metadata,
    the records' checkpoint paths, what cells printed). Returns the files changed."""
    changed = []
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.suffix in PORTABLE_SUFFIXES:
            text = f.read_text()
            new = paths.portable_text(text)
            if new != text:
                f.write_text(new)
                changed.append(f)
    return changed


# A collector's inputs when it last ran. A collector is rerun only when they changed, so that
# regenerating the tables from unchanged records changes no tracked file (its executed notebook
# carries timestamps).
INPUTS_FILE = "inputs.sha256"


def collector_inputs(spec: RunSpec) -> str:
    """sha256 of everything a collector's output depends on: its notebook, its parameters, the
    package's code, the profile's parameter files, and every record (``results.json``) of the
    profile's runs (the collectors' own left out)."""
    import hashlib

    profile = str(spec.params.get("profile"))
    files = [spec.notebook, *sorted(paths.PACKAGE_DIR.rglob("*.py")),
             *sorted((paths.PARAMS_DIR / profile).glob("*.yaml")),
             *sorted(f for f in paths.RUNS_DIR.glob(f"*/{profile}*/{RESULTS_FILE}")
                     if f.parent.parent.name not in COLLECTORS)]
    digest = hashlib.sha256(params_key(spec.params).encode())
    for f in files:
        digest.update(f"\0{repo_relative(f)}\0".encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def _recorded_inputs(spec: RunSpec) -> str | None:
    file = spec.out_dir / INPUTS_FILE
    return file.read_text().strip() if file.is_file() else None


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


def profiles() -> list[str]:
    """The profiles: the folders of ``papermill_runs/params/`` that hold parameter files."""
    if not paths.PARAMS_DIR.is_dir():
        return []
    return sorted(p.name for p in paths.PARAMS_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def grid(profile: str) -> list[RunSpec]:
    """Every run of a profile: ``papermill_runs/params/<profile>/*.yaml``, by notebook, each
    notebook's main file first.

    Each file is named after its notebook (``02_target_and_gold.yaml``), optionally with a
    suffix for a further set of runs (``05_unlearn.sweep.yaml``, after the main file), and holds
    one mapping or a list of mappings. A run that an earlier file already holds with the same parameters is run once,
    under its first name (find it with :func:`params_key`); two different runs of one notebook
    may not share a name.
    """
    folder = paths.PARAMS_DIR / profile
    if not folder.is_dir():
        raise RunError(f"Unknown profile '{profile}'. Known profiles: {', '.join(profiles())}.")
    specs, seen, same = [], {}, set()
    files = sorted(folder.glob("*.yaml"), key=lambda f: (f.name.split(".")[0], f.name.count(".") > 1, f.name))
    for file in files:
        for spec in plan_run(file.name.split(".")[0], file):
            key = (spec.notebook.stem, spec.name)
            identity = (spec.notebook.stem, params_key(spec.params, notebook=spec.notebook.stem))
            if identity in same:
                continue  # the same run, listed by another file too
            if key in seen:
                raise RunError(f"Run {key[0]}/{key[1]} is defined twice with different parameters ({seen[key]} "
                               f"and {file.name}); give one of them a parameter value that differs.")
            seen[key] = file.name
            same.add(identity)
            specs.append(spec)
    return specs


def made_checkpoints(spec: RunSpec) -> list[Path]:
    """The local checkpoints a recorded run made or points its readers to (notebook 02's target
    and gold, notebook 05's unlearned model; for method gold, notebook 02's gold model).

    Checkpoints live in the cache, not in the repository: on a fresh machine a run can be recorded
    while its checkpoint is absent (or recorded under another machine's cache path). Hub ids
    (never absolute paths) are not checkpoints of this machine and are left out.
    """
    results_file = spec.out_dir / RESULTS_FILE
    if not results_file.is_file():
        return []
    return list(_made(json.loads(results_file.read_text())["results"], spec.notebook.stem).values())


def _made(results: dict, notebook: str) -> dict[str, Path]:
    """Role (its key in ``checkpoint_sha256``) -> local path of each checkpoint a record names as made."""
    if notebook not in ("02_target_and_gold", "05_unlearn"):
        return {}
    named = (results.get("checkpoints", {}) if notebook == "02_target_and_gold"
             else {"unlearned": results.get("unlearned", "")})
    return {k: Path(c) for k, c in paths.expand_cached(named).items() if c and os.path.isabs(c)}


def _missing(spec: RunSpec) -> list[Path]:
    return [c for c in made_checkpoints(spec) if _missing_checkpoint(c)]


REMADE_DIR = "remade"  # in the cache: records of runs remade here that did not reproduce their record
_SHA_MEMO: dict[tuple, str | None] = {}


def remade_record_dir(spec: RunSpec) -> Path:
    """Where the record of a recorded run remade on this machine is kept when it does not reproduce
    the committed one: in this numerics mode's cache, beside the checkpoint it describes. The
    committed record stays as it was (it describes the checkpoint the grid's other runs read)."""
    return paths.cache_dir() / REMADE_DIR / spec.notebook.stem / spec.name


def _checkpoint_sha256(folder: Path) -> str | None:
    """:func:`frag_utils.models.weights_sha256` of a cached checkpoint, read once per state of its files."""
    files = sorted(folder.glob("*.safetensors"))
    key = (str(folder), *((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    if key not in _SHA_MEMO:
        from .models import weights_sha256  # imports torch: only where a remade record is to be checked

        _SHA_MEMO[key] = weights_sha256(folder) if files else None
    return _SHA_MEMO[key]


def remade_results(spec: RunSpec) -> dict | None:
    """The results of ``spec`` as remade on this machine (:func:`remade_record_dir`), when they
    differ from its record and the checkpoints they name are the ones in the cache now (each
    weights hash compared); else None. A remade record whose checkpoints were replaced since (the
    original put back, made again) is removed."""
    file = remade_record_dir(spec) / RESULTS_FILE
    if not file.is_file():
        return None
    results = json.loads(file.read_text())["results"]
    sha = _hashes(results)
    made = _made(results, spec.notebook.stem)
    committed = spec.out_dir / RESULTS_FILE
    named = _hashes(json.loads(committed.read_text())["results"]) if committed.is_file() else {}
    if made and all(sha.get(role) and named.get(role) == sha[role] for role in made):
        shutil.rmtree(file.parent, ignore_errors=True)  # the record now names these weights (made again since)
        return None
    if made and all(role in sha and _checkpoint_sha256(path) == sha[role] for role, path in made.items()):
        return results
    if not any(_missing_checkpoint(path) for path in made.values()):  # replaced, not just absent
        shutil.rmtree(file.parent, ignore_errors=True)
    return None


RECORDED, REMADE, OTHER_WEIGHTS = "recorded", "remade", "recorded, other weights"


def checkpoint_record(notebook: str, name: str) -> tuple[dict, str]:
    """The record that describes the checkpoint of recorded run ``notebook/name`` now in the cache,
    for a notebook that reads both (notebook 06 takes the pre-attack evaluation and FRAG from it),
    and which record it is:

    - ``"remade"``: the run as remade on this machine (:func:`remade_record_dir`), kept with
      ``--keep-remade``, when the cached weights are the remade ones;
    - ``"recorded"``: the committed record, which names the cached weights or names no hash;
    - ``"recorded, other weights"``: the committed record, where a checkpoint it names as made is in
      the cache with other weights than the hash it names (:func:`_foreign_checkpoints`), or was
      remade upstream (:func:`_remade_owner`: a gold run's model is notebook 02's, remade with it;
      this also covers records from before weight hashes): what it says of those weights (their
      evaluation, their FRAG) is not of the weights in the cache.

    The payload is :func:`frag_utils.records.read_json`'s (cache paths expanded).

    Raises:
        FileNotFoundError: the run has no record.
    """
    from . import records

    spec = recorded_spec(notebook, name)
    if spec is None:
        raise FileNotFoundError(f"{notebook}/{name} has no record ({repo_relative(paths.RUNS_DIR / notebook / name)}); "
                                f"run it first, e.g. `frag run {notebook} -f FILE --select {name}`.")
    if remade_results(spec) is not None:
        return records.read_json(remade_record_dir(spec) / RESULTS_FILE), REMADE
    payload = records.read_json(spec.out_dir / RESULTS_FILE)
    if _foreign_checkpoints(spec) or _remade_owner(spec, dependency_grid([spec])) is not None:
        return payload, OTHER_WEIGHTS
    return payload, RECORDED


def _remade_hash(spec: RunSpec, key: str, specs: list[RunSpec]) -> tuple[str | None, str | None]:
    """``(hash, remade run)`` of the checkpoint ``spec``'s record names under ``key`` (``unlearned``,
    ``target``, ...) as remade on this machine, or ``(None, None)``. A gold run's ``unlearned`` is
    notebook 02's gold model: its remade hash is that of the 02 run, when 02 was remade."""
    remade = remade_results(spec)
    if remade is not None:
        return _hashes(remade).get(key), f"{spec.notebook.stem}/{spec.name}"
    for stem, name, _, pair in _named_inputs(spec, specs):
        if pair and pair[0] == key:  # the checkpoint spec names under `key` is that run's `pair[1]`
            owner = _find(stem, name, specs)
            if owner is not None:
                return _remade_hash(owner, pair[1], specs)
    return None, None


def _pending(spec: RunSpec) -> list[Path]:
    """The marker of a remake of ``spec`` that started and did not end (killed, failed): its
    checkpoint may be in the cache, unchecked, so it counts as missing and is remade (reused)."""
    marker = _pending_marker(spec)
    return [marker] if marker.is_file() else []


def _pending_marker(spec: RunSpec) -> Path:
    return remade_record_dir(spec).with_name(spec.name + ".pending")


def _missing_checkpoint(path: Path) -> bool:
    return not any(path.glob("*.safetensors"))


def _named_inputs(spec: RunSpec, specs: list[RunSpec]) -> list[tuple[str, str, bool, tuple[str, str] | None]]:
    """``(notebook, run name, record only, hashes)`` of every run ``spec`` reads from (see
    :func:`needed_runs`), whether or not ``specs`` holds it. ``hashes`` is ``(key in spec's
    checkpoint_sha256, key in the input's)`` where ``spec`` reads the input's weights and its record
    names them (:func:`stale_inputs`), else None."""
    nb, p = spec.notebook.stem, spec.params
    makers = [s for s in specs if s.notebook.stem == "02_target_and_gold" and s.params["profile"] == p.get("profile")]
    names: list[tuple[str, str, bool, tuple[str, str] | None]] = []
    if p.get("original") == "profile-target" and makers:  # every 02 run of a profile trains its one target
        names.append(("02_target_and_gold", makers[0].name, False, ("original", "target")))
    if nb == "05_unlearn" and p.get("method") == "gold" and p.get("gold") == "profile-gold":
        names += [("02_target_and_gold", s.name, False, ("unlearned", "gold")) for s in makers
                  if s.params["forget_split"] == p["forget_split"]]
    if nb == "05_unlearn" and p.get("match_l2_run"):
        names.append(("05_unlearn", p["match_l2_run"], True, None))
    if nb == "06_attacks" and p.get("unlearned_run"):
        names.append(("05_unlearn", p["unlearned_run"], False, ("attacked", "unlearned")))
    if nb == "07_ablations" and p.get("unlearned_runs") not in (None, "", "all"):
        names += [("05_unlearn", n.strip(), False, None) for n in p["unlearned_runs"].split(",") if n.strip()]
    return names


def needed_runs(spec: RunSpec, specs: list[RunSpec]) -> list[tuple[RunSpec, bool]]:
    """The runs of ``specs`` that ``spec`` reads from, each with whether it reads only their record
    (``True``) or also their checkpoints (``False``): the profile's notebook-02 run for any run on
    ``profile-target`` and for a gold run on ``profile-gold``; the named notebook-05 runs of
    notebooks 06 and 07; the run a matched-norm notebook-05 run matches (``match_l2_run``, record
    only). ``unlearned_runs: all`` in notebook 07 names no runs in advance and is not covered."""
    by_name = {(s.notebook.stem, s.name): s for s in specs}
    found: dict[tuple[str, str], bool] = {}
    for stem, name, record_only, _ in _named_inputs(spec, specs):
        if (stem, name) in by_name:
            found[(stem, name)] = found.get((stem, name), True) and record_only
    return [(by_name[k], record_only) for k, record_only in found.items()]


def dependency_grid(specs: list[RunSpec]) -> list[RunSpec]:
    """The runs to look up what ``specs`` read from: the whole grid of each of their profiles
    (every profile with parameter files), then those of ``specs`` it does not hold (a run with
    overrides, a user's own parameter file), so that ``frag run`` remakes what a run reads as
    ``frag reproduce`` does."""
    universe: list[RunSpec] = []
    for profile in dict.fromkeys(str(s.params.get("profile")) for s in specs):
        if profile in profiles():
            universe += grid(profile)
    keys = {(s.notebook.stem, s.name) for s in universe}
    return universe + [s for s in specs if (s.notebook.stem, s.name) not in keys]


def stale_inputs(spec: RunSpec, specs: list[RunSpec]) -> list[str]:
    """The upstream runs whose current record names other weights than the ones ``spec``'s record
    read: ``spec`` was made from an earlier version of them (the upstream run was made again since),
    and is to be made again too. Compared (:func:`_named_inputs` names the pairs): a notebook-05
    record's ``original`` with the target of the profile's notebook-02 run, a gold run's
    ``unlearned`` with the gold model of the 02 run of its split, a notebook-06 record's
    ``attacked`` with the ``unlearned`` model of the 05 run it names. Judged only where both
    records carry the sha256; an unrecorded ``spec`` has nothing stale. Weights that match the
    upstream run as remade on this machine (:func:`remade_inputs`) are not stale.

    Not covered here: a cached checkpoint that differs from what its own record names (the runner
    checks that before a run reads it: :func:`_foreign_checkpoints`), and notebook-02 runs of other
    splits, which reuse the profile's target."""
    return [name for name, state in input_states(spec, specs) if state == "stale"]


def remade_inputs(spec: RunSpec, specs: list[RunSpec]) -> list[str]:
    """The upstream runs whose weights ``spec``'s record read, directly or through the runs it
    read, were not the recorded ones but those remade on this machine (:func:`remade_results`,
    kept with ``keep_remade``): ``spec`` is a run of this machine's lineage, not of the recorded grid."""
    return [name for name, state in input_states(spec, specs) if state == "remade"]


def input_states(spec: RunSpec, specs: list[RunSpec]) -> list[tuple[str, str]]:
    """``(upstream run, "stale" | "remade")`` for each input whose weights ``spec``'s record read
    are not the ones the upstream record names (see :func:`stale_inputs`); an input whose record
    was itself made from remade weights passes those on (``remade``, named by the remade run)."""
    inputs = [i for i in _named_inputs(spec, specs) if i[3]]
    if not inputs or not spec.is_complete():
        return []
    read = _hashes(json.loads((spec.out_dir / RESULTS_FILE).read_text())["results"])
    states: dict[str, str] = {}
    for stem, name, _, (read_key, made_key) in inputs:
        dep = _find(stem, name, specs)
        if not read.get(read_key) or dep is None or not dep.is_complete():
            continue
        made = _hashes(json.loads((dep.out_dir / RESULTS_FILE).read_text())["results"]).get(made_key)
        if made != read[read_key] and f"{stem}/{name}" not in states:
            remade, owner = _remade_hash(dep, made_key, specs)
            if remade == read[read_key]:
                states[owner] = "remade"
            elif made:  # a record without hashes (made before records named them) is not judged
                states[f"{stem}/{name}"] = "stale"
        elif made == read[read_key]:  # the recorded weights, but made from remade ones (a user's lineage)
            for root, state in input_states(dep, specs):
                if state == "remade":
                    states.setdefault(root, "remade")
    return list(states.items())


def _find(notebook: str, name: str, specs: list[RunSpec]) -> RunSpec | None:
    """A run of ``specs`` by notebook and name, else a recorded one by its folder (:func:`recorded_spec`)."""
    found = next((s for s in specs if (s.notebook.stem, s.name) == (notebook, name)), None)
    return found or recorded_spec(notebook, name)


def recorded_spec(notebook: str, name: str) -> RunSpec | None:
    """A recorded run by its folder (one no parameter file names: a user's run read by another)."""
    results = paths.RUNS_DIR / notebook / name / RESULTS_FILE
    if not results.is_file():
        return None
    return RunSpec(resolve_notebook(notebook), json.loads(results.read_text())["provenance"]["params"], name)


def _check_inputs_known(spec: RunSpec, specs: list[RunSpec]) -> None:
    """Refuse a run that names a run to read from that is neither recorded nor in ``specs``:
    nothing could make it, and the notebook would fail on its missing record."""
    known = {(s.notebook.stem, s.name) for s in specs}
    for stem, name, _, _ in _named_inputs(spec, specs):
        if (stem, name) not in known and not (paths.RUNS_DIR / stem / name / RESULTS_FILE).is_file():
            raise RunError(
                f"{spec.notebook.stem}/{spec.name} reads from {stem}/{name}, which has no record in "
                f"{repo_relative(paths.RUNS_DIR / stem)} and is in no parameter file of profile "
                f"'{spec.params.get('profile')}', so it cannot be made first. Run it first ('frag run {stem} -f "
                f"FILE -p NAME VALUE' with the parameters that name it), or name a recorded run (the folders of "
                f"{repo_relative(paths.RUNS_DIR / stem)}).")


def _execute_logged(spec: RunSpec, force: bool, log: list[dict], reason: str = "", remaking: bool = False) -> dict:
    """:func:`execute`, its entry appended to ``log`` (a failed run's too, status ``failed``, or
    ``interrupted`` for a kill) and printed unless skipped."""
    start = time.time()
    try:
        entry = execute(spec, force=force, remaking=remaking) if remaking else execute(spec, force=force)
    except BaseException as err:
        entry = {"run": f"{spec.notebook.stem}/{spec.name}", "status": "failed" if isinstance(err, Exception)
                 else "interrupted", "seconds": round(time.time() - start, 1)}
        raise
    finally:
        if reason:
            entry["reason"] = reason
        log.append(entry)
        if entry["status"] != "skipped (complete)":  # a grid of complete runs prints no line each
            print(f"{entry['run']}: {entry['status']} ({entry['seconds']} s{'; ' + reason if reason else ''})",
                  flush=True)
    return entry


def _restore_needed(spec: RunSpec, specs: list[RunSpec], log: list[dict], checked: set,
                    keep_remade: bool = False) -> None:
    """Before ``spec`` runs: every run it reads from is run if unrecorded, and remade if it is
    recorded but its checkpoint is missing from the cache (a fresh machine), what those read from
    first. ``checked`` holds the runs already seen to be in place (or made) during this grid.

    A remade run is compared with its record (:func:`_settle_remade`): the committed record is
    kept either way. One that differs stops the grid unless ``keep_remade``; so does a cached
    checkpoint remade earlier that differs from its record.

    Raises:
        RunError: ``spec`` names a run that is neither recorded nor in ``specs``; a remake failed.
        RemadeDiffers: see above.
    """
    _check_inputs_known(spec, specs)
    for dep, record_only in needed_runs(spec, specs):
        key = (dep.notebook.stem, dep.name)
        if key in checked:
            continue
        _put_back_committed(dep)
        stale = stale_inputs(dep, specs)
        missing = [] if record_only else _missing(dep) + _pending(dep)
        if dep.is_complete() and not stale and not missing:
            owner = None if record_only else _remade_owner(dep, specs)
            if owner and not keep_remade:
                raise RemadeDiffers(_remade_message(
                    owner, f"Its checkpoint in the cache (read by {dep.notebook.stem}/{dep.name}) was remade earlier "
                           f"on this machine and differs from its record"))
            foreign = [] if record_only or owner else _foreign_checkpoints(dep)
            if foreign:
                raise RunError(
                    f"{dep.notebook.stem}/{dep.name}: the checkpoint in the cache is not the one its record names "
                    f"({'; '.join(foreign)}). Something other than this record's run made it (a worktree or branch "
                    f"sharing this cache, an earlier version of the code, a copy by hand), so runs made from it would "
                    f"not be what the records say. Nothing was run. Remove it and the runner remakes it from the "
                    f"record's parameters (and compares), or give this checkout a cache of its own (FRAG_CACHE_DIR).")
            checked.add(key)
            continue
        _restore_needed(dep, specs, log, checked, keep_remade)
        if stale:  # made from earlier weights of its own inputs: made again, not compared with its record
            _execute_logged(dep, True, log, f"needed by {spec.notebook.stem}/{spec.name}; its record read earlier "
                            f"weights of {', '.join(stale)}")
            checked.add(key)
            continue
        missing = [] if record_only else _missing(dep) + _pending(dep)  # after its inputs: 05 gold's is 02's
        if not dep.is_complete():
            _execute_logged(dep, False, log, f"needed by {spec.notebook.stem}/{spec.name}")
        elif missing:
            _remake(dep, log, f"needed by {spec.notebook.stem}/{spec.name}: its checkpoint is not in the cache",
                    keep_remade)
        checked.add(key)


def _foreign_checkpoints(spec: RunSpec) -> list[str]:
    """The cached checkpoints of a recorded run whose weights are not the ones its record names
    (each: path, both hashes); records without weight hashes are not judged."""
    results = json.loads((spec.out_dir / RESULTS_FILE).read_text())["results"]
    named = _hashes(results)
    found = []
    for role, path in _made(results, spec.notebook.stem).items():
        cached = None if _missing_checkpoint(path) or not named.get(role) else _checkpoint_sha256(path)
        if cached and cached != named[role]:
            found.append(f"{path}: weights {cached[:12]}, recorded {named[role][:12]}")
    return found


def _remade_owner(spec: RunSpec, specs: list[RunSpec]) -> RunSpec | None:
    """The run whose remade record describes the checkpoint ``spec`` names (``spec`` itself, or for
    a gold run notebook 02's run), when that checkpoint in the cache is a remade one; else None."""
    for key in _made(json.loads((spec.out_dir / RESULTS_FILE).read_text())["results"], spec.notebook.stem):
        sha, owner = _remade_hash(spec, key, specs)
        if sha:
            return recorded_spec(*owner.split("/", 1)) or spec
    return None


def _backup(spec: RunSpec) -> Path:
    return spec.out_dir.with_name(f".{spec.name}.committed")


def _put_back_committed(spec: RunSpec) -> None:
    """A remake killed before it put the committed record back left it in :func:`_backup`: back."""
    if _backup(spec).is_dir():
        shutil.rmtree(spec.out_dir, ignore_errors=True)
        _backup(spec).rename(spec.out_dir)


def _remake(spec: RunSpec, log: list[dict], reason: str, keep_remade: bool) -> None:
    """Remake a recorded run whose checkpoint is missing, compare it with its record
    (:func:`_settle_remade`), and put the committed record back as it was, whatever happens (a
    kill included: the copy waits beside it, :func:`_put_back_committed`). Until the remake is
    settled its checkpoint counts as missing (:func:`_pending`)."""
    pending = _pending_marker(spec)
    pending.parent.mkdir(parents=True, exist_ok=True)
    pending.write_text(reason)
    shutil.copytree(spec.out_dir, _backup(spec))
    try:
        _execute_logged(spec, True, log, reason, remaking=True)
        try:
            _settle_remade(spec, _backup(spec), keep_remade)
        finally:  # compared: a remade checkpoint that differs is known by its remade record from now on
            pending.unlink(missing_ok=True)
    finally:
        _put_back_committed(spec)


def _settle_remade(spec: RunSpec, committed: Path, keep_remade: bool) -> None:
    """After ``spec`` was remade for its missing checkpoint (its record in ``committed``): compare.

    The same numbers (wall times aside) and weights: the committed record describes the new
    checkpoint too, and is put back as it was. Different: the remade record is kept in the cache
    (:func:`remade_record_dir`) beside the checkpoint it describes, and the grid stops
    (:class:`RemadeDiffers`), as the recorded runs that read the checkpoint were made from the old
    one; with ``keep_remade`` it goes on, and what is made from the new checkpoint is of this
    machine's lineage (:func:`remade_inputs`), listed as the user's by notebook 09.
    """
    recorded = json.loads((committed / RESULTS_FILE).read_text())
    # the record was made on another machine, maybe with its cache elsewhere: where the checkpoints
    # lie is not what it reports, its numbers are
    diff = record_differences(recorded["results"], json.loads((spec.out_dir / RESULTS_FILE).read_text())["results"],
                              any_location=True)
    hashed = "checkpoint_sha256" in recorded["results"]
    if not hashed:  # a record made before records named weight hashes: compared by its numbers only
        diff = [d for d in diff if not d.startswith("/checkpoint_sha256")]
    diff.sort(key=lambda d: d.startswith("/checkpoint_sha256"))  # the numbers say more than the hashes
    kept = remade_record_dir(spec)
    shutil.rmtree(kept, ignore_errors=True)
    if not diff:
        return
    shutil.copytree(spec.out_dir, kept)
    env = recorded["provenance"].get("environment", {})
    message = _remade_message(spec, f"It was remade because its checkpoint is not in the cache, and the remade run "
                                    f"differs from its record in {len(diff)} place(s), e.g. {'; '.join(diff[:3])}"
                                    + ("" if hashed else " (the record names no weight hashes: numbers compared only)"),
                              env.get("cpu_model"), env.get("numerics", {}))
    if not keep_remade:
        raise RemadeDiffers(message)
    print(f"{spec.notebook.stem}/{spec.name}: remade, differs from its record in {len(diff)} place(s); going on with "
          f"the remade checkpoint (--keep-remade): what is made from it is listed as yours", flush=True)


def _remade_message(spec: RunSpec, what: str, recorded_cpu: str | None = None,
                    recorded_numerics: dict | None = None) -> str:
    """Why the grid stopped at a remade run that differs from its record, and the ways on."""
    return (f"{spec.notebook.stem}/{spec.name}: {what}. Its committed record is unchanged; the remade record is kept "
            f"beside the remade checkpoint, in {remade_record_dir(spec)}. Nothing more was run: the recorded runs that "
            f"read this checkpoint were made from the recorded one. Training on another machine or in another numerics "
            f"mode is not bit-reproducible (README, 'Reproducibility'). To go on with the remade checkpoint, add "
            f"--keep-remade (make reproduce KEEP_REMADE=1): the runs made from it are listed as yours by notebook "
            f"09 ('Other runs: yours', with the remade runs they read), never in the grid's tables. To use the "
            f"recorded checkpoint instead, put it in the cache; to make every record from the new one, rerun the "
            f"profile with FORCE=1." + _mode_note(recorded_cpu, recorded_numerics or {}))


def _mode_note(recorded_cpu: str | None, recorded_numerics: dict) -> str:
    """What differs between the numerics the record was made with and this machine's (or nothing)."""
    from . import records  # imports torch: only once a run has been remade

    notes = []
    recorded_mkl = recorded_numerics.get("mkl_cbwr")
    theirs, ours = records.cpu_vendor(recorded_cpu), records.cpu_vendor(records.cpu_description().get("cpu_model"))
    if theirs and ours and theirs != ours and (recorded_mkl or "AVX2").upper() == "AVX2":
        notes.append(f"The record was made on an {theirs} CPU with MKL_CBWR=AVX2 and this one is {ours}: MKL's AVX2 "
                     f"reproducibility branch exists on Intel CPUs only, so such a record reproduces on Intel CPUs, "
                     f"not here (measured: docs/reproducibility.md, 'Across CPU vendors').")
    now = {"aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"),
           "mkl_cbwr": os.environ.get("MKL_CBWR", "(unset)")}
    changed = [f"{k.upper()}={recorded_numerics[k]} then, {now[k]} now" for k in now
               if recorded_numerics.get(k) and str(recorded_numerics[k]).upper() != now[k].upper()]
    if changed:
        notes.append(f"The numerics mode differs from the record's ({'; '.join(changed)}): other kernels, other bits.")
    return "".join(f" {n}" for n in notes)


def run_grid(specs: list[RunSpec], force: bool = False, select: str | None = None,
             universe: list[RunSpec] | None = None, log: list[dict] | None = None,
             keep_remade: bool = False) -> list[dict]:
    """Run every spec in order (skipping complete ones); ``select`` keeps runs whose name contains it.

    A run about to execute first gets the runs it reads checkpoints from (:func:`needed_runs`):
    run if unrecorded, rerun if their checkpoint is missing from the cache, so that a fresh
    machine, whose cache is empty while the records are committed, can run any selection. Each
    run executed prints one line; complete runs skipped print none.

    Args:
        specs: the runs, in order.
        force: rerun complete runs too.
        select: keep only runs whose ``<notebook>/<run name>`` contains this.
        universe: where the runs they read from are looked up (default ``specs``); for runs of
            one notebook, :func:`dependency_grid` of them.
        log: a list the entries are appended to as they come (the caller keeps them when a run
            fails and the grid stops; the failed run's entry has status ``failed``).
        keep_remade: go on when a run remade for its missing checkpoint differs from its record
            (its committed record is kept; what is made from the remade checkpoint is of this
            machine's lineage, :func:`remade_inputs`).
    Returns:
        The log: per run executed or skipped, ``run``, ``status`` (``done`` or ``skipped (complete)``),
        ``seconds``, and ``reason`` for a run made because another reads from it.
    Raises:
        RunError: a run failed (the grid stops there), a run reads from one nothing can make, or a
            remade run differs from its record (:class:`RemadeDiffers`).
    """
    universe = specs if universe is None else universe
    chosen = [s for s in specs if not select or select in f"{s.notebook.stem}/{s.name}"]
    log = [] if log is None else log
    checked: set = set()
    for spec in progress(chosen, desc="runs", unit="run"):
        stale = [] if force else stale_inputs(spec, universe)
        if stale:
            print(f"{spec.notebook.stem}/{spec.name}: recorded from earlier weights of {', '.join(stale)} than "
                  "their records now name; made again", flush=True)
        if force or stale or not spec.is_complete() or spec.notebook.stem in COLLECTORS:
            _restore_needed(spec, universe, log, checked, keep_remade)
        entry = _execute_logged(spec, force or bool(stale), log, "its inputs were made again" if stale else "")
        if entry["status"] == "done":  # made here: in place for what follows (a skipped one is checked when needed)
            checked.add((spec.notebook.stem, spec.name))
    return log


def upstream(spec: RunSpec, specs: list[RunSpec]) -> list[RunSpec]:
    """Every run ``spec`` reads from (records or checkpoints), recursively, each before its readers."""
    out: list[RunSpec] = []
    for dep, _ in needed_runs(spec, specs):
        for s in [*upstream(dep, specs), dep]:
            if all((s.notebook.stem, s.name) != (o.notebook.stem, o.name) for o in out):
                out.append(s)
    return out


def find_run(run: str) -> tuple[RunSpec, list[RunSpec]]:
    """``<notebook>/<run name>`` -> its spec and the grid of its profile.

    Raises:
        RunError: no such run in any profile's parameter files.
    """
    notebook, _, name = run.strip("/").partition("/")
    for profile in profiles():
        if not name.startswith(profile):
            continue
        specs = grid(profile)
        for s in specs:
            if (s.notebook.stem, s.name) == (notebook, name):
                return s, specs
    raise RunError(f"No run '{run}' in the parameter files (papermill_runs/params/<profile>/); name it as "
                   "<notebook>/<run folder>, e.g. 02_target_and_gold/tiny.")


def _hashes(results: dict) -> dict:
    return {k: v for k, v in results.get("checkpoint_sha256", {}).items() if v}


def verify(run: str, workdir: str | os.PathLike | None = None) -> list[dict]:
    """Remake a recorded run, and every run it reads from, from an empty cache, and compare.

    The remake happens in a clone of this repository's HEAD (so nothing here changes) with the
    records of those runs removed and a new cache: everything is trained again. Each remade record
    is compared with the committed one: every number exactly (wall times aside), and the sha256 of
    every checkpoint it names.

    Args:
        run: ``<notebook>/<run name>``, e.g. ``02_target_and_gold/tiny``.
        workdir: where the clone and its cache go (default: a new temporary folder, removed after).
    Returns:
        One entry per run (upstream first): ``run``, ``identical`` (bool), ``checkpoints``
        (name -> ``identical`` or ``recorded ... remade ...``) and ``differences``.
    Raises:
        RunError: an unknown run, or one whose record is not committed at HEAD.
    """
    import shutil
    import subprocess
    import sys
    import tempfile

    spec, specs = find_run(run)
    chain = [*upstream(spec, specs), spec]
    rel = [s.out_dir.relative_to(paths.REPO_ROOT) for s in chain]
    for s, r in zip(chain, rel):
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(r / RESULTS_FILE)], cwd=paths.REPO_ROOT,
                                 capture_output=True).returncode == 0
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", str(r)], cwd=paths.REPO_ROOT).returncode != 0
        if not tracked or changed:
            raise RunError(f"{s.notebook.stem}/{s.name} has no committed record at HEAD (or its record has uncommitted "
                           "changes): verify compares a remake with what is committed; commit the record first.")
    if workdir and Path(workdir).exists() and any(Path(workdir).iterdir()):
        raise RunError(f"--workdir {workdir} is not empty: verify clones the repository and makes a new cache there; "
                       "name a new or empty folder.")
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="frag-verify-"))
    clone, cache = root / "repo", root / "cache"
    try:
        subprocess.run(["git", "clone", "--quiet", "--shared", str(paths.REPO_ROOT), str(clone)], check=True)
        for r in rel:
            shutil.rmtree(clone / r)
        env = {**os.environ, "PYTHONPATH": str(clone), "FRAG_CACHE_DIR": str(cache), "FRAG_PROGRESS": "0"}
        env.pop(numerics.OPT_OUT, None)  # verification runs in deterministic mode, as the records do
        env = numerics.set_deterministic_env(env)
        print(f"remaking {', '.join(f'{s.notebook.stem}/{s.name}' for s in chain)} in {clone} (empty cache)",
              flush=True)
        done = subprocess.run([sys.executable, "-m", "frag_utils", "reproduce", "--profile", spec.params["profile"],
                               "--select", f"{spec.notebook.stem}/{spec.name}"], cwd=clone, env=env)
        if done.returncode != 0:
            raise RunError(f"Remaking {run} failed (its output is above; the clone and cache are in {root} when "
                           "--workdir is given): nothing was compared.")
        report = []
        for s, r in zip(chain, rel):
            recorded = json.loads((s.out_dir / RESULTS_FILE).read_text())["results"]
            file = clone / r / RESULTS_FILE
            remade = json.loads(file.read_text())["results"]
            diff = record_differences(recorded, remade, any_location=True)
            ours, theirs = _hashes(recorded), _hashes(remade)
            checkpoints = {k: "identical" if ours.get(k) == theirs.get(k) else
                           f"recorded {ours.get(k, 'none')[:12]}, remade {theirs.get(k, 'none')[:12]}"
                           for k in sorted(set(ours) | set(theirs))}
            report.append({"run": f"{s.notebook.stem}/{s.name}", "identical": not diff, "checkpoints": checkpoints,
                           "differences": diff})
        return report
    finally:
        if not workdir:
            shutil.rmtree(root, ignore_errors=True)
