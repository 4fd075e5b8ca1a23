import json
import re
from pathlib import Path

from frag_utils import paths, readme


def test_fill_replaces_empty_and_filled_blocks_and_is_idempotent(tmp_path, monkeypatch):
    (tmp_path / "t.md").write_text("| a |\n|---|\n| 1 |\n")
    monkeypatch.setattr(readme.paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(readme, "BLOCKS", {"x": "t.md", "gone": "missing.md"})
    text = "intro\n<!-- BEGIN x -->\n<!-- END x -->\nmid\n<!-- BEGIN gone -->\nold\n<!-- END gone -->\nend\n"
    once = readme.fill(text)
    assert "<!-- BEGIN x -->\n| a |\n|---|\n| 1 |\n\n*Source: `t.md`*\n<!-- END x -->" in once
    assert "not yet run: missing.md is missing" in once and "\nold\n" not in once
    assert readme.fill(once) == once and once.startswith("intro\n") and once.endswith("end\n")


def test_documents_with_blocks_are_found_rendered_without_writing_and_filled_by_main(tmp_path, monkeypatch):
    (tmp_path / "t.md").write_text("new\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "bench").mkdir()
    block = "<!-- BEGIN x -->\nold\n<!-- END x -->\n"
    (tmp_path / "README.md").write_text(block)
    (tmp_path / "docs" / "a.md").write_text("# A\n" + block)
    (tmp_path / "docs" / "plain.md").write_text("no block here\n")  # not a document to fill
    (tmp_path / "bench" / "README.md").write_text(block)
    (tmp_path / "other.md").write_text(block)  # outside DOCUMENTS: left alone
    monkeypatch.setattr(readme.paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(readme, "BLOCKS", {"x": "t.md"})
    docs = [tmp_path / "README.md", tmp_path / "bench" / "README.md", tmp_path / "docs" / "a.md"]
    assert readme.documents() == sorted(docs)
    rendered = readme.render()
    assert rendered[tmp_path / "docs" / "a.md"] == "# A\n<!-- BEGIN x -->\nnew\n\n*Source: `t.md`*\n<!-- END x -->\n"
    assert readme.stale() == sorted(docs) and (tmp_path / "README.md").read_text() == block  # nothing written
    readme.main()
    assert readme.stale() == [] and (tmp_path / "other.md").read_text() == block
    assert all((p.read_text() == rendered[p]) for p in docs)


def test_every_generated_block_is_current():
    """Regenerating the blocks from the committed sources would change no file
    (after ``make reproduce``, run ``python -m frag_utils.readme``)."""
    stale = [str(p.relative_to(paths.REPO_ROOT)) for p in readme.stale()]
    assert stale == [], f"blocks not current in {stale}: run `python -m frag_utils.readme`"


def test_every_block_marker_is_paired_and_known_and_every_block_is_shown():
    shown = set()
    for doc in readme.documents():
        found = readme.MARKER.findall(doc.read_text())
        begins, ends = found[0::2], found[1::2]
        assert len(begins) == len(ends), doc
        for (kind_b, name_b), (kind_e, name_e) in zip(begins, ends):
            assert (kind_b, kind_e, name_e) == ("BEGIN", "END", name_b), f"{doc}: unpaired marker {name_b}"
            assert name_b in readme.BLOCKS, f"{doc}: unknown block {name_b}"
            shown.add(name_b)
    assert shown == set(readme.BLOCKS)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # no headings inside code
    return {_anchor(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_readme_is_short_and_its_relative_links_reach_files_and_sections():
    root = paths.REPO_ROOT.resolve()
    readme_md = root / "README.md"
    assert len(readme_md.read_text().splitlines()) < 300
    pages = [readme_md, *sorted((root / "docs").glob("*.md")), root / "bench" / "README.md"]
    linked = set()
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):  # http(s), mailto
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            assert dest.exists(), f"{page.name}: broken link {target}"
            if anchor:
                assert anchor in _anchors(dest), f"{page.name}: no section #{anchor} in {file or page.name}"
            if page == readme_md:
                linked.add(dest)
    # every page the README's content moved to is one click away
    assert set(pages[1:]) <= linked


def test_the_docs_count_the_runs_not_yet_recorded_as_the_runner_does():
    """The README's and the status's "N of the M runs" recorded, and "the K left are notebook NN's", are the
    runner's own count of the smol profile's runs without a complete record, collectors left out ("every run"
    once none is left): a record committed without updating the docs (or the other way round) fails here."""
    from frag_utils import runs

    grid = [spec for spec in runs.grid("smol") if spec.notebook.stem not in runs.COLLECTORS]  # as grid_times counts
    missing = [spec for spec in grid if not spec.is_complete()]
    for page in ("README.md", "docs/reproducibility.md"):
        text = " ".join(paths.REPO_ROOT.joinpath(page).read_text().split())
        counted = re.search(r"(\d+) of the (\d+) runs the `smol` profile's files list", text)
        left = re.search(r"[Tt]he (\d+) left are notebook (\d+)'s", text)
        if not missing:
            assert not (counted or left) and "records of every run" in text, f"{page}: every run is recorded now"
            continue
        assert counted and (int(counted[1]), int(counted[2])) == (len(grid) - len(missing), len(grid)), (
            f"{page} counts {counted and counted.group(0)!r}; the records hold {len(grid) - len(missing)} of "
            f"{len(grid)}")
        notebooks = {spec.notebook.stem[:2] for spec in missing}
        assert left and int(left[1]) == len(missing) and notebooks == {left[2]}, (
            f"{page}: {left and left.group(0)!r}, but {len(missing)} are left, of notebooks {sorted(notebooks)}")


def test_readme_rerun_recipe_plans_its_jobs_on_the_kernel_path_of_the_records_it_reads(monkeypatch):
    """The README's rerun recipe, typed in a new shell (no kernel cap set), plans one new run, and every job of it on
    the path of the unlearned checkpoint's record: the AVX2 caps on an AVX-512 CPU (with them its remake lands within
    tolerance on every x86 CPU measured, docs/reproducibility.md), none on an AVX2 CPU, whose own path it is."""
    import shlex

    from frag_utils import kernel_paths, parameters, runs

    text = paths.REPO_ROOT.joinpath("README.md").read_text()
    block = re.search(r"\*\*Rerun one notebook.*?```bash\n(.*?)```", text, re.S).group(1)
    assert "export " not in block and "CAPABILITY" not in block  # the runner takes the path, not the reader
    args = shlex.split(next(line for line in block.splitlines() if "frag run " in line).split("#")[0])
    assert args[:2] == [".venv/bin/frag", "run"]
    notebook, file = args[2], args[args.index("-f") + 1]
    overrides = {args[i + 1]: parameters.parse_cli_value(args[i + 2]) for i, a in enumerate(args) if a == "-p"}
    selects = [args[i + 1] for i, a in enumerate(args) if a == "--select"]
    chosen = [s for s in runs.plan_run(notebook, file, overrides)
              if all(sel in f"{s.notebook.stem}/{s.name}" for sel in selects)]
    assert len(chosen) == 1 and not chosen[0].is_complete()  # one new run: the recipe's own
    defaults = parameters.notebook_defaults("06_attacks")  # and no grid run's parameters under another name
    grid_keys = {parameters.params_key(s.params, defaults, notebook="06_attacks") for s in runs.grid("smol")
                 if s.notebook.stem == "06_attacks"}
    assert parameters.params_key(chosen[0].params, defaults, notebook="06_attacks") not in grid_keys
    unlearned = [dep for dep, _ in runs.needed_runs(chosen[0], runs.grid("smol")) if dep.notebook.stem == "05_unlearn"]
    assert len(unlearned) == 1 and unlearned[0].is_complete()
    recorded = json.loads((unlearned[0].out_dir / paths.RESULTS_FILE).read_text())["provenance"]["environment"]
    assert recorded["cpu_capability"] == "AVX2"
    for cap in kernel_paths.ALL_CAPS:
        monkeypatch.delenv(cap, raising=False)
    universe = runs.dependency_grid(chosen)
    for here, caps in (("AVX512", kernel_paths.CAPS["AVX2"]), ("AVX2", {})):
        monkeypatch.setattr(kernel_paths, "native", lambda *a, here=here, **k: here)
        jobs = runs.plan(chosen, universe)
        assert jobs and all(j.kernels.path == "AVX2" and j.kernels.caps == caps for j in jobs), here
        assert f"06_attacks/{chosen[0].name}" in [j.key for j in jobs]
