"""The grid's throughput on this machine: a whole grid (the tiny profile by default) from an empty
cache and no records, through Snakemake's local executor, as ``make reproduce JOBS=1`` runs it (one
job with every thread of FRAG_THREADS) against ``JOBS=2`` (two jobs side by side, each with its
share), in one run on one machine; the records of the two must agree (wall times aside) within the
tolerance file. Writes bench/results/grid_jobs.json. Usage:
    python bench/grid_jobs.py [--profile tiny] [--jobs 1 2]
The tiny grid takes a few minutes per setting on 2 cores; the smol grid about a day.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import drift, paths, records  # noqa: E402

from _common import machine  # noqa: E402


def run_grid(profile: str, jobs: int, work: Path) -> float:
    """Seconds for the whole grid of ``profile`` with ``jobs`` side by side, into ``work``."""
    env = {**os.environ, "FRAG_CACHE_DIR": str(work / "cache"), "FRAG_RUNS_DIR": str(work / "runs"),
           "FRAG_FIGURES_DIR": str(work / "figures")}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "frag_utils", "reproduce", "--profile", profile, "--jobs", str(jobs)],
                   env=env, check=True, cwd=paths.REPO_ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    seconds, outside = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench_grid_") as tmp:
        for jobs in args.jobs:
            seconds[jobs] = run_grid(args.profile, jobs, Path(tmp) / f"jobs{jobs}")
            print(f"{args.profile} grid, {jobs} job(s): {seconds[jobs]:.0f} s", flush=True)
        first = Path(tmp) / f"jobs{args.jobs[0]}" / "runs"
        for jobs in args.jobs[1:]:
            other = Path(tmp) / f"jobs{jobs}" / "runs"
            n_runs, n_outside = 0, 0
            for f in sorted(first.glob(f"*/*/{paths.RESULTS_FILE}")):
                n_runs += 1
                report = drift.compare(f, other / f.relative_to(first))
                n_outside += report["verdict"] == "outside tolerance"
            outside[jobs] = {"runs": n_runs, "outside_tolerance": n_outside}
    base = seconds[args.jobs[0]]
    result = {"profile": args.profile, "threads": os.environ.get("FRAG_THREADS", "2"),
              "seconds": {str(j): round(s, 1) for j, s in seconds.items()},
              "over_first": {str(j): round(s / base, 3) for j, s in seconds.items()},
              "records_against_first": {str(j): v for j, v in outside.items()}, "machine": machine()}
    out = Path(__file__).resolve().parent / "results" / "grid_jobs.json"
    records.write_json(out, result, records.provenance("bench/grid_jobs.py", vars(args)))
    print(result)


if __name__ == "__main__":
    main()
