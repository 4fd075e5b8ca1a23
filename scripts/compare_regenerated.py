"""Compare two folders of notebook 09's outputs (e.g. before and after a change of the reporting layer).

    python scripts/compare_regenerated.py BEFORE AFTER [--provenance-may-change NAME ...]

Every ``.csv``, ``.md`` and ``.tex`` file must be byte-identical and the two folders must hold the
same files (``results.json``, the run's own record, and the ``.png`` figures, which carry no
numbers of their own, aside); every ``.provenance.json`` must be identical too, except those of the
tables named with ``--provenance-may-change``, whose differences are printed. Exits 1 on any other
difference.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

COMPARED = (".csv", ".md", ".tex", ".provenance.json")


def differences(before: Path, after: Path, may_change: set[str]) -> tuple[list[str], list[str]]:
    """(the differences that fail, the provenance differences allowed)."""
    def listing(folder):
        return {p.name for p in folder.iterdir() if p.name.endswith(COMPARED)}

    failed = [f"only in {before}: {n}" for n in sorted(listing(before) - listing(after))]
    failed += [f"only in {after}: {n}" for n in sorted(listing(after) - listing(before))]
    allowed = []
    for n in sorted(listing(before) & listing(after)):
        if (before / n).read_bytes() == (after / n).read_bytes():
            continue
        if n.endswith(".provenance.json") and n.split(".")[0] in may_change:
            old, new = (json.loads((f / n).read_text())["provenance"] for f in (before, after))
            keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
            allowed.append(f"{n}: {keys} changed ({len(old.get('source_runs') or {})} -> "
                           f"{len(new.get('source_runs') or {})} source runs)")
        else:
            failed.append(f"differs: {n}")
    return failed, allowed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--provenance-may-change", nargs="*", default=[], metavar="NAME")
    args = parser.parse_args()
    failed, allowed = differences(args.before, args.after, set(args.provenance_may_change))
    compared = len([p for p in args.before.iterdir() if p.name.endswith(COMPARED)])
    for line in allowed:
        print("allowed:", line)
    for line in failed:
        print("FAILED:", line)
    print(f"{compared} files compared: {'identical' if not failed else f'{len(failed)} differences'}"
          f"{f' (provenance of {len(allowed)} changed, as allowed)' if allowed else ''}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
