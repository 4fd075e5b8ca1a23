"""How fast a relearning attack's loss can fall from the unlearned weights, measured without an attack.

The attack minimises the mean NLL over the answer tokens of its data (:func:`frag_utils.train.answer_token_nll`,
the data encoded as :class:`frag_utils.train.QADataset` encodes it). At the unlearned weights θ (fp32) this module
measures (docs/choices.md, "Which attack-free signal ranks relearning?", the measured family):

* the gradient norm ‖∇L(θ)‖ over the parameters the attack trains;
* random sharpness: the mean over seeded Gaussian directions of L(θ + ε) − L(θ), each tensor's ε scaled to
  ``radius`` times that tensor's own norm;
* SAM sharpness (first order): L(θ + r g/‖g‖) − L(θ), g = ∇L(θ), r = ``radius`` ‖θ‖;
* the one-step probe (:func:`probe`, a probe, not attack-free): the attack itself, stopped after its first
  optimizer step, taken at the peak learning rate.

Every measure but the probe restores the weights it perturbs bit for bit. Notebook 10 runs them on a checkpoint;
tests/test_sharpness.py checks each against its definition.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, Sequence

import torch
from transformers import TrainerCallback

from . import attacks, prompts, train


def answer_batches(tokenizer: Any, records: Sequence[dict], batch_size: int = 16, chat: bool = True,
                   max_len: int = 256) -> list[dict]:
    """``records`` encoded as the attack encodes them (cut at ``max_len`` tokens), in order, padded into batches."""
    data = train.QADataset(tokenizer, records, chat, max_len)
    items = [data[i] for i in range(len(data))]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return [prompts.collate(chunk, pad) for chunk in prompts.batches(items, batch_size)]


def _tokens(batches: Sequence[dict]) -> int:
    return int(sum((b["labels"][:, 1:] != train.IGNORE).sum() for b in batches))


@torch.no_grad()
def mean_answer_loss(model: Any, batches: Sequence[dict]) -> float:
    """The attack's loss over all ``batches``: the summed NLL of their answer tokens over their count."""
    total = sum(float(train.answer_token_nll(model, b)[0].double().sum()) for b in batches)
    return total / _tokens(batches)


def loss_gradient(model: Any, batches: Sequence[dict], params: Sequence[torch.Tensor]) -> tuple[float, list]:
    """The attack's loss over all ``batches`` and its gradient with respect to ``params`` (accumulated batch by batch
    as each batch's share of the token mean, so the whole set never sits in one graph). Returns ``(loss, grads)``."""
    count, total = _tokens(batches), 0.0
    grads = [torch.zeros_like(p) for p in params]
    for b in batches:
        nll, _ = train.answer_token_nll(model, b)
        part = nll.sum() / count
        for g, d in zip(grads, torch.autograd.grad(part, list(params), allow_unused=True)):
            if d is not None:
                g.add_(d)
        total += float(part.detach().double())
    return total, grads


def norm(tensors: Sequence[torch.Tensor]) -> float:
    """The L2 norm of several tensors taken as one vector (accumulated in float64)."""
    return float(torch.sqrt(sum(t.double().pow(2).sum() for t in tensors)))


@torch.no_grad()
def _shifted_loss(model: Any, batches: Sequence[dict], params: Sequence[torch.Tensor],
                  shifts: Sequence[torch.Tensor]) -> float:
    """The loss with ``shifts`` added to ``params``; the weights are put back bit for bit afterwards."""
    saved = [p.detach().clone() for p in params]
    try:
        for p, s in zip(params, shifts):
            p.add_(s)
        return mean_answer_loss(model, batches)
    finally:
        for p, s in zip(params, saved):
            p.copy_(s)


def random_sharpness(model: Any, batches: Sequence[dict], params: Sequence[torch.Tensor], radius: float = 0.01,
                     seeds: Sequence[int] = (0, 1, 2, 3)) -> dict:
    """The mean rise of the loss in random directions: per seed, a Gaussian ε per tensor scaled to ``radius`` times
    that tensor's norm (drawn on the CPU, so a seed is the same direction on every device).

    Returns:
        ``{"sharpness", "rises", "loss"}``: the mean rise, each seed's, and the loss at θ.
    """
    if radius <= 0 or not seeds:
        raise ValueError(f"radius must be > 0 and at least one seed given, got {radius}, {list(seeds)}")
    base = mean_answer_loss(model, batches)
    rises = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(int(seed))
        shifts = []
        for p in params:
            eps = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            scale = radius * float(p.detach().float().norm()) / max(float(eps.norm()), 1e-12)
            shifts.append((eps * scale).to(p.device, p.dtype))
        rises.append(_shifted_loss(model, batches, params, shifts) - base)
    return {"sharpness": sum(rises) / len(rises), "rises": rises, "loss": base}


def sam_sharpness(model: Any, batches: Sequence[dict], params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                  loss: float, radius: float = 0.01) -> dict:
    """SAM's first-order worst case: L(θ + r g/‖g‖) − L(θ) with r = ``radius`` ‖θ‖ (``loss``: L(θ), ``grads``: g).

    Returns:
        ``{"sharpness", "r"}``.
    """
    g = norm(grads)
    if g == 0:
        return {"sharpness": 0.0, "r": 0.0}
    r = radius * norm([p.detach() for p in params])
    return {"sharpness": _shifted_loss(model, batches, params, [d * (r / g) for d in grads]) - loss, "r": r}


class _StopAfter(TrainerCallback):
    """Ends training after ``steps`` optimizer steps, saving no state: a probe is not resumed."""

    def __init__(self, steps: int):
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.steps:
            control.should_training_stop = True
            control.should_save = False

    def on_epoch_end(self, args, state, control, **kwargs):
        if state.global_step >= self.steps:
            control.should_save = False


def probe(model: Any, tokenizer: Any, records: Sequence[dict], config: attacks.AttackConfig,
          work_dir: str | Path, steps: int = 1) -> tuple[Any, dict]:
    """The one-step probe: the attack ``config`` run from ``model`` through :func:`frag_utils.attacks.relearn`
    (its sampler and seed, so the batch the attack draws first; its optimizer, clipping and precision), at the peak
    learning rate from the first step (no warmup: with the attack's warmup its first step applies lr 0) and
    stopped after ``steps`` optimizer steps. ``work_dir`` is emptied first: a probe always starts from ``model``.

    Returns:
        ``(model, summary)`` as :func:`frag_utils.attacks.relearn` returns them: the model after the step(s).
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    shutil.rmtree(work_dir, ignore_errors=True)
    at_peak = dataclasses.replace(config, epochs=1, warmup_epochs=0.0, scheduler="constant", save_steps=0)
    model, summary = attacks.relearn(model, tokenizer, records, at_peak, work_dir, eval_epochs=[],
                                     callbacks=[_StopAfter(steps)], replace_other=True)
    shutil.rmtree(work_dir, ignore_errors=True)
    if summary["global_steps"] != steps:
        raise RuntimeError(f"the probe took {summary['global_steps']} optimizer steps, not {steps}: the attack data "
                           f"has {summary['steps_per_epoch']} steps per epoch")
    return model, summary
