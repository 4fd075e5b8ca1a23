import json

import pytest

from frag_utils import data, synthetic
from frag_utils.data import DataError


def test_synthetic_configs_have_tofu_fields_and_sizes():
    for config, fields in data.CONFIG_FIELDS.items():
        recs = data.load_split("synthetic", config)
        assert recs and all(set(fields) <= set(r) for r in recs), config
    n = synthetic.QA_PER_AUTHOR
    assert len(data.load_split("synthetic", "full")) == synthetic.N_AUTHORS * n
    # the last 1/5/10 % of the authors, at least one
    n_forget = {pct: synthetic.n_forget_authors(pct) for pct in (1, 5, 10)}
    assert len(data.load_split("synthetic", "forget01")) == n_forget[1] * n
    assert len(data.load_split("synthetic", "forget10")) == n_forget[10] * n
    assert len(data.load_split("synthetic", "retain90")) == (synthetic.N_AUTHORS - n_forget[10]) * n
    for rec in data.load_split("synthetic", "forget10_perturbed"):
        assert len(rec["perturbed_answer"]) == synthetic.N_PERTURBED
        assert rec["answer"] not in rec["perturbed_answer"]
        assert rec["paraphrased_answer"] not in rec["perturbed_answer"]


def test_perturbed_answers_keep_the_paraphrase_wording_and_change_a_fact():
    """As in TOFU: perturbed answers are the paraphrase with wrong facts, so the truth ratio
    compares answers of one wording; each shares the paraphrase's words but is not it."""
    for rec in data.load_split("synthetic", "retain_perturbed"):
        para = set(rec["paraphrased_answer"].split())
        for wrong in rec["perturbed_answer"]:
            words = set(wrong.split())
            assert wrong != rec["paraphrased_answer"]
            assert len(words & para) / len(para) >= 0.4, (rec["paraphrased_answer"], wrong)


def test_splits_partition_full_by_author():
    authors = {a["name"] for a in json.loads((data.paths.SYNTHETIC_DIR / "authors.json").read_text())}
    full = {r["question"] for r in data.load_split("synthetic", "full")}
    for pct in ("01", "05", "10"):
        forget = {r["question"] for r in data.load_split("synthetic", f"forget{pct}")}
        retain = {r["question"] for r in data.load_split("synthetic", f"retain{100 - int(pct):02d}")}
        assert forget | retain == full and not forget & retain
        holdout = {r["question"] for r in data.load_split("synthetic", f"holdout{pct}")}
        assert not holdout & full
    # every forget10 answer names one of the last 10 % of the authors of `full`
    names = [a["name"] for a in json.loads((data.paths.SYNTHETIC_DIR / "authors.json").read_text())]
    k = synthetic.n_forget_authors(10)
    last = names[synthetic.N_AUTHORS - k:synthetic.N_AUTHORS]
    assert all(any(name in r["answer"] for name in last) for r in data.load_split("synthetic", "forget10"))
    assert len(authors) == synthetic.N_AUTHORS + synthetic.N_HOLDOUT_AUTHORS


def test_generator_is_deterministic_and_matches_committed_files():
    a, b = synthetic.generate(), synthetic.generate()
    assert a == b
    for name, recs in a.items():
        assert synthetic.to_json(recs) == (data.paths.SYNTHETIC_DIR / f"{name}.json").read_text(), name
    assert synthetic.generate(seed=1)["full"] != a["full"]


def test_local_directory_source(tmp_path):
    recs = [{"question": "q?", "answer": "a."}]
    (tmp_path / "forget10.json").write_text(json.dumps(recs))
    assert data.load_split(str(tmp_path), "forget10") == recs


def test_bad_inputs_raise_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="Unknown config 'forget11'"):
        data.load_split("synthetic", "forget11")
    with pytest.raises(DataError, match="missing from .*forget10.json"):
        data.load_split(str(tmp_path), "forget10")
    (tmp_path / "forget10.json").write_text(json.dumps([{"question": "q?"}]))
    with pytest.raises(DataError, match=r"Record 0 of 'forget10' .* missing field\(s\) \['answer'\]"):
        data.load_split(str(tmp_path), "forget10")
    (tmp_path / "retain90.json").write_text("[]")
    with pytest.raises(DataError, match="empty"):
        data.load_split(str(tmp_path), "retain90")
    (tmp_path / "full.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        data.load_split(str(tmp_path), "full")
    with pytest.raises(DataError, match="does not exist"):
        data.load_split("./no/such/dir", "full")
    with pytest.raises(DataError, match="not a forget split"):
        data.matching_retain("retain90")

    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'locuslab/TOFU' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="hub .* Without network access use 'synthetic'"):
        data.load_split("locuslab/TOFU", "forget10")


def test_hub_path_returns_records(monkeypatch):
    import datasets

    rows = [{"question": "q?", "answer": "a."}]
    monkeypatch.setattr(datasets, "load_dataset", lambda source, config, split: datasets.Dataset.from_list(rows))
    assert data.load_split("locuslab/TOFU", "forget10") == rows
