"""The SAC objective, with its critic options, as one pure function of the networks and tensors.

Pure (every random draw passed in as :class:`Draws`, networks as arguments), so ``torch.compile`` traces
forward and backward whole and one compiled graph serves every agent of the same shapes in a process.

The critic options and their sources (docs/algorithms.md has the table):

* SAC (Haarnoja et al. 2018, v2): N = 2 critics, the TD target's minimum over both target critics, the actor
  against their minimum; oracle torchrl's ``SACLoss``.
* REDQ (Chen et al. 2021): N critics, the target's minimum over a random subset of M of them, the actor
  against the mean of all N (``actor_q="mean"``); oracle torchrl's ``REDQLoss``. Its critic loss is the
  squared error summed over the critics (as the authors' code, ``mse * num_Q``; torchrl takes the mean).
* DroQ (Hiraoka et al. 2022): dropout and LayerNorm in the critics, active in every critic pass of the
  update (target and actor loss included, as the authors' and sbx's code); the actor against the mean of the
  two critics (``actor_q="mean"``), as the authors' agent.py does with dropout on.
* CrossQ (Bhatt et al. 2024): no target critics; (s, a) and (s', a') go through the online critics in one
  pass whose batch renorm statistics cover both; the actor's loss sees the critics' running statistics;
  the next action comes from the actor's running statistics and the actor loss's action from its batch
  statistics (sbx, the authors' code); oracle torchrl's ``CrossQLoss`` for the critic side.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from mbpo.agents.networks import BatchedMLP, TanhGaussianActor

__all__ = ["Draws", "sac_loss_terms", "td_target", "bf16_autocast", "compiled_loss_terms"]


class Draws(NamedTuple):
    """Every random number of one update, drawn by the agent from its own generator."""

    eps: torch.Tensor
    """Reparameterisation noise ``[2, B, act_dim]``: ``[0]`` for the actor loss at ``obs``, ``[1]`` for the
    next action at ``next_obs``."""
    subset: torch.Tensor | None = None
    """Indices of the critics whose minimum is the TD target (REDQ's M of N); None = all."""
    dropout_q: tuple[torch.Tensor, ...] | None = None
    """Dropout masks (one per hidden layer) of the critic pass on ``(s, a)`` (with ``(s', a')`` under CrossQ)."""
    dropout_target: tuple[torch.Tensor, ...] | None = None
    """Dropout masks of the target critics' pass on ``(s', a')``."""
    dropout_pi: tuple[torch.Tensor, ...] | None = None
    """Dropout masks of the critic pass on the actor's new action."""


def sac_loss_terms(actor: TanhGaussianActor, critic: BatchedMLP, target_critic: BatchedMLP | None,
                   log_alpha: torch.Tensor, target_entropy: float, bf16_on: str | None, obs: torch.Tensor,
                   action: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
                   discount: torch.Tensor | float, draws: Draws, actor_q: str = "min", update_actor: bool = True
                   ) -> tuple[torch.Tensor, ...]:
    """Critic, actor and alpha losses (each with its own gradient path), mean Q and entropy estimate.

    ``target_critic=None`` is CrossQ (no target critics; the online critic's batch statistics in one pass).
    ``update_actor=False`` (policy delay) computes the critic loss only; the actor and alpha losses and the
    entropy are then zeros. ``bf16_on``: the device type to autocast to bf16 on, or None for fp32.
    """
    alpha = log_alpha.detach().exp()
    eps = draws.eps
    # bf16 is for the matmuls: the critics' output layer is fp32 (BatchedMLP's fp32_output), and the TD target
    # and the losses are computed outside autocast, where values are compared at fine resolution.
    with bf16_autocast(bf16_on):
        critic_obs = actor.obs_norm(obs)  # the critics see what the actor sees (identity without obs_norm)
        with torch.no_grad():
            next_action, next_log_prob = actor.sample(next_obs, eps[1])
        next_in = torch.cat((actor.obs_norm(next_obs), next_action), -1)
        if target_critic is None:  # CrossQ: one pass over (s, a) and (s', a'), batch statistics of both
            both = critic(torch.cat((torch.cat((critic_obs, action), -1), next_in)), dropout=draws.dropout_q,
                          batch_stats=True).float().squeeze(-1)
            q, next_q = both.split(obs.shape[0], dim=1)  # [N, B] each
            next_q = next_q.detach() if draws.subset is None else next_q.detach()[draws.subset]
        else:
            q = critic(torch.cat((critic_obs, action), -1), dropout=draws.dropout_q).float().squeeze(-1)  # [N, B]
            with torch.no_grad():
                next_q = target_critic(next_in, members=draws.subset, dropout=draws.dropout_target)
                next_q = next_q.float().squeeze(-1)
    target = td_target(reward, terminated, discount, next_q, next_log_prob, alpha)
    # torchrl's convention (loss_function="l2"): squared error summed over the critics, mean over the batch.
    loss_critic = (q - target).square().sum(0).mean()
    if not update_actor:
        zero = loss_critic.new_zeros(())
        return loss_critic, zero, zero, q.detach().mean(), zero
    with bf16_autocast(bf16_on):
        new_action, log_prob = actor.sample(obs, eps[0], batch_stats=target_critic is None)
        q_new = critic(torch.cat((critic_obs, new_action), -1), detach_params=True,
                       dropout=draws.dropout_pi).float().squeeze(-1)
    q_pi = q_new.min(0).values if actor_q == "min" else q_new.mean(0)
    loss_actor = (alpha * log_prob - q_pi).mean()
    loss_alpha = -(log_alpha * (log_prob.detach() + target_entropy)).mean()
    return loss_critic, loss_actor, loss_alpha, q.detach().mean(), -log_prob.detach().mean()


def td_target(reward: torch.Tensor, terminated: torch.Tensor, discount: torch.Tensor | float, next_q: torch.Tensor,
              next_log_prob: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """``r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha log pi(a'|s'))`` in fp32, without gradient.

    ``next_q`` ``[M, B]`` holds the target critics the minimum is over (REDQ's subset, or all). fp32 even when
    called under bf16 autocast: near Q = 300 bf16's spacing is 2, about one step's reward.
    """
    with torch.autocast(next_q.device.type, enabled=False):
        next_v = next_q.float().min(0).values - alpha * next_log_prob.float()
        return (reward.float() + discount * (1.0 - terminated.float()) * next_v).detach()


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
