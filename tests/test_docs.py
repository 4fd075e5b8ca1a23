"""What a reader sees stays navigable: no internal work-item numbers, and every relative link and
``#anchor`` in README.md and docs/**/*.md reaches a file and a section."""
import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from frag_utils import paths

ROOT = paths.REPO_ROOT.resolve()
# An internal work item named in prose or in an anchor: "issue 39", "Issue 27's", "#...-issue-43".
ISSUE = re.compile(r"\bissue[\s_-]*#?\d+", re.I)
LINK = re.compile(r"\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb"))


def _markdown_cells(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (links there are not links)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation other than hyphens and
    underscores dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # [text](url) -> text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives ``page``'s headings, repeats numbered ``-1``, ``-2`` as GitHub does."""
    found: set[str] = set()
    text = FENCE.sub("", page.read_text())
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", text, flags=re.M):
        base = github_anchor(heading)
        anchor, n = base, 0
        while anchor in found:
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def test_anchor_rule_matches_github_examples():
    assert github_anchor("Does FRAG predict recovery on the healthy frontier?") == (
        "does-frag-predict-recovery-on-the-healthy-frontier")
    assert github_anchor("Choices for the `smol` profile") == "choices-for-the-smol-profile"
    assert github_anchor("The attack's precision: Table 3 and Table 1") == (
        "the-attacks-precision-table-3-and-table-1")
    assert github_anchor("Memory per stage (computed, not measured)") == "memory-per-stage-computed-not-measured"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_in_pages(page):
    hits = sorted(set(m.group(0) for m in ISSUE.finditer(page.read_text())))
    assert not hits, f"{page.relative_to(ROOT)} names internal work items {hits}: name the section by what it holds"


@pytest.mark.parametrize("notebook", _notebooks(), ids=lambda p: p.name)
def test_no_issue_numbers_in_notebook_markdown(notebook):
    hits = sorted(set(m.group(0) for m in ISSUE.finditer(_markdown_cells(notebook))))
    assert not hits, f"{notebook.name}'s markdown names internal work items {hits}"


@pytest.mark.parametrize("notebook", _notebooks(), ids=lambda p: p.name)
def test_every_notebook_is_valid_nbformat_with_an_id_on_every_cell(notebook):
    """A cell without an id is fixed up (with a random id) by every tool that reads the notebook, and will be an
    error in later nbformat versions."""
    import nbformat

    raw = json.loads(notebook.read_text())  # as written: nbformat.read would add the missing ids itself
    assert [i for i, c in enumerate(raw["cells"]) if "id" not in c] == [], f"{notebook.name}: cells without an id"
    nbformat.validate(nbformat.from_dict(raw))


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http(s), mailto
            continue
        file, _, anchor = unquote(target).partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no section #{anchor} in {dest.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_every_results_page_is_reachable_from_the_index_and_the_readme():
    results = ROOT / "docs" / "results"
    pages = set(results.glob("*.md")) - {results / "README.md"}
    for source in (results / "README.md", ROOT / "README.md"):
        linked = {(source.parent / unquote(t).partition("#")[0]).resolve()
                  for t in LINK.findall(_prose(source.read_text())) if not re.match(r"[a-z]+:", t)}
        assert pages <= linked, f"{source.relative_to(ROOT)} does not link {sorted(p.name for p in pages - linked)}"


def _rendered(line: str) -> str:
    """A Markdown line as it reads: links as their text, code marks dropped."""
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line).replace("`", "")


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_tables_are_for_the_eye(page):
    """At most 12 columns and no row over 220 characters as it reads (a page shows what a reader
    compares; the CSV beside a generated table keeps every column)."""
    rows = [_rendered(line) for line in page.read_text().splitlines() if line.startswith("|")]
    wide = [r[:60] for r in rows if r.count("|") - 1 > 12 or len(r) > 220]
    assert not wide, f"{page.relative_to(ROOT)}: {len(wide)} table rows too wide, e.g. {wide[:2]}"


def test_the_generated_tables_are_for_the_eye():
    for table in sorted((ROOT / "figures" / "smol").glob("*.md")):
        rows = [line for line in table.read_text().splitlines() if line.startswith("|")]
        assert all(r.count("|") - 1 <= 12 and len(r) <= 220 for r in rows), table.name


def _list_items(markdown: str) -> list[str]:
    """The top-level list items of ``markdown``, each joined with its indented continuation lines."""
    items: list[str] = []
    inside = False
    for line in FENCE.sub("", markdown).splitlines():
        if re.match(r"(?:[-*+]|\d+\.)\s", line):
            items.append(line)
            inside = True
        elif inside and line.startswith(" ") and line.strip():
            items[-1] += " " + line.strip()
        else:
            inside = False
    return items


def test_list_items_joins_continuation_lines():
    text = "- **A**: one\n  two [x](y.md)\n- B\n\n  code after a blank\n| t |\n"
    assert [_rendered(i).replace("*", "") for i in _list_items(text)] == ["- A: one two x", "- B"]


def test_the_results_index_rows_are_for_the_eye():
    """Every row of the results index, a table row or a list item (the terms), reads within 220
    characters: links as their text, code and emphasis marks dropped."""
    text = (ROOT / "docs" / "results" / "README.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")] + _list_items(text)
    wide = {len(r): r[:60] for r in (_rendered(row).replace("*", "") for row in rows) if len(r) > 220}
    assert rows and not wide, f"index rows over 220 characters as read: {wide}"


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "results").glob("*.md")), ids=lambda p: p.name)
def test_each_results_page_is_under_400_lines(page):
    """A page answers one question; a longer one is split by question (its tables move with it)."""
    assert len(page.read_text().splitlines()) < 400, f"{page.name}: split it by question"


def _as_read(markdown: str) -> list[str]:
    """The paragraphs of ``markdown`` as a reader reads them: no HTML comments, headings, tables, images
    or ``*Source: ...*`` captions; links as their text; code and emphasis marks dropped."""
    paragraphs, current = [], []
    for line in re.sub(r"<!--.*?-->", "", FENCE.sub("", markdown), flags=re.S).splitlines():
        s = line.strip()
        if not s or s.startswith(("|", "![", "#")) or re.fullmatch(r"\*Source: .*\*", s):
            if current:
                paragraphs.append(" ".join(current))
            current = []
            continue
        current.append(_rendered(s).replace("*", ""))
    return paragraphs + ([" ".join(current)] if current else [])


def _sentences(paragraph: str) -> list[str]:
    """Sentences end at ., ! or ? (or one closing a parenthesis) before a space and anything but a lower-case
    Latin letter (ρ(L2) starts one)."""
    return [s for s in re.split(r"(?:(?<=[.!?])|(?<=[.!?]\)))\s+(?=[^a-z])", paragraph) if s.strip()]


def test_as_read_counts_what_a_reader_reads():
    text = ("Intro [link text](docs/x.md#a) and `code`.\n\n<!-- BEGIN b -->\n**Bold:** one. Two words.\n\n"
            "*Source: `x.md`*\n<!-- END b -->\n\n| a | b |\n|---|---|\n\n![fig](f.png)\n")
    assert _as_read(text) == ["Intro link text and code.", "Bold: one. Two words."]
    assert _sentences("Bold: one. Two words, e.g. these. (A third.) ρ(L2) four.") == [
        "Bold: one.", "Two words, e.g. these.", "(A third.)", "ρ(L2) four."]


def test_the_readme_first_screen_reads_in_a_minute():
    """The question's section of the README (the verdict block, the definitions, the table's
    note) holds at most 180 words of prose, no sentence over 40 words: what a reader who knows the
    paper takes in within a minute. Generated text counts; tables, the figure and captions do not."""
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Does FRAG rank recovery better than global L2?")
    section = text[start:text.index("\n## ", start + 1)]
    paragraphs = _as_read(section)
    words = sum(len(p.split()) for p in paragraphs)
    longest = max((s for p in paragraphs for s in _sentences(p)), key=lambda s: len(s.split()))
    assert words <= 180, f"the first screen holds {words} words of prose; move detail one link deeper"
    assert len(longest.split()) <= 40, f"a sentence of {len(longest.split())} words: {longest[:80]}"
