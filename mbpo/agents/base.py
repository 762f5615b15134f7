"""The Agent protocol every learner (SAC, DQN) implements.

The learner lives on the plan's device; acting happens on a CPU replica so
collectors never touch the learner's device. Weights flow one way: the
learner's :meth:`Agent.snapshot` (CPU tensors only, never CUDA, never a
``torch.device``) is what collectors and checkpoints receive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase

from mbpo.errors import MbpoError

__all__ = ["Agent", "AgentSpaceError"]


class AgentSpaceError(MbpoError, TypeError, ValueError):
    """The env's spaces are not ones the configured learner can act in (a user's choice of env or agent.name, so
    the CLI says it in one line); a TypeError or ValueError as well, for callers that catch those.
    """


@runtime_checkable
class Agent(Protocol):
    device: torch.device
    """Where the learner's networks, optimizers and update live."""

    @property
    def num_updates(self) -> int:
        """Gradient updates applied so far (skipped non-finite steps not included); starts at 0."""

    @property
    def num_skipped_updates(self) -> int:
        """Updates whose loss was non-finite and so never reached an optimizer step."""

    @property
    def networks(self) -> dict[str, torch.nn.Module]:
        """The learner's modules (online and target), which must all be on ``device``."""

    @property
    def acting_replica(self) -> torch.nn.Module:
        """The CPU copy of the policy that :meth:`act` runs."""

    def act(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """Actions for CPU ``obs`` ``(N, obs_dim)`` from the CPU replica, on CPU.

        ``explore=True`` samples (SAC) or is epsilon-greedy (DQN); ``False`` is
        the deterministic policy used for evaluation. Continuous actions are in
        the env's action bounds, float32 ``(N, act_dim)``; discrete int64 ``(N,)``.
        """

    def rollout_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The exploration noise of ``n`` model-rollout branches for one step, ``(n, k)`` on ``device``: drawn
        for every branch at once, so how the rollouts are chunked changes no action.
        """

    def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Exploring actions for model rollouts from ``obs``' rows of :meth:`rollout_noise`, on ``device`` from
        the learner's own networks (no grad).
        """

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The critics' estimate ``Q(s, a)`` at the deterministic policy's action for ``obs`` ``(N, obs_dim)``
        on ``device``: float32 ``(N,)`` (SAC: the lower of its twin critics, as its targets use; DQN: max_a Q).
        """

    def entropy_bonus(self) -> float:
        """What the critics' targets add to each step's reward (SAC: ``alpha * H``, H at the target entropy that
        automatic alpha holds; 0 for a critic of rewards alone): :func:`mbpo.run.evaluation.critic_bias` takes it out.
        """

    def observe(self, obs: torch.Tensor) -> None:
        """Real observations ``(B, obs_dim)`` the trainer just stored: running statistics (agent.obs_norm) learn
        from them on the learner; a no-op for a learner without any.
        """

    def update(self, batch: TensorDictBase) -> Mapping[str, float]:
        """One gradient update from a batch on ``device`` (keys in mbpo.data.transitions); returns metrics."""

    def pop_metrics(self) -> dict[str, float]:
        """Means of the update metrics since the last call, plus ``updates``/``skipped`` counts.

        Loggers call this every few hundred updates instead of reading each
        update's metrics, so a GPU learner is not synchronised once per update.
        """

    def snapshot(self) -> dict[str, Any]:
        """Publishable CPU state: actor, critics, target nets, epsilon, num_updates."""

    def load_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Load a snapshot; optimizer state is reset so it is consistent with the loaded weights."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: the snapshot plus optimizer states and counters."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
