"""make verify: a recorded run remade from an empty cache in a clone of HEAD reproduces its record
bit for bit (deterministic mode). The tiny target's record is committed as the fixture; it was
recorded on the machine its provenance names, and this test runs wherever the suite runs."""
import json

import pytest

from frag_utils import paths, runs


def test_the_tiny_target_remade_from_an_empty_cache_is_identical_to_its_record(tmp_path):
    recorded = json.loads((paths.RUNS_DIR / "02_target_and_gold" / "tiny" / runs.RESULTS_FILE).read_text())
    assert recorded["results"]["checkpoint_sha256"]["target"]  # the record names its weights
    assert recorded["provenance"]["environment"]["numerics"]["deterministic"]
    report = runs.verify("02_target_and_gold/tiny", workdir=tmp_path)
    assert [e["run"] for e in report] == ["02_target_and_gold/tiny"]
    assert report[0]["checkpoints"] == {"gold": "identical", "target": "identical"}
    assert report[0]["identical"], report[0]["differences"]


def test_verify_refuses_unknown_runs():
    with pytest.raises(runs.RunError, match="No run"):
        runs.verify("02_target_and_gold/nonexistent")


def test_upstream_lists_what_an_attack_reads_before_it():
    """A smol attack reads its unlearned model, which reads the profile's target."""
    attack = next(s for s in runs.grid("smol") if s.notebook.stem == "06_attacks")
    spec, specs = runs.find_run(f"06_attacks/{attack.name}")
    chain = [f"{s.notebook.stem}/{s.name}" for s in runs.upstream(spec, specs)]
    assert chain == ["02_target_and_gold/smol", f"05_unlearn/{attack.params['unlearned_run']}"]
