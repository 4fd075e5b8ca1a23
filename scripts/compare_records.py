"""Compare the run records of two copies of papermill_runs/ (used by scripts/check_resume.sh).

Every run folder of the profile must exist in both, with the same files, and each results.json
must be identical once what differs between any two runs is left out: wall times (keys ending in
``seconds``), the time of writing, and the traces of an interrupted run: the step a training
resumed from (``resumed_from``) and whether a checkpoint saved before the kill was reused
(``reused``).
Numbers are compared exactly; a difference is reported with its path and both values (the
comparison is ``frag_utils.drift.record_differences``, which ``make verify`` also uses to say "bit-identical").

    .venv/bin/python scripts/compare_records.py REFERENCE_RUNS OTHER_RUNS [--profile tiny]
Exits 1 when the records differ.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from frag_utils.drift import record_differences


def run_folders(root: Path, profile: str) -> dict[str, Path]:
    return {f"{d.parent.name}/{d.name}": d for d in sorted(root.glob(f"*/{profile}*"))
            if d.is_dir() and d.parent.name != "params"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reference", type=Path)
    ap.add_argument("other", type=Path)
    ap.add_argument("--profile", default="tiny")
    args = ap.parse_args()
    ref, other = run_folders(args.reference, args.profile), run_folders(args.other, args.profile)
    problems = [f"{r}: only in the reference" for r in sorted(set(ref) - set(other))]
    problems += [f"{r}: only in the other" for r in sorted(set(other) - set(ref))]
    compared = 0
    for run in sorted(set(ref) & set(other)):
        files_a = {p.name for p in ref[run].iterdir() if not p.name.startswith(".")}
        files_b = {p.name for p in other[run].iterdir() if not p.name.startswith(".")}
        if files_a != files_b:
            problems.append(f"{run}: files differ: {sorted(files_a ^ files_b)}")
        leftovers = [p.name for p in other[run].iterdir() if p.name.startswith(".")]
        if leftovers:
            problems.append(f"{run}: half-written files left behind: {leftovers}")
        res_a, res_b = ref[run] / "results.json", other[run] / "results.json"
        if res_a.is_file() and res_b.is_file():
            diff = record_differences(json.loads(res_a.read_text()), json.loads(res_b.read_text()))
            problems += [f"{run}: {d}" for d in diff]
            compared += 1
    print(f"{len(ref)} run folders in the reference, {len(other)} in the other; {compared} results.json compared")
    if problems:
        print(f"{len(problems)} difference(s):")
        for p in problems[:50]:
            print("  " + p)
        return 1
    print("identical records (wall times and timestamps left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
