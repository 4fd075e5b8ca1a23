"""Training in two processes (DDP over gloo on the CPU, launched by torchrun as a GPU user launches
several GPUs) ends where one process ends at the same effective batch (issue 18)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from frag_utils import data, launch, models, runs

TORCHRUN = Path(sys.executable).with_name("torchrun")


def _qa(split, n):
    return [{"question": r["question"], "answer": r["answer"]} for r in data.load_split("synthetic", split, limit=n)]


def _launch(tmp_path: Path, spec: dict, processes: int) -> tuple[dict, dict]:
    name = f"{spec['stage']}_{spec['config'].get('method', 'ft')}_{processes}"
    spec = {**spec, "work_dir": str(tmp_path / f"work_{name}"), "out": str(tmp_path / f"out_{name}")}
    file = tmp_path / f"{name}.json"
    file.write_text(json.dumps(spec))
    if processes == 1:  # one process: this one (as ``python -m frag_utils.launch``; no start-up to pay)
        with runs.environment(FRAG_PROGRESS="0"):
            assert launch.main([str(file)]) == 0
    else:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "FRAG_PROGRESS": "0"}
        cmd = [str(TORCHRUN), "--nproc_per_node", str(processes), "-m", "frag_utils.launch", str(file)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((Path(spec["out"]) / "summary.json").read_text())
    return load_file(str(Path(spec["out"]) / "model.safetensors")), summary


def _relative_difference(a: dict, b: dict, start: dict) -> float:
    """|a - b| over |a - start|: how far two updates from ``start`` are apart, relative to one."""
    num = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in a)
    den = sum(float((a[k].double() - start[k].double()).pow(2).sum()) for k in a if k in start)
    return (num / den) ** 0.5


@pytest.fixture(scope="module")
def start():
    return models.build_tiny_model(len(models.load_tokenizer(models.SMOLLM2)), seed=0).state_dict()


@pytest.mark.parametrize("stage,config", [
    ("finetune", {"epochs": 1, "lr": 1e-3, "warmup_epochs": 0.5}),
    ("unlearn", {"method": "npo", "epochs": 1, "lr": 1e-3, "warmup_epochs": 0.5}),
    ("unlearn", {"method": "rmu", "epochs": 1, "lr": 1e-3, "warmup_epochs": 0.5, "rmu_steering_coeff": 20.0}),
])
def test_two_processes_end_where_one_does_at_the_same_effective_batch(tmp_path, start, stage, config):
    base = {"stage": stage, "model": "tiny", "seed": 0, "records": _qa("forget10", 8), "forget": _qa("forget10", 8),
            "retain": _qa("retain90", 8)}
    cfg = {**config, "grad_accum": 1, "device": "cpu", "seed": 0, "max_len": 64}
    one, s1 = _launch(tmp_path, {**base, "config": {**cfg, "batch_size": 4}}, 1)
    two, s2 = _launch(tmp_path, {**base, "config": {**cfg, "batch_size": 2}}, 2)
    assert (s1["world_size"], s2["world_size"]) == (1, 2)
    assert s1["global_steps"] == s2["global_steps"] == 2  # 8 examples, 4 per step either way; warmup 1 step
    # fine-tuning's loss is normalised over the whole batch's answer tokens, as one process does; the
    # unlearning losses average each process's own tokens first, which moves the update a little
    assert _relative_difference(one, two, start) < (1e-5 if stage == "finetune" else 2e-2), stage
    assert any(not torch.equal(one[k], start[k]) for k in one if k in start)  # it trained at all
