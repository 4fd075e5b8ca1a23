"""The grid's throughput on this machine: a whole grid (the tiny profile by default) from an empty
cache and no records, through Snakemake's local executor, as ``make reproduce JOBS=1`` runs it (one
job with every thread of FRAG_THREADS) against ``JOBS=2`` (two jobs side by side, each with its
share), in one run on one machine; the records of the two must agree (wall times aside) within the
tolerance file. Writes bench/results/grid_jobs.json. Usage:
    python bench/grid_jobs.py [--profile tiny] [--jobs 1 2]
The tiny grid takes a few minutes per setting on 2 cores; the smol grid about a day, so for it
    python bench/grid_jobs.py --profile smol --slice TEXT
times a slice instead: the recorded runs whose '<notebook>/<run>' holds TEXT, redone (as FORCE=1
does) beside a copy of the committed records, with the checkpoints they read from this machine's
cache (FRAG_CACHE_DIR), which both settings find alike; writes bench/results/grid_jobs_<profile>_slice.json.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import drift, paths, records  # noqa: E402

from _common import machine  # noqa: E402


def run_grid(profile: str, jobs: int, work: Path, slice_: str | None = None) -> float:
    """Seconds for the whole grid of ``profile`` (or the runs of ``slice_``, redone beside a copy of
    the records, from this machine's cache) with ``jobs`` side by side, into ``work``."""
    env = {**os.environ, "FRAG_RUNS_DIR": str(work / "runs"), "FRAG_FIGURES_DIR": str(work / "figures")}
    if slice_:
        shutil.copytree(paths.RUNS_DIR, work / "runs")
    else:
        env["FRAG_CACHE_DIR"] = str(work / "cache")
    command = [sys.executable, "-m", "frag_utils", "reproduce", "--profile", profile, "--jobs", str(jobs),
               *(["--select", slice_, "--force"] if slice_ else [])]
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, cwd=paths.REPO_ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--slice", default=None, metavar="TEXT",
                        help="redo only the recorded runs whose '<notebook>/<run>' holds TEXT")
    args = parser.parse_args()
    if args.slice:
        from frag_utils import runs

        chosen = [f"{s.notebook.stem}/{s.name}" for s in runs.grid(args.profile)
                  if args.slice in f"{s.notebook.stem}/{s.name}"]
        if not chosen or any(not (paths.RUNS_DIR / c / paths.RESULTS_FILE).is_file() for c in chosen):
            raise SystemExit(f"--slice {args.slice!r}: matches {len(chosen)} runs of the {args.profile} grid; "
                             "name one or more recorded runs (a slice is timed against its own records)")
        print(f"slice: {len(chosen)} runs: {', '.join(chosen)}", flush=True)
    seconds, outside = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_grid_") as tmp:
        for jobs in args.jobs:
            seconds[jobs] = run_grid(args.profile, jobs, Path(tmp) / f"jobs{jobs}", args.slice)
            print(f"{args.profile} {'slice' if args.slice else 'grid'}, {jobs} job(s): {seconds[jobs]:.0f} s",
                  flush=True)
        first = Path(tmp) / f"jobs{args.jobs[0]}" / "runs"
        made = sorted(first.glob(f"*/*/{paths.RESULTS_FILE}"))
        if args.slice:
            made = [first / c / paths.RESULTS_FILE for c in chosen]
        for jobs in args.jobs[1:]:
            other = Path(tmp) / f"jobs{jobs}" / "runs"
            n_runs, n_outside = 0, 0
            for f in made:
                n_runs += 1
                report = drift.compare(f, other / f.relative_to(first))
                n_outside += report["verdict"] == "outside tolerance"
            outside[jobs] = {"runs": n_runs, "outside_tolerance": n_outside}
        committed = {}  # a slice's runs against their committed records: verdict counts per setting
        for jobs in args.jobs if args.slice else []:
            verdicts = [drift.compare(paths.RUNS_DIR / c / paths.RESULTS_FILE,
                                      Path(tmp) / f"jobs{jobs}" / "runs" / c / paths.RESULTS_FILE)["verdict"]
                        for c in chosen]
            committed[str(jobs)] = {v: verdicts.count(v) for v in sorted(set(verdicts))}
    base = seconds[args.jobs[0]]
    result = {"profile": args.profile, "slice": args.slice, "threads": os.environ.get("FRAG_THREADS", "2"),
              "seconds": {str(j): round(s, 1) for j, s in seconds.items()},
              "over_first": {str(j): round(s / base, 3) for j, s in seconds.items()},
              "records_against_first": {str(j): v for j, v in outside.items()},
              **({"records_against_committed": committed} if args.slice else {}), "machine": machine()}
    name = f"grid_jobs_{args.profile}_slice.json" if args.slice else "grid_jobs.json"
    out = Path(__file__).resolve().parent / "results" / name
    records.write_json(out, result, records.provenance("bench/grid_jobs.py", vars(args)))
    print(result)


if __name__ == "__main__":
    main()
