"""Multiple-choice accuracy through lm-eval: the paper's second evaluation family (Table 2).

Forgetting is measured as 4-way multiple-choice accuracy on the forget side and utility as
accuracy on general knowledge, both scored by ``lm-eval`` (the log-likelihood of each option
after the question, as lm-eval scores MMLU), never by a hand-written scorer.

* Embedded tasks, offline: the task definition is ``lm_eval_tasks/frag_mc.yaml`` in this
  package; each set is written to a JSON file and handed to lm-eval's ``json`` loader. Sets:
  ``forget`` (``<forget_split>_mc``), ``retain`` (``retain_mc``), and the utility stand-ins for
  MMLU, ``real_authors`` and ``world_facts``. Any TOFU-format source works: where a source has
  no ``_mc`` config it is derived from the ``_perturbed`` one (:func:`frag_utils.data.mc_from_perturbed`).
* Hub tasks, for users with network access: ``wmdp_cyber`` (forget) and ``mmlu`` (utility,
  5-shot), lm-eval's own definitions (``lm_eval_tasks/hub_tasks.yaml`` holds the settings).

Chance is 0.25 for every set (four options).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from . import data

TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"
UTILITY_SETS = ("real_authors", "world_facts")


class MCError(RuntimeError):
    """A multiple-choice evaluation that cannot run, with what to do about it."""


def local_sets(forget_split: str) -> dict[str, str]:
    """Set name -> data config of the embedded tasks."""
    data.matching_retain(forget_split)  # validates the split name
    return {"forget": f"{forget_split}_mc", "retain": "retain_mc", "real_authors": "real_authors",
            "world_facts": "world_facts"}


def task_config(task: str, json_file: str | Path) -> dict:
    """The lm-eval task config of one embedded set: ``frag_mc.yaml`` with its name and data file."""
    config = yaml.safe_load((TASKS_DIR / "frag_mc.yaml").read_text())
    config["task"] = task
    config["dataset_kwargs"] = {"data_files": {"test": str(json_file)}}
    return config


def hub_task_settings() -> dict[str, dict]:
    """``{task: {"num_fewshot": k, "role": "forget"|"utility"}}`` of the paper's hub tasks."""
    return yaml.safe_load((TASKS_DIR / "hub_tasks.yaml").read_text())


def as_lm(model: Any, tokenizer: Any = None, batch_size: int = 8) -> Any:
    """``model`` as an lm-eval ``LM``: an ``LM`` is returned as it is, a transformers model is
    wrapped in ``HFLM`` on its own device."""
    from lm_eval.api.model import LM

    if isinstance(model, LM):
        return model
    if tokenizer is None:
        raise MCError("A transformers model needs its tokenizer to be scored by lm-eval.")
    from lm_eval.models.huggingface import HFLM

    device = str(next(model.parameters()).device)
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=device)


def _run(lm: Any, tasks: list, num_fewshot: int, limit: int | None) -> dict:
    """lm-eval's ``simple_evaluate``. Tasks given as configs (the embedded sets) need no index of lm-eval's
    own task files, which a default ``TaskManager`` builds first (about 15 s on a 2-core Zen 3)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from .progress import quiet_transformers

    by_config = all(isinstance(t, dict) for t in tasks)
    with quiet_transformers():
        return simple_evaluate(lm, tasks=tasks, num_fewshot=num_fewshot, limit=limit, log_samples=True,
                               bootstrap_iters=0, random_seed=0, numpy_random_seed=0, torch_random_seed=0,
                               fewshot_random_seed=0,
                               task_manager=TaskManager(include_defaults=False) if by_config else None)


def evaluate_local(model: Any, tokenizer: Any = None, data_source: str = data.SYNTHETIC,
                   forget_split: str = "forget10", num_fewshot: int = 0, batch_size: int = 8,
                   limit: int | None = None, sets: tuple[str, ...] | None = None) -> dict:
    """Accuracy on the embedded multiple-choice sets, through lm-eval.

    Args:
        model: a transformers causal LM (with ``tokenizer``) or any lm-eval ``LM``.
        num_fewshot: examples from the same set before each question (0: zero-shot).
        limit: first N items of each set.
        sets: which of ``forget``, ``retain``, ``real_authors``, ``world_facts`` (default: all).
    Returns:
        ``{"acc": {set: accuracy}, "utility_acc": mean over real_authors and world_facts (if
        scored), "per_example": {set: [0/1 per item]}, "n": {set: items}}``.
    """
    names = local_sets(forget_split)
    chosen = sets or tuple(names)
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise MCError(f"Unknown multiple-choice set(s) {unknown}; choose from {list(names)}.")
    lm = as_lm(model, tokenizer, batch_size)
    with tempfile.TemporaryDirectory(prefix="frag_mc_") as tmp:
        tasks = []
        for name in chosen:
            file = Path(tmp) / f"{name}.json"
            file.write_text(json.dumps(data.load_split(data_source, names[name], limit)))
            tasks.append(task_config(f"frag_mc_{name}", file))
        out = _run(lm, tasks, num_fewshot, None)
    acc = {name: float(out["results"][f"frag_mc_{name}"]["acc,none"]) for name in chosen}
    per_example = {name: [float(s["acc"]) for s in sorted(out["samples"][f"frag_mc_{name}"], key=lambda s: s["doc_id"])]
                   for name in chosen}
    utility = [acc[s] for s in UTILITY_SETS if s in acc]
    return {"acc": acc, "utility_acc": sum(utility) / len(utility) if utility else float("nan"),
            "per_example": per_example, "n": {k: len(v) for k, v in per_example.items()},
            "num_fewshot": num_fewshot}


def evaluate_hub(model: Any, tokenizer: Any = None, tasks: dict[str, dict] | None = None, batch_size: int = 8,
                 limit: int | None = None) -> dict:
    """Accuracy on lm-eval's hub tasks (default: WMDP-cyber 0-shot and MMLU 5-shot, the paper's).

    Raises:
        MCError: a task could not be loaded (no network, or an unknown task name).
    """
    tasks = tasks or hub_task_settings()
    lm = as_lm(model, tokenizer, batch_size)
    acc = {}
    for name, settings in tasks.items():
        try:
            out = _run(lm, [name], int(settings.get("num_fewshot", 0)), limit)
        except Exception as err:  # lm-eval raises many kinds when a dataset cannot be fetched
            raise MCError(f"lm-eval could not run task {name!r} ({err.__class__.__name__}: {str(err)[:200]}). "
                          "Hub tasks need network access to the Hugging Face hub; offline, use "
                          "evaluate_local on the embedded sets.") from None
        # a group task (mmlu) reports its aggregate under its own name
        acc[name] = float(out["results"][name]["acc,none"])
    return {"acc": acc, "tasks": tasks}
