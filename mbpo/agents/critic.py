"""SAC's critics: N Q-networks as one batched network, their Polyak-averaged target, and what each critic option
needs from the learner's generator every update (the loss that uses them is :mod:`mbpo.agents.sac_loss`).

* N members (``num_critics``) are one :class:`~mbpo.agents.networks.BatchedMLP`, so REDQ's 10 critics cost one
  batched matmul per layer; LayerNorm, dropout and CrossQ's batch renorm are options of that network. Its output
  layer stays fp32 under bf16 autocast, so Q values keep fp32 resolution (bf16 is for the hidden matmuls).
* The target is a deep copy moved by Polyak averaging with ``tau``, in one ``_foreach_lerp_`` per update;
  CrossQ has none.
* :meth:`Critics.draws` draws REDQ's random subset of target critics and DroQ's dropout masks after the
  reparameterisation noise; options that are off draw nothing, so a plain SAC's stream is unchanged.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from mbpo.agents.networks import BatchedMLP
from mbpo.agents.sac_loss import Draws
from mbpo.config import SACConfig
from mbpo.device.state import cpu_copy

__all__ = ["Critics", "DEFAULT_TAU"]

DEFAULT_TAU = 0.005
"""Polyak rate of the target critics when agent.sac.tau is unset (the SAC paper's)."""


class Critics:
    """The critic ensemble of one SAC learner, on its device."""

    def __init__(self, config: SACConfig, in_dim: int, device: torch.device,
                 batch_renorm: dict[str, Any] | None) -> None:
        """Builds the network from the global torch generator (the learner seeds it around this call)."""
        self.config = config
        self.widths: list[int] = list(config.critic_hidden_sizes or config.hidden_sizes)
        self.net = BatchedMLP(config.num_critics, in_dim, self.widths, 1, layer_norm=config.layer_norm,
                              batch_renorm=batch_renorm, fp32_output=True,
                              weight_init=config.weight_init).to(device).train()
        self.target: BatchedMLP | None = (
            None if config.crossq else copy.deepcopy(self.net).requires_grad_(False).train())
        """The Polyak-averaged critics of the TD target; None under CrossQ, which has none."""
        self.tau = DEFAULT_TAU if config.tau is None else config.tau
        self.params: list[torch.Tensor] = list(self.net.parameters())
        self._target_params: list[torch.Tensor] = [] if self.target is None else list(self.target.parameters())

    def draws(self, eps: torch.Tensor, update_actor: bool, generator: torch.Generator) -> Draws:
        """One update's random numbers after its noise ``eps`` ``[2, B, act_dim]``: REDQ's subset of target
        critics, then DroQ's dropout masks (one per hidden layer) for each critic pass the update makes.
        """
        c, device, batch_size = self.config, eps.device, eps.shape[1]
        subset = None
        if c.num_min is not None and c.num_min < c.num_critics:
            subset = torch.randperm(c.num_critics, generator=generator, device=device)[:c.num_min]
        masks: list[tuple[torch.Tensor, ...] | None] = [None, None, None]
        if c.dropout > 0:
            target_members = c.num_critics if c.num_min is None else min(c.num_min, c.num_critics)
            passes = [(c.num_critics, 2 * batch_size if c.crossq else batch_size), (target_members, batch_size),
                      (c.num_critics, batch_size)]
            for k, (members, rows) in enumerate(passes):
                if (k == 1 and c.crossq) or (k == 2 and not update_actor):
                    continue  # no target pass under CrossQ; no actor pass on a delayed step
                masks[k] = tuple(
                    torch.empty((members, rows, width), device=device)
                    .bernoulli_(1.0 - c.dropout, generator=generator).div_(1.0 - c.dropout)
                    for width in self.widths)
        return Draws(eps, subset, *masks)

    @torch.no_grad()
    def polyak(self, finite: torch.Tensor) -> None:
        """``target += tau * (online - target)``, or nothing where the update was not ``finite`` (no host sync).

        torchrl's SoftUpdate needs a LossModule holding TensorDictParams, which these plain modules are not;
        ``_foreach_lerp_`` on the parameter lists is the same update in one kernel per list. Under no_grad:
        the online critics require grad, and a recorded lerp would chain an autograd node per update onto the
        target (memory that grows for the whole run).
        """
        if self._target_params:
            weight = finite.float().mul(self.tau)
            torch._foreach_lerp_(self._target_params, self.params, [weight] * len(self._target_params))

    def reduce(self, q: torch.Tensor) -> torch.Tensor:
        """The critics' values ``[N, B]`` reduced as the actor's loss reduces them: min (SAC) or mean (REDQ)."""
        return q.min(0).values if self.config.actor_q == "min" else q.mean(0)

    def state(self) -> dict[str, Any]:
        """CPU copies of the critics' and the target's weights (and renorm statistics)."""
        out = {"critic": cpu_copy(self.net.state_dict())}
        if self.target is not None:
            out["target_critic"] = cpu_copy(self.target.state_dict())
        return out

    def load(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["critic"])
        if self.target is not None:
            self.target.load_state_dict(state["target_critic"])
