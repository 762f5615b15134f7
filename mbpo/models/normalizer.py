"""Input standardisation for the dynamics ensemble, fitted on real data only.

Observations and actions span very different scales (HalfCheetah joint velocities
vs. angles); the ensemble sees ``(x - mean) / std`` so one learning rate and one
weight-decay schedule fit every input. The statistics are refitted on the real
buffer's training rows at every model training, the holdout left out (as MBPO's
``TensorStandardScaler`` is), and are buffers, so the module's ``state_dict`` carries them.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Normalizer"]


class Normalizer(nn.Module):
    """Per-dimension mean/std standardisation; identity until :meth:`fit` is called.

    A dimension whose std is below ``min_std`` (a constant input, e.g. a one-hot
    column never seen) gets std 1.0 instead of a huge scale, as in MBPO/mbrl-lib.
    """

    mean: torch.Tensor
    std: torch.Tensor
    count: torch.Tensor

    def __init__(self, dim: int, device: torch.device | str = "cpu", min_std: float = 1e-12) -> None:
        super().__init__()
        if dim < 1:
            raise ValueError(f"Normalizer needs dim >= 1, got {dim}")
        self.dim = dim
        self.min_std = min_std
        self.register_buffer("mean", torch.zeros(dim, device=device))
        self.register_buffer("std", torch.ones(dim, device=device))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64, device=device))

    @torch.no_grad()
    def fit(self, x: torch.Tensor) -> None:
        """Set mean and (population) std from ``x`` of shape ``(N, dim)``, N >= 1."""
        if x.dim() != 2 or x.shape[1] != self.dim or x.shape[0] < 1:
            raise ValueError(f"Normalizer.fit wants (N >= 1, {self.dim}) data, got shape {tuple(x.shape)}")
        if x.device != self.mean.device:
            raise ValueError(f"Normalizer.fit got data on {x.device} but the normalizer lives on {self.mean.device}")
        x = x.float()
        std = x.std(0, correction=0)
        self.mean.copy_(x.mean(0))
        self.std.copy_(torch.where(std < self.min_std, torch.ones_like(std), std))
        self.count.fill_(x.shape[0])

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / std`` over the last dimension (any leading shape)."""
        return (x - self.mean) / self.std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize`."""
        return x * self.std + self.mean

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
