"""Run notebooks through papermill with checked parameters (:mod:`frag_utils.parameters`); plan
the jobs that bring a grid of them up to date (Snakemake runs them: ``workflow/Snakefile``).

* Output names are built from parameter values: ``papermill_runs/<notebook>/<run name>/``, the run
  name being the ``profile`` parameter plus any overrides, e.g. ``smol`` or ``smol__lr=0.0001``
  (``smol.table1__lr=0.0001`` for a run of ``05_unlearn.table1.yaml``).
* A complete run (:meth:`RunSpec.is_complete`) is not planned; anything else is (re)done, written
  to a temporary file and renamed at the end.
* A recorded run whose checkpoint a run needs and the cache lacks (a fresh machine, edited code)
  is remade into the cache, once, and its drift against the record printed; the record stays. A
  checkpoint half-written by a killed run is deleted before it reruns (:func:`drop_torn_checkpoints`).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import drift, kernel_paths, numerics, parameters, paths
from .parameters import RunError

KERNEL = "frag"
# Notebooks that only collect other runs' records: redone when what they read changed (collector_inputs)
COLLECTORS = ("08_predictors", "09_figures")
# the notebooks that start from a notebook-05 run's checkpoint (unlearned_run), else from the model they name
STARTS_FROM_05 = ("06_attacks", "10_sharpness")


@dataclass
class RunSpec:
    """One notebook run: the notebook, its full parameters and where it writes."""

    notebook: Path
    params: dict
    name: str

    @property
    def out_dir(self) -> Path:
        return paths.RUNS_DIR / self.notebook.stem / self.name

    @property
    def executed(self) -> Path:
        return self.out_dir / self.notebook.name

    def is_complete(self) -> bool:
        """Its executed notebook and readable record in place, with the parameters asked for (one the
        notebook gained later counts as equal at its default); for a collector, read from what is there now."""
        results = self.out_dir / paths.RESULTS_FILE
        if not (self.executed.is_file() and results.is_file()):
            return False
        try:
            recorded = json.loads(results.read_text())["provenance"]["params"]
        except (json.JSONDecodeError, KeyError):
            return False
        defaults = parameters.notebook_defaults(self.notebook)
        stem = self.notebook.stem
        if parameters.params_key(recorded, defaults, stem) != parameters.params_key(self.params, defaults, stem):
            return False
        inputs = self.out_dir / INPUTS_FILE  # a collection: complete while what it read is unchanged
        return stem not in COLLECTORS or inputs.is_file() and inputs.read_text().strip() == collector_inputs(self)


def plan_run(notebook: str, params_file: str | Path | None = None, overrides: dict | None = None) -> list[RunSpec]:
    """Check and name the runs of one notebook (one per mapping in the parameter file)."""
    nb = parameters.resolve_notebook(notebook)
    overrides = dict(overrides or {})
    if params_file is None and nb.stem in COLLECTORS:  # a profile's collection is its file's one run, never a
        profile = overrides.get("profile", parameters.notebook_defaults(nb).get("profile"))  # second under its name
        own = paths.PARAMS_DIR / str(profile) / f"{nb.stem}.yaml"
        params_file = own if own.is_file() else None
    bases = parameters.load_params_file(params_file) if params_file else [{}]
    # runs of a suffixed file (05_unlearn.table1.yaml) carry the suffix in their names: two files
    # naming their runs by the same varying keys never collide
    parts = Path(params_file).name.split(".") if params_file else []
    tag = ".".join(parts[1:-1]) if len(parts) > 2 and parts[0] == nb.stem else ""
    # in a list of runs, the keys whose values differ between runs and apply to the run name it
    varying = {k for k in set().union(*bases) if len({repr(b.get(k)) for b in bases}) > 1}
    specs = []
    defaults = parameters.notebook_defaults(nb)
    for base in bases:
        params = {**defaults, **parameters.check_parameters(nb, {**base, **overrides})}
        named = {k: v for k, v in params.items()
                 if k in overrides or k in varying and parameters.applies(nb.stem, k, params)}
        name = parameters.run_name(params, named, tag)
        params["run_name"] = name
        params = parameters.check_parameters(nb, params)
        specs.append(RunSpec(nb, params, name))
    return specs


def repo_relative(path: Path) -> str:
    """A path as messages show it: relative to the repository when inside it, else absolute."""
    return str(path.relative_to(paths.REPO_ROOT)) if path.is_relative_to(paths.REPO_ROOT) else str(path)


def failed_notebook_path(spec: RunSpec, had_record: bool) -> Path:
    """Where a failed run's partial notebook is kept: next to the record it was to replace, else in
    the cache's ``failed/`` (nothing in ``papermill_runs/`` may look like a run)."""
    if had_record:
        return spec.out_dir / f"{spec.notebook.stem}.failed.ipynb"
    return paths.cache_dir() / "failed" / spec.notebook.stem / f"{spec.name}.ipynb"


def _failed(spec: RunSpec, tmp: Path, had_record: bool, err: Exception, remaking: bool) -> RunError:
    """Clear away a run that failed inside papermill and say what happened, in one paragraph."""
    kept = None
    if tmp.is_file():
        kept = (tmp.with_name(f"{spec.notebook.stem}.failed.ipynb") if remaking
                else failed_notebook_path(spec, had_record))
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(tmp, kept)
    if not had_record and not remaking:  # the folder held no record before: nothing of this attempt stays in it
        shutil.rmtree(spec.out_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            spec.out_dir.parent.rmdir()  # the notebook's folder, when this was its only run
    if hasattr(err, "ename"):  # papermill's PapermillExecutionError: the error raised in a cell
        cell = f" in cell [{err.exec_count}]" if getattr(err, "exec_count", None) is not None else ""
        what = f"{cell}: {err.ename}: {' '.join(str(err.evalue).split())}"
    else:  # the kernel did not start, or papermill could not read or write a notebook
        what = f": {type(err).__name__}: {' '.join(str(err).split())}"
    where = (f"The partial executed notebook is kept at {repo_relative(kept)}." if kept else
             "papermill wrote no notebook.")
    if remaking:
        after = f" It was being remade; its committed record in {repo_relative(spec.out_dir)} is unchanged."
    elif had_record:
        after = (f" The run's earlier results.json was removed when it started, so its record is incomplete; "
                 f"'git checkout -- {repo_relative(spec.out_dir)}' restores a committed one.")
    else:
        after = f" Its run folder {repo_relative(spec.out_dir)} was removed (it held no record before)."
    return RunError(f"{spec.notebook.stem}/{spec.name} failed{what.rstrip('.')}. {where}{after}")


def drop_torn_checkpoints(spec: RunSpec, roles: tuple[str, ...] = ("target", "gold")) -> list[Path]:
    """Delete (and return) the trainer checkpoints without a readable ``trainer_state.json`` (the
    Trainer writes it last) in ``spec``'s own work folders only (of notebook 02, those of ``roles``):
    another runner may write elsewhere."""
    root, p = paths.cache_dir() / "checkpoints" / paths.safe_name(str(spec.params.get("profile"))), spec.params
    seed = p.get("seed", paths.TARGET_SEED)
    works = [*root.glob(f"*--{paths.safe_name(spec.name)}.work"), *(
        [root / (paths.trained_name(role, seed, p.get("forget_split")) + ".work")
         for role in roles] if "target" in spec.notebook.stem else [])]
    torn = []
    for c in (c for w in works for c in sorted(w.glob("checkpoint-*")) if c.name.split("-")[-1].isdigit()):
        with contextlib.suppress(OSError, ValueError):
            json.loads((c / "trainer_state.json").read_text())
            continue
        torn.append(c)
        print(f"deleted the half-written checkpoint {c} (its run was stopped while writing it)")
        shutil.rmtree(c)
    return torn


@functools.cache
def check_kernel_package(kernel: str = KERNEL) -> None:
    """Refuse to start where the notebook kernel would import another checkout's ``frag_utils``
    (a worktree sharing another checkout's editable ``.venv``): its record would name this checkout's
    commit for other code. Asked of the kernel's own Python, with this process's environment."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        python = KernelSpecManager().get_kernel_spec(kernel).argv[0]
    except NoSuchKernel:
        return  # papermill names the missing kernel itself
    found = subprocess.run([python, "-c", "import importlib.util as u; s = u.find_spec('frag_utils'); "
                            "print(s.origin if s and s.origin else '')"],
                           cwd=paths.NOTEBOOKS_DIR, capture_output=True, text=True, timeout=120)
    origin = found.stdout.strip()
    if not origin or Path(origin).resolve().parent != paths.PACKAGE_DIR.resolve():
        raise RunError(f"the notebook kernel {kernel!r} ({python}) imports frag_utils from "
                       f"{origin or 'nowhere'}, not from this checkout ({paths.PACKAGE_DIR}): its record "
                       f"would name this checkout's commit for other code. Run `make setup` in "
                       f"{paths.REPO_ROOT}, or start the runner with PYTHONPATH={paths.REPO_ROOT}.")


def execute(spec: RunSpec, force: bool = False, kernel: str = KERNEL, record_to: Path | None = None) -> dict:
    """Execute one run unless it is already complete; returns its status and timing.

    Args:
        record_to: write the record and executed notebook there instead of the run's folder (a
            recorded run remade: its committed record stays as it is).
    Raises:
        RunError: the notebook failed; its partial notebook is kept (:func:`failed_notebook_path`).
    """
    if record_to is None and not force and spec.is_complete():
        return {"run": f"{spec.notebook.stem}/{spec.name}", "status": "skipped (complete)", "seconds": 0.0}
    inputs = collector_inputs(spec) if spec.notebook.stem in COLLECTORS else None  # what it reads now
    import papermill

    from .records import RUN_COMMIT_ENV, git_commit

    check_kernel_package(kernel)

    out_dir = Path(record_to or spec.out_dir)
    had_record = (out_dir / paths.RESULTS_FILE).is_file() or (out_dir / spec.notebook.name).is_file()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / paths.RESULTS_FILE).unlink(missing_ok=True)
    # hidden, ignored by git, and ending in .ipynb (papermill warns at every run about any other name)
    tmp = out_dir / f".{spec.notebook.stem}.running.ipynb"
    start_git = git_commit()  # the record names the code this run starts from
    dirty = {True: "1", False: "0"}.get(start_git["dirty"], "?")
    env = {"FRAG_PROGRESS": "0", RUN_COMMIT_ENV: f"{start_git['commit'] or ''}:{dirty}",  # the kernel inherits these
           **({paths.RECORD_TO_ENV: str(out_dir)} if record_to else {})}
    numerics.pin_threads()
    drop_torn_checkpoints(spec)
    start = time.time()
    try:  # after it, this process's own records name their own commit again
        with environment(**env), heartbeat(f"{spec.notebook.stem}/{spec.name}", tmp):
            # the kernel's own log stays at errors: ipykernel 7 warns at every start that its local TCP
            # sockets are unencrypted, a line per run in the runner's output that says nothing about it
            papermill.execute_notebook(str(spec.notebook), str(tmp), parameters=injected(spec), kernel_name=kernel,
                                       cwd=str(paths.NOTEBOOKS_DIR), progress_bar=False, log_output=False,
                                       extra_arguments=["--IPKernelApp.log_level=ERROR"])
    except Exception as err:  # not a kill (KeyboardInterrupt): a later run resumes from what it left
        raise _failed(spec, tmp, had_record, err, record_to is not None) from err
    os.replace(tmp, out_dir / spec.notebook.name)
    paths.make_portable(out_dir)
    if record_to is None:
        failed_notebook_path(spec, True).unlink(missing_ok=True)  # an earlier failure's, now replaced
    if inputs:
        (out_dir / INPUTS_FILE).write_text(inputs + "\n")
    return {"run": f"{spec.notebook.stem}/{spec.name}", "status": "done", "seconds": round(time.time() - start, 1)}


def injected(spec: RunSpec) -> dict:
    """The parameters papermill writes into a run's executed notebook: its ``run_name`` and ``profile``, and those
    whose value (or type) differs from the notebook's default; the parameters cell above sets the rest to the same
    values, so the injected cell reads as what this run changed (the record holds every value)."""
    declared = parameters.declared_parameters(spec.notebook)
    return {k: v for k, v in spec.params.items() if k in ("run_name", "profile") or k not in declared
            or type(v) is not type(declared[k]["default"]) or v != declared[k]["default"]}


HEARTBEAT_SECONDS = 120.0  # how often a running notebook says where it is (the runner's output, not the record)


def where(notebook: Path) -> str:
    """Where a notebook papermill is executing stands: ``cell 7 of 16: <the heading above it>``,
    read from the copy papermill saves after each cell; "" where it cannot be read yet."""
    try:
        cells = json.loads(notebook.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return ""
    status = [c.get("metadata", {}).get("papermill", {}).get("status") for c in cells]
    if "running" not in status:
        return ""
    at = status.index("running")
    heading = next((c["source"] for c in reversed(cells[:at]) if c["cell_type"] == "markdown"), "")
    heading = "".join(heading).strip().splitlines()[0].lstrip("# ") if heading else ""
    return f"cell {at + 1} of {len(cells)}" + (f": {heading[:70]}" if heading else "")


@contextlib.contextmanager
def heartbeat(label: str, notebook: Path, every: float = HEARTBEAT_SECONDS):
    """While the block runs, print every ``every`` seconds how long ``label`` has run and where (:func:`where`)."""
    import threading

    start, stop = time.time(), threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            at = where(notebook)
            print(f"{label}: running for {(time.time() - start) / 60:.0f} min" + (f", {at}" if at else ""),
                  flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def environment(**env: str | None):
    """``env`` set in this process (and so in the kernels it starts) for the duration of a block (None: unset)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: v for k, v in env.items() if v is not None})
    for k in (k for k, v in env.items() if v is None):
        os.environ.pop(k, None)
    try:
        yield
    finally:
        os.environ.update({k: v for k, v in saved.items() if v is not None})
        for k in (k for k, v in saved.items() if v is None):
            os.environ.pop(k, None)


# A collector's inputs when it last ran: rerun only when they changed, regenerating the tables from
# unchanged records changes no tracked file (its executed notebook carries timestamps)
INPUTS_FILE = "inputs.sha256"


def collector_inputs(spec: RunSpec) -> str:
    """sha256 of everything a collector's output depends on: its notebook, its parameters, the
    package's code, the profile's parameter files, and every record (``results.json``) of the
    profile's runs (its own and a later collector's left out: notebook 09 reads notebook 08's record)."""
    import hashlib

    profile = str(spec.params.get("profile"))
    files = [spec.notebook, *sorted(paths.PACKAGE_DIR.rglob("*.py")),
             *sorted((paths.PARAMS_DIR / profile).glob("*.yaml")),
             *sorted(f for f in paths.RUNS_DIR.glob(f"*/{profile}*/{paths.RESULTS_FILE}")
                     if f.parent.parent.name not in COLLECTORS or f.parent.parent.name < spec.notebook.stem)]
    digest = hashlib.sha256(parameters.params_key(spec.params).encode())
    for f in files:
        digest.update(f"\0{repo_relative(f)}\0".encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def profiles() -> list[str]:
    """The profiles: the folders of ``papermill_runs/params/`` that hold parameter files."""
    return sorted(p.name for p in paths.PARAMS_DIR.glob("*") if p.is_dir() and any(p.glob("*.yaml")))


def grid(profile: str) -> list[RunSpec]:
    """Every run of a profile: ``papermill_runs/params/<profile>/<notebook>[.<suffix>].yaml``, each a
    mapping or a list of them, by notebook, its main file first. A run two files hold with the same
    parameters runs once, under its first name; two different runs of one notebook may not share one."""
    folder = paths.PARAMS_DIR / profile
    if not folder.is_dir():
        raise RunError(f"Unknown profile '{profile}'. Known profiles: {', '.join(profiles())}.")
    specs, seen, same = [], {}, set()
    files = sorted(folder.glob("*.yaml"), key=lambda f: (f.name.split(".")[0], f.name.count(".") > 1, f.name))
    for file in files:
        for spec in plan_run(file.name.split(".")[0], file):
            key = (spec.notebook.stem, spec.name)
            identity = (spec.notebook.stem, parameters.params_key(spec.params, notebook=spec.notebook.stem))
            if identity in same:
                continue  # the same run, listed by another file too
            if key in seen:
                raise RunError(f"Run {key[0]}/{key[1]} is defined twice with different parameters ({seen[key]} "
                               f"and {file.name}); give one of them a parameter value that differs.")
            seen[key] = file.name
            same.add(identity)
            specs.append(spec)
    return specs


def _made(results: dict, notebook: str, roles: tuple[str, ...] | None = None) -> dict[str, Path]:
    """The checkpoints in this machine's cache that a record names as made, by role: notebook 02's
    ``target`` and ``gold`` (only ``roles``, when given), notebook 05's ``unlearned`` model (for
    method gold notebook 02's gold model)."""
    if notebook not in ("02_target_and_gold", "05_unlearn"):
        return {}
    named = (results.get("checkpoints", {}) if notebook == "02_target_and_gold"
             else {"unlearned": results.get("unlearned", "")})
    cache_root = str(paths.cache_dir())
    return {r: Path(c) for r, c in paths.expand_cached(named).items()
            if c and str(c).startswith(cache_root) and (roles is None or r in roles)}


def _results(spec: RunSpec) -> dict:
    return json.loads((spec.out_dir / paths.RESULTS_FILE).read_text())["results"]


def checkpoints_current(spec: RunSpec, roles: tuple[str, ...] | None = None) -> bool:
    """Whether every checkpoint ``spec``'s record names as made (of ``roles``, when given) is in the
    cache and current: made by this code from the inputs there now (:func:`frag_utils.cache.is_current`)."""
    from . import cache

    return all(cache.is_current(c) for c in _made(_results(spec), spec.notebook.stem, roles).values())


def _named_inputs(spec: RunSpec, specs: list[RunSpec]) -> list[tuple[str, str, tuple[str, ...] | None]]:
    """``(notebook, run name, reads)`` of every run ``spec`` reads from: the profile's notebook-02 run
    for a run on ``profile-target`` (its ``target``) or a gold run on ``profile-gold`` (its ``gold``), the
    named notebook-05 runs of notebooks 06, 07 and 10 (``None``: every checkpoint), the run a matched-norm
    run matches and a collector's earlier collectors of its profile (``()``: their record only)."""
    nb, p = spec.notebook.stem, spec.params
    makers = [s for s in specs if s.notebook.stem == "02_target_and_gold" and s.params["profile"] == p.get("profile")]
    names = []
    # the target a run starts from: notebook 05's and 07's original, notebook 06's and 10's model (no unlearned run)
    seed = paths.target_seed(str(p.get("original", p.get("model", "") if nb in STARTS_FROM_05 and not
                                       p.get("unlearned_run") else "")))
    trains = [s for s in makers if s.params.get("seed", paths.TARGET_SEED) == seed]
    # every 02 run of a profile at one seed trains its one target of that seed; a run pinned to a kernel path reads
    # the 02 run pinned to it where there is one (the frontier's AVX2 target), so that one is recorded first
    trains = [s for s in trains if s.params.get("kernels", "") == p.get("kernels", "")] or trains
    if trains:
        names.append(("02_target_and_gold", trains[0].name, ("target",)))
    if nb == "05_unlearn" and p.get("method") == "gold" and p.get("gold") == "profile-gold":  # gold_<split>: seed 42's
        names += [("02_target_and_gold", s.name, ("gold",)) for s in makers if s.params["forget_split"] ==
                  p["forget_split"] and s.params.get("seed", paths.TARGET_SEED) == paths.TARGET_SEED][:1]
    if nb == "05_unlearn" and p.get("match_l2_run"):
        names.append(("05_unlearn", p["match_l2_run"], ()))
    if nb in STARTS_FROM_05 and p.get("unlearned_run"):
        names.append(("05_unlearn", p["unlearned_run"], None))
    if nb == "07_ablations" and p.get("unlearned_runs") not in (None, "", "all"):
        names += [("05_unlearn", n.strip(), None) for n in p["unlearned_runs"].split(",") if n.strip()]
    if nb in COLLECTORS:  # notebook 09 reads notebook 08's record of its profile: made first where not current
        names += [(s.notebook.stem, s.name, ()) for s in specs if s.notebook.stem in COLLECTORS
                  and s.notebook.stem < nb and s.params.get("profile") == p.get("profile")]
    return names


def needed_runs(spec: RunSpec, specs: list[RunSpec]) -> list[tuple[RunSpec, tuple[str, ...] | None]]:
    """The runs ``spec`` reads from (:func:`_named_inputs`), each with what it reads of them: ``()``
    their record only, the roles of the checkpoints it reads (``("target",)``), or ``None``, every
    checkpoint they made; looked up in ``specs``, else among the records.

    Raises:
        RunError: a run it reads from is neither in ``specs`` nor recorded: nothing could make it.
    """
    found: dict[tuple[str, str], tuple[str, ...] | None] = {}
    for stem, name, reads in _named_inputs(spec, specs):
        before = found.get((stem, name), ())
        found[(stem, name)] = None if reads is None or before is None else tuple(sorted({*before, *reads}))
    deps = []
    for (stem, name), reads in found.items():
        dep = _find(stem, name, specs)
        if dep is None:
            raise RunError(
                f"{spec.notebook.stem}/{spec.name} reads from {stem}/{name}, which has no record in "
                f"{repo_relative(paths.RUNS_DIR / stem)} and is in no parameter file of profile "
                f"'{spec.params.get('profile')}', so it cannot be made first. Run it first ('frag run {stem} -f "
                f"FILE -p NAME VALUE' with the parameters that name it), or name a recorded run (the folders of "
                f"{repo_relative(paths.RUNS_DIR / stem)}).")
        deps.append((dep, reads))
    return deps


def _find(notebook: str, name: str, specs: list[RunSpec]) -> RunSpec | None:
    """A run of ``specs`` by notebook and name, else a recorded one by its folder (one no parameter
    file names: a user's run read by another)."""
    found = next((s for s in specs if (s.notebook.stem, s.name) == (notebook, name)), None)
    results = paths.RUNS_DIR / notebook / name / paths.RESULTS_FILE
    if found or not results.is_file():
        return found
    return RunSpec(parameters.resolve_notebook(notebook), json.loads(results.read_text())["provenance"]["params"], name)


def remake(spec: RunSpec, reason: str, once: bool = False, roles: tuple[str, ...] | None = None) -> dict:
    """Execute a recorded run again into ``<cache>/remade/<notebook>/<run>/`` (its committed record
    stays) and print its drift against the record (:func:`frag_utils.drift.compare`); returns the
    drift report. With ``roles``, a notebook-02 run makes only those models (:func:`remake_models`).
    Under a lock in the cache; with ``once``, not when its checkpoints are current once the lock is
    had (``already current``): two jobs, or machines sharing a cache, make one checkpoint once."""
    import fcntl

    out = drift.remade_dir(spec.notebook.stem, spec.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{spec.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process dies
        if once and checkpoints_current(spec, roles):
            print(f"{spec.notebook.stem}/{spec.name}: its checkpoints are current (remade by another job)", flush=True)
            return {"verdict": "already current"}
        if roles:
            return remake_models(spec, roles, reason)
        shutil.rmtree(out, ignore_errors=True)
        entry = execute(spec, force=True, record_to=out)
    report = drift.compare(spec.out_dir / paths.RESULTS_FILE, out / paths.RESULTS_FILE)
    print(f"{entry['run']}: done ({entry['seconds']} s; {reason})", flush=True)
    print(drift.format_report(entry["run"], report), flush=True)
    return report


def remake_models(spec: RunSpec, roles: tuple[str, ...], reason: str) -> dict:
    """Train only ``roles`` (``target``, ``gold``) of a recorded notebook-02 run into the cache, as
    its notebook does (:func:`train_models`), without running the notebook: the other model is not
    trained and nothing is evaluated. Prints whether each is the recorded weights, bit for bit
    (``make verify`` prints the drift of their evaluations)."""
    run = f"{spec.notebook.stem}/{spec.name}"
    if spec.notebook.stem != "02_target_and_gold" or not set(roles) <= {"target", "gold"}:
        raise RunError(f"Only notebook 02's target and gold model are made alone, not {run}'s {'+'.join(roles)}.")
    record = json.loads((spec.out_dir / paths.RESULTS_FILE).read_text())
    drop_torn_checkpoints(spec, roles)  # a killed job's half-written trainer checkpoint is not resumed from
    start = time.time()
    made = train_models(record["provenance"]["params"], roles)
    if not checkpoints_current(spec, roles):
        raise RunError(f"{run}: its {'+'.join(roles)} made alone is not where its record names it, or not current "
                       f"({_made(record['results'], spec.notebook.stem, roles)}); remake the run whole: "
                       f"frag run-one {run} --remake.")
    print(f"{run}: made its {' and '.join(roles)} only ({time.time() - start:.0f} s; {reason})", flush=True)
    from .cache import kernels

    here, theirs = kernels().get("cpu_capability"), kernel_paths.of_records([record])  # None on a GPU
    if here and theirs and here not in theirs:  # judged by the records on this path that read it, not notebook 02's
        readers = read_by(made, here)
        same = {role: bool(readers.get(role)) for role in made}
        for role, equal in same.items():
            print(f"  {role}: made on the {here} kernel path, its record on {', '.join(sorted(theirs))}: " + (
                f"the weights the {here} records read, bit for bit ({len(readers[role])} records, e.g. "
                f"{readers[role][0]})" if equal else f"not the weights any {here} record read (other code, kernels "
                "or threads): the drift tables of the runs that read it say how far that moves them"), flush=True)
        return {"verdict": "bit-identical" if all(same.values()) else "other weights"}
    same = {role: sha == record["results"].get("checkpoint_sha256", {}).get(role) for role, sha in made.items()}
    for role, equal in same.items():
        print(f"  {role}: " + ("the recorded weights, bit for bit" if equal else "not the recorded weights (other "
              f"code, kernels or threads): make verify RUN={run} prints the drift of their evaluations"), flush=True)
    return {"verdict": "bit-identical" if all(same.values()) else "other weights"}


def read_by(made: dict[str, str | None], path: str) -> dict[str, list[str]]:
    """Per role of ``made`` (``{role: weights sha256}``), the notebook-05 records made on kernel ``path`` whose
    original (the target) or gold model has those weights: the records a notebook-02 model made alone is judged by."""
    found: dict[str, list[str]] = {role: [] for role in made}
    for f in sorted((paths.RUNS_DIR / "05_unlearn").glob(f"*/{paths.RESULTS_FILE}")):
        rec = json.loads(f.read_text())
        if path in kernel_paths.of_records([rec]):
            shas = rec["results"].get("checkpoint_sha256", {})
            # a gold run (method gold) copies notebook 02's gold model as its "unlearned" one
            held = {"target": shas.get("original"), "gold": shas.get("unlearned") if rec["results"].get(
                "method") == "gold" else None}
            for role, sha in made.items():
                if sha and held.get(role) == sha:
                    found[role].append(f"05_unlearn/{f.parent.name}")
    return found


def train_models(params: dict, roles: tuple[str, ...]) -> dict[str, str | None]:
    """Notebook 02's ``roles`` trained (or reused) with a run's parameters: ``{role: weights sha256}``."""
    from . import models, prompts, train

    prompts.set_template(params["prompt_template"])  # the chat prompts it was trained behind
    return {role: models.weights_sha256(train.target_or_gold(role, params)[0]) for role in roles}


@dataclass
class Job:
    """A run to execute, or a recorded run to remake for its checkpoints, after the jobs ``needs``."""

    spec: RunSpec
    remake: bool = False
    force: bool = False
    needs: tuple[str, ...] = ()
    reason: str = ""
    roles: tuple[str, ...] | None = None  # a remake of notebook 02 that makes only these models
    kernels: kernel_paths.Choice | None = None  # the path it computes on: that of the records it extends

    @property
    def key(self) -> str:
        only = f"@{'+'.join(self.roles)}" if self.roles else ""
        return f"{'remade/' if self.remake else ''}{self.spec.notebook.stem}/{self.spec.name}{only}"


def extends(spec: RunSpec, universe: list[RunSpec]) -> list[dict]:
    """The records a run extends, whose kernel path it computes on (:mod:`frag_utils.kernel_paths`): its own where
    recorded; else those of its parameter file's other runs (its name's part before ``__``) where they name one
    path; else those of the runs it reads."""
    def read(folder: Path) -> list[dict]:
        f = folder / paths.RESULTS_FILE
        return [json.loads(f.read_text())] if f.is_file() else []

    own = read(spec.out_dir)
    if own or spec.notebook.stem in COLLECTORS:
        return own
    folder, tag = paths.RUNS_DIR / spec.notebook.stem, spec.name.split("__")[0]
    siblings = [r for d in sorted(folder.glob(f"{tag}__*")) if d.name != spec.name for r in read(d)]
    if len(kernel_paths.of_records(siblings)) == 1:  # a file of one path; else what the run reads decides
        return siblings
    return [r for dep, _ in needed_runs(spec, universe) for r in read(dep.out_dir)]


def plan(chosen: list[RunSpec], universe: list[RunSpec], force: bool = False, kernels: str = "records") -> list[Job]:
    """The jobs that bring ``chosen`` up to date, each after those it ``needs`` (the DAG that
    ``workflow/Snakefile`` hands to Snakemake). A chosen run is a job when not complete
    (:meth:`RunSpec.is_complete`) or ``force``; a collector also when what it reads changed
    (:func:`collector_inputs`) or another run of its profile is a job. A run a job reads
    (:func:`needed_runs`, in ``universe``) is a job before it when unrecorded, a remake
    (:func:`remake`) when its checkpoint is not current in the cache; a committed record stays.
    Each job computes on the kernel path of the records its chosen run extends (:func:`extends`;
    ``kernels="native"``: this CPU's own; a run whose parameter ``kernels`` pins a path: that one), and so do the
    jobs that make what it reads.

    Raises:
        RunError: a run reads from one nothing can make.
    """
    from . import cache

    jobs: dict[str, Job] = {}
    made_by: dict[Path, str] = {}  # checkpoint -> the job that makes it
    current: dict[tuple[Path, str], bool] = {}  # (checkpoint, kernel path) -> current there

    def require(dep: RunSpec, reads: tuple[str, ...] | None, why: str, path: kernel_paths.Choice) -> list[str]:
        """The jobs that make what a reader reads of ``dep`` (:func:`needed_runs`), made jobs here."""
        key = f"{dep.notebook.stem}/{dep.name}"
        if key in jobs:  # run in full: it makes everything it made
            return [key]
        if not dep.is_complete():
            jobs[key] = Job(dep, needs=needs(dep, path), reason=f"unrecorded, {why}", kernels=path)
            return [key]
        with environment(**{paths.KERNELS_ENV: path.flag if path.caps else None}):  # the job's cache folder
            made_all = _made(_results(dep), dep.notebook.stem)  # the record read once
            made = {r: c for r, c in made_all.items() if reads is None or r in reads}
            # the kernels of the job's process: its path's caps, or (no flag) this environment's
            on = cache.kernels(kernel_paths.on_path(path.flag), path.flag) if made and path.flag else None
            current.update({(c, path.path): cache.is_current(c, on) for c in made.values()
                            if (c, path.path) not in current})
        stale = {r: c for r, c in made.items() if not current[(c, path.path)]}
        keys = []
        for d, _ in needed_runs(dep, universe) if stale else ():
            # a checkpoint that a run it reads made (a gold run's model is notebook 02's gold): made there
            theirs = d.is_complete() and [r for r, c in _made(_results(d), d.notebook.stem).items()
                                          if c in stale.values()]
            keys += require(d, tuple(theirs), why, path) if theirs else []
        keys += sorted({made_by[c] for c in stale.values() if c in made_by})
        todo = {r: c for r, c in stale.items() if c not in made_by}
        if not todo:
            return keys
        every = dep.notebook.stem != "02_target_and_gold" or todo.keys() == made_all.keys()
        job = Job(dep, True, needs=needs(dep, path), roles=None if every else tuple(sorted(todo)),
                  reason=f"its checkpoint is not in the cache, or other code made it; {why}", kernels=path)
        jobs[job.key] = job
        made_by.update(dict.fromkeys(todo.values(), job.key))
        return [*keys, job.key]

    def needs(spec: RunSpec, path: kernel_paths.Choice) -> tuple[str, ...]:
        why = f"needed by {spec.notebook.stem}/{spec.name}"
        return tuple(dict.fromkeys(k for dep, reads in needed_runs(spec, universe)
                                   for k in require(dep, reads, why, path)))

    for spec in chosen:
        key, collector = f"{spec.notebook.stem}/{spec.name}", spec.notebook.stem in COLLECTORS
        others = tuple(k for k, j in jobs.items() if collector and not j.remake
                       and j.spec.params.get("profile") == spec.params.get("profile"))
        if key not in jobs and (force or others or not spec.is_complete()):
            why = "forced" if force else "what it collects changed" if collector else "unrecorded or parameters changed"
            pinned = spec.params.get("kernels")  # a run of one path computes there, whatever the mode
            path = (kernel_paths.choose({pinned}, whose="its parameter kernels") if pinned else
                    kernel_paths.choose(kernel_paths.of_records(extends(spec, universe)), kernels))
            jobs[key] = Job(spec, force=force, needs=(*needs(spec, path), *others), reason=why, kernels=path)
    return list(jobs.values())


def dependency_grid(specs: list[RunSpec]) -> list[RunSpec]:
    """``specs``, then the runs of their profiles' grids that ``specs`` does not name: where the
    runs they read from are looked up (a run with overrides, a user's own file, the dry run's runs)."""
    keys, known = {(s.notebook.stem, s.name) for s in specs}, profiles()
    grids = [grid(p) for p in dict.fromkeys(str(s.params.get("profile")) for s in specs) if p in known]
    return [*specs, *(s for g in grids for s in g if (s.notebook.stem, s.name) not in keys)]


def upstream(spec: RunSpec, specs: list[RunSpec]) -> list[RunSpec]:
    """Every run ``spec`` reads from (records or checkpoints), recursively, each before its readers."""
    out: list[RunSpec] = []
    for dep, _ in needed_runs(spec, specs):
        for s in [*upstream(dep, specs), dep]:
            if all((s.notebook.stem, s.name) != (o.notebook.stem, o.name) for o in out):
                out.append(s)
    return out


def find_run(run: str, specs: list[RunSpec] | None = None) -> RunSpec:
    """``<notebook>/<run name>`` -> its spec: in ``specs`` and their profiles' grids
    (:func:`dependency_grid`), else in the grid its name starts with, else a recorded run."""
    notebook, _, name = run.strip("/").partition("/")
    found = _find(notebook, name, dependency_grid(specs) if specs else
                  [s for p in profiles() if name.startswith(p) for s in grid(p)])
    if found is None:
        raise RunError(f"No run '{run}' in the parameter files (papermill_runs/params/<profile>/) or the records; "
                       "name it as <notebook>/<run folder>, e.g. 02_target_and_gold/tiny.")
    return found


def verify(run: str, workdir: str | os.PathLike | None = None) -> list[dict]:
    """Remake ``run`` (``<notebook>/<run name>``) and every run it reads from in the empty cache
    ``workdir`` (default: a temporary one), printing each one's drift against its record
    (:func:`remake`); returns the drift reports, upstream first. Nothing tracked changes."""
    import tempfile

    spec = find_run(run)
    chain = [*upstream(spec, dependency_grid([spec])), spec]
    unrecorded = [f"{s.notebook.stem}/{s.name}" for s in chain if not s.is_complete()]
    if unrecorded:
        raise RunError(f"{', '.join(unrecorded)} has no record: verify compares a remake with a record; "
                       f"make it first (frag run ... --select {unrecorded[0].split('/', 1)[1]}).")
    if workdir and Path(workdir).exists() and any(Path(workdir).iterdir()):
        raise RunError(f"--workdir {workdir} is not empty: verify remakes into an empty cache; name a new folder.")
    cache = (contextlib.nullcontext(str(workdir)) if workdir else
             tempfile.TemporaryDirectory(prefix="frag-verify-", ignore_cleanup_errors=True))
    # empty of what it remakes: the embedded model's converted copy (the same in every cache) stays shared
    # on the run's own kernel path where this CPU takes it: its notebooks' kernels start with the caps
    path = kernel_paths.choose(kernel_paths.of_records([json.loads((spec.out_dir / paths.RESULTS_FILE).read_text())]))
    print(f"{run}: {path.line}", flush=True)
    env = kernel_paths.on_path(path.flag)
    on = {k: env.get(k) for k in (*kernel_paths.ALL_CAPS, paths.KERNELS_ENV)}  # None: unset
    with cache as root, environment(FRAG_CACHE_DIR=root, FRAG_MODELS_DIR=str(paths.models_dir()), **on):
        return [{"run": f"{s.notebook.stem}/{s.name}", **remake(s, "make verify")} for s in chain]  # kernels too


def matched_l2(match_l2_run: str, params: dict) -> float | None:
    """The update norm a matched-norm control of notebook 05 is made to: the global L2 of the recorded notebook-05
    run ``match_l2_run`` (times ``noise_scale`` for ``method`` noise), or None without one.

    Raises:
        ValueError: noise without a run to match or a positive scale, a method that is not a control, or a run
            made from another original, split or profile.
    """
    method, profile = params["method"], params["profile"]
    if method == "noise" and not (match_l2_run and params["noise_scale"] > 0):
        raise ValueError("method noise scales its noise to another run's L2: set match_l2_run (a 05_unlearn run "
                         f"folder, e.g. an FRP run) and noise_scale > 0 (got {match_l2_run!r}, "
                         f"{params['noise_scale']}).")
    if not match_l2_run:
        return None
    if method not in ("sp", "noise"):
        raise ValueError(f"match_l2_run is a setting of the controls (method sp or noise), not of method {method!r}.")
    from . import records

    matched = records.read_run("05_unlearn", match_l2_run, profile)
    mp = matched["provenance"]["params"]
    mine = (profile, params["original"], params["forget_split"])
    if (mp["profile"], mp["original"], mp["forget_split"]) != mine:
        raise ValueError(f"match_l2_run: 05_unlearn/{match_l2_run} unlearned {mp['original']} on {mp['forget_split']} "
                         f"(profile {mp['profile']}); this run unlearns {mine[1]} on {mine[2]} (profile {profile}).")
    return matched["results"]["frag"]["l2_all"] * (params["noise_scale"] if method == "noise" else 1.0)


def unlearned_checkpoints(unlearned_runs: str, profile: str, forget_split: str, original: str) -> dict[str, str]:
    """The checkpoints notebook 07 scores, by notebook-05 run: those ``unlearned_runs`` names (comma-separated), or
    with ``all`` every recorded run of ``profile`` on ``forget_split`` from ``original``; gold models (not updates of
    the target) left out.

    Raises:
        ValueError: a named run of another profile, split or original (its update is not against this W0).
        FileNotFoundError: a named run's checkpoint is not in the cache, with the command that remakes it.
    """
    from . import models, records

    folder = paths.RUNS_DIR / "05_unlearn"
    names = ([p.name for p in sorted(folder.iterdir())] if unlearned_runs == "all"
             else [n.strip() for n in unlearned_runs.split(",") if n.strip()])
    found = {}
    for n in names:
        rec = records.read_json(folder / n / paths.RESULTS_FILE)
        p = rec["provenance"]["params"]
        if unlearned_runs == "all" and (p["profile"] != profile or p["forget_split"] != forget_split
                                        or p.get("original") != original):
            continue
        if (p["profile"], p["forget_split"], p.get("original")) != (profile, forget_split, original):
            raise ValueError(f"05_unlearn/{n} unlearned {p.get('original')} on {p['forget_split']} (profile "
                             f"{p['profile']}); this run scores updates of {original} on {forget_split} (profile "
                             f"{profile}): name runs of the same original and split.")
        if rec["results"]["method"] == "gold":  # not an update of the target
            continue
        if not models.is_checkpoint(rec["results"]["unlearned"]):
            raise FileNotFoundError(f"The checkpoint of 05_unlearn/{n} is not in the cache; re-create it with "
                                    f"`make reproduce PROFILE={profile} SELECT=05_unlearn/{n} FORCE=1`.")
        found[n] = rec["results"]["unlearned"]
    return found


def which_model(model_id: str) -> dict[str, str]:
    """Which model a run reads: its folder, its weights' sha256 (first 12 hex digits), the kernel path that made it
    (from its ``frag_record.json``; blank for a model this package did not train) and the notebook-02 records that
    hold the same weights. Two models of one name are told apart here: the faithful grid's target (AVX-512) and the
    frontier's (AVX2) are both ``profile-target``, with other weights (docs/reproducibility.md)."""
    from . import models
    from .cache import KERNEL_CAPS

    sha = models.weights_sha256(model_id)
    made_on = ((models.load_record(model_id) or {}).get("cache") or {}).get("kernels") or {}
    made_by = (f"{made_on['gpu']} (CUDA {made_on.get('cuda')})" if "gpu" in made_on else made_on.get(
        "cpu_capability", "") + (", capped by the environment" if any(made_on.get(k) for k in KERNEL_CAPS) else ""))
    recorded = []
    for f in sorted((paths.RUNS_DIR / "02_target_and_gold").glob(f"*/{paths.RESULTS_FILE}")):
        shas = json.loads(f.read_text())["results"].get("checkpoint_sha256", {})
        recorded += [f"02_target_and_gold/{f.parent.name} ({role})" for role, s in shas.items() if sha and s == sha]
    return {"model": str(model_id).replace(str(Path.home()), "~"),
            "weights sha256": sha[:12] if sha else "(no local weights)",
            "made on kernels": made_by,
            "recorded by notebook 02": ", ".join(recorded) or "none (made by the runs that read it)"}
