"""The SAC objective as one pure function of the networks and tensors, and its compiled form.

Pure (noise passed in, networks as arguments), so ``torch.compile`` traces forward and backward
whole and one compiled graph serves every agent of the same shapes in a process.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch

from mbpo.agents.networks import BatchedMLP, TanhGaussianActor

__all__ = ["sac_loss_terms", "bf16_autocast", "compiled_loss_terms"]


def sac_loss_terms(actor: TanhGaussianActor, critic: BatchedMLP, target_critic: BatchedMLP, log_alpha: torch.Tensor,
                   target_entropy: float, bf16_on: str | None, obs: torch.Tensor, action: torch.Tensor,
                   reward: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
                   discount: torch.Tensor | float, eps: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Critic, actor and alpha losses (each with its own gradient path), mean Q and entropy estimate.

    Pure tensor maths of its arguments (noise passed in), so ``torch.compile`` traces it whole
    (agent.compile), and, the networks being arguments rather than one agent's attributes, one
    compiled graph serves every agent of the same shapes. ``bf16_on``: the device type to autocast
    to bf16 on, or None for fp32.
    """
    alpha = log_alpha.detach().exp()
    with bf16_autocast(bf16_on):
        # TD target: r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha log pi(a'|s'))
        critic_obs = actor.obs_norm(obs)  # the critics see what the actor sees (identity without obs_norm)
        with torch.no_grad():
            next_action, next_log_prob = actor.sample(next_obs, eps[1])
            next_q = target_critic(torch.cat((actor.obs_norm(next_obs), next_action), -1))
            next_v = next_q.float().squeeze(-1).min(0).values - alpha * next_log_prob
            target = reward + discount * (1.0 - terminated.float()) * next_v
        q = critic(torch.cat((critic_obs, action), -1)).float().squeeze(-1)  # [2, B]
        # torchrl's convention (loss_function="l2"): squared error summed over the critics, mean over the batch.
        loss_critic = (q - target).square().sum(0).mean()
        new_action, log_prob = actor.sample(obs, eps[0])
        q_new = critic(torch.cat((critic_obs, new_action), -1), detach_params=True).float().squeeze(-1)
        loss_actor = (alpha * log_prob - q_new.min(0).values).mean()
        loss_alpha = -(log_alpha * (log_prob.detach() + target_entropy)).mean()
    return loss_critic, loss_actor, loss_alpha, q.detach().mean(), -log_prob.detach().mean()


def bf16_autocast(device_type: str | None) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on ``device_type``, or nothing (fp32) for None."""
    return torch.autocast(device_type, dtype=torch.bfloat16) if device_type else contextlib.nullcontext()


@functools.cache
def compiled_loss_terms(cuda_graphs: bool) -> Callable[..., tuple[torch.Tensor, ...]]:
    """:func:`sac_loss_terms` compiled once per mode and shared by every agent in the process."""
    # One graph per shape set (sizes, batch size, precision): a process that builds agents of many shapes (a
    # benchmark, a test suite) needs more than dynamo's default 8, and with fullgraph=True the limit is an error.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(sac_loss_terms, mode="reduce-overhead" if cuda_graphs else None, dynamic=False,
                         fullgraph=True)
