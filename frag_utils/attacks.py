"""Relearning attacks: fine-tune an unlearned model briefly and see how much comes back.

The paper's threat model: the released checkpoint is fine-tuned for one epoch (AdamW, lr 1e-5,
weight decay 0.01, effective batch 32, seed 42) on

* ``retain``: the retain split matching the forget split (``retain90`` for ``forget10``);
* ``forget``: the forget split itself;
* ``forget_retain``: their union (TOFU's ``full``);

and forget ES before and after is compared (ΔES = ES_post - ES_pre). The appendix variants are
parameters of the same function: the learning rate, the optimizer (:data:`OPTIMIZERS`), the attack
data (also ``paraphrased_forget``: the forget split's paraphrased questions and answers;
``mix50``: the forget split plus as many retain records drawn at random; ``forget_general``: the
forget split plus the ``real_authors`` and ``world_facts`` question/answer sets), the horizon
(epochs, evaluated after each epoch of one run) and a LoRA attack (``lora_rank > 0``, through
peft), which the paper does not test.

The reference schedule is OpenUnlearning's ``experiment=finetune/tofu/default`` as the authors'
``scripts/attack.sh`` runs it: one epoch, lr 1e-5, ``adamw_torch``, weight decay 0.01, effective
batch 32, seed 42, and ``warmup_epochs: 1.0``, counted as OpenUnlearning counts it
(:func:`frag_utils.train.warmup_steps`: ``len(data) // 32`` steps), so an attack on a multiple of
32 records is linear warmup throughout (step k of T applies ``lr k/T``), one with a last partial
batch applies the peak rate at that step, and one on fewer than 32 records is a single step at the
peak. What the optimizer actually did is recorded (:func:`schedule_summary`: the rate of every
step read from the optimizer, its peak and mean, the non-padding tokens trained on) and an attack
of fewer than :data:`FEW_STEPS` steps is flagged. An attack that leaves the weights bit-identical
(exactly 32 records: one step of warmup, at lr 0) is an error, never a silent no-op.

Training goes through :func:`frag_utils.train.make_trainer` (Hugging Face ``Trainer``): progress
bar, logging, seeding, several GPUs through ``accelerate``, and resumption from the newest saved
state in the work folder; the evaluation after each epoch is kept in that folder too, so a
resumed run reports every epoch.
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn
from transformers import TrainerCallback

from . import cache, data, train
from .records import atomic_write_text

ATTACK_DATA = ("retain", "forget", "forget_retain", "paraphrased_forget", "mix50", "forget_general")
# Our name -> (TrainingArguments.optim, optim_args).
OPTIMIZERS = {"adamw": ("adamw_torch", None), "sgd": ("sgd", None), "sgd_momentum": ("sgd", "momentum=0.9"),
              "adafactor": ("adafactor", None), "adagrad": ("adagrad", None)}
LORA_DEFAULT_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
SPEC_FILE = "attack_spec.json"
EPOCHS_FILE = "epoch_evaluations.json"
STEPS_FILE = "optimizer_steps.json"
# An attack of fewer optimizer steps is flagged: with warmup over the whole attack (the reference
# schedule) its first step applies lr 0 and most of the others a fraction of the configured peak.
FEW_STEPS = 5


@dataclass(frozen=True)
class AttackConfig:
    """One relearning attack. Defaults: the paper's setting (OpenUnlearning's fine-tuning recipe,
    one epoch, including its one-epoch linear warmup)."""

    data: str = "forget_retain"  # one of ATTACK_DATA
    epochs: int = 1
    lr: float = 1e-5
    optimizer: str = "adamw"  # one of OPTIMIZERS
    batch_size: int = 8
    grad_accum: int = 4  # effective batch 32
    weight_decay: float = 0.01
    warmup_epochs: float = 1.0  # reference: one epoch (train.warmup_steps: len(data) // effective batch steps)
    scheduler: str = "linear"
    bf16: bool = False  # bf16 autocast over the stored weights (GPU; refused on the CPU, which computes in fp32)
    weights: str = "fp32"  # storage: fp32 | bf16 (rounded after every step, as OpenUnlearning trains)
    seed: int = 42
    max_len: int = 256
    chat: bool = True
    lora_rank: int = 0  # 0: full fine-tuning; > 0: a LoRA attack of this rank
    lora_alpha: float = 0.0  # LoRA scaling numerator; 0 means 2 * rank
    lora_targets: str = LORA_DEFAULT_TARGETS  # comma-separated module names LoRA adapts
    save_steps: int = 0  # save resumable state every N optimizer steps (0: at each epoch end)
    device: str = "auto"  # auto | cpu | cuda: where it trains (left out of as_dict)

    def __post_init__(self) -> None:
        problems = []
        if self.data not in ATTACK_DATA:
            problems.append(f"data must be one of {ATTACK_DATA}, got {self.data!r}")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"optimizer must be one of {tuple(OPTIMIZERS)}, got {self.optimizer!r}")
        if not (isinstance(self.epochs, int) and self.epochs >= 1):
            problems.append(f"epochs must be a whole number >= 1 (ES is reported per epoch), got {self.epochs!r}")
        if self.lora_rank < 0 or self.lora_alpha < 0:
            problems.append(f"lora_rank and lora_alpha must be >= 0, got {self.lora_rank}, {self.lora_alpha}")
        if self.lora_rank > 0 and not [t for t in self.lora_targets.split(",") if t.strip()]:
            problems.append("lora_targets names no module")
        if self.save_steps < 0:
            problems.append(f"save_steps must be >= 0, got {self.save_steps}")
        if problems:
            raise ValueError("Invalid attack settings: " + "; ".join(problems) + ".")
        self.train_config()  # the shared checks (lr > 0, warmup within the run, ...)

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "device"}

    def train_config(self) -> train.TrainConfig:
        return train.TrainConfig(
            epochs=float(self.epochs), lr=self.lr, batch_size=self.batch_size, grad_accum=self.grad_accum,
            weight_decay=self.weight_decay, warmup_epochs=self.warmup_epochs, scheduler=self.scheduler,
            optimizer=OPTIMIZERS[self.optimizer][0], bf16=self.bf16, seed=self.seed, max_len=self.max_len,
            chat=self.chat, weights=self.weights, device=self.device)


def _qa(records: Sequence[dict]) -> list[dict]:
    return [{"question": r["question"], "answer": r["answer"]} for r in records]


def attack_records(source: str, forget_split: str, which: str, seed: int = 42) -> list[dict]:
    """The question/answer records an attack fine-tunes on.

    Args:
        source: a data source of :func:`frag_utils.data.load_split`.
        forget_split: ``forget01`` | ``forget05`` | ``forget10``; the retain side is the matching split.
        which: one of :data:`ATTACK_DATA`.
        seed: draws the retain half of ``mix50``.
    Raises:
        ValueError: ``which`` is not an attack set; DataError: the data cannot be loaded.
    """
    if which not in ATTACK_DATA:
        raise ValueError(f"Unknown attack data {which!r}; choose one of {ATTACK_DATA}.")
    forget = _qa(data.load_split(source, forget_split))
    if which == "forget":
        return forget
    if which == "paraphrased_forget":
        return [{"question": r["paraphrased_question"], "answer": r["paraphrased_answer"]}
                for r in data.load_split(source, f"{forget_split}_perturbed")]
    if which == "forget_general":
        return forget + _qa(data.load_split(source, "real_authors")) + _qa(data.load_split(source, "world_facts"))
    retain = _qa(data.load_split(source, data.matching_retain(forget_split)))
    if which == "retain":
        return retain
    if which == "forget_retain":
        return forget + retain
    if len(retain) < len(forget):  # mix50
        raise ValueError(f"mix50 needs at least as many retain records as forget records "
                         f"({len(retain)} < {len(forget)}).")
    return forget + random.Random(seed).sample(retain, len(forget))


class _EpochEvaluation(TrainerCallback):
    """Evaluates the model at the end of chosen epochs; results are kept in ``file`` (resumable).

    With saves every N steps, the save at an evaluated epoch's last step would come before the
    evaluation (``on_step_end`` runs before ``on_epoch_end``): a run killed during the evaluation
    would resume past the epoch and never evaluate it. That save is postponed until the
    evaluation is written.
    """

    def __init__(self, evaluate: Callable[[nn.Module], dict], epochs: set[int], file: Path, steps_per_epoch: int):
        self.evaluate, self.epochs, self.file, self.steps_per_epoch = evaluate, epochs, file, steps_per_epoch
        self.results: dict[str, dict] = json.loads(file.read_text()) if file.is_file() else {}

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step % self.steps_per_epoch == 0 and step // self.steps_per_epoch in self.epochs:
            control.should_save = False  # saved after the evaluation, in on_epoch_end
        return control

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        epoch = int(round(state.epoch or 0))
        if epoch in self.epochs:
            was_training = model.training
            model.eval()
            start = time.time()
            with train.plain_forward(model):  # fp32, as the evaluation before the attack
                self.results[str(epoch)] = {**self.evaluate(model), "eval_seconds": time.time() - start}
            model.train(was_training)
            atomic_write_text(self.file, json.dumps(self.results, sort_keys=True, default=str))
            control.should_save = True
        return control


class _StepRecord(TrainerCallback):
    """The learning rate each optimizer step applied, read from the optimizer as it steps, and the
    non-padding tokens trained on by the end of that step (the trainer's count); kept in ``file``
    so that a resumed run reports every step."""

    def __init__(self, file: Path):
        self.file = file
        self.steps: list[dict] = []

    def on_train_begin(self, args, state, control, **kwargs):
        kept = json.loads(self.file.read_text()) if self.file.is_file() else []
        self.steps = [s for s in kept if s["step"] < state.global_step]  # the resumed run redoes the rest

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        # after optimizer.step(), before the scheduler moves on: the rate this step used
        self.steps.append({"step": state.global_step, "lr": optimizer.param_groups[0]["lr"]})

    def on_step_end(self, args, state, control, **kwargs):
        self.steps[-1]["tokens_seen"] = state.num_input_tokens_seen
        atomic_write_text(self.file, json.dumps(self.steps))


def weights_digest(model: nn.Module) -> str:
    """sha256 over the name and raw bytes of every parameter of ``model``, in order."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, p in model.named_parameters():
            digest.update(name.encode())
            digest.update(p.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def schedule_summary(steps: list[dict], global_steps: int, lr: float) -> dict:
    """What an attack's optimizer did, from its per-step record: the learning rate of every step, its
    peak and mean, the tokens trained on, and a warning when it took fewer than :data:`FEW_STEPS`
    steps (None otherwise). Rates are None when the record does not hold every step (a run resumed
    from state saved before steps were recorded)."""
    complete = [s["step"] for s in steps] == list(range(global_steps))
    lrs = [s["lr"] for s in steps] if complete else None
    peak, mean = (max(lrs), sum(lrs) / len(lrs)) if lrs else (None, None)
    warning = None
    if global_steps < FEW_STEPS:
        warning = (f"only {global_steps} optimizer step(s), fewer than {FEW_STEPS}: the attack barely trains"
                   + (f" (learning rates applied {[f'{x:.3g}' for x in lrs]}, configured peak {lr:g})" if lrs else ""))
    return {"lr_per_step": lrs, "lr_peak": peak, "lr_mean": mean,
            "tokens_seen": steps[-1].get("tokens_seen") if complete and steps else 0,
            "few_steps": global_steps < FEW_STEPS, "few_steps_warning": warning}


def _with_lora(model: nn.Module, config: AttackConfig) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    targets = [t.strip() for t in config.lora_targets.split(",") if t.strip()]
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in targets if t not in present]
    if missing:
        raise ValueError(f"lora_targets {missing} name no module of this model; modules include "
                         f"{sorted(present & set(LORA_DEFAULT_TARGETS.split(',')))}.")
    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha or 2 * config.lora_rank,
                      target_modules=targets, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def relearn(model: nn.Module, tokenizer: Any, records: Sequence[dict], config: AttackConfig,
            work_dir: str | Path, evaluate: Callable[[nn.Module], dict] | None = None,
            eval_epochs: Sequence[int] | None = None, model_id: str = "", callbacks: list | None = None,
            replace_other: bool = False, eval_key: dict | None = None) -> tuple[nn.Module, dict]:
    """Fine-tune ``model`` on ``records`` as an attacker would.

    Args:
        model: the unlearned model (updated in place for full fine-tuning).
        records: question/answer records (:func:`attack_records`).
        work_dir: resumable state and the per-epoch evaluations; delete it when the run is recorded.
        evaluate: called on the model after each epoch in ``eval_epochs`` (default: every epoch);
            its results are returned under ``epochs``.
        model_id: the identity of the attacked weights, part of the work folder's guard.
        callbacks: extra ``TrainerCallback``s.
        replace_other: a work folder left by another attack (other settings, data or model) is
            emptied instead of refused.
        eval_key: what determines ``evaluate``'s results (its settings); part of the work folder's
            guard, so evaluations kept from an interrupted run are reused only under the same settings.
    Returns:
        ``(model, summary)``: the attacked model (LoRA adapters merged into the weights) and
        ``train_seconds`` (including the evaluations; each evaluation's own ``eval_seconds`` is in
        it), ``global_steps`` (optimizer steps taken), ``steps_per_epoch``, ``logged_losses``,
        ``resumed_from``, ``n_examples``, ``config``, ``epochs`` ({epoch: evaluation}), and what the
        optimizer did (:func:`schedule_summary`): ``lr_per_step``, ``lr_peak``, ``lr_mean``,
        ``tokens_seen``, ``few_steps``, ``few_steps_warning``.
    Raises:
        ValueError: empty ``records``, LoRA targets missing from the model, ``eval_epochs``
            outside ``1..epochs``, or a work folder of another attack.
        RuntimeError: the attacked weights are bit-identical to the weights it started from.
    """
    if not records:
        raise ValueError("The attack set is empty: nothing to fine-tune on.")
    wanted = set(range(1, config.epochs + 1)) if eval_epochs is None else {int(e) for e in eval_epochs}
    outside = sorted(e for e in wanted if not 1 <= e <= config.epochs)
    if outside:
        raise ValueError(f"eval_epochs {outside} lie outside the attack's epochs 1..{config.epochs}.")
    work_dir = Path(work_dir)
    # how often state is saved changes nothing
    trained = {k: v for k, v in config.as_dict().items() if k != "save_steps"}
    train.guard_work_dir(work_dir, {"config": trained, "data": cache.records_digest(records), "model": model_id,
                                    "evaluation": {**(eval_key or {}), "epochs": sorted(wanted)}},
                         "attack", SPEC_FILE, replace_other)
    start_digest = weights_digest(model)
    if config.lora_rank > 0:
        model = _with_lora(model, config)
    dataset = train.QADataset(tokenizer, records, config.chat, config.max_len)
    step_record = _StepRecord(work_dir / STEPS_FILE)
    cbs = [step_record, *(callbacks or [])]
    epoch_eval = None
    if evaluate is not None and wanted:
        epoch_eval = _EpochEvaluation(evaluate, wanted, work_dir / EPOCHS_FILE,
                                      train.steps_per_epoch(len(dataset), config.train_config()))
        cbs.append(epoch_eval)
    trainer = train.make_trainer(model, tokenizer, dataset, config.train_config(), work_dir,
                                 optim_args=OPTIMIZERS[config.optimizer][1], save_steps=config.save_steps,
                                 count_tokens=True, callbacks=cbs)
    summary = train.run_trainer(trainer, work_dir)
    model = trainer.model  # run_trainer has removed training's mixed-precision wrapper
    if config.lora_rank > 0:
        model = model.merge_and_unload()
        model.requires_grad_(True)  # peft froze the base weights
    model.eval()
    summary.update(schedule_summary(step_record.steps, summary["global_steps"], config.lr))
    if weights_digest(model) == start_digest:
        raise RuntimeError(
            f"The attack left every weight exactly as it was ({summary['global_steps']} optimizer step(s), "
            f"learning rates applied {summary['lr_per_step']}): an attack here must never be a silent no-op. "
            "With warmup over the whole attack, a single step (exactly one effective batch of records) applies "
            "lr 0; use more data, a smaller batch or less warmup (work folder: " + str(work_dir) + ").")
    summary.update(n_examples=len(dataset), config=config.as_dict(),
                   steps_per_epoch=train.steps_per_epoch(len(dataset), config.train_config()),
                   epochs={int(k): v for k, v in (epoch_eval.results if epoch_eval else {}).items()})
    return model, summary



def model_to_attack(profile: str, unlearned_run: str, model: str, params: dict) -> dict:
    """What a run that starts from an unlearned checkpoint reads: with ``unlearned_run``, the checkpoint of that
    notebook-05 run (its record's data, split and prompts must be ``params``'), else the model ``model`` names
    (``profile-target``: notebook 02's target of ``profile``).

    Returns:
        ``{"path", "method", "weights" (the precision it was unlearned in), "row" (its recorded FRAG and L2, {} for a
        named model), "sha256" (the weights its record names, None for a named model)}``.
    Raises:
        ValueError: the 05 run used other data, split or prompts. FileNotFoundError: the checkpoint is not in the
        cache, with the command that makes it.
    """
    from . import models, paths, records

    if unlearned_run:
        source = records.read_run("05_unlearn", unlearned_run, profile)
        made = source["provenance"]["params"]
        differ = {k: (made.get(k), params[k]) for k in ("data_source", "forget_split", "prompt_template")
                  if made.get(k) != params[k]}
        if differ:  # another split or prompt: measuring it answers another question
            raise ValueError(f"05_unlearn/{unlearned_run} was made with other data or prompts (05 value, this run's): "
                             f"{differ}; set this run's parameters to match, or name another run.")
        path = paths.expand_cached(source["results"]["unlearned"])
        if not models.is_checkpoint(path):
            raise FileNotFoundError(f"The checkpoint of 05_unlearn/{unlearned_run} is not in the cache ({path}); the "
                                    f"runner remakes it first: make reproduce PROFILE={profile} SELECT=<this run>, "
                                    f"or make reproduce PROFILE={profile} SELECT=05_unlearn/{unlearned_run} FORCE=1.")
        return {"path": path, "method": source["results"]["method"], "weights": made.get("weights", "fp32"),
                "row": source["results"]["row"], "sha256": source["results"]["checkpoint_sha256"].get("unlearned")}
    path = paths.original_dir(profile, model)
    method = "target" if paths.target_seed(model) is not None else "model"
    if method == "target" and not models.is_checkpoint(path):
        raise FileNotFoundError(f"The {model} of profile {profile} is not in the cache ({path}); the runner makes it "
                                f"first, or run: make reproduce PROFILE={profile} SELECT=02_target_and_gold")
    models.check_template(params["prompt_template"], path)  # the prompts it was trained behind
    return {"path": path, "method": method, "weights": "fp32", "row": {}, "sha256": None}
