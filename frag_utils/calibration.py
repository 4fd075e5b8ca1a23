"""Per-channel activation norms on forget and retain calibration text (the paper's Eq. 7).

For every selected ``nn.Linear`` with weight ``[d_out, d_in]``, a forward pre-hook sees its input
``X [B, T, d_in]`` and accumulates, per input channel ``j``:

* ``seq_norm`` (default, Eq. 7): ``x_j = mean over sequences s of ||X[s, :, j]||_2``, the L2 norm
  over that sequence's (non-padding) tokens;
* ``wanda``: ``x_j = sqrt(sum over sequences and tokens of X^2 / N)``, Wanda's running
  root-mean-square scaler, a different quantity offered for comparison.

Padding never enters a norm: batches are right-padded and padded positions are masked out.
Both passes (forget and retain) run the same, original model. Norms are cached to disk as
safetensors under a :func:`frag_utils.cache.key` (model, text, settings, code).
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import nn

from . import paths
from .prompts import IGNORE, PLAIN_TEMPLATE, batches, collate, encode_qa

PROJECTIONS = {
    "attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
}
PROJECTIONS["all"] = PROJECTIONS["attn"] + PROJECTIONS["mlp"]


class CalibrationError(ValueError):
    """Calibration that cannot run: empty split, unknown scope or setting."""


@dataclass(frozen=True)
class CalibConfig:
    """How calibration text is chosen and summarised (defaults: the paper's appendix)."""

    n: int = 128  # sequences per split (N_f = N_r)
    max_len: int = 256  # tokens per sequence, longer ones cut
    selection: str = "first"  # first | sample (seeded)
    seed: int = 0  # for selection="sample"
    chat: bool = False  # the chat template instead of plain "Question: ...\nAnswer: ..." text
    statistic: str = "seq_norm"  # seq_norm (Eq. 7) | wanda
    batch_size: int = 8

    def __post_init__(self) -> None:
        if self.n < 1 or self.max_len < 2 or self.batch_size < 1:
            raise CalibrationError(f"n, max_len and batch_size must be positive, got {self}")
        if self.selection not in ("first", "sample"):
            raise CalibrationError(f"selection must be 'first' or 'sample', got {self.selection!r}")
        if self.statistic not in ("seq_norm", "wanda"):
            raise CalibrationError(f"statistic must be 'seq_norm' or 'wanda', got {self.statistic!r}")

    def as_dict(self) -> dict:
        return asdict(self)


def select_modules(model: nn.Module, scope: str = "all") -> dict[str, nn.Linear]:
    """The Linear modules FRAG and FRP work on, by name.

    ``all`` is the seven projections of each block, ``mlp`` gate/up/down, ``attn`` q/k/v/o. For an
    architecture without those names, ``all`` falls back to every ``nn.Linear`` except the
    output head.
    """
    if scope not in PROJECTIONS:
        raise CalibrationError(f"Unknown module scope {scope!r}; choose all, mlp or attn.")
    linear = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    chosen = {n: m for n, m in linear.items() if n.rsplit(".", 1)[-1] in PROJECTIONS[scope]}
    if chosen:
        return chosen
    if scope != "all":
        raise CalibrationError(f"This architecture has no {PROJECTIONS[scope]} modules; use scope 'all'.")
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    chosen = {n: m for n, m in linear.items() if m is not head}
    if not chosen:
        raise CalibrationError("The model has no nn.Linear modules to score.")
    return chosen


def select_records(records: Sequence[dict], config: CalibConfig) -> list[dict]:
    """The calibration records: the first ``n`` or a seeded sample of ``n`` (all if fewer)."""
    if len(records) == 0:
        raise CalibrationError("The calibration split is empty: FRAG needs forget and retain text.")
    if config.selection == "first" or len(records) <= config.n:
        return list(records[:config.n])
    idx = sorted(random.Random(config.seed).sample(range(len(records)), config.n))
    return [records[i] for i in idx]


def encode_calibration(tokenizer: Any, records: Sequence[dict], config: CalibConfig) -> list[dict]:
    """Token ids of each calibration text, cut to ``max_len``."""
    out = []
    for r in records:
        if config.chat:
            ids = encode_qa(tokenizer, r["question"], r["answer"], chat=True)["input_ids"]
        else:
            ids = tokenizer(PLAIN_TEMPLATE.format(question=r["question"]) + r["answer"])["input_ids"]
        out.append({"input_ids": list(ids)[:config.max_len]})
    return out


def backbone(model: nn.Module, modules: dict[str, nn.Linear]) -> nn.Module:
    """The part of ``model`` to run for calibration: the decoder without the output head when every
    hooked module lies inside it (a causal LM's ``.model``), so no [batch, tokens, vocab] logits
    are computed; otherwise the whole model. The hooks see the same inputs either way."""
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and modules and all(n.startswith("model.") for n in modules):
        return inner
    return model


@torch.no_grad()
def run_hooked_batches(model: nn.Module, tokenizer: Any, encoded: Sequence[dict], batch_size: int,
                       hooked: dict[str, nn.Module], state: dict) -> int:
    """Run encoded calibration text through ``model`` for forward hooks on ``hooked`` to collect.

    Right-padded batches in eval mode (the mode is restored after), through :func:`backbone`
    (no output head when the hooked modules do not need it). Before each batch,
    ``state["mask"]`` is set to its attention mask ``[B, T]`` (float), so a hook can exclude padding.

    Returns:
        The number of non-padding tokens run.
    """
    device = next(model.parameters()).device
    run = backbone(model, hooked)
    was_training = model.training
    model.eval()
    tokens = 0
    try:
        for chunk in batches(encoded, batch_size):
            batch = {k: v.to(device) for k, v in collate(chunk, tokenizer.pad_token_id, side="right").items()}
            state["mask"] = batch["attention_mask"].float()
            tokens += int(batch["attention_mask"].sum())
            run(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    finally:
        model.train(was_training)
    return tokens


@torch.no_grad()
def activation_norms(model: nn.Module, tokenizer: Any, records: Sequence[dict], modules: dict[str, nn.Linear],
                     config: CalibConfig) -> dict[str, torch.Tensor]:
    """Per-input-channel activation norms ``{module name: x [d_in]}`` (fp32) on ``records``."""
    chosen = select_records(records, config)
    encoded = encode_calibration(tokenizer, chosen, config)
    device = next(model.parameters()).device
    acc = {name: torch.zeros(m.in_features, dtype=torch.float64, device=device) for name, m in modules.items()}
    state: dict[str, torch.Tensor] = {}

    def hook(name):
        def fn(_module, args):
            x = args[0].float()  # [B, T, d_in]
            sq = (x.pow(2) * state["mask"][..., None]).sum(dim=1)  # [B, d_in], padding excluded
            acc[name] += (sq.sqrt() if config.statistic == "seq_norm" else sq).sum(dim=0).double()
        return fn

    handles = [m.register_forward_pre_hook(hook(name)) for name, m in modules.items()]
    try:
        run_hooked_batches(model, tokenizer, encoded, config.batch_size, modules, state)
    finally:
        for h in handles:
            h.remove()
    n = len(encoded)
    if config.statistic == "seq_norm":
        return {k: (v / n).float().cpu() for k, v in acc.items()}
    return {k: (v / n).sqrt().float().cpu() for k, v in acc.items()}


def _cache_file(model_id: str, data_source: str, split: str, records: Sequence[dict], modules: Iterable[str],
                config: CalibConfig, dtype: torch.dtype = torch.float32) -> Path:
    """Where the norms of these settings are cached: named by their :func:`frag_utils.cache.key`
    (the model's identity, the calibration text itself, the settings, the dtype, the code)."""
    from . import cache

    text = [[r["question"], r["answer"]] for r in select_records(records, config)]
    settings = {"data": data_source, "split": split, "modules": sorted(modules), "text": cache.records_digest(text),
                **config.as_dict(), "dtype": str(dtype)}
    digest = cache.key("calibration", settings, {"model": model_id})[:24]
    return paths.cache_dir() / "calibration" / f"{digest}.safetensors"


def cached_norms(model_id: str, data_source: str, split: str, records: Sequence[dict], modules: Iterable[str],
                 config: CalibConfig, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor] | None:
    """The activation norms :func:`calibrate` cached for these settings (the model run in
    ``dtype``), or None; no model needed."""
    from safetensors.torch import load_file

    modules = list(modules)
    file = _cache_file(model_id, data_source, split, records, modules, config, dtype)
    if not file.is_file():
        return None
    norms = load_file(str(file))
    return norms if set(norms) == set(modules) else None


def calibrate(model: nn.Module, tokenizer: Any, model_id: str, data_source: str, split: str,
              records: Sequence[dict], modules: dict[str, nn.Linear], config: CalibConfig,
              use_cache: bool = True) -> tuple[dict[str, torch.Tensor], bool]:
    """Activation norms of one split, from the disk cache when the same key was computed before.

    Returns:
        ``(norms, from_cache)``.
    """
    from safetensors.torch import save_file

    dtype = next(model.parameters()).dtype
    norms = cached_norms(model_id, data_source, split, records, modules, config, dtype) if use_cache else None
    if norms is not None:
        return norms, True
    norms = activation_norms(model, tokenizer, records, modules, config)
    file = _cache_file(model_id, data_source, split, records, modules, config, dtype)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in norms.items()}, str(tmp))
    tmp.replace(file)
    return norms, False


def gradient_stats(model: nn.Module, tokenizer: Any, records: Sequence[dict], modules: dict[str, nn.Linear],
                   config: CalibConfig, ig_steps: int = 0) -> dict[str, dict[str, torch.Tensor]]:
    """Gradient statistics of the language-model loss on calibration text, per scored module.

    For the importance terms the FRAG ablation swaps in (appendix C.5). Over the batches of the
    calibration text (the same records and encoding as :func:`activation_norms`), the gradient
    ``g`` of the mean token NLL with respect to each module's weight:

    * ``g2``: the mean of ``g ** 2`` over batches (a batch-level empirical Fisher diagonal);
    * ``g``: the mean of ``g``;
    * ``ig`` (when ``ig_steps > 0``): the mean gradient along the straight path from zero to the
      weights of the scored modules, ``(1/m) sum_k g(alpha_k W)`` with ``alpha_k = k/m``, the
      path average that integrated gradients multiply by ``W``.

    The model is left as it was (weights, gradients, train/eval mode).

    Returns:
        ``{module: {"g2": [d_out, d_in], "g": ..., "ig": ...}}`` (float64).
    """
    if ig_steps < 0:
        raise CalibrationError(f"ig_steps must be >= 0, got {ig_steps}.")
    encoded = encode_calibration(tokenizer, select_records(records, config), config)
    device = next(model.parameters()).device
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    was_training = model.training
    model.eval()
    weights = {name: m.weight for name, m in modules.items()}
    for p in model.parameters():
        p.requires_grad_(False)
    for w in weights.values():
        w.requires_grad_(True)
    acc = {name: {"g2": torch.zeros(w.shape, dtype=torch.float64), "g": torch.zeros(w.shape, dtype=torch.float64)}
           for name, w in weights.items()}
    if ig_steps:
        for a in acc.values():
            a["ig"] = torch.zeros_like(a["g"])
    originals = {name: w.detach().clone() for name, w in weights.items()}
    n_batches = 0
    try:
        chunks = [collate(c, tokenizer.pad_token_id, side="right") for c in batches(encoded, config.batch_size)]
        for batch in chunks:
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE)
            grads = torch.autograd.grad(model(**batch, labels=labels).loss, list(weights.values()))
            for (name, _), g in zip(weights.items(), grads):
                g = g.detach().double().cpu()
                acc[name]["g"] += g
                acc[name]["g2"] += g.pow(2)
            for k in range(1, ig_steps + 1):  # the path from 0 to W, scored modules scaled together
                with torch.no_grad():
                    for name, w in weights.items():
                        w.copy_(originals[name] * (k / ig_steps))
                grads = torch.autograd.grad(model(**batch, labels=labels).loss, list(weights.values()))
                for (name, _), g in zip(weights.items(), grads):
                    acc[name]["ig"] += g.detach().double().cpu() / ig_steps
            n_batches += 1
    finally:
        with torch.no_grad():
            for name, w in weights.items():
                w.copy_(originals[name])
        for n, p in model.named_parameters():
            p.requires_grad_(flags[n])
        model.train(was_training)
    return {name: {k: v / n_batches for k, v in a.items()} for name, a in acc.items()}
