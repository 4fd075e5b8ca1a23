import json
import math
import os
import subprocess
import sys

import pytest
import torch

from frag_utils import calibration, cli, data, models, paths, pruning, runs
from frag_utils.calibration import CalibConfig

from test_pruning import check_frp_rows, released_sp_by_hand
from test_runs import fake_grid  # noqa: F401  (a fixture: a small grid run by a fake papermill)


def _frag(*args):
    return subprocess.run([sys.executable, "-m", "frag_utils", *args], capture_output=True, text=True,
                          cwd=paths.REPO_ROOT, timeout=600, env={**__import__("os").environ, "FRAG_PROGRESS": "0"})


def test_eval_prints_es_and_utility_as_json():
    out = _frag("eval", "--model", "tiny", "--data", "synthetic", "--split", "forget10", "--limit", "2",
                "--utility-limit", "2", "--max-new-tokens", "4", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["n_forget"] == 2 and 0 <= res["es"] <= 1 and 0 <= res["model_utility"] <= 1
    assert len([k for k in res if "/" in k]) == 9


def test_eval_bad_input_is_one_clear_line():
    out = _frag("eval", "--model", "tiny", "--split", "retain90")
    assert out.returncode == 2 and "must be a forget split" in out.stderr and "Traceback" not in out.stderr
    out = _frag("eval", "--model", "./missing_dir", "--split", "forget10")
    assert out.returncode == 2 and "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_run_refuses_unknown_parameter():
    out = _frag("run", "01_data", "-p", "data_sauce", "synthetic")
    assert out.returncode == 2 and "Unknown parameter(s) ['data_sauce']" in out.stderr


def _prune(tmp_path, *args):
    """``frag prune`` with its calibration cache in ``tmp_path`` (the embedded model copy shared: conftest)."""
    return subprocess.run([sys.executable, "-m", "frag_utils", "prune", *args], capture_output=True, text=True,
                          cwd=paths.REPO_ROOT, timeout=600,
                          env={**os.environ, "FRAG_PROGRESS": "0", "FRAG_CACHE_DIR": str(tmp_path)})


def test_prune_frp_writes_checkpoint_and_record_that_match(tmp_path, tiny, tokenizer):
    out_dir = tmp_path / "frp"
    out = _prune(tmp_path, "--model", "tiny", "--data", "synthetic", "--forget-split", "forget10",
                 "--retain-split", "retain90", "--method", "frp", "--sparsity", "0.1", "--beta", "0.05",
                 "--variant", "eq6", "--lam", "0.5", "--n-calib", "400", "--max-len", "32", "--out", str(out_dir))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    # the synthetic splits hold fewer than 400 records: all are used, and the record says so
    assert summary["n_forget_used"] == 30 and summary["n_retain_used"] == 270 and summary["calibration"]["n"] == 400
    assert summary["method"] == "frp" and summary["variant"] == "eq6" and summary["lam"] == 0.5
    assert models.is_checkpoint(out_dir)
    record = models.load_record(out_dir)
    pruned, _ = models.load_model(str(out_dir))
    w0, w1 = tiny.state_dict(), pruned.state_dict()
    mlp = calibration.select_modules(tiny, "mlp")
    cfg = CalibConfig(n=400, max_len=32)
    xf = calibration.activation_norms(tiny, tokenizer, data.load_split("synthetic", "forget10"), mlp, cfg)
    xr = calibration.activation_norms(tiny, tokenizer, data.load_split("synthetic", "retain90"), mlp, cfg)
    assert sorted(record["achieved"]) == sorted(mlp)
    for name, m in mlp.items():
        k = math.floor(0.1 * m.in_features)
        key = f"{name}.weight"
        assert pruning.zeroed_per_row(w0[key], w1[key]) == {"min": k, "max": k, "d_in": m.in_features,
                                                            "other_changes": 0}
        assert record["achieved"][name]["pruned_per_row"] == record["achieved"][name]["requested_per_row"] == k
        assert record["achieved"][name]["row_sparsity"] == k / m.in_features
        check_frp_rows(w0[key], w1[key], xf[name], xr[name], 0.1, 0.05, 0.5)  # the top of S, computed directly
    assert all(torch.equal(w0[k], w1[k]) for k in w0 if ".mlp." not in k)
    assert record["provenance"]["params"]["model"] == "tiny" and record["data"] == "synthetic"


def test_prune_sp_removes_the_neurons_its_record_names(tmp_path, tiny, tokenizer):
    out_dir = tmp_path / "sp"
    out = _prune(tmp_path, "--model", "tiny", "--method", "sp", "--variant", "released", "--n-calib", "6",
                 "--max-len", "40", "--out", str(out_dir))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["sparsity"] == 0.05 and summary["n_removed"] == summary["requested"] == math.floor(0.05 * 256)
    record = models.load_record(out_dir)
    _, expected, _ = released_sp_by_hand(tiny, tokenizer, data.load_split("synthetic", "forget10"),
                                         data.load_split("synthetic", "retain90"), 0.05, n=6, max_len=40)
    assert record["removed"] == expected and record["variant"] == "released"
    pruned, _ = models.load_model(str(out_dir))
    assert pruning.removed_neurons(pruning.mlp_blocks(pruned)) == expected
    w0, w1 = tiny.state_dict(), pruned.state_dict()
    assert sum(int((w0[k] != w1[k]).sum()) for k in w0) == sum(len(v) for v in expected.values()) * 3 * 64


def test_prune_bad_input_is_one_clear_line(tmp_path, capsys):
    base = ["prune", "--model", "tiny", "--out", str(tmp_path / "o")]
    for args, msg in ((["--method", "frp", "--sparsity", "1.5"], "--sparsity: must be in (0, 1)"),
                      (["--method", "frp", "--sparsity", "abc"], "'abc' is not a number"),
                      (["--method", "wanda"], "invalid choice: 'wanda'"),
                      (["--method", "sp", "--n-calib", "0"], "--n-calib: must be at least 1"),
                      (["--method", "frp", "--variant", "down_in"],
                       "Variant 'down_in' does not belong to method 'frp'"),
                      (["--method", "frp", "--sparsity", "0.001"], "prunes no entry of rows of width 64"),
                      (["--method", "sp", "--forget-split", "forget11"], "Unknown config 'forget11'"),
                      (["--method", "sp", "--model", "./missing_dir"], "does not exist"),
                      (["--method", "frp", "--device", "gpu"], "'gpu' is not a device"),
                      (["--method", "frp", "--retain-split", "forget10"], "forget split must be a forgetXX")):
        try:  # in process: argparse exits with 2, library errors return 2; any other exception fails here
            code = cli.main([*base, *args])
        except SystemExit as exit_:
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2 and msg in err and err.startswith(("usage: frag prune", "frag prune: error:")), (args, err)
    assert not (tmp_path / "o").exists()


def _main(*args) -> int:
    try:
        return cli.main(list(args))
    except SystemExit as exit_:  # argparse
        return exit_.code


@pytest.fixture()
def in_process(fake_grid, tmp_path, monkeypatch):
    """``frag run`` and ``frag reproduce`` with the workflow's jobs run here, in plan order (the
    workflow itself is tested in test_runs.py); returns the configs they were given."""
    from test_runs import _make

    given = []

    def workflow(config, specs=None, **kw):
        given.append({**config, **kw})
        _make(select=config.get("select"), force=bool(config.get("force")), chosen=specs,
              specs=tmp_path / "specs.json" if specs else None)

    monkeypatch.setattr(cli, "workflow", workflow)
    return given


def test_run_of_one_notebook_remakes_the_checkpoints_it_reads_as_reproduce_does(in_process, fake_grid, tmp_path,
                                                                                capsys):
    import shutil

    from test_runs import _make

    _make(chosen=[s for s in runs.grid("t") if s.notebook.stem != "06_attacks"])
    shutil.rmtree(tmp_path / "cache")  # a fresh clone: records committed, cache empty
    fake_grid.update(calls=[])
    capsys.readouterr()
    # the README's rerun recipe: the profile's attacks at another learning rate
    assert _main("run", "06_attacks", "-f", "t/06_attacks.yaml", "-p", "lr", "1e-4") == 0
    assert sorted(fake_grid["calls"]) == [  # each model of notebook 02 made alone, for its reader
        "02_target_and_gold/t@gold", "02_target_and_gold/t@target", "05_unlearn/t__method=npo",
        "06_attacks/t__lr=0.0001__unlearned_run=t__method=gold", "06_attacks/t__lr=0.0001__unlearned_run=t__method=npo"]
    out = capsys.readouterr().out
    assert "05_unlearn/t__method=npo: done (" in out and "its checkpoint is needed and not current" in out
    assert "records: " in out and "for the 2 runs of t/06_attacks.yaml" in out
    fake_grid.update(calls=[])
    assert _main("run", "06_attacks", "-f", "t/06_attacks.yaml", "-p", "lr", "1e-4") == 0
    assert fake_grid["calls"] == []
    # one run of the file: --select keeps the runs whose name holds every text given
    assert _main("run", "06_attacks", "-f", "t/06_attacks.yaml", "-p", "lr", "2e-4", "--select", "lr=0.0002",
                 "--select", "method=gold", "--jobs", "2") == 0
    assert fake_grid["calls"] == ["06_attacks/t__lr=0.0002__unlearned_run=t__method=gold"]
    assert in_process[-1] == {"force": 0, "kernels": None, "jobs": 2, "gpus": 0, "extra": []}
    capsys.readouterr()
    assert _main("run", "06_attacks", "-f", "t/06_attacks.yaml", "--select", "method=nope") == 2
    err = capsys.readouterr().err
    assert "--select 'method=nope' matches none of the 2 run(s) planned" in err and "Traceback" not in err
    assert _main("run", "06_attacks", "-p", "profile", "t", "-p", "unlearned_run", "t__method=nope") == 2
    err = capsys.readouterr().err.strip()  # refused before the workflow starts
    assert "reads from 05_unlearn/t__method=nope, which has no record" in err and "\n" not in err


def test_verify_passes_within_tolerance_and_fails_outside_it_in_one_line(fake_grid, tmp_path, capsys):
    runs.execute(runs.grid("t")[0])
    capsys.readouterr()
    assert _main("verify", "02_target_and_gold/t", "--workdir", str(tmp_path / "v1")) == 0
    assert "02_target_and_gold/t: remade, bit-identical to its record" in capsys.readouterr().out
    fake_grid["target_es"] = 0.8  # another machine's training
    assert _main("verify", "02_target_and_gold/t", "--workdir", str(tmp_path / "v2")) == 2
    captured = capsys.readouterr()
    assert "OUTSIDE" in captured.out and "/evaluation/target/es" in captured.out
    err = captured.err.strip()
    assert err.startswith("frag verify: error: 02_target_and_gold/t: remade outside the tolerances") and "\n" not in err
    assert json.loads((paths.RUNS_DIR / "02_target_and_gold" / "t" / paths.RESULTS_FILE).read_text())[
        "results"]["evaluation"]["target"]["es"] == 0.9  # the record is untouched


def test_a_failed_job_is_one_paragraph_and_writes_no_stamp(fake_grid, tmp_path, capsys):
    fake_grid["fail_at"] = 1
    stamp = tmp_path / "stamps" / "x.done"
    assert _main("run-one", "02_target_and_gold/t", "--stamp", str(stamp)) == 2
    err = capsys.readouterr().err
    assert err.startswith("frag run-one: error: 02_target_and_gold/t failed in cell [3]: FileNotFoundError")
    assert err.count("\n") == 1 and not stamp.exists() and not (paths.RUNS_DIR / "02_target_and_gold").exists()
    fake_grid["fail_at"] = None
    assert _main("run-one", "02_target_and_gold/t", "--stamp", str(stamp)) == 0
    assert json.loads(stamp.read_text())["status"] == "done"
    assert _main("run-one", "02_target_and_gold/nope") == 2 and "No run '02_target_and_gold/nope'" in \
        capsys.readouterr().err


def test_reproduce_runs_snakemake_with_each_job_its_share_of_the_threads(monkeypatch, capsys):
    import subprocess

    commands = []
    monkeypatch.setattr(subprocess, "call", lambda command: commands.append(command) or len(commands) - 1)
    monkeypatch.setenv("FRAG_THREADS", "4")
    assert _main("reproduce", "--profile", "tiny") == 0
    assert _main("reproduce", "--profile", "paper", "--jobs", "2", "--select", "05_unlearn", "--force",
                 "--", "--profile", "profiles/slurm", "-n") == 2  # the second call "fails"
    one, two = commands
    assert one[1:3] == ["-m", "snakemake"] and one[one.index("--cores") + 1] == "4"
    assert one[one.index("--config") + 1:] == ["profile=tiny", "threads=4"]
    assert two[two.index("--cores") + 1] == "4" and "threads=2" in two and "select=05_unlearn" in two
    assert "force=1" in two and two[-3:] == ["--profile", "profiles/slurm", "-n"]
    assert "frag reproduce: error: snakemake stopped with exit status 1" in capsys.readouterr().err
    commands.clear()
    assert _main("reproduce", "--profile", "tiny", "--kernels", "native") == 0  # every job on this CPU's own path
    assert commands[-1][commands[-1].index("--config") + 1:] == ["profile=tiny", "kernels=native", "threads=4"]
    commands.clear()
    monkeypatch.setattr(subprocess, "call", lambda command: commands.append(command) or 0)
    assert _main("reproduce", "--profile", "paper", "--gpus", "2") == 0  # one job on each GPU
    (three,) = commands
    assert three[three.index("--resources") + 1] == "gpu=2" and "gpus=2" in three and "threads=2" in three


def test_a_job_takes_a_free_gpu_of_the_machine_and_holds_it(monkeypatch, tmp_path):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    first = cli._gpu_slot(2)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    second = cli._gpu_slot(2)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(runs.RunError, match="all 2 GPUs of this machine are held"):
        cli._gpu_slot(2)
    first.close()  # its job ended
    assert cli._gpu_slot(2) is not None and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    second.close()
    assert cli._gpu_slot(2) is None  # a job that already sees its GPU (SLURM) keeps it


def test_reproduce_help_lists_every_profile(capsys):
    assert _main("reproduce", "--help") == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for profile in runs.profiles():
        assert profile in help_text
    assert "smol" in help_text and "paper" in help_text


def test_score_and_eval_of_a_truncated_checkpoint_name_the_file(tmp_path, tokenizer):
    model = models.build_tiny_model(len(tokenizer), seed=0)
    models.save_checkpoint(model, tokenizer, tmp_path / "original")
    models.save_checkpoint(model, tokenizer, tmp_path / "unlearned")
    weights = tmp_path / "unlearned" / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    out = _frag("score", "--original", str(tmp_path / "original"), "--unlearned", str(tmp_path / "unlearned"),
                "--n-calib", "2", "--max-len", "16")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert str(weights) in out.stderr and "truncated or corrupt" in out.stderr
    assert "make reproduce SELECT=" in out.stderr
    with pytest.raises(models.ModelLoadError, match=f"{weights}.*truncated or corrupt"):
        models.load_model(str(tmp_path / "unlearned"))


def test_device_cuda_without_a_gpu_is_one_clear_line_in_every_command(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    commands = (["eval", "--model", "tiny"], ["score", "--original", "tiny", "--unlearned", str(tmp_path)],
                ["prune", "--model", "tiny", "--method", "frp", "--out", str(tmp_path / "o")],
                ["run", "05_unlearn", "-p", "device", "cuda"])
    for command in commands:
        extra = [] if command[0] == "run" else ["--device", "cuda"]
        code = _main(*command, *extra)
        err = capsys.readouterr().err
        assert code == 2 and "no usable CUDA device" in err and "Traceback" not in err, (command, err)
        assert sum("error" in line for line in err.splitlines()) == 1, err  # argparse's usage, then one line


def test_verify_rejudge_of_a_missing_or_tableless_file_is_one_clear_line(tmp_path):
    out = _frag("verify", "02_target_and_gold/smol", "--rejudge", str(tmp_path / "missing.md"))
    assert out.returncode == 2 and "no such file" in out.stderr and "Traceback" not in out.stderr
    (tmp_path / "notes.md").write_text("# no table here\n")
    out = _frag("verify", "02_target_and_gold/smol", "--rejudge", str(tmp_path / "notes.md"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no drift table of 02_target_and_gold/smol" in out.stderr
