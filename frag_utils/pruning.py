"""Pruning for unlearning: FRP (Forget-Retain Pruning), the random-mask control of the same
size, and the Selective Pruning baseline (MLP neurons).

FRP, per target module ``W [d_out, d_in]`` and output row ``i``, zeroes the top
``floor(rho * d_in)`` entries of a score ``S`` ranked within the row. Two scorings:

* ``released`` (the default): exactly the authors' released code (``frp/prune.py``, scoring
  ``rank_combo``, as ``scripts/frp_tofu.sh`` runs it)::

      S_ij = rank_j(x^f_j / (x^r_j + eps)) + lam * rank_j(|W_ij|)      (float32, as theirs)

  with ``lam`` = :data:`DEFAULT_LAM` = 0.05 (their flag ``--beta`` is the paper's lambda), and the
  paper's beta applied as a hard veto: per row the top ``floor(veto * d_in)`` entries by
  ``|W_ij| x^r_j / (x^f_j + eps)`` are never pruned (their ``--protect_by excl --protect_p P``;
  ``veto`` = P = 0 for plain FRP, 0.15 for the 1B "beta = 0.15" row, 0.05 at 3B).
* ``eq6``: the paper's Eq. 6 as printed, ``rank(F) - beta * rank(R) + lam * rank(|W|)`` with
  ``F = |W| x^f/(x^r+eps)``, ``R = |W| x^r/(x^f+eps)`` (float64; an ablation, not what produced
  the paper's numbers). With ``lam = 0`` and ``beta`` small its ranking is nearly the channel
  ratio alone.

Ties. Ranks break ties by position (a stable sort) and the top-k takes, among equal scores at
the budget's edge, the lowest positions. The authors' code uses torch's default (unstable)
``argsort`` and ``topk``, whose order among equal values is unspecified and differs between CPU
and GPU kernels. Ties in ``S`` are common whatever the precision: with ``lam`` = 0.05 two entries
of a row tie whenever their ``rank(|W|)`` differ by 20 times their ratio ranks' difference the other
way (measured: every row of a random fp32 576 x 64 layer holds tied scores, and 3 rows in 64 tie
at the 3 % budget's edge); bf16 weights add ties in ``|W|`` itself (about a third of a 576-wide
row). So at the budget's edge a mask can differ from one of theirs in entries whose scores are
equal. Scores and rule are theirs; the tie order is fixed here so that a mask is a function of
its inputs.

Selective Pruning (SP, the neuron-level baseline): each MLP neuron is scored by its mean
``|activation|`` on forget tokens over that on retain tokens, ``I_f / (I_r + eps)``, one global
top ``fraction`` over all layers is chosen, and each chosen neuron is removed (its ``down_proj``
column and its ``gate_proj`` / ``up_proj`` rows zeroed). Two variants:

* ``released`` (the default): exactly the authors' ``baselines/selective_pruning.py --scoring
  activation_ratio`` with its defaults (:data:`SP_RELEASED`): the activation is the output of
  ``up_proj``; the text is the first 500 records as plain ``Question: ...\nAnswer: ...`` cut at
  256 tokens (``frp/data.py``), run one sequence per forward pass, sequences taken until 50,000
  tokens have been run (the one that crosses the mark included); each sequence's sum of
  ``|a|`` is taken in the model's dtype and accumulated in float32; ``eps`` = 1e-5; scores in
  float32; the threshold is the smallest of the global top ``floor(fraction * n)`` scores and
  every neuron scoring ``>=`` it is removed, so ties at the threshold remove more than the budget.
* ``down_in``: the input of ``down_proj``, ``act(gate(x)) * up(x)``, over the calibration
  configuration's batches (padding excluded), ``eps`` = 1e-6, scores in float64, exactly
  ``floor(fraction * n)`` neurons (ties to the earlier MLP, then the lower index).

The authors load the model in bf16 for SP (``torch_dtype=torch.bfloat16``); here the dtype the
model runs in is :func:`prune_checkpoint`'s ``precision``.

:func:`prune_checkpoint` does either method end to end (load, calibrate, prune, measure, save);
``frag prune`` is its command line.
"""
from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .frag import EPS, importance

DEFAULT_LAM = 0.05  # the authors' released lambda (their --beta), weight of the |W| rank
DEFAULT_VETO = 0.0  # the paper's beta as a veto fraction P: 0 for plain FRP (0.15: the 1B "beta = 0.15" row)
FRP_VARIANTS = ("released", "eq6")
# The scoring rules of the paper's FRP ablation (appendix B.3), each pruning the per-row top of
# its score: |W| only (magnitude pruning), |W| x^f, and |W| x^f / x^r (= F alone, no retain term).
FRP_ABLATION_RULES = ("magnitude", "magnitude_xf", "magnitude_ratio")
SP_VARIANTS = ("released", "down_in")
# The released SP baseline's defaults (baselines/selective_pruning.py, frp/data.py): records per split,
# tokens per sequence, the token budget per split, and eps.
SP_RELEASED = {"n": 500, "max_len": 256, "max_tokens": 50_000, "eps": 1e-5}
SP_EPS = {"released": SP_RELEASED["eps"], "down_in": EPS}
PRECISIONS = ("fp32", "bf16")  # the dtype a pruner runs the model in for calibration (the authors' --dtype)
DEFAULT_SPARSITY = {"frp": 0.03, "sp": 0.05}  # paper: 3 % of each row; SP baseline: 5 % of neurons


class PruningError(ValueError):
    """Pruning that cannot run or did not do what was asked, with what is wrong."""


def row_ranks(x: torch.Tensor) -> torch.Tensor:
    """0-based ranks within each row of ``x [d_out, d_in]`` (larger value, larger rank; ties by position)."""
    order = x.argsort(dim=1, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(x.shape[1], device=x.device).expand_as(order))
    return ranks


def _check_frp_variant(variant: str) -> str:
    if variant not in FRP_VARIANTS + FRP_ABLATION_RULES:
        raise PruningError(f"Unknown FRP variant {variant!r}; choose one of {FRP_VARIANTS + FRP_ABLATION_RULES}.")
    return variant


def frp_scores(w: torch.Tensor, xf: torch.Tensor, xr: torch.Tensor, beta: float, lam: float,
               variant: str = "released", eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor | None]:
    """FRP scores ``S [d_out, d_in]`` and, for the released variant, the score its veto ranks.

    Args:
        w: weight [d_out, d_in]; xf, xr: calibration norms [d_in].
        beta: ``eq6`` only, the weight of ``rank(R)``; lam: the weight of ``rank(|W|)``.
    Returns:
        ``(S, veto_score)``; ``veto_score`` is ``|W| x^r / (x^f + eps)`` for ``released``, else None.
    """
    variant = _check_frp_variant(variant)
    if variant == "released":  # float32 throughout, as rank_combo computes it
        a = w.detach().float().abs()
        xf32, xr32 = xf.float().to(a.device), xr.float().to(a.device)
        ratio = (xf32 / (xr32 + eps))[None, :].expand_as(a)
        s = row_ranks(ratio).float() + lam * row_ranks(a).float()
        return s, a * (xr32 / (xf32 + eps))[None, :]
    w, xf, xr = w.double(), xf.double().to(w.device), xr.double().to(w.device)
    f, r = importance(w, xf, xr, eps)
    if variant == "eq6":  # float64: rank sums with small beta stay exact
        return row_ranks(f).double() - beta * row_ranks(r).double() + lam * row_ranks(w.abs()).double(), None
    if variant == "magnitude":
        return w.abs(), None
    if variant == "magnitude_xf":
        return w.abs() * xf[None, :], None
    return f, None  # magnitude_ratio


def top_k_mask(scores: torch.Tensor, k: int, blocked: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean mask of the ``k`` highest scores in each row, never choosing ``blocked`` entries;
    among equal scores the lower position is chosen first."""
    if k <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    s = scores.clone()
    if blocked is not None:
        s[blocked] = -math.inf
    idx = s.sort(dim=1, descending=True, stable=True).indices[:, :k]
    mask = torch.zeros_like(scores, dtype=torch.bool)
    mask.scatter_(1, idx, True)
    if blocked is not None and (mask & blocked).any():
        raise PruningError("A row has fewer unvetoed entries than the pruning budget.")
    return mask


@torch.no_grad()
def frp_prune(modules: dict[str, nn.Linear], xf: dict[str, torch.Tensor], xr: dict[str, torch.Tensor],
              rho: float = 0.03, beta: float = 0.05, lam: float = DEFAULT_LAM, variant: str = "released",
              veto: float = DEFAULT_VETO) -> dict[str, dict]:
    """Zero the top ``floor(rho * d_in)`` FRP entries of every row of each module, in place.

    Args:
        modules: the Linear modules to prune, by name (weights ``[d_out, d_in]``).
        xf, xr: forget and retain calibration norms by module name, each ``[d_in]``.
        rho: fraction of each row zeroed; beta: ``eq6``'s retain-rank weight; lam: magnitude-rank weight.
        variant: ``released`` (the authors' code), ``eq6`` (Eq. 6 as printed), or one of the
            ablation's scoring rules :data:`FRP_ABLATION_RULES` (``beta``, ``lam`` unused).
        veto: ``released`` only: the per-row fraction by ``|W| x^r / x^f`` never pruned (P).
    Returns:
        Per module, measured on the weights after pruning: entries zeroed per row (equal in every
        row), the achieved row sparsity, the total zeroed, ``d_in``, and how many distinct sets
        of columns the rows pruned (1 would be column pruning).
    Raises:
        PruningError: rho outside (0, 1), an unknown variant, a veto for another variant or that
            leaves fewer entries than the budget, or a row that did not end with exactly
            ``floor(rho * d_in)`` zeros.
    """
    if not 0 < rho < 1:
        raise PruningError(f"rho must be in (0, 1), got {rho}")
    if not 0 <= veto < 1:
        raise PruningError(f"veto must be in [0, 1), got {veto}")
    variant = _check_frp_variant(variant)
    if veto and variant != "released":
        raise PruningError(f"veto is the released variant's retain veto (the paper's beta as P); variant "
                           f"{variant!r} has none: set veto to 0.")
    missing = sorted(set(modules) - (set(xf) & set(xr)))
    if missing:
        raise PruningError(f"No calibration norms for module(s) {missing[:3]}: calibrate the same modules.")
    report = {}
    for name, m in modules.items():
        w = m.weight
        k = math.floor(rho * w.shape[1])
        s, veto_score = frp_scores(w.detach(), xf[name], xr[name], beta, lam, variant)
        blocked = top_k_mask(veto_score, math.floor(veto * w.shape[1])) if veto_score is not None else None
        mask = top_k_mask(s, k, blocked)
        report[name] = {**_apply_row_mask(w, mask, k, name),
                        "distinct_row_masks": int(torch.unique(mask, dim=0).shape[0])}
    return report


@torch.no_grad()
def random_prune(modules: dict[str, nn.Linear], rho: float, seed: int = 0) -> dict[str, dict]:
    """Zero ``floor(rho * d_in)`` uniformly random entries of every row, in place (a direction-blind control)."""
    gen = torch.Generator().manual_seed(seed)
    report = {}
    for name, m in modules.items():
        k = math.floor(rho * m.weight.shape[1])
        mask = top_k_mask(torch.rand(m.weight.shape, generator=gen), k)
        report[name] = _apply_row_mask(m.weight, mask.to(m.weight.device), k, name)
    return report


def _apply_row_mask(w: torch.Tensor, mask: torch.Tensor, k: int, name: str) -> dict:
    """Zero ``w [d_out, d_in]`` on ``mask`` in place, then measure what happened on the weights:
    every row must hold exactly ``k`` zeroed entries and nothing off the mask may have moved."""
    before = w.detach().clone()
    w[mask] = 0.0
    # entries already zero before (quantised checkpoints have some) count as pruned when chosen
    per_row = ((w == 0) & mask).sum(dim=1)
    if not bool((per_row == k).all()) or not bool((mask.sum(dim=1) == k).all()):
        raise PruningError(f"'{name}': rows lost between {int(per_row.min())} and {int(per_row.max())} "
                           f"entries, not the {k} asked for.")
    if not torch.equal(w[~mask], before[~mask]):
        raise PruningError(f"'{name}': entries outside the pruning mask changed.")
    achieved = int(per_row[0]) if per_row.numel() else 0
    return {"pruned_per_row": achieved, "row_sparsity": achieved / w.shape[1], "pruned": int(per_row.sum()),
            "d_in": int(w.shape[1])}


def zeroed_per_row(original: torch.Tensor, pruned: torch.Tensor) -> dict:
    """Entries of each row of ``pruned [d_out, d_in]`` that are zero where ``original`` was not.

    A check from the weights alone (e.g. of a saved checkpoint); entries that were already zero
    are not counted, so on a model without exact zeros this is the pruned count per row.

    Returns:
        ``min`` and ``max`` over rows, ``d_in``, and ``other_changes``: entries changed to a non-zero value.
    """
    zeroed = ((pruned == 0) & (original != 0)).sum(dim=1)
    other = int(((pruned != original) & (pruned != 0)).sum())
    return {"min": int(zeroed.min()), "max": int(zeroed.max()), "d_in": int(original.shape[1]),
            "other_changes": other}


@torch.no_grad()
def add_isotropic_noise(modules: dict[str, nn.Linear], target_l2: float, seed: int = 0) -> float:
    """Add N(0, sigma^2) noise to every weight of ``modules`` in place, sigma set so that the
    expected L2 norm of the update is ``target_l2``; returns sigma. A direction-blind control."""
    n = sum(m.weight.numel() for m in modules.values())
    sigma = target_l2 / math.sqrt(n)
    gen = torch.Generator().manual_seed(seed)
    for _, m in sorted(modules.items()):
        m.weight.add_(torch.randn(m.weight.shape, generator=gen).to(m.weight) * sigma)
    return sigma


def edited_copy(model: nn.Module, edit: Callable[[dict[str, nn.Linear]], Any], scope: str = "mlp"
                ) -> tuple[dict[str, torch.Tensor], Any]:
    """Apply ``edit`` to the ``scope`` modules of a copy of ``model``; ``model`` is left as it was.

    Returns:
        ``(state dict of the edited copy, whatever edit returned)``.
    """
    from .calibration import select_modules
    from .frag import state_dict_of

    clone = copy.deepcopy(model)
    info = edit(select_modules(clone, scope))
    return state_dict_of(clone), info


# ---------------------------------------------------------------------------------------------
# Selective Pruning (SP): the neuron-level baseline


def mlp_blocks(model: nn.Module) -> dict[str, nn.Module]:
    """The gated MLPs of ``model`` (modules with ``gate_proj``, ``up_proj`` and ``down_proj``), in model order.

    Raises:
        PruningError: the model has no such MLP, or their widths do not fit together.
    """
    blocks = {}
    for name, m in model.named_modules():
        parts = [getattr(m, p, None) for p in ("gate_proj", "up_proj", "down_proj")]
        if all(isinstance(p, nn.Linear) for p in parts):
            gate, up, down = parts
            if not gate.out_features == up.out_features == down.in_features:
                raise PruningError(f"'{name}': gate_proj/up_proj outputs ({gate.out_features}, {up.out_features}) "
                                   f"do not match down_proj's input ({down.in_features}).")
            blocks[name] = m
    if not blocks:
        raise PruningError("Selective Pruning needs gated MLPs (modules with gate_proj, up_proj and down_proj, "
                           "as in Llama); this model has none.")
    return blocks


def sp_calib_config(variant: str = "released") -> Any:
    """The calibration text a Selective Pruning variant uses by default: the released baseline's
    500 records of 256 tokens (``frp/data.py``), or 400 for ``down_in``."""
    from .calibration import CalibConfig

    _check_sp_variant(variant)
    if variant == "released":
        return CalibConfig(n=SP_RELEASED["n"], max_len=SP_RELEASED["max_len"], batch_size=1)
    return CalibConfig(n=400, max_len=256)


def _check_sp_variant(variant: str) -> None:
    if variant not in SP_VARIANTS:
        raise PruningError(f"Unknown Selective Pruning variant {variant!r}; choose one of {SP_VARIANTS}.")


@torch.no_grad()
def neuron_activations(model: nn.Module, tokenizer: Any, records: Sequence[dict], config: Any,
                       variant: str = "released") -> tuple[dict[str, torch.Tensor], dict]:
    """Mean ``|activation|`` of every MLP neuron over the tokens of ``records``.

    Args:
        config: a :class:`frag_utils.calibration.CalibConfig` (n, max_len, selection, chat, batch
            size; its ``statistic`` is not used, and ``released`` ignores its batch size).
        variant: ``released`` (the output of ``up_proj``, one sequence per forward pass, the
            sequences up to :data:`SP_RELEASED` ``max_tokens`` tokens, sums in the model's dtype
            accumulated in float32, as ``collect_activations`` does) or ``down_in`` (the input of
            ``down_proj``, ``act(gate(x)) * up(x)``, batched, padding excluded, float64 sums).
    Returns:
        ``({MLP name: mean |a| [d_ff]} (fp32, on the CPU), {"sequences": run, "tokens": run})``.
    """
    from .calibration import encode_calibration, run_hooked_batches, select_records

    _check_sp_variant(variant)
    blocks = mlp_blocks(model)
    if len(records) == 0:
        raise PruningError("Selective Pruning needs forget and retain text: a split is empty.")
    encoded = encode_calibration(tokenizer, select_records(records, config), config)
    released = variant == "released"
    if released:  # theirs: stop after the sequence with which the tokens run reach max_tokens
        ends = torch.tensor([len(e["input_ids"]) for e in encoded]).cumsum(0)
        encoded = encoded[:int((ends < SP_RELEASED["max_tokens"]).sum()) + 1]
    device = next(model.parameters()).device
    acc = {name: torch.zeros(b.down_proj.in_features, dtype=torch.float32 if released else torch.float64,
                             device=device) for name, b in blocks.items()}
    state: dict[str, torch.Tensor] = {}

    def add(name: str, a: torch.Tensor) -> None:  # a [B, T, d_ff]
        if released:  # B = 1, no padding: the sum in a's dtype, then float32, as theirs
            acc[name] += a.abs().reshape(-1, a.shape[-1]).sum(dim=0).float()
        else:  # padded positions masked out
            acc[name] += (a.float().abs() * state["mask"][..., None]).sum(dim=(0, 1)).double()

    if released:
        hooked = {f"{name}.up_proj": b.up_proj for name, b in blocks.items()}
        handles = [b.up_proj.register_forward_hook(lambda _m, _args, out, n=name: add(n, out))
                   for name, b in blocks.items()]
    else:
        hooked = {f"{name}.down_proj": b.down_proj for name, b in blocks.items()}
        handles = [b.down_proj.register_forward_pre_hook(lambda _m, args, n=name: add(n, args[0]))
                   for name, b in blocks.items()]
    try:
        tokens = run_hooked_batches(model, tokenizer, encoded, 1 if released else config.batch_size, hooked, state)
    finally:
        for h in handles:
            h.remove()
    if tokens == 0:
        raise PruningError("The calibration text has no tokens.")
    return {k: (v / tokens).float().cpu() for k, v in acc.items()}, {"sequences": len(encoded), "tokens": tokens}


def sp_scores(forget_act: dict[str, torch.Tensor], retain_act: dict[str, torch.Tensor], eps: float = EPS,
              dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """Selective Pruning scores ``I_f / (I_r + eps)`` per neuron (``[d_ff]`` per MLP), computed in ``dtype``."""
    if set(forget_act) != set(retain_act):
        raise PruningError("Forget and retain activations must cover the same MLPs.")
    return {k: forget_act[k].to(dtype) / (retain_act[k].to(dtype) + eps) for k in forget_act}


def sp_select(scores: dict[str, torch.Tensor], fraction: float, keep_ties: bool = False) -> dict[str, list[int]]:
    """The global top ``k = floor(fraction * all neurons)`` by score, as sorted neuron indices per MLP.

    ``keep_ties=False``: exactly ``k``, ties to the earlier MLP (in ``scores`` order), then the lower
    index. ``keep_ties=True`` (the released rule): every neuron scoring at least the ``k``-th
    largest score, so ties at that threshold select more than ``k``.
    """
    if not 0 < fraction < 1:
        raise PruningError(f"The Selective Pruning fraction must be in (0, 1), got {fraction}")
    names = list(scores)
    flat = torch.cat([scores[n].cpu() for n in names])
    k = math.floor(fraction * flat.numel())
    if k < 1:
        raise PruningError(f"fraction {fraction} of {flat.numel()} neurons removes none; use at least "
                           f"{1 / flat.numel():.2g}.")
    if keep_ties:
        threshold = flat.topk(k).values.min()
        return {n: (scores[n].cpu() >= threshold).nonzero().flatten().tolist() for n in names}
    return _chosen_from(flat.double().argsort(descending=True, stable=True)[:k], scores)


def neuron_sq_norms(blocks: dict[str, nn.Module]) -> dict[str, torch.Tensor]:
    """What removing each neuron adds to ``||W_u - W_0||^2``: the squared norms of its
    ``gate_proj``/``up_proj`` rows (and biases) and its ``down_proj`` column, ``[d_ff]`` per MLP (float64)."""
    out = {}
    for name, b in blocks.items():
        sq = b.down_proj.weight.detach().double().pow(2).sum(dim=0)
        for proj in (b.gate_proj, b.up_proj):
            sq = sq + proj.weight.detach().double().pow(2).sum(dim=1)
            if proj.bias is not None:
                sq = sq + proj.bias.detach().double().pow(2)
        out[name] = sq.cpu()
    return out


def sp_select_l2(scores: dict[str, torch.Tensor], sq_norms: dict[str, torch.Tensor], target_l2: float
                 ) -> dict[str, list[int]]:
    """Selective Pruning at a given update norm: neurons in the order of :func:`sp_select` (score,
    then earlier MLP, then lower index), as many as bring ``||W_u - W_0||`` (the root of the summed
    :func:`neuron_sq_norms`) closest to ``target_l2``; at least one.

    For the matched-update-norm control, which compares FRP and SP at the same ``||ΔW||``.
    """
    if not (math.isfinite(target_l2) and target_l2 > 0):
        raise PruningError(f"target_l2 must be a positive number, got {target_l2}")
    if set(scores) != set(sq_norms):
        raise PruningError("Scores and neuron norms must cover the same MLPs.")
    names = list(scores)
    flat = torch.cat([scores[n].double().cpu() for n in names])
    order = flat.argsort(descending=True, stable=True)
    l2 = torch.cat([sq_norms[n].double().cpu() for n in names])[order].cumsum(0).sqrt()
    if target_l2 >= float(l2[-1]):
        raise PruningError(f"Removing every MLP neuron gives ||ΔW|| {float(l2[-1]):.4g}, below the target "
                           f"{target_l2:.4g}: Selective Pruning cannot reach it on this model.")
    k = int((l2 - target_l2).abs().argmin()) + 1
    return _chosen_from(order[:k], scores)


def _chosen_from(top: torch.Tensor, scores: dict[str, torch.Tensor]) -> dict[str, list[int]]:
    """Flat neuron indices (over MLPs in ``scores`` order) -> sorted indices per MLP."""
    names = list(scores)
    chosen: dict[str, list[int]] = {n: [] for n in names}
    bounds = torch.tensor([scores[n].numel() for n in names]).cumsum(0)
    for i in sorted(top.tolist()):
        layer = int(torch.searchsorted(bounds, i, right=True))
        chosen[names[layer]].append(i - (int(bounds[layer - 1]) if layer else 0))
    return chosen


def removed_neurons(blocks: dict[str, nn.Module]) -> dict[str, list[int]]:
    """Neurons of each MLP whose ``down_proj`` column and ``gate_proj``/``up_proj`` rows are all zero."""
    out = {}
    for name, b in blocks.items():
        dead = ((b.down_proj.weight == 0).all(dim=0) & (b.gate_proj.weight == 0).all(dim=1)
                & (b.up_proj.weight == 0).all(dim=1))
        out[name] = dead.nonzero().flatten().tolist()
    return out


@torch.no_grad()
def remove_neurons(blocks: dict[str, nn.Module], chosen: dict[str, list[int]]) -> dict[str, list[int]]:
    """Zero the ``down_proj`` columns and ``gate_proj``/``up_proj`` rows (and their biases) of the
    ``chosen`` neurons, in place, then check on the weights that exactly those were removed.

    Returns:
        The neurons removed by this call per MLP (measured: newly all-zero).
    Raises:
        PruningError: an index out of range, or the measured removal differs from ``chosen``.
    """
    before = removed_neurons(blocks)
    for name, idx in chosen.items():
        b = blocks[name]
        if idx and not 0 <= min(idx) <= max(idx) < b.down_proj.in_features:
            raise PruningError(f"'{name}': neuron index out of range [0, {b.down_proj.in_features}).")
        t = torch.tensor(idx, dtype=torch.long, device=b.down_proj.weight.device)
        b.down_proj.weight[:, t] = 0.0
        for proj in (b.gate_proj, b.up_proj):
            proj.weight[t, :] = 0.0
            if proj.bias is not None:
                proj.bias[t] = 0.0
    after = removed_neurons(blocks)
    newly = {}
    for name in blocks:
        want = set(before[name]) | set(chosen.get(name, []))
        if set(after[name]) != want:
            raise PruningError(f"'{name}': {len(set(after[name]) ^ want)} neuron(s) differ from the chosen ones "
                               "after removal.")
        newly[name] = sorted(set(after[name]) - set(before[name]))
    return newly


def selective_prune(model: nn.Module, tokenizer: Any, forget: Sequence[dict], retain: Sequence[dict],
                    fraction: float = 0.05, variant: str = "released", config: Any = None,
                    eps: float | None = None, target_l2: float | None = None) -> dict:
    """Selective Pruning in place: score neurons on forget over retain text, remove the global top fraction.

    Args:
        forget, retain: TOFU records (``question``, ``answer``).
        fraction: share of all MLP neurons in the budget (one global top over every layer).
        variant: ``released`` (the authors' baseline, default) or ``down_in`` (module docstring).
        config: a :class:`frag_utils.calibration.CalibConfig` for the text (default:
            :func:`sp_calib_config` of the variant).
        eps: the score's stabiliser (default: the variant's, :data:`SP_EPS`).
        target_l2: instead of ``fraction``, remove as many top-scored neurons as bring the update's
            ``||W_u - W_0||`` closest to this value (:func:`sp_select_l2`; the matched-update-norm control).
    Returns:
        The record: settings, neurons in total, in the budget and removed, the removed indices per
        MLP, the update norm ``l2`` the removal adds, and the sequences and tokens each split ran.
    Raises:
        PruningError: no gated MLP, fraction outside (0, 1), empty data, an unknown variant.
    """
    _check_sp_variant(variant)
    config = config or sp_calib_config(variant)
    eps = SP_EPS[variant] if eps is None else eps
    if not 0 < fraction < 1:
        raise PruningError(f"The Selective Pruning fraction must be in (0, 1), got {fraction}")
    for role, recs in (("forget", forget), ("retain", retain)):
        if len(recs) == 0:
            raise PruningError(f"Selective Pruning needs forget and retain text: the {role} split is empty.")
    blocks = mlp_blocks(model)
    released = variant == "released"
    (act_f, used_f), (act_r, used_r) = (neuron_activations(model, tokenizer, recs, config, variant)
                                        for recs in (forget, retain))
    scores = sp_scores(act_f, act_r, eps, torch.float32 if released else torch.float64)
    sq_norms = neuron_sq_norms(blocks)
    chosen = (sp_select(scores, fraction, keep_ties=released) if target_l2 is None
              else sp_select_l2(scores, sq_norms, target_l2))
    removed = remove_neurons(blocks, chosen)
    n_total = sum(s.numel() for s in scores.values())
    requested = sum(len(v) for v in chosen.values())
    if target_l2 is not None:
        fraction = requested / n_total
    l2 = math.sqrt(sum(float(sq_norms[k][v].sum()) for k, v in removed.items() if v))
    return {"method": "sp", "variant": variant, "fraction": fraction, "eps": eps, "n_neurons": n_total,
            "budget": math.floor(fraction * n_total), "n_removed": sum(len(v) for v in removed.values()),
            "requested": requested, "target_l2": target_l2, "l2": l2,
            "removed_per_mlp": {k: len(v) for k, v in removed.items()}, "removed": removed,
            "n_forget_used": used_f["sequences"], "n_retain_used": used_r["sequences"],
            "forget_tokens": used_f["tokens"], "retain_tokens": used_r["tokens"]}


# ---------------------------------------------------------------------------------------------
# End to end: what ``frag prune`` runs


def prune_checkpoint(model_id: str, out: str | Path, data_source: str = "synthetic", forget_split: str = "forget10",
                     retain_split: str | None = None, method: str = "frp", sparsity: float | None = None,
                     beta: float = 0.05, lam: float = DEFAULT_LAM, variant: str | None = None,
                     veto: float = DEFAULT_VETO, scope: str = "mlp", calib: Any = None, device: str = "cpu",
                     use_cache: bool = True, target_l2: float | None = None, weights: str = "fp32",
                     precision: str = "fp32") -> dict:
    """Load a model, calibrate on forget/retain text, prune with FRP or SP, check, and save.

    Args:
        model_id: ``smollm2-135m``, ``tiny``, a checkpoint directory or a hub id.
        out: checkpoint directory to write (replaced whole); the record goes in ``frag_record.json``.
        method: ``frp`` or ``sp``.
        sparsity: FRP: fraction of each row zeroed (default 0.03); SP: fraction of all MLP
            neurons removed (default 0.05).
        beta, lam, veto, scope: FRP only (``eq6``'s retain-rank weight, magnitude-rank weight,
            the released variant's veto fraction P, modules pruned).
        variant: FRP ``released`` (default, the authors' code) | ``eq6`` | an ablation rule;
            SP ``released`` (default, the authors' baseline) | ``down_in``.
        calib: a :class:`frag_utils.calibration.CalibConfig` (default: FRP and SP ``down_in`` 400
            sequences of 256 tokens, the paper's setting; SP ``released`` :func:`sp_calib_config`);
            fewer records than ``n`` means all are used, and the record says how many.
        target_l2: SP only: remove neurons until the update norm is closest to this value
            (``sparsity`` is then ignored and the achieved fraction is recorded).
        weights: ``fp32``, or ``bf16``: the original is rounded to bf16 when loaded, as the
            authors load it (``--dtype bf16``), so the pruned checkpoint is bf16-representable
            and differs from that rounded original in pruned entries only.
        precision: the dtype the model is loaded and run in to calibrate (FRP's norms, SP's
            activations) and whose weights are scored, as the authors' ``--dtype``: ``fp32`` (their
            default; ``scripts/unlearn_baselines.sh`` method RC, the FRP of Tables 1 and 3) or
            ``bf16`` (``scripts/frp_tofu.sh``, the FRP-RV rows; ``selective_pruning.py`` always).
            ``bf16`` rounds the weights, so it needs ``weights="bf16"``; on the CPU it runs on the
            CPU's own bf16 kernels.
    Returns:
        The record written next to the checkpoint: settings, model and data ids, calibration
        counts, achieved sparsity per module (FRP) or removed neurons per MLP (SP), provenance.
    Raises:
        PruningError: bad settings, or a pruning that did not achieve what was asked.
    """
    from . import calibration, data, models, records

    start = time.time()
    if method not in DEFAULT_SPARSITY:
        raise PruningError(f"Unknown pruning method {method!r}; choose 'frp' or 'sp'.")
    allowed = FRP_VARIANTS + FRP_ABLATION_RULES if method == "frp" else SP_VARIANTS
    variant = variant or allowed[0]
    if variant not in allowed:
        raise PruningError(f"Variant {variant!r} does not belong to method '{method}'; choose one of {list(allowed)}.")
    if target_l2 is not None and method != "sp":
        raise PruningError("target_l2 (pruning to a given update norm) is a Selective Pruning setting; FRP's "
                           "update norm follows from its sparsity.")
    sparsity = DEFAULT_SPARSITY[method] if sparsity is None else sparsity
    if not 0 < sparsity < 1:
        raise PruningError(f"sparsity must be in (0, 1), got {sparsity}")
    if not (math.isfinite(beta) and math.isfinite(lam)):
        raise PruningError(f"beta and lam must be finite, got beta={beta}, lam={lam}")
    if not 0 <= veto < 1:
        raise PruningError(f"veto must be in [0, 1), got {veto}")
    if veto and not (method == "frp" and variant == "released"):
        raise PruningError(f"veto (P) is the released FRP variant's retain veto; "
                           f"{method} {variant!r} has none: set it to 0.")
    from . import numerics
    from .numerics import check_weights, round_to_bf16_

    check_weights(weights)
    if precision not in PRECISIONS:
        raise PruningError(f"precision must be one of {PRECISIONS}, got {precision!r}.")
    if precision == "bf16" and weights != "bf16":
        raise PruningError("precision 'bf16' loads the model in bf16, which rounds its weights (as the authors' "
                           "--dtype bf16 does): set weights to 'bf16' as well.")
    load_dtype = numerics.resolve_dtype(precision, device)
    calib = calib or (sp_calib_config(variant) if method == "sp" else calibration.CalibConfig(n=400, max_len=256))
    retain_split = retain_split or data.matching_retain(forget_split)
    if not forget_split.startswith("forget") or retain_split == forget_split or retain_split.startswith("forget"):
        raise PruningError(f"Prune what is forgotten against what is kept: the forget split must be a forgetXX "
                           f"split and the retain split another one (got forget '{forget_split}', retain "
                           f"'{retain_split}'; e.g. forget10 with retain90).")
    forget = data.load_split(data_source, forget_split)
    retain = data.load_split(data_source, retain_split)
    model, tokenizer = models.load_model(model_id, device=device, dtype=load_dtype)
    # bf16 storage at fp32 precision: the original rounded to bf16, then calibrated in fp32 (as RC
    # prunes OpenUnlearning's bf16 checkpoints loaded with --dtype fp32)
    rounded = round_to_bf16_(model.parameters()) if weights == "bf16" else 0
    settings = {"method": method, "variant": variant, "sparsity": sparsity, "weights": weights,
                "precision": precision}
    if method == "frp":
        modules = calibration.select_modules(model, scope)
        too_narrow = sorted({m.in_features for m in modules.values() if math.floor(sparsity * m.in_features) < 1})
        if too_narrow:
            raise PruningError(f"sparsity {sparsity} prunes no entry of rows of width {too_narrow[0]}; "
                               f"use at least {1 / too_narrow[0]:.2g}.")
        norms = {}
        for role, split, recs in (("forget", forget_split, forget), ("retain", retain_split, retain)):
            norms[role], _ = calibration.calibrate(model, tokenizer, model_id, data_source, split, recs, modules,
                                                   calib, use_cache)
        report = frp_prune(modules, norms["forget"], norms["retain"], rho=sparsity, beta=beta, lam=lam,
                           variant=variant, veto=veto)
        for name, m in modules.items():  # the request, checked against what frp_prune measured
            report[name]["requested_per_row"] = math.floor(sparsity * m.in_features)
            if report[name]["pruned_per_row"] != report[name]["requested_per_row"]:
                raise PruningError(f"'{name}': {report[name]['pruned_per_row']} entries pruned per row, "
                                   f"asked for floor({sparsity} * {m.in_features}).")
        settings.update(scope=scope, **({"beta": beta} if variant == "eq6" else {}),
                        **({"lam": lam} if variant in FRP_VARIANTS else {}),
                        **({"veto": veto} if variant == "released" else {}))
        result = {"achieved": report, "n_forget_used": len(calibration.select_records(forget, calib)),
                  "n_retain_used": len(calibration.select_records(retain, calib)),
                  "row_sparsity_min": min(r["row_sparsity"] for r in report.values()),
                  "row_sparsity_max": max(r["row_sparsity"] for r in report.values()),
                  "pruned_total": sum(r["pruned"] for r in report.values()),
                  "distinct_row_masks_min": min(r["distinct_row_masks"] for r in report.values())}
    else:
        result = selective_prune(model, tokenizer, forget, retain, sparsity, variant, calib, target_l2=target_l2)
        if result["n_removed"] != result["requested"]:
            raise PruningError(f"{result['n_removed']} neurons removed, asked for {result['requested']}.")
        if target_l2 is not None:
            settings.update(sparsity=result["fraction"], target_l2=target_l2)
        for key in ("method", "variant", "fraction"):
            result.pop(key)
    calib_record = {k: v for k, v in calib.as_dict().items() if method == "frp" or k != "statistic"}
    params = {"model": model_id, "data": data_source, "forget_split": forget_split, "retain_split": retain_split,
              **settings, "calibration": calib_record}
    record = {**params, **result, "rounded_to_bf16_at_load": rounded, "seconds": round(time.time() - start, 1),
              "provenance": records.provenance("frag_utils.pruning.prune_checkpoint", params)}
    models.save_checkpoint(model, tokenizer, out, record, weights=weights)
    # measured again on the saved checkpoint against the original, from the weights alone
    saved, _ = models.load_model(str(out), device=device, dtype=load_dtype)
    original, _ = models.load_model(model_id, device=device, dtype=load_dtype)
    if weights == "bf16":
        round_to_bf16_(original.parameters())
    record["verified_from_weights"] = verify_pruned(original, saved, record)
    models.write_record(out, record)
    return record


@torch.no_grad()
def verify_pruned(original: nn.Module, pruned: nn.Module, record: dict) -> dict:
    """Check a pruned model against its original from the weights alone, as :func:`prune_checkpoint`
    recorded it: the only change anywhere is entries set to zero, and

    * FRP: in every pruned module, every row holds at least ``requested_per_row`` zeros and at most
      that many entries newly zeroed (fewer when a chosen entry was already zero);
    * SP: exactly the recorded neurons are fully removed, and no other entry changed.

    Returns:
        What was measured: newly zeroed entries per row (min, max over FRP modules) or removed neurons.
    Raises:
        PruningError: the weights do not show the recorded prune.
    """
    w0, wu = dict(original.named_parameters()), dict(pruned.named_parameters())
    if w0.keys() != wu.keys():
        raise PruningError("The pruned model's parameters differ in name from the original's.")
    changed = [n for n in w0 if w0[n].shape != wu[n].shape or not torch.equal(w0[n], wu[n])]
    to_nonzero = [n for n in changed if w0[n].shape != wu[n].shape or bool(((wu[n] != w0[n]) & (wu[n] != 0)).any())]
    if to_nonzero:
        raise PruningError(f"Pruning changed weights to non-zero values (or shapes) in {to_nonzero[:3]}.")
    if "achieved" in record:  # FRP
        allowed = {f"{m}.weight" for m in record["achieved"]}
        newly = []
        for module, rep in record["achieved"].items():
            a, b, k = w0[f"{module}.weight"], wu[f"{module}.weight"], rep["requested_per_row"]
            zeros = (b == 0).sum(dim=1)
            new = zeroed_per_row(a, b)
            if int(zeros.min()) < k or new["max"] > k:
                raise PruningError(f"'{module}': rows hold {int(zeros.min())}..{int(zeros.max())} zeros and "
                                   f"{new['min']}..{new['max']} newly zeroed entries; the record says {k} per row.")
            newly.append((new["min"], new["max"]))
        measured = {"newly_zeroed_per_row_min": min(n for n, _ in newly),
                    "newly_zeroed_per_row_max": max(x for _, x in newly)}
    else:  # SP
        blocks = mlp_blocks(pruned)
        removed = removed_neurons(blocks)
        want = {name: sorted(idx) for name, idx in record["removed"].items()}
        got = {name: idx for name, idx in removed.items() if idx}
        originally_dead = {name: idx for name, idx in removed_neurons(mlp_blocks(original)).items() if idx}
        extra = {n: sorted(set(got.get(n, [])) - set(want.get(n, [])) - set(originally_dead.get(n, []))) for n in got}
        missing = {n: sorted(set(idx) - set(got.get(n, []))) for n, idx in want.items()}
        if any(extra.values()) or any(missing.values()):
            raise PruningError(f"The removed neurons differ from the record: missing {missing}, extra {extra}.")
        allowed = {f"{b}.{p}.{t}" for b in want for p in ("gate_proj", "up_proj", "down_proj")
                   for t in ("weight", "bias")}
        measured = {"n_removed_in_weights": sum(len(v) for v in want.values())}
    outside = sorted(set(changed) - allowed)
    if outside:
        raise PruningError(f"Pruning changed parameters outside the pruned modules: {outside[:3]}.")
    measured["l2_in_weights"] = math.sqrt(sum(float((wu[n].double() - w0[n].double()).pow(2).sum()) for n in changed))
    return measured


def prune_summary(record: dict) -> dict:
    """The short view of a :func:`prune_checkpoint` record that ``frag prune`` prints."""
    drop = ("achieved", "removed", "provenance")
    return {k: v for k, v in record.items() if k not in drop}
