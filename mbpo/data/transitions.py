"""The transition layout every producer and consumer shares: its keys, and the constructors of a batch.

A transition batch is a TensorDict with batch size ``[B]``:

* ``obs``, ``next_obs``: float32 ``(B, obs_dim)``; ``next_obs`` is the true
  next observation (``info["final_obs"]`` at an auto-reset boundary).
* ``action``: float32 ``(B, act_dim)`` (continuous) or int64 ``(B,)`` (discrete).
* ``reward``: float32 ``(B,)``.
* ``terminated``: bool ``(B,)``, true terminal states only; a time-limit
  truncation is not terminal, so the learner bootstraps through it.

Apart from the buffers (mbpo.data.replay) because collectors build batches too: a collector process or Ray actor
imports this, not torchrl's replay buffers (0.7 s of every child's start).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = [
    "OBS", "ACTION", "REWARD", "NEXT_OBS", "TERMINATED", "MODEL_VERSION", "DISCOUNT", "NEXT_OBS_VALID", "FIRST_STEP",
    "TRANSITION_KEYS", "transitions", "real_transitions", "first_step_view",
]

OBS = "obs"
ACTION = "action"
REWARD = "reward"
NEXT_OBS = "next_obs"
TERMINATED = "terminated"
NEXT_OBS_VALID = "next_obs_valid"
"""bool ``(B,)``: False where the env did not give the true next observation (an auto-reset without
the final one, e.g. Isaac Lab without ``compute_final_obs``); :func:`real_transitions` then stores
``obs`` as ``next_obs``, so a time-out among them bootstraps from the last known state, never from the
env's placeholder (the next episode's first observation). The model learns such a row's reward and
termination, never its next state; the learner keeps the row."""
DISCOUNT = "discount"
"""float32 ``(B,)``, n-step rows only (agent.n_step > 1): ``gamma ** m`` for an m-step transition, the discount
of its bootstrap (mbpo.data.nstep)."""
FIRST_STEP = {REWARD: "first_reward", NEXT_OBS: "first_next_obs", TERMINATED: "first_terminated",
              NEXT_OBS_VALID: "first_next_obs_valid"}
"""n-step rows that the dynamics model also learns from (agent.n_step > 1 with model.enabled) keep their first
step's 1-step fields under these keys: one stored row is an n-step row for the learner and a 1-step row for the
model (:func:`first_step_view`)."""
MODEL_VERSION = "model_version"
"""int64 ``(B,)``: the ensemble version that generated a model transition."""
TRANSITION_KEYS = (OBS, ACTION, REWARD, NEXT_OBS, TERMINATED)



def real_transitions(
    obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
    truncated: torch.Tensor, info: dict,
) -> TensorDict:
    """One vector step from an env, with the true next observation (``info["final_obs"]`` where an
    episode ended: at an auto-reset ``next_obs`` is already the next episode's first) and whether it
    is known (``info["final_obs_valid"]``, absent = always).

    Where it is unknown, ``next_obs`` is ``obs`` itself, not the env's placeholder: a time-out then
    bootstraps from ``V(s_t)``, as rsl_rl's PPO does for time-outs, instead of from the next
    episode's first state (a terminal row does not bootstrap at all).
    """
    done = terminated | truncated
    real_next = torch.where(done.unsqueeze(-1), info["final_obs"], next_obs)
    valid = info.get("final_obs_valid")
    valid = torch.ones_like(done) if valid is None else valid.to(done.device, torch.bool)
    real_next = torch.where(valid.unsqueeze(-1), real_next, obs)
    data = transitions(obs, action, reward, real_next, terminated)
    data[NEXT_OBS_VALID] = valid
    return data


def first_step_view(data: TensorDictBase) -> TensorDictBase:
    """``data`` as 1-step transitions: n-step rows that carry their first step (:data:`FIRST_STEP`) give it under
    the ordinary keys (a shallow copy; no tensor is copied); other rows are returned as they are.
    """
    if FIRST_STEP[REWARD] not in data.keys():
        return data
    view = data.exclude(*FIRST_STEP.values(), DISCOUNT)
    for key, first in FIRST_STEP.items():
        if first in data.keys():
            view[key] = data[first]
    return view


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
