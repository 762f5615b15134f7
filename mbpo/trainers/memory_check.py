"""What a run's buffers and networks will hold on its device, said at start-up, and a run that cannot fit refused
before anything is allocated (the replay buffer takes its whole capacity at its first transition).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

import envs
from mbpo.config import Config, rollouts_per_transition
from mbpo.device.memory import network_bytes
from mbpo.errors import MbpoError
from mbpo.model_based.rollouts import rollout_bytes

__all__ = ["check_memory", "fit_bytes_per_row", "transition_bytes"]


def check_memory(config: Config, obs_dim: int, act_dim: int, action_space: Any, device: torch.device) -> None:
    """Print what the replay and model buffers and the networks will hold on ``device``; refuse, before
    anything is allocated, a run that cannot fit (the replay buffer takes its whole capacity at the first
    transition), naming the keys of the parts that take the most.
    """
    row = transition_bytes(obs_dim, action_space)
    m = config.model
    real_row = row
    if config.agent.n_step > 1:  # + the discount; with a model, + the first step's reward, next obs and flags
        real_row += 4 + ((4 * obs_dim + 6) if m.enabled else 0)
    replay = real_row * config.agent.buffer_size
    model_rows = int(rollouts_per_transition(config) * m.epoch_length * max(m.rollout_schedule[2:])
                     * m.retain_epochs)
    model = (row + 8) * model_rows if m.enabled else 0  # + the model_version column
    # A rollout starts rollouts_per_real branches per real transition since the last one: train_freq, or a
    # whole vector step where that is more.
    starts = int(rollouts_per_transition(config) * max(m.train_freq, config.env.num_envs))
    a = config.agent
    widest = max(*m.hidden_sizes, *(a.sac.hidden_sizes if a.name == "sac" else a.dqn.hidden_sizes))
    rollout = (rollout_bytes(starts, m.rollout_batch_size, row + 8, obs_dim, act_dim, widest,
                             device) if m.enabled else 0)
    learner, ensemble = network_bytes(a, m if m.enabled else None, obs_dim, act_dim)
    # A fit works on a copy of every real row so far and its own tensors of them (inputs raw and normalised,
    # targets, their training split, the members' bootstrap and its shuffle), at their most once the buffer is
    # full: several times the replay buffer's own bytes.
    fit_rows = min(config.agent.buffer_size, config.total_env_steps)
    fit_row = real_row + fit_bytes_per_row(obs_dim, act_dim, m.ensemble_size)
    fit = fit_row * fit_rows if m.enabled else 0
    available = envs.available_memory(device)
    # (what it holds, bytes, the keys that size it)
    sized = [(f"replay buffer {config.agent.buffer_size:,} x {real_row} B = {_size(replay)}", replay,
              "agent.buffer_size")]
    if m.enabled:
        sized.append((f"model buffer up to {model_rows:,} x {row + 8} B = {_size(model)}", model,
                      "model.rollouts_per_real, model.retain_epochs"))
        sized.append((f"rollouts of {starts:,} branches, {min(starts, m.rollout_batch_size):,} at a time "
                      f"(model.rollout_batch_size): about {_size(rollout)} at their peak", rollout,
                      "model.rollout_batch_size"))
        sized.append((f"a model fit on up to {fit_rows:,} real rows x {fit_row} B = {_size(fit)}", fit,
                      "agent.buffer_size"))
    learner_keys = ("agent.sac.num_critics, agent.sac.hidden_sizes, agent.sac.critic_hidden_sizes"
                    if a.name == "sac" else "agent.dqn.hidden_sizes")
    sized.append((f"{a.name.upper()} networks with their optimizer state about {_size(learner)}", learner,
                  learner_keys))
    if m.enabled:
        sized.append((f"the ensemble with its optimizer state about {_size(ensemble)}", ensemble,
                      "model.ensemble_size, model.hidden_sizes"))
    parts = [text for text, _, _ in sized]
    need = sum(n for _, n, _ in sized)
    room = "" if available is None else f" ({_size(available)} available)"
    print(f"[mbpo] memory on {device}: {'; '.join(parts)}{room}", file=sys.stderr)
    if available is not None and need > available:
        keys = ", ".join(k for _, n, k in sorted(sized, key=lambda part: -part[1]) if n >= need / 10)
        raise MbpoError(f"the networks and buffers need {_size(need)} on {device} but only "
                        f"{_size(available)} is available ({'; '.join(parts)}); lower {keys}")


def fit_bytes_per_row(obs_dim: int, act_dim: int, ensemble_size: int) -> int:
    """A model fit's own bytes per real row (mbpo.models.training): inputs raw, normalised and their training split
    (3 x 4 B x (obs + act)), targets and their split (2 x 4 B x (obs + reward)), the members' bootstrap indices
    (8 B each) and one epoch's shuffle of them (a float draw, its argsort and the gathered order: 20 B each).
    """
    inputs, targets = obs_dim + act_dim, obs_dim + 1
    return 12 * inputs + 8 * targets + 28 * ensemble_size


def transition_bytes(obs_dim: int, action_space: Any) -> int:
    """One stored transition: obs and next obs (float32), action (int64 or float32), reward (float32), the
    terminated and next_obs_valid flags.
    """
    import gymnasium as gym

    action = 8 if isinstance(action_space, gym.spaces.Discrete) else 4 * int(np.prod(action_space.shape))
    return 8 * obs_dim + action + 4 + 2


def _size(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"
