"""Row-wise pruning: FRP (Forget-Retain Pruning, the paper's Eq. 6 / Algorithm 1) and the
random-mask control of the same size.

FRP, per target module ``W [d_out, d_in]`` and output row ``i``::

    S_ij = rank_j(F_ij) - beta * rank_j(R_ij) + lam * rank_j(|W_ij|)

ranks taken within the row (larger value, larger rank, 0-based), and the top
``floor(rho * d_in)`` entries of ``S`` in each row are zeroed.

``variant="released"`` follows the authors' released code instead: the first rank is of the
channel ratio ``x^f / x^r`` (not ``F``), and the retain term is a veto: in each row the top
``veto`` fraction by ``|W| x^r / x^f`` is never pruned.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable

import torch
from torch import nn

from .frag import EPS, importance


def row_ranks(x: torch.Tensor) -> torch.Tensor:
    """0-based ranks within each row of ``x [d_out, d_in]`` (larger value, larger rank; ties by position)."""
    order = x.argsort(dim=1, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(x.shape[1], device=x.device).expand_as(order))
    return ranks


def frp_scores(w: torch.Tensor, xf: torch.Tensor, xr: torch.Tensor, beta: float, lam: float,
               variant: str = "paper", eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor | None]:
    """FRP scores ``S [d_out, d_in]`` and, for the released variant, the rank used by the veto.

    Args:
        w: weight [d_out, d_in]; xf, xr: calibration norms [d_in].
    Returns:
        ``(S, veto_score)``; ``veto_score`` is ``|W| x^r / x^f`` for ``released``, else None.
    """
    w, xf, xr = w.double(), xf.double().to(w.device), xr.double().to(w.device)
    f, r = importance(w, xf, xr, eps)
    if variant == "paper":  # float64: rank sums with small beta stay exact
        s = row_ranks(f).double() - beta * row_ranks(r).double() + lam * row_ranks(w.abs()).double()
        return s, None
    if variant == "released":
        ratio = (xf / (xr + eps))[None, :].expand_as(w)
        return row_ranks(ratio).double() + lam * row_ranks(w.abs()).double(), r
    raise ValueError(f"Unknown FRP variant {variant!r}; choose 'paper' or 'released'.")


def top_k_mask(scores: torch.Tensor, k: int, blocked: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean mask of the ``k`` highest scores in each row, never choosing ``blocked`` entries."""
    if k <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    s = scores.clone().double()
    if blocked is not None:
        s[blocked] = -math.inf
    idx = s.topk(k, dim=1).indices
    mask = torch.zeros_like(scores, dtype=torch.bool)
    mask.scatter_(1, idx, True)
    if blocked is not None and (mask & blocked).any():
        raise ValueError("A row has fewer unvetoed entries than the pruning budget.")
    return mask


@torch.no_grad()
def frp_prune(modules: dict[str, nn.Linear], xf: dict[str, torch.Tensor], xr: dict[str, torch.Tensor],
              rho: float = 0.03, beta: float = 0.05, lam: float = 0.0, variant: str = "paper",
              veto: float = 0.05) -> dict[str, dict]:
    """Zero the top ``floor(rho * d_in)`` FRP entries of every row of each module, in place.

    Returns:
        Per module: the number of entries zeroed per row and the achieved per-row sparsity.
    """
    if not 0 < rho < 1:
        raise ValueError(f"rho must be in (0, 1), got {rho}")
    report = {}
    for name, m in modules.items():
        w = m.weight
        k = math.floor(rho * w.shape[1])
        s, veto_score = frp_scores(w.detach(), xf[name], xr[name], beta, lam, variant)
        blocked = None
        if veto_score is not None:
            blocked = top_k_mask(veto_score, math.floor(veto * w.shape[1]))
        mask = top_k_mask(s, k, blocked)
        w[mask] = 0.0
        report[name] = _sparsity(mask, k)
    return report


@torch.no_grad()
def random_prune(modules: dict[str, nn.Linear], rho: float, seed: int = 0) -> dict[str, dict]:
    """Zero ``floor(rho * d_in)`` uniformly random entries of every row, in place (a direction-blind control)."""
    gen = torch.Generator().manual_seed(seed)
    report = {}
    for name, m in modules.items():
        k = math.floor(rho * m.weight.shape[1])
        mask = top_k_mask(torch.rand(m.weight.shape, generator=gen), k)
        m.weight[mask.to(m.weight.device)] = 0.0
        report[name] = _sparsity(mask, k)
    return report


def _sparsity(mask: torch.Tensor, k: int) -> dict:
    per_row = mask.sum(dim=1)
    assert bool((per_row == k).all()), "every row must lose exactly k entries"
    return {"pruned_per_row": k, "row_sparsity": k / mask.shape[1], "pruned": int(per_row.sum())}


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
