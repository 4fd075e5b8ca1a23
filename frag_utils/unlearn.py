"""Gradient unlearning methods as OpenUnlearning runs them: the paper's GA, GradDiff, NPO and RMU,
and four more mechanisms (SimNPO, IdkDPO, UNDIAL, WGA).

Each method fine-tunes the target in place through Hugging Face ``Trainer`` (the machinery of
:mod:`frag_utils.train`: seeding, progress bar, logging, epoch checkpoints to resume from,
several GPUs through ``accelerate``) with its own loss on a *paired* batch: every forget item
comes with a retain item drawn for it at random, as OpenUnlearning's ``ForgetRetainDataset``
(anchor = forget) does. Losses, with ``NLL`` the mean negative log-likelihood over the answer
tokens of a batch (the Trainer's causal-LM loss) and ``gamma``/``alpha`` the forget/retain weights:

* ``ga``:       ``gamma * (-NLL_forget)``
* ``graddiff``: ``gamma * (-NLL_forget) + alpha * NLL_retain``
* ``npo``:      ``gamma * (2/beta) * mean_batch softplus(beta * (log p_theta(y|x) - log p_ref(y|x)))
  + alpha * NLL_retain``, i.e. ``(2/beta) mean log(1 + (p_theta / p_ref)^beta)``; sequence
  log-probabilities summed over answer tokens; the reference is the frozen target, whose
  log-probabilities of the forget answers are computed once before training.
* ``rmu``:      ``gamma * MSE(h_L(forget), u) + rmu_alpha * MSE(h_L(retain), h_L^ref(retain))``,
  ``h_L`` the output of decoder block ``L`` [B, T, d], ``u = c * r / ||r||`` with
  ``r ~ U[0, 1)^d`` drawn once from the seed, ``h^ref`` the frozen target. Each MSE is the mean
  over ``d``, averaged over the answer tokens of each sequence, then over the batch. Only the
  parameters chosen by ``rmu_trainable`` are updated.
* ``simnpo``:   ``gamma * (-(2/beta) * mean_batch logsigmoid(beta * (NLL_seq / |y| - delta))) + alpha * NLL_retain``
  (SimNPO, Fan et al. 2024: NPO without a reference model, the sequence NLL divided by the answer
  length ``|y|``; OpenUnlearning's ``SimNPO``: beta 4.5, delta 0, gamma 0.125, alpha 1).
* ``idkdpo``:   ``gamma * (-(2/beta) * mean_batch logsigmoid(beta * (log p/p_ref(idk|x) - log p/p_ref(y|x))))
  + alpha * NLL_retain`` (DPO, Rafailov et al. 2023, with a refusal ``idk`` preferred over the forget
  answer ``y``; OpenUnlearning's ``DPO`` trainer on ``TOFU_QA_forget_idk``: beta 0.1, gamma 1, alpha 1).
  Each forget item gets a refusal drawn uniformly from :func:`frag_utils.data.load_refusals` every
  epoch; both references are the frozen target's.
* ``undial``:   ``gamma * CE(p_theta, softmax(z_ref - beta * onehot(y)))`` averaged over the forget
  answer tokens, ``+ alpha * NLL_retain`` (UNDIAL, Dong et al. 2025: self-distillation towards the
  frozen target's logits ``z_ref`` with the true token's logit lowered by beta; OpenUnlearning's
  ``UNDIAL``: beta 10, gamma 1, alpha 0). OpenUnlearning averages over every position of the batch,
  prompt and padding included (where its -100 label indexes the vocabulary's entry V-100); here only
  the answer tokens count, as the equation has it.
* ``wga``:      ``gamma * (-mean_tokens w_t * NLL_t) + alpha * NLL_retain``, ``w_t = p_theta(y_t)^beta``
  held constant (weighted gradient ascent, Wang et al. 2025: tokens the model still predicts get the
  most ascent; OpenUnlearning's ``WGA``: beta 1, gamma 1, alpha 1).

The defaults are OpenUnlearning's TOFU unlearning settings, read at its commit d3d7cf9
(2025-12-24; ``configs/experiment/unlearn/tofu/default.yaml`` and ``configs/trainer/*.yaml``):
AdamW, lr 1e-5, weight decay 0.01, effective batch 32 (8 x 4), linear schedule after one warmup
epoch, 10 epochs, seed 42, NPO beta 0.1, forget and retain weights 1. RMU
(``configs/trainer/RMU.yaml``, unchanged there since RMU was added in a897704, 2025-03-09):
steering coefficient 2, retain weight 1, block 7 of Llama-3.2-1B's 16 steered (here the block at
the same relative depth), and **every parameter trained** (``trainable_params_regex: .*``,
``rmu_trainable="all"``), which is what the paper's TOFU runs used (the authors'
``scripts/unlearn_baselines.sh`` runs ``trainer=RMU`` at its defaults). OpenUnlearning's WMDP
experiment (``configs/experiment/unlearn/wmdp/default.yaml``) and the original WMDP code train only
the MLP ``down_proj`` of blocks 5, 6, 7: ``rmu_trainable="down_proj"`` (that block and the two below).
"""
from __future__ import annotations

import copy
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset
from transformers import Trainer, TrainerCallback

from . import cache, models, train
from .prompts import IGNORE, batches, collate

METHODS = ("ga", "graddiff", "npo", "rmu", "simnpo", "idkdpo", "undial", "wga")
RMU_TRAINABLE_PRESETS = ("down_proj", "mlp", "all")
# OpenUnlearning steers block 7 of Llama-3.2-1B-Instruct (16 blocks); other depths scale to it.
RMU_REFERENCE_LAYER, RMU_REFERENCE_DEPTH = 7, 16
RMU_BLOCKS_BELOW = 2  # presets train block L and the two below it (OpenUnlearning's WMDP config: 5, 6, 7)
SPEC_FILE = "unlearn_spec.json"
# The term each method minimises on the forget side, and its sign in the loss.
FORGET_TERM = {"ga": ("forget_nll", -1.0), "graddiff": ("forget_nll", -1.0),
               "npo": ("forget_npo", 1.0), "rmu": ("forget_mse", 1.0), "simnpo": ("forget_simnpo", 1.0),
               "idkdpo": ("forget_dpo", 1.0), "undial": ("forget_undial", 1.0), "wga": ("forget_wga", -1.0)}
TERM_NAMES = ("forget_nll", "forget_npo", "forget_mse", "forget_simnpo", "forget_dpo", "forget_undial",
              "forget_wga", "retain_nll", "retain_mse")
# OpenUnlearning's forget and retain weights (gamma, alpha) where they are not 1 (configs/trainer/*.yaml)
DEFAULT_WEIGHTS = {"simnpo": (0.125, 1.0), "undial": (1.0, 0.0)}
# Methods that keep a frozen copy of the target for their loss
FROZEN_COPY = ("rmu", "idkdpo", "undial")


@dataclass(frozen=True)
class UnlearnConfig:
    """Settings of one gradient unlearning run (defaults: OpenUnlearning's TOFU settings)."""

    method: str  # ga | graddiff | npo | rmu | simnpo | idkdpo | undial | wga
    epochs: float = 10.0  # passes over the forget set
    lr: float = 1e-5  # peak learning rate
    batch_size: int = 8  # forget items (each with one retain item) per device and step
    grad_accum: int = 4  # effective batch = batch_size * grad_accum * devices = 32
    warmup_epochs: float = 1.0  # linear warmup, then linear decay to 0
    weight_decay: float = 0.01  # AdamW
    max_grad_norm: float = 1.0  # Trainer's default clipping, as OpenUnlearning
    seed: int = 42  # Trainer seed, data order, forget/retain pairing and RMU's control vector
    bf16: bool = False  # bf16 autocast over the stored weights (GPU; refused on the CPU, which computes in fp32)
    weights: str = "fp32"  # storage: fp32 | bf16 (rounded after every step, as OpenUnlearning trains)
    forget_weight: float | None = None  # gamma, on the forget term; None: OpenUnlearning's (SimNPO 0.125, else 1)
    retain_weight: float | None = None  # alpha, on the retain NLL (not GA, RMU); None: OpenUnlearning's (UNDIAL 0,
    # else 1)
    npo_beta: float = 0.1  # NPO inverse temperature
    simnpo_beta: float = 4.5  # SimNPO inverse temperature
    simnpo_delta: float = 0.0  # SimNPO reward margin (its paper's gamma)
    dpo_beta: float = 0.1  # IdkDPO inverse temperature
    undial_beta: float = 10.0  # UNDIAL: how far the true token's logit is lowered in the teacher
    wga_beta: float = 1.0  # WGA: exponent of the token weight p^beta
    rmu_layer: int | None = None  # decoder block steered by RMU; None: same relative depth as 7/16
    rmu_steering_coeff: float = 2.0  # c, the norm of RMU's control vector
    rmu_alpha: float = 1.0  # weight of RMU's retain MSE
    rmu_trainable: str = "all"  # all (OpenUnlearning's RMU trainer, TOFU) | down_proj (its WMDP config) | mlp | a regex
    chat: bool = True  # the model's chat template around each pair
    max_len: int = 256  # tokens per example, longer ones are cut
    device: str = "auto"  # auto | cpu | cuda: where it trains (left out of as_dict)

    def __post_init__(self) -> None:
        gamma, alpha = DEFAULT_WEIGHTS.get(self.method, (1.0, 1.0))
        if self.forget_weight is None:  # frozen dataclass: the method's defaults filled in once
            object.__setattr__(self, "forget_weight", gamma)
        if self.retain_weight is None:
            object.__setattr__(self, "retain_weight", alpha)
        problems = []
        if self.method not in METHODS:
            problems.append(f"method must be one of {METHODS}, got {self.method!r}")
        positive = {"epochs": self.epochs, "lr": self.lr, "npo_beta": self.npo_beta,
                    "rmu_steering_coeff": self.rmu_steering_coeff, "forget_weight": self.forget_weight,
                    "max_grad_norm": self.max_grad_norm, "simnpo_beta": self.simnpo_beta,
                    "dpo_beta": self.dpo_beta}
        problems += [f"{k} must be > 0, got {v}" for k, v in positive.items() if not v > 0]
        non_negative = {"weight_decay": self.weight_decay, "retain_weight": self.retain_weight,
                        "rmu_alpha": self.rmu_alpha, "undial_beta": self.undial_beta, "wga_beta": self.wga_beta}
        problems += [f"{k} must be >= 0, got {v}" for k, v in non_negative.items() if not v >= 0]
        at_least_one = {"batch_size": self.batch_size, "grad_accum": self.grad_accum}
        problems += [f"{k} must be an integer >= 1, got {v}" for k, v in at_least_one.items()
                     if not (isinstance(v, int) and v >= 1)]
        if not 0 <= self.warmup_epochs <= self.epochs:
            problems.append(f"warmup_epochs must be in [0, epochs={self.epochs}], got {self.warmup_epochs}")
        if self.max_len < 8:
            problems.append(f"max_len must be >= 8, got {self.max_len}")
        if self.weights not in train.numerics.WEIGHTS:
            problems.append(f"weights must be one of {train.numerics.WEIGHTS}, got {self.weights!r}")
        if self.rmu_layer is not None and not (isinstance(self.rmu_layer, int) and self.rmu_layer >= 0):
            problems.append(f"rmu_layer must be None or a block index >= 0, got {self.rmu_layer!r}")
        if self.rmu_trainable not in RMU_TRAINABLE_PRESETS:
            try:
                re.compile(self.rmu_trainable)
            except re.error as err:
                problems.append(f"rmu_trainable must be one of {RMU_TRAINABLE_PRESETS} or a regex over "
                                f"parameter names; {self.rmu_trainable!r} is not a valid regex ({err})")
        if problems:
            raise ValueError("Invalid unlearning settings: " + "; ".join(problems))

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "device"}

    @property
    def uses_retain(self) -> bool:
        """Whether the loss reads a retain item: RMU always, the others with a retain weight (GA never)."""
        return self.method == "rmu" or (self.method != "ga" and self.retain_weight > 0)

    def train_config(self) -> train.TrainConfig:
        """The ``Trainer`` settings (AdamW, linear schedule with warmup)."""
        return train.TrainConfig(
            epochs=self.epochs, lr=self.lr, batch_size=self.batch_size, grad_accum=self.grad_accum,
            weight_decay=self.weight_decay, warmup_epochs=self.warmup_epochs, scheduler="linear",
            optimizer="adamw_torch", max_grad_norm=self.max_grad_norm, bf16=self.bf16, seed=self.seed,
            max_len=self.max_len, chat=self.chat, weights=self.weights, device=self.device)

    def resolved(self, model: nn.Module) -> "UnlearnConfig":
        """This config with RMU's block chosen for ``model`` and checked against its depth.

        Raises:
            ValueError: ``rmu_layer`` is not a block of ``model``.
        """
        if self.method != "rmu":
            return self
        n = len(decoder_blocks(model)[1])
        layer = default_rmu_layer(n) if self.rmu_layer is None else self.rmu_layer
        if not 0 <= layer < n:
            raise ValueError(f"rmu_layer={layer} is out of range: the model has {n} decoder blocks (0..{n - 1}).")
        return replace(self, rmu_layer=layer)


def default_rmu_layer(n_blocks: int) -> int:
    """The block at OpenUnlearning's relative depth (7 of 16): 13 of SmolLM2-135M's 30, 1 of 2."""
    return min(n_blocks - 1, int(round(RMU_REFERENCE_LAYER * n_blocks / RMU_REFERENCE_DEPTH)))


def decoder_blocks(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The model's list of decoder blocks and its name (``model.layers`` for Llama)."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return name, module
    raise ValueError(f"Cannot find the decoder blocks of {type(model).__name__} (no ModuleList of "
                     f"config.num_hidden_layers={n} modules).")


def rmu_trainable_names(model: nn.Module, layer: int, which: str) -> list[str]:
    """Names of the parameters RMU updates.

    Args:
        which: ``all`` (every parameter, those after block ``L`` get no gradient: OpenUnlearning's
            RMU trainer default, ``.*``), ``down_proj`` (MLP down projection of blocks ``L-2..L``:
            OpenUnlearning's WMDP experiment config, after the WMDP code), ``mlp`` (every MLP weight of
            those blocks), or a regex matched in full against parameter names.
    Raises:
        ValueError: nothing matches.
    """
    prefix, _ = decoder_blocks(model)
    near = "|".join(str(i) for i in range(max(0, layer - RMU_BLOCKS_BELOW), layer + 1))
    presets = {"down_proj": rf"{re.escape(prefix)}\.({near})\.mlp\.down_proj\.weight",
               "mlp": rf"{re.escape(prefix)}\.({near})\.mlp\..+", "all": r".+"}
    pattern = presets.get(which, which)
    names = [n for n, _ in model.named_parameters() if re.fullmatch(pattern, n)]
    if not names:
        raise ValueError(f"rmu_trainable={which!r} (pattern {pattern!r}) matches no parameter of "
                         f"{type(model).__name__}; pass a regex over its parameter names.")
    return names


def params_after_block(model: nn.Module, layer: int) -> list[str]:
    """Names of the parameters that act only after decoder block ``layer`` (the later blocks, the
    final norm, an untied output head): RMU's loss, read at that block, gives them no gradient."""
    prefix, blocks = decoder_blocks(model)
    later = tuple(f"{prefix}.{i}." for i in range(layer + 1, len(blocks)))
    # named_parameters lists a tied output head once, as the embedding it shares (which RMU reaches)
    return [n for n, _ in model.named_parameters()
            if n.startswith(later) or (not n.startswith(f"{prefix}.") and "embed" not in n)]


# ---- data ---------------------------------------------------------------------------------


class Refusals:
    """Each forget question with each refusal, encoded on first use (IdkDPO's preferred answers).

    Args:
        questions: the forget questions, in the forget set's order.
        answers: the refusals (:func:`frag_utils.data.load_refusals`).
    """

    def __init__(self, tokenizer: Any, questions: Sequence[str], answers: Sequence[str], chat: bool, max_len: int):
        if len(answers) < 1:
            raise ValueError("IdkDPO needs at least one refusal to prefer over the forget answers.")
        self.tokenizer, self.questions, self.answers = tokenizer, list(questions), list(answers)
        self.chat, self.max_len = chat, max_len
        self._encoded: dict[tuple[int, int], dict] = {}

    def __len__(self) -> int:
        return len(self.answers)

    def get(self, i: int, j: int) -> dict:
        """Question ``i`` answered with refusal ``j``, encoded as :class:`train.QADataset` encodes."""
        if (i, j) not in self._encoded:
            enc = train.encode_qa(self.tokenizer, self.questions[i], self.answers[j], self.chat)
            self._encoded[i, j] = {"input_ids": enc["input_ids"][:self.max_len], "labels": enc["labels"][:self.max_len]}
        return self._encoded[i, j]


class PairedDataset(Dataset):
    """Forget items, each with a retain item drawn uniformly for it (with replacement).

    As OpenUnlearning's ``ForgetRetainDataset`` (anchor = forget), the pairing is redrawn every
    epoch; unlike it, the draw comes from ``(seed, epoch)`` rather than the global RNG, so the
    pairs depend on the seed only and a resumed run sees the same ones. Items are
    ``{"index": i, "forget": encoded, "retain": encoded}`` (no ``retain`` without a retain set),
    and, with ``refusals`` (IdkDPO), ``"alternate"``: the forget question answered with a refusal
    drawn uniformly from ``(seed, epoch)`` too (OpenUnlearning draws one at every access).
    """

    def __init__(self, forget: train.QADataset, retain: train.QADataset | None, seed: int,
                 refusals: Refusals | None = None):
        self.forget, self.retain, self.seed, self.refusals = forget, retain, seed, refusals
        self.epoch = -1
        self._pairs = np.zeros(0, dtype=np.int64)
        self._refusal = np.zeros(0, dtype=np.int64)
        self.use_epoch(0)

    def retain_indices(self, epoch: int) -> np.ndarray:
        """The retain index paired with each forget item in ``epoch``, [N_forget]."""
        if self.retain is None:
            return np.zeros(0, dtype=np.int64)
        rng = np.random.default_rng([self.seed, epoch])
        return rng.integers(0, len(self.retain), size=len(self.forget))

    def refusal_indices(self, epoch: int) -> np.ndarray:
        """The refusal drawn for each forget item in ``epoch``, [N_forget] (its own stream: the
        retain pairing is the same with or without refusals)."""
        if self.refusals is None:
            return np.zeros(0, dtype=np.int64)
        rng = np.random.default_rng([self.seed, epoch, 1])
        return rng.integers(0, len(self.refusals), size=len(self.forget))

    def use_epoch(self, epoch: int) -> None:
        """Switch to the pairing of ``epoch`` (called by the trainer at each epoch start)."""
        if epoch != self.epoch:
            self.epoch, self._pairs, self._refusal = epoch, self.retain_indices(epoch), self.refusal_indices(epoch)

    def __len__(self) -> int:
        return len(self.forget)

    def __getitem__(self, i: int) -> dict:
        item = {"index": i, "forget": self.forget[i]}
        if self.retain is not None:
            item["retain"] = self.retain[int(self._pairs[i])]
        if self.refusals is not None:
            item["alternate"] = self.refusals.get(i, int(self._refusal[i]))
        return item


def collate_pairs(examples: Sequence[dict], pad_id: int) -> dict:
    """Batch paired items: ``index`` [B] and, per side (``forget``, ``retain``, ``alternate``),
    ``input_ids``/``attention_mask``/``labels`` [B, T]."""
    out = {"index": torch.tensor([e["index"] for e in examples], dtype=torch.long),
           "forget": collate([e["forget"] for e in examples], pad_id, side="right")}
    for side in ("retain", "alternate"):
        if all(side in e for e in examples):
            out[side] = collate([e[side] for e in examples], pad_id, side="right")
    return out


class _PairingEpoch(TrainerCallback):
    """Tells the paired dataset which epoch starts (also after resuming from a checkpoint)."""

    def __init__(self, dataset: PairedDataset):
        self.dataset = dataset

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.dataset.use_epoch(int(round(state.epoch or 0)))


# ---- loss pieces --------------------------------------------------------------------------


def mean_answer_nll(model: nn.Module, batch: dict) -> torch.Tensor:
    """Mean NLL over all answer tokens of the batch (the Trainer's causal-LM loss), scalar."""
    nll, mask = train.answer_token_nll(model, batch)
    return nll.sum() / mask.sum().clamp_min(1)


def sequence_logprob(model: nn.Module, batch: dict) -> torch.Tensor:
    """``log p(y | x)`` of each answer, summed over its tokens, [B]."""
    nll, _ = train.answer_token_nll(model, batch)
    return -nll.sum(dim=1)


def npo_loss(logp: torch.Tensor, ref_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """``(2/beta) * mean log(1 + (p / p_ref)^beta)`` from sequence log-probs [B], scalar."""
    return (2.0 / beta) * F.softplus(beta * (logp - ref_logp)).mean()


def simnpo_loss(nll_sum: torch.Tensor, n_tokens: torch.Tensor, beta: float, delta: float) -> torch.Tensor:
    """SimNPO's forget loss ``-(2/beta) * mean log sigmoid(beta * (nll_sum / n_tokens - delta))``
    from each answer's summed NLL [B] and token count [B], scalar."""
    return -(2.0 / beta) * F.logsigmoid(beta * (nll_sum / n_tokens.clamp_min(1) - delta)).mean()


def dpo_loss(win_logp: torch.Tensor, win_ref: torch.Tensor, lose_logp: torch.Tensor, lose_ref: torch.Tensor,
             beta: float) -> torch.Tensor:
    """DPO's ``-(2/beta) * mean log sigmoid(beta * ((win - win_ref) - (lose - lose_ref)))`` from
    sequence log-probabilities [B] (OpenUnlearning's scaling, 2/beta as its NPO), scalar."""
    return -(2.0 / beta) * F.logsigmoid(beta * ((win_logp - win_ref) - (lose_logp - lose_ref))).mean()


def undial_loss(logits: torch.Tensor, ref_logits: torch.Tensor, labels: torch.Tensor, beta: float) -> torch.Tensor:
    """UNDIAL's distillation loss: cross-entropy of ``logits`` against ``softmax(ref_logits - beta *
    onehot(labels))``, mean over the N answer tokens.

    Args:
        logits, ref_logits: [N, V], the student's and the frozen target's at the answer positions.
        labels: [N], the true next token at each.
    """
    adjusted = ref_logits.float().scatter_add(
        1, labels[:, None], torch.full((len(labels), 1), -beta, dtype=torch.float32, device=labels.device))
    return F.cross_entropy(logits.float(), F.softmax(adjusted, dim=-1))


def wga_weighted_nll(nll: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """WGA's forget term before its sign: ``mean_t p_t^beta * NLL_t`` over the answer tokens, the
    weight ``p_t^beta = exp(-beta * NLL_t)`` held constant (no gradient through it), scalar.

    Args:
        nll, mask: [B, T-1] from :func:`frag_utils.train.answer_token_nll`.
    """
    weight = torch.exp(-beta * nll.detach())
    return (weight * nll)[mask].mean()


def masked_mse(act: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """OpenUnlearning's RMU distance: mean over d, mean over masked tokens of each sequence, mean over batch.

    Args:
        act, target: [B, T, d]; mask: [B, T], true on the tokens that count.
    """
    per_token = (act.float() - target.float()).pow(2).mean(dim=-1)  # [B, T]
    m = mask.to(per_token.dtype)
    return ((per_token * m).sum(dim=1) / m.sum(dim=1).clamp_min(1)).mean()


def control_vector(dim: int, coeff: float, seed: int) -> torch.Tensor:
    """RMU's fixed target ``u = coeff * r / ||r||``, ``r ~ U[0, 1)^dim`` from ``seed``, [dim]."""
    r = torch.rand(dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
    return coeff * r / r.norm()


class _StopForward(Exception):
    pass


def block_output(model: nn.Module, block: nn.Module, batch: dict, stop: bool = False) -> torch.Tensor:
    """Hidden state [B, T, d] leaving ``block`` (a decoder block of ``model``) on ``batch``.

    Args:
        stop: end the forward pass there (saves the later blocks and the vocabulary projection);
            only for a model that is not wrapped for distributed training.
    """
    cache = []

    def hook(module, inputs, output):
        cache.append(output[0] if isinstance(output, tuple) else output)
        if stop:
            raise _StopForward

    handle = block.register_forward_hook(hook)
    try:
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    except _StopForward:
        pass
    finally:
        handle.remove()
    return cache[0]


@torch.no_grad()
def reference_logprobs(model: nn.Module, dataset: train.QADataset, pad_id: int, batch_size: int,
                       bf16: bool) -> torch.Tensor:
    """``log p_ref(y | x)`` of every item of ``dataset`` under ``model`` (frozen), [N] on the CPU."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    try:
        for chunk in batches([dataset[i] for i in range(len(dataset))], batch_size):
            batch = {k: v.to(device) for k, v in collate(chunk, pad_id, side="right").items()}
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
                out.append(sequence_logprob(model, batch).float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(out)


# ---- objectives ---------------------------------------------------------------------------


class Objective:
    """One method's loss: named terms on a paired batch, and their weighted sum.

    Built from the target before training, it holds what the method needs from the frozen
    target: NPO the reference log-probabilities of every forget answer [N_forget]; RMU, IdkDPO and
    UNDIAL a frozen copy of the target (RMU also the control vector [d]). ``terms`` works on any
    model of the same shape.

    Args:
        config: the run's settings (RMU's block is resolved against ``model``).
        model: the target, as it is before unlearning.
        forget: the encoded forget set, in the order of the paired dataset's ``index`` (NPO only;
            may be None for the other methods).
        pad_id: the tokenizer's pad token.
    """

    def __init__(self, config: UnlearnConfig, model: nn.Module, forget: train.QADataset | None, pad_id: int):
        self.config = config.resolved(model)
        self.method = self.config.method
        self.ref_logp: torch.Tensor | None = None  # [N_forget], NPO
        self.frozen: nn.Module | None = None  # RMU
        self.control: torch.Tensor | None = None  # [d], RMU
        self.trainable: list[str] | None = None  # RMU
        if self.method in FROZEN_COPY:
            self.frozen = copy.deepcopy(model).eval().requires_grad_(False)
        if self.method == "npo":
            if forget is None:
                raise ValueError("NPO needs the forget set to compute the reference log-probabilities.")
            self.ref_logp = reference_logprobs(model, forget, pad_id, self.config.batch_size, self.config.bf16)
        if self.method == "rmu":
            layer = self.config.rmu_layer
            self.frozen_block = decoder_blocks(self.frozen)[1][layer]
            self.control = control_vector(model.config.hidden_size, self.config.rmu_steering_coeff,
                                          self.config.seed)
            self.trainable = rmu_trainable_names(model, layer, self.config.rmu_trainable)

    def terms(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        """The method's loss terms (scalars) on a batch from :func:`collate_pairs`."""
        cfg, f = self.config, batch["forget"]
        if self.method == "rmu":
            return self._rmu_terms(model, batch)
        if self.method in FROZEN_COPY:
            self._frozen_to(f["input_ids"].device)
        if self.method in ("ga", "graddiff"):
            out = {"forget_nll": mean_answer_nll(model, f)}
        elif self.method == "npo":
            ref = self.ref_logp.to(f["input_ids"].device)[batch["index"]]
            out = {"forget_npo": npo_loss(sequence_logprob(model, f), ref, cfg.npo_beta)}
        elif self.method == "simnpo":
            nll, mask = train.answer_token_nll(model, f)
            out = {"forget_simnpo": simnpo_loss(nll.sum(dim=1), mask.sum(dim=1), cfg.simnpo_beta, cfg.simnpo_delta)}
        elif self.method == "idkdpo":
            win = batch["alternate"]
            with torch.no_grad():
                win_ref, lose_ref = sequence_logprob(self.frozen, win), sequence_logprob(self.frozen, f)
            out = {"forget_dpo": dpo_loss(sequence_logprob(model, win), win_ref, sequence_logprob(model, f), lose_ref,
                                          cfg.dpo_beta)}
        elif self.method == "undial":
            out = {"forget_undial": self._undial_term(model, f)}
        else:  # wga
            out = {"forget_wga": wga_weighted_nll(*train.answer_token_nll(model, f), cfg.wga_beta)}
        if cfg.uses_retain:
            out["retain_nll"] = mean_answer_nll(model, batch["retain"])
        return out

    def _frozen_to(self, device: torch.device) -> None:
        if next(self.frozen.parameters()).device != device:  # Trainer moved the model after us
            self.frozen.to(device)

    def _undial_term(self, model: nn.Module, f: dict) -> torch.Tensor:
        targets = f["labels"][:, 1:]
        mask = targets != IGNORE
        keep = torch.cat([mask, torch.zeros_like(mask[:, :1])], dim=1)  # position t predicts token t+1
        inputs = {"input_ids": f["input_ids"], "attention_mask": f["attention_mask"], "use_cache": False}
        with torch.no_grad():
            ref_logits = models.logits_at(self.frozen, keep, **inputs)
        return undial_loss(models.logits_at(model, keep, **inputs), ref_logits, targets[mask], self.config.undial_beta)

    def _rmu_terms(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor]:
        f, r = batch["forget"], batch["retain"]
        inner = getattr(model, "module", model)  # under DDP, the module it wraps
        block = decoder_blocks(inner)[1][self.config.rmu_layer]
        stop = inner is model  # never stop a DDP-wrapped forward early: its reducer expects a full pass
        act_f = block_output(model, block, f, stop)
        u = self.control.to(device=act_f.device, dtype=act_f.dtype).expand_as(act_f)
        act_r = block_output(model, block, r, stop)
        self._frozen_to(act_r.device)
        with torch.no_grad():
            ref_r = block_output(self.frozen, self.frozen_block, r, stop=True)
        # As OpenUnlearning: the tokens that count are those whose label is an answer token.
        return {"forget_mse": masked_mse(act_f, u, f["labels"] != IGNORE),
                "retain_mse": masked_mse(act_r, ref_r, r["labels"] != IGNORE)}

    def loss(self, terms: dict[str, torch.Tensor]) -> torch.Tensor:
        """Weighted sum of the terms (see the module docstring)."""
        cfg = self.config
        name, sign = FORGET_TERM[self.method]
        loss = cfg.forget_weight * sign * terms[name]
        if "retain_nll" in terms:
            loss = loss + cfg.retain_weight * terms["retain_nll"]
        if "retain_mse" in terms:
            loss = loss + cfg.rmu_alpha * terms["retain_mse"]
        return loss


# ---- trainer ------------------------------------------------------------------------------


class UnlearnTrainer(Trainer):
    """``Trainer`` whose loss is an :class:`Objective`; logs each term's mean next to the loss."""

    # Our loss is a per-batch mean: the Trainer divides it by the accumulation steps itself.
    loss_is_scaled_for_ga = False

    def __init__(self, *args, objective: Objective, **kwargs):
        super().__init__(*args, **kwargs)
        self.objective = objective
        self._window: dict[str, list[float]] = {}  # term sums and counts since the last log
        self._epoch_terms: dict[str, list[float]] = {}  # same, over the current epoch
        self._epoch_index: int | None = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        terms = self.objective.terms(model, inputs)
        loss = self.objective.loss(terms)
        epoch = int(self.state.epoch or 0)
        if epoch != self._epoch_index:
            self._epoch_index, self._epoch_terms = epoch, {}
        for k, v in terms.items():
            for acc in (self._window, self._epoch_terms):
                s = acc.setdefault(k, [0.0, 0])
                s[0] += float(v.detach())
                s[1] += 1
        return (loss, None) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._window:
            logs.update({k: s / n for k, (s, n) in self._window.items()})
            self._window = {}
        super().log(logs, start_time)

    def last_epoch_terms(self) -> dict[str, float]:
        """Mean of each term over the batches of the last epoch trained in this process (this rank)."""
        return {k: s / n for k, (s, n) in self._epoch_terms.items()}


def make_unlearn_trainer(model: nn.Module, tokenizer: Any, forget_records: Sequence[dict],
                         retain_records: Sequence[dict] | None, config: UnlearnConfig,
                         work_dir: str | Path, callbacks: list | None = None,
                         refusals: Sequence[str] | None = None) -> UnlearnTrainer:
    """The trainer of one unlearning run, its objective built from ``model`` (the target) as it is now.

    For RMU the parameters outside ``objective.trainable`` are frozen here (``requires_grad=False``,
    so the optimizer leaves them out); :func:`unlearn` restores the flags after training.

    Args:
        refusals: IdkDPO's preferred answers (:func:`frag_utils.data.load_refusals`); only IdkDPO reads them.
    Raises:
        ValueError: an empty forget set, an empty retain set for a method that uses one, IdkDPO
            without refusals, ``rmu_layer`` out of range, or ``rmu_trainable`` matching nothing.
    """
    if not forget_records:
        raise ValueError("The forget set is empty: nothing to unlearn.")
    if config.uses_retain and not retain_records:
        raise ValueError(f"The retain set is empty; method {config.method!r} needs retain records.")
    if config.method == "idkdpo" and not refusals:
        raise ValueError("IdkDPO prefers a refusal over each forget answer: pass refusals "
                         "(frag_utils.data.load_refusals() reads the committed set).")
    config = config.resolved(model)
    forget = train.QADataset(tokenizer, forget_records, config.chat, config.max_len)
    retain = (train.QADataset(tokenizer, retain_records, config.chat, config.max_len)
              if config.uses_retain else None)  # GA (and a zero retain weight) never looks at the retain side
    idk = (Refusals(tokenizer, [r["question"] for r in forget_records], refusals, config.chat, config.max_len)
           if config.method == "idkdpo" else None)
    dataset = PairedDataset(forget, retain, config.seed, idk)
    spec = {"config": config.as_dict(), "forget": cache.records_digest(forget_records),
            "retain": cache.records_digest(retain_records if retain is not None else None),
            **({"refusals": cache.records_digest(list(refusals))} if idk is not None else {})}
    train.guard_work_dir(Path(work_dir), spec, "unlearning run", SPEC_FILE)
    pad = tokenizer.pad_token_id
    train.numerics.check_autocast(config.bf16, str(next(model.parameters()).device))  # before any reference pass
    if config.weights == "bf16":  # the frozen references (NPO, RMU) are taken from the stored, bf16 model
        train.numerics.round_to_bf16_(model.parameters())
    objective = Objective(config, model, forget, pad)
    if objective.trainable is not None:
        keep = set(objective.trainable)
        if train.world_size() > 1:  # DDP: a parameter RMU's loss never reaches would stall the gradient
            keep -= set(params_after_block(model, objective.config.rmu_layer))  # reduction (alone: no grad, no step)
        for name, p in model.named_parameters():
            p.requires_grad_(name in keep)
    return train.make_trainer(model, tokenizer, dataset, config.train_config(), work_dir,
                              trainer_cls=UnlearnTrainer, collator=_PairCollator(pad), objective=objective,
                              callbacks=[_PairingEpoch(dataset), *(callbacks or [])])


class _PairCollator:
    """Picklable collator (dataloader workers may need to pickle it)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, examples: Sequence[dict]) -> dict:
        return collate_pairs(examples, self.pad_id)


def unlearn(model: nn.Module, tokenizer: Any, forget_records: Sequence[dict],
            retain_records: Sequence[dict] | None, config: UnlearnConfig, work_dir: str | Path,
            callbacks: list | None = None, refusals: Sequence[str] | None = None) -> dict:
    """Unlearn ``forget_records`` from ``model`` in place with a gradient method.

    Args:
        model: the target. To resume an interrupted run, pass the target again: the Trainer loads
            the newest checkpoint in ``work_dir`` over it, while NPO's reference and RMU's frozen
            copy are taken from the target as passed.
        forget_records, retain_records: question/answer records; ``retain_records`` may be empty for
            GA and for a zero retain weight.
        refusals: IdkDPO's preferred answers (:func:`frag_utils.data.load_refusals`).
        work_dir: epoch checkpoints to resume from; delete it once the model is saved.
        callbacks: extra ``TrainerCallback``s.
    Returns:
        Summary: ``method``, ``global_steps``, ``train_seconds``, ``final_train_loss``,
        ``final_terms`` (each term's mean over the last epoch), ``logged_losses``, ``logged_terms``
        (one dict per logging step), ``resumed_from``, ``n_forget``, ``n_retain``, ``config`` (with
        the RMU block chosen) and, for RMU, ``rmu`` (block, block count, trainable parameters).
    """
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    try:
        trainer = make_unlearn_trainer(model, tokenizer, forget_records, retain_records, config, work_dir,
                                       callbacks, refusals)
        summary = train.run_trainer(trainer, work_dir)
    finally:
        for name, p in model.named_parameters():  # undo RMU's freezing
            p.requires_grad_(flags[name])
    objective = trainer.objective
    summary.update(
        method=objective.method, final_terms=trainer.last_epoch_terms(),
        logged_terms=[{k: h[k] for k in ("step", "epoch", "loss", *TERM_NAMES) if k in h}
                      for h in trainer.state.log_history if "loss" in h],
        n_forget=len(forget_records), n_retain=len(retain_records or []), config=objective.config.as_dict())
    if objective.method == "rmu":
        summary["rmu"] = {"layer": objective.config.rmu_layer, "n_blocks": len(decoder_blocks(model)[1]),
                          "trainable": objective.trainable,
                          "n_trainable": sum(p.numel() for n, p in model.named_parameters()
                                             if n in set(objective.trainable)),
                          "control_norm": float(objective.control.norm())}
    return summary
