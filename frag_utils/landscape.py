"""Linear mode connectivity between the target and an unlearned model (appendix C.5).

Along the straight line ``theta(alpha) = (1 - alpha) theta_0 + alpha theta_u`` the loss on the
forget set is measured at ``alpha = 0, 0.05, ..., 1``; the barrier is the largest excess of that
loss over the straight line between its end points,
``max_alpha [L(alpha) - ((1 - alpha) L(0) + alpha L(1))]``. A large barrier means the unlearned
model sits in another basin of the forget loss, which the paper relates to robustness.
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from .metrics import answer_stats


def alphas(stride: float = 0.05) -> list[float]:
    """``0, stride, ..., 1`` (both ends included)."""
    if not 0 < stride <= 1:
        raise ValueError(f"stride must be in (0, 1], got {stride}.")
    n = int(round(1 / stride))
    if abs(n * stride - 1) > 1e-9:
        raise ValueError(f"stride {stride} does not divide [0, 1] evenly.")
    return [i / n for i in range(n + 1)]


def forget_loss(model: nn.Module, tokenizer: Any, records: Sequence[dict], batch_size: int = 16) -> float:
    """Mean over records of the average answer-token NLL (teacher forced, fp32)."""
    stats = answer_stats(model, tokenizer, [(r["question"], r["answer"]) for r in records], batch_size)
    return float(np.mean([s.avg_nll for s in stats]))


@torch.no_grad()
def interpolation_losses(original: nn.Module, unlearned: nn.Module, tokenizer: Any, records: Sequence[dict],
                         points: Sequence[float], batch_size: int = 16) -> list[float]:
    """The forget loss at each point of the line from ``original`` to ``unlearned`` (neither is changed).

    Raises:
        ValueError: the two models' parameters differ in names or shapes.
    """
    a, b = original.state_dict(), unlearned.state_dict()
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        raise ValueError("The two models differ in their parameters: interpolation needs one architecture.")
    work = copy.deepcopy(original).eval()
    losses = []
    for alpha in points:
        work.load_state_dict({k: torch.lerp(a[k].float(), b[k].float(), alpha).to(a[k].dtype)
                              if a[k].is_floating_point() else a[k] for k in a})
        losses.append(forget_loss(work, tokenizer, records, batch_size))
    return losses


def barrier(points: Sequence[float], losses: Sequence[float]) -> float:
    """``max_alpha [L(alpha) - ((1 - alpha) L(0) + alpha L(1))]`` over the measured points
    (``points`` must start at 0 and end at 1)."""
    p, loss = np.asarray(points, float), np.asarray(losses, float)
    if len(p) != len(loss) or len(p) < 2 or p[0] != 0 or p[-1] != 1:
        raise ValueError("barrier() needs losses at points running from 0 to 1.")
    return float(np.max(loss - ((1 - p) * loss[0] + p * loss[-1])))
