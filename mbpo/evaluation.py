"""Evaluate the deterministic policy on its own env instance, one episode per env."""

from __future__ import annotations

from collections.abc import Callable

import torch

import envs
from mbpo.agents.base import Agent

__all__ = ["evaluate"]

MAX_EVAL_STEPS = 100_000  # for envs without a time limit


def evaluate(agent: Agent, env: envs.VecEnv, seed: int, poll: Callable[[], None] | None = None) -> list[float]:
    """Return of the first episode of each of ``env.num_envs`` envs, acting greedily.

    ``reset(seed=seed)`` makes every evaluation reproducible on its own, so
    evaluating never disturbs the training RNG streams (exact resume relies on it).
    """
    obs = env.reset(seed=seed)
    n = env.num_envs
    returns = torch.zeros(n, dtype=torch.float64)
    running = torch.ones(n, dtype=torch.bool)
    limit = env.max_episode_steps or MAX_EVAL_STEPS
    for _ in range(limit):
        if poll is not None:
            poll()  # e.g. the async trainer's supervision: a long evaluation must not hide a worker's error
        actions = agent.act(obs.cpu(), explore=False).to(env.device)
        obs, reward, terminated, truncated, _ = env.step(actions)
        returns += torch.where(running, reward.cpu().double(), 0.0)
        running &= ~(terminated | truncated).cpu()
        if not bool(running.any()):
            break
    return returns.tolist()
