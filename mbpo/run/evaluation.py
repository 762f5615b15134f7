"""Evaluate the deterministic policy on its own env instance, one episode per env.

:func:`evaluate_episodes` also keeps each episode's start state and discounted return: against the
critics' estimate at those states, that is the critic's bias (``q_bias`` in metrics.csv). The discounted
return stops at the episode's end; where a time limit cut it, SAC's critics (which bootstrap through
time-outs) also count the value beyond it, worth ``gamma ** T`` of a state's value after ``T`` steps:
negligible for 1,000-step MuJoCo episodes at gamma 0.99 (4e-5), about 13% for Pendulum's 200.

SAC's critics are soft: their targets add ``alpha * H`` (H the policy's entropy) per step after the first,
which a reward-only return lacks; ``q_bias_reward`` takes that part out, with H at the entropy that
automatic alpha holds (``target_entropy``), over each episode's steps. With a negative target (Hopper's
-1) it is negative: about ``-alpha * 99`` for long episodes at gamma 0.99.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

import envs
from mbpo.agents.base import Agent

__all__ = ["evaluate", "evaluate_episodes", "Episodes", "critic_bias", "eval_stats"]

MAX_EVAL_STEPS = 100_000  # for envs without a time limit


@dataclass
class Episodes:
    """One greedy episode per env: what :func:`evaluate_episodes` measured."""

    returns: list[float]
    """Undiscounted return of each episode."""
    discounted_returns: list[float]
    """``sum_t gamma**t r_t`` of each episode: the Monte-Carlo value of its start state."""
    start_obs: torch.Tensor
    """``(num_envs, obs_dim)`` first observations, on the env's device."""
    lengths: list[int]
    """Steps of each episode."""
    gamma: float
    """The discount of ``discounted_returns``."""


def evaluate(agent: Agent, env: envs.VecEnv, seed: int, poll: Callable[[], None] | None = None,
             frames: Callable[[torch.Tensor], None] | None = None) -> list[float]:
    """Return of the first episode of each of ``env.num_envs`` envs, acting greedily.

    ``reset(seed=seed)`` makes every evaluation reproducible on its own, so
    evaluating never disturbs the training RNG streams (exact resume relies on it).
    ``frames`` (a video recorder, mbpo.run.video) is called before each step with the mask of envs still
    in their first episode, bool ``(num_envs,)`` on CPU.
    """
    return evaluate_episodes(agent, env, seed, poll, frames=frames).returns


def evaluate_episodes(agent: Agent, env: envs.VecEnv, seed: int, poll: Callable[[], None] | None = None,
                      gamma: float = 0.99, frames: Callable[[torch.Tensor], None] | None = None) -> Episodes:
    """:func:`evaluate`, keeping each episode's start state and its return discounted by ``gamma``."""
    obs = env.reset(seed=seed)
    start_obs = obs.clone()
    n = env.num_envs
    returns = torch.zeros(n, dtype=torch.float64)
    discounted = torch.zeros(n, dtype=torch.float64)
    discount = 1.0
    running = torch.ones(n, dtype=torch.bool)
    lengths = torch.zeros(n, dtype=torch.long)
    limit = env.max_episode_steps or MAX_EVAL_STEPS
    for _ in range(limit):
        if poll is not None:
            poll()  # e.g. the async trainer's supervision: a long evaluation must not hide a worker's error
        if frames is not None:
            frames(running)
        actions = agent.act(obs.cpu(), explore=False).to(env.device)
        obs, reward, terminated, truncated, _ = env.step(actions)
        reward = torch.where(running, reward.cpu().double(), 0.0)
        returns += reward
        discounted += discount * reward
        discount *= gamma
        lengths += running
        running &= ~(terminated | truncated).cpu()
        if not bool(running.any()):
            break
    return Episodes(returns.tolist(), discounted.tolist(), start_obs, lengths.tolist(), gamma)


def eval_stats(episodes: Episodes) -> dict[str, float]:
    """The spread beside an evaluation's mean return: the episodes' return std (population, as SB3's
    ``evaluate_policy``), min and max, and their mean length in steps (a falling Hopper ends early).
    """
    returns = torch.tensor(episodes.returns, dtype=torch.float64)
    return {"eval_return_std": float(returns.std(correction=0)), "eval_return_min": float(returns.min()),
            "eval_return_max": float(returns.max()), "eval_length_mean": sum(episodes.lengths) / len(episodes.lengths)}


def critic_bias(agent: Agent, episodes: Episodes) -> dict[str, float]:
    """The critics' mean value of the episodes' start states (``q_start``), their mean discounted return
    (``mc_return_start``), and the difference (``q_bias``: above 0, the critics are optimistic); beside it
    ``q_bias_reward``, without the entropy part of a soft critic's value (see the module docstring).
    """
    q_start = float(agent.value(episodes.start_obs.to(agent.device)).mean())
    mc_start = sum(episodes.discounted_returns) / len(episodes.discounted_returns)
    g = episodes.gamma
    # sum_{t=1}^{T-1} gamma^t: the steps after the first whose entropy the critic's targets added
    entropy_part = agent.entropy_bonus() * sum((g - g**t) / (1 - g) if g < 1 else t - 1.0
                                               for t in episodes.lengths) / len(episodes.lengths)
    return {"q_start": q_start, "mc_return_start": mc_start, "q_bias": q_start - mc_start,
            "q_bias_reward": q_start - entropy_part - mc_start}
