"""Pieces of the dynamics ensemble's loss that are not plain torch: a one-pass weight decay and a masked
per-member mean.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["WeightDecay", "mean_per_member"]


class WeightDecay(torch.autograd.Function):
    """``sum_i wd_i * ||W_i||^2 / 2`` with a one-pass forward and backward ``wd_i * W_i * g``.

    Same value and gradient as autograd through ``square().sum()``, whose chain of ops makes
    several passes over every weight per step; on CPU that memory traffic is worth saving.
    """

    @staticmethod
    def forward(ctx: Any, decays: tuple[float, ...], *weights: torch.Tensor) -> torch.Tensor:
        ctx.decays = decays
        ctx.save_for_backward(*weights)
        halves = [0.5 * wd * torch.dot(w.reshape(-1), w.reshape(-1)) for wd, w in zip(decays, weights, strict=True)]
        return torch.stack(halves).sum()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return (None, *(w * (grad * wd) for wd, w in zip(ctx.decays, ctx.saved_tensors, strict=True)))


def mean_per_member(err: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``err`` ``[M, B, D]`` per member ``[M]``; with ``weight`` (``[M, B, D]`` or ``[B, D]``,
    0 or 1), the mean over the weighted entries only, 0 where there is none (a reward that is not learned
    and rows whose next obs is unknown leave nothing to fit).
    """
    if weight is None:
        return err.mean((1, 2))
    weight = weight.expand_as(err)
    return (err * weight).sum((1, 2)) / weight.sum((1, 2)).clamp_min(1.0)

