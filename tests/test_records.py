import json

import pandas as pd
import pytest

from frag_utils import records


def test_write_table_formats_columns_and_keeps_full_precision_in_csv(tmp_path):
    df = pd.DataFrame({"method": ["ga", "npo"], "lr": [5e-05, 1e-4], "es": [0.123456, 0.5], "knob": ["2e-05", ""]})
    out = records.write_table(df, tmp_path / "t", {"source": "test"}, formats={"lr": "g", "knob": "g"})
    md = out["md"].read_text()
    assert "5e-05" in md and "0.0001" in md and "0.123" in md and "0.123456" not in md
    assert "2e-05" in md  # a number written as text is not rounded to 0.000
    tex = out["tex"].read_text()
    assert "5e-05" in tex and "0.123" in tex and "0.123456" not in tex
    back = pd.read_csv(out["csv"])
    assert back["lr"].tolist() == [5e-05, 1e-4] and back["es"].tolist() == [0.123456, 0.5]
    assert json.loads((tmp_path / "t.provenance.json").read_text())["results"]["files"] == ["t.md", "t.csv", "t.tex"]


def test_write_table_refuses_formats_of_missing_columns(tmp_path):
    with pytest.raises(ValueError, match=r"\['lrr'\]"):
        records.write_table(pd.DataFrame({"lr": [1e-5]}), tmp_path / "t", {}, formats={"lrr": "g"})


def test_peak_rss_of_a_fresh_process_is_its_own_not_its_parents():
    import subprocess
    import sys

    from frag_utils import records

    held = b"\x01" * (400 * 2**20)  # 400 MB touched by this process
    parent = records.peak_rss_bytes()
    child = subprocess.run([sys.executable, "-c", "from frag_utils import records; print(records.peak_rss_bytes())"],
                           capture_output=True, text=True, check=True)
    assert parent >= 400 * 2**20 and 0 < int(child.stdout) < parent - 300 * 2**20
    del held


def test_git_commit_is_dirty_for_changed_code_and_params_but_not_for_changed_outputs(tmp_path):
    import subprocess

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    assert records.git_commit(tmp_path) == {"commit": None, "dirty": None}  # not a repository: unknown, not clean
    files = ["frag_utils/x.py", "papermill_runs/params/smol/05_unlearn.yaml",
             "papermill_runs/05_unlearn/smol/results.json", "figures/smol/t.md", "bench/results/b.json"]
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("a\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "init")
    head = records.git_commit(tmp_path)
    assert len(head["commit"]) == 40 and head["dirty"] is False
    for f in files[2:]:  # outputs: a rerun deletes its own tracked record, then writes it anew
        (tmp_path / f).unlink()
    assert records.git_commit(tmp_path)["dirty"] is False
    for f in files[2:]:
        (tmp_path / f).write_text("rewritten\n")
    assert records.git_commit(tmp_path)["dirty"] is False
    for f in files[:2]:  # the code and the parameter files are what the record must be traceable to
        (tmp_path / f).write_text("b\n")
        assert records.git_commit(tmp_path)["dirty"] is True
        git("checkout", "--", f)
    assert records.git_commit(tmp_path)["dirty"] is False


def test_environment_names_the_cpu_features_that_decide_bf16_kernels():
    env = records.environment()
    assert isinstance(env["cpu_capability"], str) and env["cpu_capability"]  # e.g. AVX512, AVX2, DEFAULT
    if "cpu_flags" in env:  # Linux: read from /proc/cpuinfo, only the flags that matter, in a fixed order
        assert env["cpu_flags"] == [f for f in records.BF16_FLAGS if f in env["cpu_flags"]]
        assert ("avx2" in env["cpu_flags"]) == (" avx2" in open("/proc/cpuinfo").read())


def test_a_run_names_the_commit_it_started_from(monkeypatch):
    from frag_utils import records

    monkeypatch.setenv(records.RUN_COMMIT_ENV, "abc123:0")
    assert records.git_commit() == {"commit": "abc123", "dirty": False}
    monkeypatch.setenv(records.RUN_COMMIT_ENV, "abc123:1")
    assert records.git_commit()["dirty"] is True
    monkeypatch.setenv(records.RUN_COMMIT_ENV, "abc123:?")
    assert records.git_commit()["dirty"] is None


def test_seed_everything_repeats_python_numpy_and_torch_draws():
    import random

    import numpy as np
    import torch

    def draws():
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    records.seed_everything(3)
    first = draws()
    records.seed_everything(3)
    assert draws() == first
    records.seed_everything(4)
    assert all(a != b for a, b in zip(draws(), first))


def test_seed_everything_leaves_every_generator_as_transformers_set_seed_does():
    """The same generator states as the Trainer's own seeding, which it replaces outside training."""
    import random

    import numpy as np
    import torch
    from transformers import set_seed

    def states():
        np_state = np.random.get_state()
        return random.getstate(), (np_state[0], np_state[1].tolist(), *np_state[2:]), torch.get_rng_state()

    for seed in (0, 7, 2**31 - 1):
        set_seed(seed)
        theirs = states()
        random.seed(seed + 1), np.random.seed(seed + 1), torch.manual_seed(seed + 1)  # moved away in between
        records.seed_everything(seed)
        ours = states()
        assert ours[:2] == theirs[:2] and torch.equal(ours[2], theirs[2]), seed


def test_importing_records_does_not_load_transformers():
    import subprocess
    import sys

    code = "import sys; from frag_utils import records; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_derived_provenance_holds_record_hashes_and_commits_not_the_machine(tmp_path, monkeypatch):
    import hashlib

    from frag_utils import paths

    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    rec = tmp_path / "runs" / "05_unlearn" / "r1" / "results.json"
    records.write_json(rec, {"x": 1}, records.provenance("05_unlearn", {"a": 1}))
    prov = {**records.derived_provenance("09_figures", {"profile": "p"}),
            "source_runs": ["05_unlearn/r1", "05_unlearn/gone"]}
    table = pd.DataFrame({"a": [1.0]})
    records.write_table(table, tmp_path / "figs" / "t", prov)
    first = (tmp_path / "figs" / "t.provenance.json").read_text()
    written = json.loads(first)["provenance"]
    assert written["source_runs"] == {"05_unlearn/r1": hashlib.sha256(rec.read_bytes()).hexdigest(),
                                      "05_unlearn/gone": None}
    assert written["record_commits"] == [json.loads(rec.read_text())["provenance"]["git"]["commit"] or "unknown"]
    assert not {"environment", "written_at", "git"} & set(written)
    records.write_table(table, tmp_path / "figs" / "t", prov)  # regenerated: the same bytes
    assert (tmp_path / "figs" / "t.provenance.json").read_text() == first
    records.write_json(rec, {"x": 2}, records.provenance("05_unlearn", {"a": 1}))  # a changed record shows
    records.write_table(table, tmp_path / "figs" / "t", prov)
    assert (tmp_path / "figs" / "t.provenance.json").read_text() != first
