"""Fill the result blocks (``<!-- BEGIN name -->`` ... ``<!-- END name -->``) of the README and the
pages under docs/ from committed run records, never retyping a number: ``python -m frag_utils.readme``
after ``make reproduce``; ``tests/test_readme.py`` fails when a block is not current (:func:`stale`)."""
from __future__ import annotations

import re
from pathlib import Path

from . import paths
from .report import families

# block name -> the Markdown file (relative to the repository) whose content fills it: each table notebook
# 09 declares with a docs block (frag_utils.report.families.tables) is smol-<name>, its name with dashes
BLOCKS = {
    "smol-models": "papermill_runs/02_target_and_gold/smol/models.md",
    "smol-frag": "papermill_runs/04_frag/smol/scores.md",
    **{f"smol-{t.name.replace('_', '-')}": f"figures/smol/{t.name}.md" for t in families.tables() if t.block},
    "bench": "bench/results/summary.md",
}

# Glob patterns, relative to the repository, of the Markdown files that may hold blocks.
DOCUMENTS = ("README.md", "docs/*.md", "docs/results/*.md", "bench/README.md")
MARKER = re.compile(r"<!-- (BEGIN|END) ([^ ]+) -->")  # findall: every marker in order, as (kind, name)


def fill(text: str) -> str:
    """``text`` with every known block replaced by its source file's current content."""
    for name, rel in BLOCKS.items():
        source = paths.REPO_ROOT / rel
        body = source.read_text().strip() if source.is_file() else f"*(not yet run: {rel} is missing)*"
        pattern = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n)(?:.*?\n)?(<!-- END {re.escape(name)} -->)", re.S)
        text = pattern.sub(lambda m, body=body, rel=rel: f"{m.group(1)}{body}\n\n*Source: `{rel}`*\n{m.group(2)}", text)
    return text


def documents() -> list[Path]:
    """The Markdown files of ``DOCUMENTS`` that contain at least one block marker, sorted."""
    found = {p for pattern in DOCUMENTS for p in paths.REPO_ROOT.glob(pattern) if p.is_file()}
    return sorted(p for p in found if MARKER.search(p.read_text()))


def render() -> dict[Path, str]:
    """The would-be content of every document (:func:`documents`) with its blocks filled; writes nothing."""
    return {p: fill(p.read_text()) for p in documents()}


def stale() -> list[Path]:
    """The documents whose blocks are not current: filling them would change the file."""
    return [p for p, text in render().items() if p.read_text() != text]


def main() -> None:
    for path, text in render().items():
        if path.read_text() != text:
            path.write_text(text)
            print(f"filled {path.relative_to(paths.REPO_ROOT)}")


if __name__ == "__main__":
    main()
