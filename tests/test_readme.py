from frag_utils import readme


def test_fill_replaces_empty_and_filled_blocks_and_is_idempotent(tmp_path, monkeypatch):
    (tmp_path / "t.md").write_text("| a |\n|---|\n| 1 |\n")
    monkeypatch.setattr(readme.paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(readme, "BLOCKS", {"x": "t.md", "gone": "missing.md"})
    text = "intro\n<!-- BEGIN x -->\n<!-- END x -->\nmid\n<!-- BEGIN gone -->\nold\n<!-- END gone -->\nend\n"
    once = readme.fill(text)
    assert "<!-- BEGIN x -->\n| a |\n|---|\n| 1 |\n\n*Source: `t.md`*\n<!-- END x -->" in once
    assert "not yet run: missing.md is missing" in once and "\nold\n" not in once
    assert readme.fill(once) == once and once.startswith("intro\n") and once.endswith("end\n")
