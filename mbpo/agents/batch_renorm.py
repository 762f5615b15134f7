"""Batch renormalisation (Ioffe 2017) for batched networks: CrossQ's normaliser (Bhatt et al. 2024).

CrossQ drops the target networks and normalises the critic's and the actor's layers instead; plain batch
norm fails there because a forward pass in training sees another distribution than the running statistics
that evaluation uses. Batch *re*normalisation corrects the batch statistics towards the running ones (``r``
and ``d``, clipped to ``max_r`` and ``max_d``) once ``warmup`` batches have been seen; before that it is
batch norm.

torchrl's ``BatchRenorm1d`` is the reference for the maths (tests/agents/test_critic_options.py). This one
differs where ours needs it: it normalises over the batch dim (-2) of ``[..., B, features]``, so a
``[members, B, features]`` critic ensemble keeps one set of statistics per member; the forward pass says
whether to use the batch's statistics (``batch_stats=True``, the learner's update) or the running ones
(everything else: acting, model rollouts, ``value``), so a forward outside the update never moves them
whatever the module's train/eval mode; the warm-up switch stays at 1 once reached (torchrl's counter grows
past it and so multiplies ``r - 1`` and ``d`` by 2, 3, ... after 2, 3, ... warm-ups); the statistics are
computed in fp32 under bf16 autocast.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BatchRenorm"]


class BatchRenorm(nn.Module):
    """Batch renormalisation over dim -2 of ``[*prefix, B, features]``, with statistics of shape
    ``[*prefix, 1, features]`` (``prefix=(members,)`` for a batched critic, ``()`` for the actor).

    Defaults are CrossQ's (its reference code, araffin/sbx): momentum 0.01 (flax's 0.99), eps 1e-3,
    ``max_r`` 3, ``max_d`` 5, and 100,000 batches of warm-up.
    """

    def __init__(self, features: int, prefix: tuple[int, ...] = (), momentum: float = 0.01, eps: float = 1e-3,
                 max_r: float = 3.0, max_d: float = 5.0, warmup: int = 100_000) -> None:
        super().__init__()
        shape = (*prefix, 1, features) if prefix else (features,)
        self.momentum, self.eps, self.max_r, self.max_d, self.warmup = momentum, eps, max_r, max_d, warmup
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.running_mean: torch.Tensor
        self.running_var: torch.Tensor
        self.num_batches_tracked: torch.Tensor
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        self.register_buffer("num_batches_tracked", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor, batch_stats: bool = False, detach_params: bool = False,
                members: torch.Tensor | None = None) -> torch.Tensor:
        """Normalise ``x``; ``batch_stats=True`` uses (and folds into the running statistics) this batch's.

        ``detach_params=True`` uses the scale and shift as constants (SAC's actor loss through the critic);
        ``members`` (indices into the prefix's first dim) normalises with those members' running statistics
        only (a planner scoring with one critic), never with a batch's: folding a subset's statistics in would
        move only some members'.
        """
        x = x.float()
        if members is not None and batch_stats:
            raise ValueError("BatchRenorm: a subset of members normalises with the running statistics only "
                             "(batch_stats=False)")
        running_mean, running_var = self.running_mean, self.running_var
        weight, bias = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        if members is not None:
            running_mean, running_var = running_mean[members], running_var[members]
            weight, bias = weight[members], bias[members]
        running_std = (running_var + self.eps).sqrt()
        if batch_stats:
            n = x.shape[-2]
            mean = x.mean(-2, keepdim=True)
            var = x.var(-2, keepdim=True, unbiased=False)
            std = (var + self.eps).sqrt()
            renorm = (self.num_batches_tracked >= self.warmup).float()  # 0 during warm-up: plain batch norm
            r = 1.0 + (torch.clamp(std.detach() / running_std, 1 / self.max_r, self.max_r) - 1.0) * renorm
            d = torch.clamp((mean.detach() - self.running_mean) / running_std, -self.max_d, self.max_d) * renorm
            y = (x - mean) / std * r + d
            with torch.no_grad():
                batch_mean = mean.detach().reshape(self.running_mean.shape)
                unbiased = var.detach().reshape(self.running_var.shape) * (n / max(n - 1, 1))
                self.running_mean.lerp_(batch_mean, self.momentum)
                self.running_var.lerp_(unbiased, self.momentum)
                self.num_batches_tracked.add_(1)
        else:
            y = (x - running_mean) / running_std
        return y * weight + bias

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, momentum={self.momentum}, eps={self.eps}, warmup={self.warmup}"
