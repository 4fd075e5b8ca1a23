"""One training stage as a program, so that ``accelerate launch`` (or ``torchrun``) can run it in
several processes: ``python -m frag_utils.launch SPEC.json``.

``SPEC.json`` holds ``stage`` (``finetune`` or ``unlearn``), ``model`` (a checkpoint directory, or
``tiny`` with ``seed``), the records (``records`` for fine-tuning; ``forget`` and ``retain`` for
unlearning), ``config`` (the fields of :class:`~frag_utils.train.TrainConfig` or
:class:`~frag_utils.unlearn.UnlearnConfig`), ``work_dir`` and ``out``. Every process trains
(the ``Trainer`` shards the batches and averages the gradients: DDP, gloo on the CPU, NCCL on
GPUs); only the main process saves the checkpoint and ``summary.json`` in ``out``.

Two processes with ``batch_size`` b each make the steps one process with 2b makes; the update
agrees with it up to how the loss is normalised (a mean over each process's answer tokens, then
over processes) and summation order: ``tests/test_launch.py`` bounds the difference.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def is_main_process() -> bool:
    """Rank 0 of a launch, or a process on its own."""
    return int(os.environ.get("RANK", "0")) == 0


def run(spec: dict) -> dict:
    """Run the stage ``spec`` describes in this process (one of a launch's processes)."""
    from . import models, train, unlearn

    model, tokenizer = models.load_model(spec["model"], seed=spec.get("seed", 0))
    work = Path(spec["work_dir"])
    if spec["stage"] == "finetune":
        summary = train.finetune(model, tokenizer, spec["records"], train.TrainConfig(**spec["config"]), work)
    elif spec["stage"] == "unlearn":
        summary = unlearn.unlearn(model, tokenizer, spec["forget"], spec.get("retain") or [],
                                  unlearn.UnlearnConfig(**spec["config"]), work)
    else:
        raise ValueError(f"stage must be finetune or unlearn, got {spec['stage']!r}")
    if is_main_process():
        record = {"stage": spec["stage"], "world_size": train.world_size()}
        models.save_checkpoint(model, tokenizer, spec["out"], record)
        (Path(spec["out"]) / "summary.json").write_text(json.dumps(
            {**{k: v for k, v in summary.items() if k != "logged_terms"}, "world_size": train.world_size()},
            default=str, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_file():
        print("usage: python -m frag_utils.launch SPEC.json (see the module's docstring)", file=sys.stderr)
        return 2
    run(json.loads(Path(args[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
