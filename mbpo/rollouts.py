"""Branched model rollouts: short imagined trajectories that start from real states.

MBPO (Janner et al. 2019) trains the policy mostly on these. Each start state
is sampled from the real buffer; every step, each branch goes through a
uniformly random elite of the ensemble (``DynamicsEnsemble.sample``) with the
learner's own exploring policy. A branch ends when it terminates (a known
termination function, else the ensemble's learned termination head), or when
the model predicts a non-finite or absurdly large state or reward: that
transition is dropped, counted, and never reaches the model buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from tensordict import TensorDict

from mbpo.buffers import MODEL_VERSION, transitions

__all__ = ["rollout_length", "branched_rollouts", "RolloutStats", "obs_limit_from"]

ABSURD_FACTOR = 10.0
"""A predicted state is absurd beyond this many times the largest |value| seen in real data (+1) per dim."""


class EnsembleLike(Protocol):
    version: int

    def sample(
        self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]: ...


@dataclass
class RolloutStats:
    started: int
    """Branches started (start states)."""
    stored: int
    """Model transitions written to the model buffer."""
    nonfinite: int
    """Branches ended because the model predicted a non-finite or absurd state or reward."""
    terminated: int
    """Branches ended by (predicted) termination."""
    length: int
    """Rollout length used (steps per branch at most)."""


def rollout_length(schedule: list[int], epoch: float) -> int:
    """MBPO's linear schedule ``[start_epoch, end_epoch, start_len, end_len]``, evaluated at ``epoch``."""
    start_epoch, end_epoch, start_len, end_len = schedule
    if epoch <= start_epoch or end_epoch == start_epoch:
        return int(start_len if epoch <= start_epoch else end_len)
    frac = min((epoch - start_epoch) / (end_epoch - start_epoch), 1.0)
    return int(start_len + frac * (end_len - start_len))


def obs_limit_from(real_obs: torch.Tensor) -> torch.Tensor:
    """Per-dimension bound beyond which a predicted observation is absurd."""
    return real_obs.abs().amax(dim=0) * ABSURD_FACTOR + 1.0


def branched_rollouts(
    start_obs: torch.Tensor,
    length: int,
    policy: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
    ensemble: EnsembleLike,
    termination: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None,
    obs_limit: torch.Tensor,
    generator: torch.Generator,
) -> tuple[TensorDict, RolloutStats]:
    """Roll ``length`` model steps from every row of ``start_obs``; return the kept transitions.

    ``termination`` is a known termination function ``(obs, action, next_obs) -> bool``;
    None means the ensemble's learned termination logit decides (logit > 0).
    Transitions carry ``model_version``. One host sync per step (dropping ended branches).
    """
    obs = start_obs
    pieces: list[TensorDict] = []
    nonfinite = terminated_count = 0
    for _ in range(length):
        action = policy(obs, generator)
        next_obs, reward, term_logit = ensemble.sample(obs, action, generator)
        if termination is not None:
            terminated = termination(obs, action, next_obs)
        elif term_logit is not None:
            terminated = term_logit > 0
        else:
            raise ValueError("no termination function and no learned termination head: cannot end branches")
        bad = ~torch.isfinite(next_obs).all(-1) | ~torch.isfinite(reward) | (next_obs.abs() > obs_limit).any(-1)
        keep = ~bad
        terminated = terminated & keep
        n_bad, n_term = (int(x) for x in torch.stack((bad.sum(), terminated.sum())).tolist())
        nonfinite, terminated_count = nonfinite + n_bad, terminated_count + n_term
        step = transitions(obs, action, reward, next_obs, terminated)[keep]
        step[MODEL_VERSION] = torch.full((step.shape[0],), ensemble.version, dtype=torch.int64, device=obs.device)
        pieces.append(step)
        alive = keep & ~terminated
        obs = next_obs[alive]
        if obs.shape[0] == 0:
            break
    batch = torch.cat(pieces) if pieces else TensorDict({}, batch_size=[0])
    stats = RolloutStats(started=start_obs.shape[0], stored=batch.shape[0], nonfinite=nonfinite,
                         terminated=terminated_count, length=length)
    return batch, stats
