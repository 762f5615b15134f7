"""Replay buffers and the transition keys every producer and consumer shares.

A transition batch is a TensorDict with batch size ``[B]``:

* ``obs``, ``next_obs``: float32 ``(B, obs_dim)``; ``next_obs`` is the true
  next observation (``info["final_obs"]`` at an auto-reset boundary).
* ``action``: float32 ``(B, act_dim)`` (continuous) or int64 ``(B,)`` (discrete).
* ``reward``: float32 ``(B,)``.
* ``terminated``: bool ``(B,)``, true terminal states only; a time-limit
  truncation is not terminal, so the learner bootstraps through it.

Storage is torchrl's ``LazyTensorStorage`` on the plan's device; sampling uses
a dedicated ``torch.Generator`` so a checkpoint can restore it exactly.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers.samplers import RandomSampler

__all__ = ["OBS", "ACTION", "REWARD", "NEXT_OBS", "TERMINATED", "TRANSITION_KEYS", "make_replay_buffer", "transitions"]

OBS = "obs"
ACTION = "action"
REWARD = "reward"
NEXT_OBS = "next_obs"
TERMINATED = "terminated"
TRANSITION_KEYS = (OBS, ACTION, REWARD, NEXT_OBS, TERMINATED)


def make_replay_buffer(
    capacity: int, device: torch.device | str, batch_size: int, generator: torch.Generator
) -> ReplayBuffer:
    """A uniform replay buffer of ``capacity`` transitions stored on ``device``."""
    return ReplayBuffer(
        storage=LazyTensorStorage(capacity, device=torch.device(device)),
        sampler=RandomSampler(),
        batch_size=batch_size,
        generator=generator,
    )


def transitions(
    obs: torch.Tensor,
    action: torch.Tensor,
    reward: torch.Tensor,
    next_obs: torch.Tensor,
    terminated: torch.Tensor,
) -> TensorDict:
    """Pack one vector step (or any batch) of transitions under the shared keys."""
    return TensorDict(
        {OBS: obs, ACTION: action, REWARD: reward, NEXT_OBS: next_obs, TERMINATED: terminated},
        batch_size=[obs.shape[0]],
        device=obs.device,
    )
