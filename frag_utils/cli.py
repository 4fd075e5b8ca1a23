"""Command line: ``frag eval``, ``frag score``, ``frag prune``, ``frag run``, ``frag reproduce``,
``frag verify``, ``frag dry-run`` (also ``python -m frag_utils ...``)."""
from __future__ import annotations

import argparse
import json
import sys
import time

from .data import DataError
from .models import ModelLoadError
from .pruning import DEFAULT_LAM, DEFAULT_VETO, FRP_ABLATION_RULES, FRP_VARIANTS, SP_VARIANTS
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


def _summary(log: list[dict], chosen: list[str], where: str) -> str:
    """What a grid did, in two lines: runs done, skipped and failed (each run counted once, by its
    last state) and those of ``chosen`` never reached; then ``where`` its outputs are, if given."""
    last = {e["run"]: e["status"] for e in log}
    counts = {s: sum(v == s for v in last.values()) for s in ("done", "skipped (complete)", "failed", "interrupted")}
    unreached = [r for r in chosen if r not in last]
    parts = [f"{counts['done']} done", f"{counts['skipped (complete)']} skipped (complete)",
             f"{counts['failed']} failed"]
    if counts["interrupted"]:
        parts.append(f"{counts['interrupted']} interrupted")
    if unreached:
        parts.append(f"{len(unreached)} not reached")
    failed = [r for r, v in last.items() if v in ("failed", "interrupted")]
    return "\n".join([f"runs: {', '.join(parts)}" + (f" ({', '.join(failed)}; the error is below)" if failed else ""),
                      *([where] if where else [])])


def _run(args: argparse.Namespace) -> list[dict]:
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
    universe = runs.dependency_grid(specs)  # upstream runs are remade as `frag reproduce` remakes them
    log: list[dict] = []
    try:
        return runs.run_grid(specs, force=args.force, universe=universe, log=log)
    finally:
        where = (f"record: {runs.repo_relative(specs[0].out_dir)}/" if len(specs) == 1 else
                 f"records: {runs.repo_relative(paths.RUNS_DIR / specs[0].notebook.stem)}/<run>/ for the {len(specs)} "
                 f"runs of {args.file or args.notebook}")
        names = [f"{s.notebook.stem}/{s.name}" for s in specs]
        ended = any(e["run"] in names and e["status"] in ("done", "skipped (complete)") for e in log)
        print(_summary(log, names, where if ended else ""), flush=True)  # no record to point to otherwise


def _reproduce(args: argparse.Namespace) -> list[dict]:
    from . import paths, runs

    specs = runs.grid(args.profile)
    names = [f"{s.notebook.stem}/{s.name}" for s in specs]
    chosen = [n for n in names if not args.select or args.select in n]
    log: list[dict] = []
    try:
        return runs.run_grid(specs, force=args.force, select=args.select, log=log)
    finally:
        where = (f"records: {runs.repo_relative(paths.RUNS_DIR)}/<notebook>/{args.profile}*/; tables and figures: "
                 f"{runs.repo_relative(paths.FIGURES_DIR / args.profile)}/ (collected by notebook 09_figures)")
        print(_summary(log, chosen, where), flush=True)


def _verify(args: argparse.Namespace) -> list[dict]:
    from . import runs

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
    log = dryrun.dry_run(root, args.device)
    print(f"paper dry run: {len(log)} runs ({sum(e['status'] == 'done' for e in log)} made) on {args.device}; "
          f"records in {root}/papermill_runs, figures in {root}/figures/paper", flush=True)
    return log


def build_parser() -> argparse.ArgumentParser:
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
    ve.set_defaults(func=_verify)

    dry = sub.add_parser("dry-run", help="every notebook of the paper profile, with its parameter files, on a "
                                         "small random Llama and local TOFU-format data (no hub, no GPU needed)")
    dry.add_argument("--workdir", default=None, help="records, figures and checkpoints go here (default: a "
                                                   "temporary folder); rerunning in it resumes")
    dry.add_argument("--device", default="auto", type=_device, help="auto (a GPU when visible) | cpu | cuda")
    dry.set_defaults(func=_dry_run)

    run = sub.add_parser("run", help="run one notebook through papermill, parameters checked")
    run.add_argument("notebook", help="e.g. 02_target_and_gold")
    run.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    run.add_argument("-f", "--file", help="YAML parameter file (a path, or relative to papermill_runs/params)")
    run.add_argument("--select", action="append", default=[], metavar="TEXT",
                     help="only the runs whose '<notebook>/<run>' name holds TEXT (repeat: every one)")
    run.add_argument("--force", action="store_true", help="rerun even if a complete record exists")
    run.set_defaults(func=_run)

    known = profiles()  # the folders of papermill_runs/params/
    rep = sub.add_parser("reproduce", help="run a profile's grid (resumable)")
    rep.add_argument("--profile", default="smol", choices=known or None,
                     help="a folder of papermill_runs/params/ (default: smol)")
    rep.add_argument("--select", default=None, help="only runs whose '<notebook>/<run>' contains this")
    rep.add_argument("--force", action="store_true")
    rep.set_defaults(func=_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        out = args.func(args)
    except (DataError, ModelLoadError, RunError, ValueError) as err:  # FragError, CalibrationError too
        print(f"frag {args.command}: error: {err}", file=sys.stderr)
        return 2
    if args.command in ("eval", "score", "prune"):
        print(json.dumps(out, indent=1))
    return 0
