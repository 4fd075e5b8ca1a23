"""Supervised fine-tuning on question/answer pairs, through Hugging Face ``Trainer``.

``Trainer`` gives what a research loop needs without re-implementing it: seeding, a progress
bar, loss logging, resumption from the last saved epoch, and several GPUs through
``accelerate``. Two precision settings, apart: ``bf16=True`` is bf16 autocast over the stored
weights (refused on the CPU, where runs compute in fp32), and
``weights="bf16"`` stores the weights in bf16 as OpenUnlearning does (fp32 compute, every weight
rounded to bf16 after every optimizer step), so that an update below half a bf16 ulp is lost.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import Trainer

from . import cache, data, models, numerics, paths
from .progress import progress_enabled, quiet_transformers
from .prompts import IGNORE, collate, encode_qa
from .records import seed_everything


@dataclass(frozen=True)
class TrainConfig:
    """Fine-tuning settings (defaults: OpenUnlearning's TOFU fine-tuning, rescaled by profiles)."""

    epochs: float = 5.0  # passes over the data
    lr: float = 1e-5  # peak learning rate
    batch_size: int = 8  # per device
    grad_accum: int = 4  # effective batch = batch_size * grad_accum * devices
    weight_decay: float = 0.01
    warmup_epochs: float = 1.0  # linear warmup length, in epochs (OpenUnlearning: one epoch)
    scheduler: str = "linear"  # decay after warmup: linear | constant_with_warmup | cosine
    optimizer: str = "adamw_torch"  # any TrainingArguments.optim value
    max_grad_norm: float = 1.0
    bf16: bool = False  # bf16 autocast over the stored weights (GPU; refused on the CPU, which computes in fp32)
    weights: str = "fp32"  # storage: fp32 | bf16 (rounded after every optimizer step, as OpenUnlearning)
    seed: int = 42
    max_len: int = 256  # tokens per example, longer ones are cut
    chat: bool = True  # the model's chat template around each pair
    group_by_length: bool = False  # batches of similar length (an epoch still sees every example once)
    device: str = "auto"  # auto (a GPU when one is visible) | cpu | cuda; where, not what: left out of as_dict

    def __post_init__(self) -> None:
        numerics.resolve_device(self.device)  # a clear error for cuda on a machine without it
        checks = {
            "epochs": self.epochs > 0, "lr": self.lr > 0, "batch_size": self.batch_size >= 1,
            "grad_accum": self.grad_accum >= 1, "weight_decay": self.weight_decay >= 0,
            "warmup_epochs": 0 <= self.warmup_epochs <= self.epochs, "max_len": self.max_len >= 8,
            "max_grad_norm": self.max_grad_norm > 0,
            "scheduler": self.scheduler in ("linear", "constant_with_warmup", "cosine", "constant"),
            "weights": self.weights in numerics.WEIGHTS,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"Invalid training settings {bad} in {self}")

    def as_dict(self) -> dict:
        """The settings that decide the numbers (``device`` says where they are computed)."""
        return {k: v for k, v in asdict(self).items() if k != "device"}


# TrainConfig fields a notebook-02 run sets by its parameters of the same names
_RUN_SETTINGS = ("epochs", "lr", "batch_size", "grad_accum", "warmup_epochs", "scheduler", "weight_decay", "bf16",
                 "weights", "seed", "group_by_length")


def run_config(params: dict, device: str) -> TrainConfig:
    """The fine-tuning settings of a notebook-02 run with these parameters."""
    return TrainConfig(**{k: params[k] for k in _RUN_SETTINGS}, device=device)


def target_or_gold(role: str, params: dict) -> tuple[str, dict]:
    """Notebook 02's ``role``: the target (the base model fine-tuned on ``full``) or the gold model
    (on the retain split matching ``forget_split``), trained into its cache folder, or reused there
    (:func:`train_or_reuse`). Called by the notebook, and by the runner when a run reads only one of
    them (the other is not trained). Returns its folder and its record."""
    limit = params["train_limit"] or None
    split = "full" if role == "target" else data.matching_retain(params["forget_split"])
    records = data.load_split(params["data_source"], split, limit)
    name = paths.trained_name(role, params["seed"], params["forget_split"])
    folder = paths.checkpoint_dir(params["profile"], name)
    spec = {"data_source": params["data_source"], "split": split, "train_limit": params["train_limit"],
            **({"prompt_template": params["prompt_template"]} if params["prompt_template"] != "model" else {})}
    config = run_config(params, numerics.resolve_device(params["device"]))
    return str(folder), train_or_reuse(params["base_model"], records, config, folder, spec,
                                       retrain=params["retrain"], save_bf16=params["save_bf16"])


class QADataset(Dataset):
    """Question/answer records encoded once, labels on answer tokens only."""

    def __init__(self, tokenizer: Any, records: Sequence[dict], chat: bool = True, max_len: int = 256):
        if len(records) == 0:
            raise ValueError("Cannot train on an empty split.")
        self.items = []
        for r in records:
            enc = encode_qa(tokenizer, r["question"], r["answer"], chat)
            self.items.append({"input_ids": enc["input_ids"][:max_len], "labels": enc["labels"][:max_len]})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


def guard_work_dir(work_dir: Path, spec: dict, what: str, spec_file: str, replace_other: bool = False) -> None:
    """Make ``work_dir`` the resumable state of one run described by ``spec`` (written to
    ``spec_file`` inside it), refusing to resume from the state of another run.

    The folder belongs to another run when its spec file differs from ``spec``, or when it holds
    trainer checkpoints but no spec file.

    Raises:
        ValueError: the folder belongs to another ``what`` (``replace_other`` empties it instead).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    file = work_dir / spec_file
    foreign = (json.loads(file.read_text()) != spec) if file.is_file() else any(work_dir.glob("checkpoint-*"))
    if foreign and replace_other:
        shutil.rmtree(work_dir)
        work_dir.mkdir(parents=True)
    elif foreign:
        raise ValueError(f"{work_dir} holds the state of another {what} (settings, data or model differ); "
                         "delete it or choose another work_dir.")
    file.write_text(json.dumps(spec, sort_keys=True, indent=1))


def world_size() -> int:
    """Processes training together (``WORLD_SIZE``, set by ``accelerate launch`` or ``torchrun``; 1 alone)."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def steps_per_epoch(n_examples: int, config: TrainConfig, devices: int | None = None) -> int:
    """Optimizer steps in one epoch (the last partial accumulation still steps), with
    ``batch_size`` examples per process and step on ``devices`` processes (default: this run's
    :func:`world_size`)."""
    devices = world_size() if devices is None else devices
    batches = -(-n_examples // (config.batch_size * devices))
    return max(1, -(-batches // config.grad_accum))


def warmup_steps(n_examples: int, config: TrainConfig, devices: int | None = None) -> int:
    """Linear-warmup steps as OpenUnlearning counts them (``load_trainer_args`` in its
    ``src/trainer/__init__.py``): ``int(warmup_epochs * n_examples // (batch_size * grad_accum *
    devices))``, floored on the records rather than taken from :func:`steps_per_epoch`. So a
    one-epoch warmup ends before the step of a last partial batch, which applies the peak rate, and
    a data set smaller than one effective batch is not warmed up at all."""
    devices = world_size() if devices is None else devices
    return int(config.warmup_epochs * n_examples // (config.batch_size * config.grad_accum * devices))


def answer_token_nll(model: Any, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced NLL of each answer token, the vocabulary projection computed only where a
    label is scored.

    Only the positions whose next token carries a label (about a third at SmolLM2's prompt
    lengths) go through the output embedding, the 49,152-way projection that is a fifth of a
    step's compute at SmolLM2's size (:func:`frag_utils.models.logits_at`: inside the model's
    forward, so under training's autocast and DDP as the full logits would be). The numbers and
    gradients are those of the Trainer's full-logits loss (``tests/test_train.py``).

    Returns:
        ``(nll [B, T-1], mask [B, T-1])``: at position ``t`` the NLL of token ``t+1`` (0 where it is
        not an answer token), and the mask of answer tokens.
    """
    targets = batch["labels"][:, 1:]
    mask = targets != IGNORE
    keep = torch.cat([mask, torch.zeros_like(mask[:, :1])], dim=1)  # position t predicts token t+1
    logits = models.logits_at(model, keep, input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              use_cache=False)
    nll = torch.zeros(targets.shape, dtype=torch.float32, device=logits.device)
    nll[mask] = F.cross_entropy(logits.float(), targets[mask], reduction="none")
    return nll, mask


class AnswerLossTrainer(Trainer):
    """``Trainer`` with its default causal-LM loss (the mean NLL of the label tokens of the
    accumulated batch), computed from :func:`answer_token_nll`: logits only at label positions."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        nll, mask = answer_token_nll(model, inputs)
        # as the model's own loss: summed and divided by the label tokens of the accumulated batch
        # when the Trainer counts them (models that take loss keyword arguments), else the batch mean
        counted = self.model_accepts_loss_kwargs and num_items_in_batch is not None
        loss = nll.sum() / (num_items_in_batch if counted else mask.sum())
        if self.args.average_tokens_across_devices and counted:
            loss = loss * self.accelerator.num_processes
        return (loss, None) if return_outputs else loss


def make_trainer(model: Any, tokenizer: Any, dataset: Dataset, config: TrainConfig, work_dir: str | Path,
                 trainer_cls: type | None = None, collator: Callable | None = None, optim_args: str | None = None,
                 save_steps: int = 0, count_tokens: bool = False, **trainer_kwargs) -> Any:
    """A ``Trainer`` for ``dataset`` with ``config``: :class:`AnswerLossTrainer` unless
    ``trainer_cls`` (a ``Trainer`` with its own ``compute_loss``) is given.

    Checkpoints (weights and optimizer state) are saved to ``work_dir`` at every epoch end (every
    ``save_steps`` optimizer steps instead when it is positive), the newest one kept, so an
    interrupted run resumes where it stopped. ``optim_args`` is passed to the optimizer as
    ``TrainingArguments.optim_args`` (e.g. ``"momentum=0.9"`` for SGD). ``count_tokens``: the
    trainer counts the non-padding tokens it trains on (``state.num_input_tokens_seen``; batches
    with an ``attention_mask``).
    """
    from transformers import TrainingArguments

    device = numerics.resolve_device(config.device)
    numerics.check_autocast(config.bf16, device)
    if device != "cpu" and torch.cuda.device_count() > 1:
        # Trainer would wrap the model in nn.DataParallel: warmup counted for one device, RMU's
        # activation hook shared by the replicas, reference models not replicated. Refused.
        raise ValueError(f"{torch.cuda.device_count()} GPUs are visible, and training on several is not supported "
                         "yet (Trainer would fall back to nn.DataParallel, which changes the schedule and RMU's "
                         "loss). Make one visible, e.g. CUDA_VISIBLE_DEVICES=0, and run other selections of the "
                         "grid on the other GPUs (README, 'GPUs').")
    n_steps = steps_per_epoch(len(dataset), config)
    args = TrainingArguments(
        output_dir=str(work_dir), num_train_epochs=config.epochs, learning_rate=config.lr,
        per_device_train_batch_size=config.batch_size, gradient_accumulation_steps=config.grad_accum,
        weight_decay=config.weight_decay, lr_scheduler_type=config.scheduler,
        warmup_steps=warmup_steps(len(dataset), config), optim=config.optimizer,
        max_grad_norm=config.max_grad_norm, bf16=config.bf16, seed=config.seed, data_seed=config.seed,
        use_cpu=device == "cpu", logging_strategy="steps",
        logging_steps=max(1, n_steps // 4),
        save_strategy="steps" if save_steps > 0 else "epoch", save_steps=save_steps if save_steps > 0 else 500,
        optim_args=optim_args, save_total_limit=1, report_to="none", disable_tqdm=not progress_enabled(),
        log_level="info" if progress_enabled() else "error", remove_unused_columns=False,
        dataloader_num_workers=0, include_num_input_tokens_seen="non_padding" if count_tokens else "no",
        train_sampling_strategy="group_by_length" if config.group_by_length else "random",
    )
    pad = tokenizer.pad_token_id
    trainer = (trainer_cls or AnswerLossTrainer)(
        model=model, args=args, train_dataset=dataset,
        data_collator=collator or (lambda examples: collate(examples, pad, side="right")), **trainer_kwargs)
    if config.weights == "bf16":
        trainer.add_callback(numerics.bf16_storage_callback())
    if not progress_enabled():  # with tqdm off, Trainer would print every log dict instead
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    return trainer


# Not accelerate.utils.extract_model_from_parallel(model, keep_fp32_wrapper=False), which would be
# the library's way (checked with accelerate 1.15, transformers 5.23): it follows ``__wrapped__``
# past the autocast wrapper into transformers' own decorators of the class's forward and binds the
# bare function (``model(ids, return_dict=False)`` then fails inside LlamaForCausalLM.forward); it
# leaves a bound ``forward`` in the instance ``__dict__`` and the ``_is_accelerate_prepared`` mark;
# and it cannot put the wrapper back, which ``plain_forward`` must do in the middle of training.
# Its other job, taking the model out of DDP or torch.compile, has nothing to do here:
# ``Trainer.model`` is the bare model.
@contextlib.contextmanager
def plain_forward(model: Any) -> Iterator[Any]:
    """Run ``model`` without the mixed-precision wrapper training put on it.

    With ``bf16=True``, accelerate replaces ``model.forward`` *on the model object itself* by an
    autocast wrapper (keeping the original as ``model._original_forward``), and ``Trainer`` never
    undoes it. An evaluation during or after training would then run in bf16 while one of a
    freshly loaded model runs in fp32; inside this context the model runs its own forward.
    """
    wrapped, original = model.__dict__.get("forward"), model.__dict__.get("_original_forward")
    if wrapped is not None and original is not None:
        model.forward = original
    try:
        yield model
    finally:
        if wrapped is not None and original is not None:
            model.forward = wrapped


def strip_mixed_precision(model: Any) -> Any:
    """Undo what training's ``accelerate.prepare`` left on ``model``: the autocast wrapper of
    :func:`plain_forward`, and the "prepared" mark, without which a later ``Trainer`` with
    ``bf16=True`` would skip preparing the model and silently train it in fp32."""
    original = model.__dict__.pop("_original_forward", None)
    if original is not None:
        model.__dict__.pop("forward", None)  # the class's own forward again
    model.__dict__.pop("_is_accelerate_prepared", None)
    return model


def run_trainer(trainer: Any, work_dir: str | Path) -> dict:
    """Train (resuming from the newest checkpoint in ``work_dir`` if any); returns a summary."""
    from transformers.trainer_utils import get_last_checkpoint

    work_dir = Path(work_dir)  # a first run's folder may not exist yet; get_last_checkpoint needs one
    resume = get_last_checkpoint(work_dir) if work_dir.is_dir() else None
    start = time.time()
    with quiet_transformers():
        out = trainer.train(resume_from_checkpoint=resume)
    strip_mixed_precision(trainer.model).eval()  # whoever evaluates it next gets the fp32 forward
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"train_seconds": time.time() - start, "resumed_from": resume, "global_steps": trainer.state.global_step,
            "final_train_loss": float(out.training_loss), "logged_losses": losses}


def finetune(model: Any, tokenizer: Any, records: Sequence[dict], config: TrainConfig,
             work_dir: str | Path) -> dict:
    """Fine-tune ``model`` in place on question/answer ``records`` (loss on answer tokens only).

    Args:
        work_dir: holds the epoch checkpoints used to resume; delete it once the model is saved.
    Returns:
        A summary: time, steps, losses, settings.
    """
    dataset = QADataset(tokenizer, records, config.chat, config.max_len)
    trainer = make_trainer(model, tokenizer, dataset, config, work_dir)
    summary = run_trainer(trainer, work_dir)
    summary.update(n_examples=len(dataset), config=config.as_dict())
    return summary


def train_or_reuse(base_model: str, records: Sequence[dict], config: TrainConfig, out_dir: str | Path,
                   spec: dict, retrain: bool = False, save_bf16: bool = False) -> dict:
    """Fine-tune ``base_model`` on ``records`` into ``out_dir``, or reuse the checkpoint cached
    there under the same key (:func:`frag_utils.cache.checkpoint`: base model, training settings,
    the records, ``spec``, the package's code). Interrupted training resumes from the last epoch
    saved in ``<out_dir>.work``.

    Args:
        spec: further settings that determine the checkpoint (data source, split, ...).
        save_bf16: round the trained weights to bf16 before saving (OpenUnlearning's released
            checkpoints are bf16), whatever precision they were trained in.
    Returns:
        The checkpoint's record: ``{"spec": ..., "summary": {train_seconds, losses, ...}, "reused": ...}``.
    """
    want = {"train": config.as_dict(), "data": cache.records_digest(records), **spec,
            **({"save_bf16": True} if save_bf16 else {}),
            # a GPU-trained checkpoint is not reused by a CPU run (other kernels, other weights)
            **({"device": "gpu"} if numerics.resolve_device(config.device) != "cpu" else {})}

    def make(folder: Path, work: Path) -> dict:
        seed_everything(config.seed)
        model, tokenizer = models.load_model(base_model, seed=config.seed)
        summary = finetune(model, tokenizer, records, config, work)
        if save_bf16:
            summary["rounded_to_bf16_at_save"] = numerics.round_to_bf16_(model.parameters())
        models.save_checkpoint(model, tokenizer, folder)
        return {"spec": {"base_model": base_model, **want}, "summary": summary}

    return cache.checkpoint(out_dir, "train", want, {"base": base_model}, make, remake=retrain)

