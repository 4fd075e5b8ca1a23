"""Command line: ``frag eval``, ``frag score``, ``frag prune``, ``frag run``, ``frag reproduce``,
``frag run-one`` (a job of the workflow), ``frag verify``, ``frag dry-run`` (also ``python -m frag_utils ...``)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .data import DataError
from .runs import RunError, profiles


def _eval(args: argparse.Namespace) -> dict:
    from . import data, metrics, models

    if not args.split.startswith("forget"):
        raise DataError(f"--split must be a forget split (forget01, forget05, forget10), got '{args.split}'.")
    forget = data.load_split(args.data, f"{args.split}_perturbed", args.limit)
    utility = data.load_utility_sets(args.data, args.utility_limit)
    start = time.time()
    model, tokenizer = models.load_model(args.model, device=args.device)
    res = metrics.evaluate(model, tokenizer, forget, utility, max_new_tokens=args.max_new_tokens,
                           batch_size=args.batch_size, bf16=args.bf16)
    per_example = res.pop("per_example")
    out = {"model": args.model, "data": args.data, "split": args.split, "n_forget": len(forget),
           **res, "seconds": round(time.time() - start, 1)}
    if args.per_example:
        out["per_example"] = per_example
    return out


def _score(args: argparse.Namespace) -> dict:
    from . import calibration, frag, records

    calib = calibration.CalibConfig(n=args.n_calib, max_len=args.max_len, selection=args.selection,
                                    seed=args.seed, chat=args.chat, statistic=args.statistic)
    out = frag.score_pair(args.original, args.unlearned, args.data, args.forget_split, args.retain_split,
                          args.gamma, args.modules, calib, args.device)
    if not args.per_layer:
        out.pop("per_layer")
    out["peak_rss_bytes"] = records.peak_rss_bytes()
    return out


def _prune(args: argparse.Namespace) -> dict:
    from . import calibration, pruning

    calib = calibration.CalibConfig(n=args.n_calib, max_len=args.max_len, selection=args.selection,
                                    seed=args.seed, chat=args.chat, batch_size=args.batch_size)
    record = pruning.prune_checkpoint(args.model, args.out, args.data, args.forget_split, args.retain_split,
                                      args.method, args.sparsity, args.beta, args.lam, args.variant, args.veto,
                                      args.modules, calib, args.device, use_cache=not args.no_cache,
                                      weights=args.weights, precision=args.precision)
    return {"out": str(args.out), **pruning.prune_summary(record)}


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be finite, got {text}")
    return value


def _fraction(text: str) -> float:
    """argparse type: a number strictly between 0 and 1."""
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


def _veto_fraction(text: str) -> float:
    """argparse type: a number in [0, 1)."""
    value = _number(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _device(text: str) -> str:
    """argparse type: a torch device this installation can use (auto, cpu, cuda, cuda:1, mps)."""
    from .numerics import NumericsError, resolve_device

    try:
        return resolve_device(text)
    except NumericsError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def write_specs(specs: list, file: Path) -> Path:
    """Write runs (:class:`~frag_utils.runs.RunSpec`) to a JSON file that :func:`read_specs` reads:
    how ``frag run`` hands its runs to the workflow."""
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps([{"notebook": s.notebook.stem, "name": s.name, "params": s.params} for s in specs],
                               indent=1, default=str))
    return file


def read_specs(file: str | Path) -> list:
    """The runs :func:`write_specs` wrote."""
    from . import parameters, runs

    return [runs.RunSpec(parameters.resolve_notebook(r["notebook"]), r["params"], r["name"])
            for r in json.loads(Path(file).read_text())]


def workflow(config: dict, specs: list | None = None, workdir: Path | None = None, jobs: int = 1, gpus: int = 0,
             extra: list[str] | tuple = ()) -> None:
    """Run the grid's workflow (``workflow/Snakefile``) through Snakemake: its local executor, or
    what ``extra`` names (``--profile profiles/slurm``); returns when it ends.

    Args:
        config: ``profile``, ``select``, ``force`` (the Snakefile's docstring says each).
        specs: the runs to make instead of a profile's grid (``frag run``).
        workdir: where Snakemake keeps its state, ``.snakemake/`` (default: the folder holding the
            records' folder, the repository unless ``FRAG_RUNS_DIR`` names another).
        jobs: jobs side by side, each with its share of the threads (``FRAG_THREADS``, default 2).
        gpus: GPUs on this machine: one job on each, each seeing one (``CUDA_VISIBLE_DEVICES``).
    Raises:
        RunError: a job failed (its error is printed above it), or Snakemake did not start.
    """
    import hashlib
    import shlex
    import subprocess

    from . import numerics, paths, runs

    workdir = Path(workdir or paths.RUNS_DIR.parent)
    jobs = max(jobs, gpus, 1)
    threads = max(1, numerics.threads() // jobs)
    config = {k: v for k, v in {**config, "threads": threads, "gpus": gpus}.items() if v not in (None, "", False, 0)}
    if specs is not None:
        digest = hashlib.sha256(json.dumps([[s.notebook.stem, s.name] for s in specs]).encode()).hexdigest()[:16]
        config["specs"] = write_specs(specs, workdir / ".snakemake" / "frag" / f"specs-{digest}.json")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(paths.REPO_ROOT / "workflow" / "Snakefile"),
               "--directory", str(workdir), "--cores", str(threads * jobs),
               *([] if {"-n", "--dry-run", "--dryrun"} & set(extra) else ["--quiet", "rules"]),  # -n: each job
               "--config", *(f"{k}={v}" for k, v in config.items()),
               *(["--resources", f"gpu={gpus}"] if gpus else []), *extra]
    # Snakemake's lock names each invocation's own stamps, so a lock a kill left never blocks the
    # next invocation, and two (frag run beside make reproduce) may run side by side
    code = subprocess.call(command)
    if code:
        raise runs.RunError(f"snakemake stopped with exit status {code} (a job failed: its error is above): "
                            f"{shlex.join(command)}")


def _kernels(args: argparse.Namespace) -> str | None:
    """The workflow's ``kernels`` setting: only where it is not the default (each job on its records' path)."""
    return None if args.kernels == "records" else args.kernels


def _run(args: argparse.Namespace) -> None:
    from . import parameters, paths, runs

    overrides = {name: parameters.parse_cli_value(value) for name, value in args.param}
    specs = runs.plan_run(args.notebook, args.file, overrides)
    if args.select:  # some runs of a file: those whose name holds every --select
        planned = specs
        specs = [s for s in planned if all(sel in f"{s.notebook.stem}/{s.name}" for sel in args.select)]
        if not specs:
            shown = "; ".join(s.name for s in planned[:5]) + (" ..." if len(planned) > 5 else "")
            raise runs.RunError(f"--select {' and '.join(map(repr, args.select))} matches none of the {len(planned)} "
                                f"run(s) planned ({shown}).")
    universe = runs.dependency_grid(specs)
    for spec in specs:  # a run reading from one nothing can make is refused before Snakemake starts
        runs.needed_runs(spec, universe)
    workflow({"force": int(args.force), "kernels": _kernels(args)}, specs, jobs=args.jobs, gpus=args.gpus,
             extra=args.snakemake)
    print(f"record: {runs.repo_relative(specs[0].out_dir)}/" if len(specs) == 1 else
          f"records: {runs.repo_relative(paths.RUNS_DIR / specs[0].notebook.stem)}/<run>/ for the {len(specs)} "
          f"runs of {args.file or args.notebook}", flush=True)


def _reproduce(args: argparse.Namespace) -> None:
    from . import paths, runs

    workflow({"profile": args.profile, "select": args.select, "force": int(args.force), "kernels": _kernels(args)},
             jobs=args.jobs, gpus=args.gpus, extra=args.snakemake)
    print(f"records: {runs.repo_relative(paths.RUNS_DIR)}/<notebook>/{args.profile}*/; tables and figures: "
          f"{runs.repo_relative(paths.FIGURES_DIR / args.profile)}/ (collected by notebook 09_figures)", flush=True)


def _gpu_slot(count: int):
    """Hold one of ``count`` GPUs of this machine for this process (a lock file per GPU in the cache)
    and show it alone to the notebook (``CUDA_VISIBLE_DEVICES``); a job under SLURM already sees its own."""
    import fcntl
    import os
    import socket

    from . import paths, runs

    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return None
    folder = paths.cache_dir() / "gpu-slots" / socket.gethostname()
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        handle = open(folder / f"{i}.lock", "w")  # noqa: SIM115 (held until the process ends)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        os.environ["CUDA_VISIBLE_DEVICES"] = str(i)
        return handle
    raise runs.RunError(f"all {count} GPUs of this machine are held by other jobs ({folder}).")


def _run_one(args: argparse.Namespace) -> dict:
    from . import runs

    roles = tuple(args.roles.split("+")) if args.roles else None
    if roles and (not args.remake or not set(roles) <= {"target", "gold"}):
        raise runs.RunError(f"--roles {args.roles}: give it with --remake of a notebook-02 run, as target, gold or "
                            "target+gold.")
    spec = runs.find_run(args.run, read_specs(args.specs) if args.specs else None)
    slot = _gpu_slot(args.gpus) if args.gpus else None  # noqa: F841 (held while the run runs)
    if args.remake:
        report = runs.remake(spec, "its checkpoint is needed and not current in the cache", once=True, roles=roles)
        entry = {"run": f"{spec.notebook.stem}/{spec.name}", "status": "remade", "drift": report["verdict"]}
    else:
        entry = runs.execute(spec, force=args.force)
        print(f"{entry['run']}: {entry['status']} ({entry['seconds']} s)", flush=True)
    if args.stamp:
        Path(args.stamp).parent.mkdir(parents=True, exist_ok=True)
        Path(args.stamp).write_text(json.dumps(entry) + "\n")
    return entry


def _verify(args: argparse.Namespace) -> list[dict]:
    from . import drift, runs

    if args.rejudge:  # a table another machine printed, judged by today's tolerance file
        if not Path(args.rejudge).is_file():
            raise runs.RunError(f"--rejudge {args.rejudge}: no such file (give a file holding one run's drift table "
                                "as make verify printed it, e.g. docs/verify/02_target_and_gold_smol_zen3.md)")
        report = [{"run": args.run, **drift.rejudge(Path(args.rejudge).read_text(), args.run)}]
        print(drift.format_report(args.run, report[0]))
    else:
        report = runs.verify(args.run, args.workdir)  # prints each run's drift table
    outside = [e["run"] for e in report if e["verdict"] == "outside tolerance"]
    if outside:
        raise runs.RunError(f"{', '.join(outside)}: remade outside the tolerances of papermill_runs/tolerance.yaml "
                            "(the rows marked OUTSIDE above)")
    return report


def _dry_run(args: argparse.Namespace) -> list[dict]:
    import tempfile

    from . import dryrun

    root = args.workdir or tempfile.mkdtemp(prefix="frag_dry_run_")
    log = dryrun.dry_run(root, args.device, args.quick)
    print(f"paper dry run: {len(log)} runs ({sum(e['status'] == 'done' for e in log)} made) on {args.device}; "
          f"records in {root}/papermill_runs, figures in {root}/figures/paper", flush=True)
    return log


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; given the ``command`` about to run, one that imports torch only
    where that command needs it (a workflow job, ``run-one``, starts hundreds of times a grid)."""
    parser = argparse.ArgumentParser(prog="frag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="ES on a forget split and Model Utility of one model")
    ev.add_argument("--model", required=True, help="smollm2-135m, tiny, a checkpoint directory or a hub id")
    ev.add_argument("--data", default="synthetic", help="synthetic, a directory of <config>.json, or a hub id")
    ev.add_argument("--split", default="forget10", help="forget01, forget05 or forget10")
    ev.add_argument("--limit", type=int, default=None, help="first N forget records only")
    ev.add_argument("--utility-limit", type=int, default=None, help="first N records of each utility set")
    ev.add_argument("--batch-size", type=int, default=16)
    ev.add_argument("--max-new-tokens", type=int, default=64, help="greedy answer length for ROUGE")
    ev.add_argument("--device", default="auto", type=_device, help="auto (a GPU when visible) | cpu | cuda | cuda:N")
    ev.add_argument("--bf16", action="store_true", help="bf16 autocast (faster, argmax may differ slightly)")
    ev.add_argument("--per-example", action="store_true", help="include per-example values")
    ev.add_argument("--json", action="store_true", help="print JSON only (the default output is JSON too)")
    ev.set_defaults(func=_eval)

    sc = sub.add_parser("score", help="FRAG and L2 of an unlearned checkpoint against its original")
    sc.add_argument("--original", required=True, help="hub id, checkpoint directory or embedded name")
    sc.add_argument("--unlearned", required=True, help="hub id or checkpoint directory (safetensors)")
    sc.add_argument("--data", default="synthetic")
    sc.add_argument("--forget-split", default="forget10")
    sc.add_argument("--retain-split", default=None, help="default: the matching retainXX")
    sc.add_argument("--gamma", type=float, default=1.0, help="FRAG = A_f - gamma * A_r (0: the printed Table 3)")
    sc.add_argument("--modules", default="all", choices=["all", "mlp", "attn"])
    sc.add_argument("--n-calib", type=int, default=128, help="calibration sequences per split")
    sc.add_argument("--max-len", type=int, default=256, help="tokens per calibration sequence")
    sc.add_argument("--selection", default="first", choices=["first", "sample"])
    sc.add_argument("--seed", type=int, default=0, help="for --selection sample")
    sc.add_argument("--chat", action="store_true", help="chat template instead of plain Question/Answer text")
    sc.add_argument("--statistic", default="seq_norm", choices=["seq_norm", "wanda"])
    sc.add_argument("--device", default="auto", type=_device, help="auto (a GPU when visible) | cpu | cuda | cuda:N")
    sc.add_argument("--per-layer", action="store_true", help="include every layer's share")
    sc.add_argument("--json", action="store_true", help="print JSON (the default output is JSON too)")
    sc.set_defaults(func=_score)

    pr = sub.add_parser("prune", help="unlearn by pruning (FRP or Selective Pruning), save checkpoint + record",
                        description="Prune a model with FRP (row-wise, the paper's Eq. 6) or Selective Pruning "
                                    "(MLP neurons), check the achieved sparsity, and save the checkpoint with a "
                                    "JSON record (frag_record.json) of settings and achieved sparsity.")
    if command in (None, "prune"):  # its choices and defaults are the pruning module's (torch)
        from .pruning import DEFAULT_LAM, DEFAULT_VETO, FRP_ABLATION_RULES, FRP_VARIANTS, SP_VARIANTS
    else:  # another command runs: the prune parser is not used
        DEFAULT_LAM = DEFAULT_VETO = None
        FRP_VARIANTS = FRP_ABLATION_RULES = SP_VARIANTS = ()
    pr.add_argument("--model", required=True, help="smollm2-135m, tiny, a checkpoint directory or a hub id")
    pr.add_argument("--data", default="synthetic", help="synthetic, a directory of <config>.json, or a hub id")
    pr.add_argument("--forget-split", default="forget10")
    pr.add_argument("--retain-split", default=None, help="default: the matching retainXX")
    pr.add_argument("--method", required=True, choices=["frp", "sp"])
    pr.add_argument("--sparsity", type=_fraction, default=None,
                    help="frp: fraction of each row zeroed (default 0.03); sp: fraction of all MLP neurons removed "
                         "(default 0.05)")
    pr.add_argument("--beta", type=_number, default=0.05, help="frp eq6: weight of the retain rank R (Eq. 6)")
    pr.add_argument("--lam", type=_number, default=DEFAULT_LAM,
                    help="frp: weight of the |W| rank (default 0.05, the authors' released value; their flag "
                         "--beta is this lambda)")
    pr.add_argument("--variant", default=None, choices=[*FRP_VARIANTS, *FRP_ABLATION_RULES, *SP_VARIANTS],
                    help="frp: released (the authors' rank_combo, default) or eq6 (Eq. 6 as printed) or an "
                         "ablation rule; sp: released (the authors' baseline, up_proj output, default) "
                         "or down_in (down_proj input)")
    pr.add_argument("--veto", type=_veto_fraction, default=DEFAULT_VETO,
                    help="frp released: per-row fraction P by |W| x_r/x_f never pruned (the paper's beta; 0 is plain "
                         "FRP, the 1B 'beta = 0.15' row is 0.15)")
    pr.add_argument("--weights", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: round the original to bf16 when loaded (OpenUnlearning's bf16 checkpoints)")
    pr.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="the dtype calibration and scoring run in, as the authors' --dtype: fp32 (their RC path, the "
                         "FRP of Tables 1 and 3) or bf16 (frp_tofu.sh; needs --weights bf16)")
    pr.add_argument("--modules", default="mlp", choices=["mlp", "attn", "all"], help="frp: modules pruned")
    pr.add_argument("--n-calib", type=_positive_int, default=400,
                    help="calibration sequences per split (all if the split has fewer)")
    pr.add_argument("--max-len", type=_positive_int, default=256, help="tokens per calibration sequence")
    pr.add_argument("--selection", default="first", choices=["first", "sample"])
    pr.add_argument("--seed", type=int, default=0, help="for --selection sample")
    pr.add_argument("--chat", action="store_true", help="chat template instead of plain Question/Answer text")
    pr.add_argument("--batch-size", type=_positive_int, default=8)
    pr.add_argument("--device", default="auto", type=_device, help="auto (a GPU when visible) | cpu | cuda | cuda:N")
    pr.add_argument("--no-cache", action="store_true", help="recompute FRP calibration norms")
    pr.add_argument("--out", required=True, help="checkpoint directory to write (replaced whole)")
    pr.set_defaults(func=_prune)

    ve = sub.add_parser("verify", help="remake a recorded run and what it reads from, from an empty cache, and print "
                                       "the drift against each record (fails outside papermill_runs/tolerance.yaml)")
    ve.add_argument("run", help="<notebook>/<run folder>, e.g. 02_target_and_gold/tiny")
    ve.add_argument("--workdir", default=None, help="remake into this empty folder, kept (default: a temporary one)")
    ve.add_argument("--rejudge", metavar="FILE", default=None,
                    help="remake nothing: judge the drift table FILE holds (what verify printed on another machine) "
                         "by today's papermill_runs/tolerance.yaml")
    ve.set_defaults(func=_verify)

    dry = sub.add_parser("dry-run", help="every notebook of the paper profile, with its parameter files, on a "
                                         "small random Llama and local TOFU-format data (no hub, no GPU needed)")
    dry.add_argument("--workdir", default=None, help="records, figures and checkpoints go here (default: a "
                                                   "temporary folder); rerunning in it resumes")
    dry.add_argument("--device", default="auto", type=_device, help="auto (a GPU when visible) | cpu | cuda")
    dry.add_argument("--quick", action="store_true", help="every notebook once, on one unlearned model (make test's)")
    dry.set_defaults(func=_dry_run)

    def scheduling(command: argparse.ArgumentParser) -> None:
        command.add_argument("--jobs", type=_positive_int, default=1,
                             help="runs side by side, each with its share of FRAG_THREADS (default 1)")
        command.add_argument("--gpus", type=int, default=0, help="GPUs on this machine: one run on each")
        command.add_argument("--kernels", default="records", choices=("records", "native"),
                             help="records (default): each job on the CPU kernel path of the records it extends "
                                  "(AVX2 caps on an AVX-512 CPU where they are AVX2); native: this CPU's own")
        command.set_defaults(snakemake=[])  # what follows "--": snakemake's own options (main)

    run = sub.add_parser("run", help="run one notebook through papermill, parameters checked (through Snakemake, "
                                     "which makes first what it reads)")
    run.add_argument("notebook", help="e.g. 02_target_and_gold")
    run.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    run.add_argument("-f", "--file", help="YAML parameter file (a path, or relative to papermill_runs/params)")
    run.add_argument("--select", action="append", default=[], metavar="TEXT",
                     help="only the runs whose '<notebook>/<run>' name holds TEXT (repeat: every one)")
    run.add_argument("--force", action="store_true", help="rerun even if a complete record exists")
    scheduling(run)
    run.set_defaults(func=_run)

    known = profiles()  # the folders of papermill_runs/params/
    rep = sub.add_parser("reproduce", help="run a profile's grid through Snakemake (resumable; what follows -- "
                                           "goes to snakemake, e.g. -- -n, -- --profile profiles/slurm)")
    rep.add_argument("--profile", default="smol", choices=known or None,
                     help="a folder of papermill_runs/params/ (default: smol)")
    rep.add_argument("--select", default=None, help="only runs whose '<notebook>/<run>' contains this")
    rep.add_argument("--force", action="store_true")
    scheduling(rep)
    rep.set_defaults(func=_reproduce)

    one = sub.add_parser("run-one", help="one job of the workflow: execute one run of a grid (or remake a recorded "
                                         "one for its checkpoint) and write its stamp")
    one.add_argument("run", help="<notebook>/<run folder>")
    one.add_argument("--specs", default=None, help="a file of runs written by frag run, looked up first")
    one.add_argument("--force", action="store_true", help="rerun even if a complete record exists")
    one.add_argument("--remake", action="store_true", help="remake the recorded run into the cache for its checkpoint")
    one.add_argument("--roles", default=None, help="with --remake of a notebook-02 run: make only these of its models "
                                                   "(target, gold or target+gold), without running the notebook")
    one.add_argument("--gpus", type=int, default=0, help="take one of this machine's N GPUs")
    one.add_argument("--stamp", default=None, help="write the run's log entry (JSON) there when it ends")
    one.add_argument("--kernels", default=None, metavar="PATH",
                     help="the CPU kernel path to compute on (AVX2, AVX512, ...: the plan's); its caps are set "
                          "before torch loads (frag_utils.kernel_paths). Default: as the environment stands")
    one.set_defaults(func=_run_one)
    return parser


def _model_errors() -> tuple:
    """ModelLoadError when the models module is loaded (it raises nothing before; importing it loads torch)."""
    models = sys.modules.get(f"{__package__}.models")
    return (models.ModelLoadError,) if models else ()


def _on_kernel_path(path: str, argv: list[str]) -> None:
    """Start this command again on kernel ``path`` (:func:`frag_utils.kernel_paths.on_path`: its caps and no other,
    its cache folder) where the environment is not on it: the caps act when torch loads, which this process may
    have done already. The interpreter's own options are kept.

    Raises:
        ValueError: ``path`` is no kernel path.
    """
    import os

    from . import kernel_paths

    path = kernel_paths.check(path)
    if kernel_paths.is_on(path):
        return
    options = sys.orig_argv[1:sys.orig_argv.index("-m")] if "-m" in sys.orig_argv else []
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *options, "-m", __package__, *argv], kernel_paths.on_path(path))


def main(argv: list[str] | None = None) -> int:
    from_shell = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = build_parser(ours[0] if ours else None).parse_args(ours)
    if extra and getattr(args, "snakemake", None) is None:
        build_parser().error(f"options after -- go to snakemake: frag run or frag reproduce only, not {args.command}")
    args.snakemake = extra
    if getattr(args, "kernels", None) and args.command == "run-one" and from_shell:  # not from a caller's process
        try:
            _on_kernel_path(args.kernels, argv)
        except ValueError as err:
            print(f"frag {args.command}: error: {err}", file=sys.stderr)
            return 2
    try:
        out = args.func(args)
    except (DataError, RunError, ValueError, *_model_errors()) as err:  # FragError, CalibrationError too
        print(f"frag {args.command}: error: {err}", file=sys.stderr)
        return 2
    if args.command in ("eval", "score", "prune"):
        print(json.dumps(out, indent=1))
    return 0
