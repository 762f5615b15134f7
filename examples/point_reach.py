"""A worked example of ``env.factory``: a task of your own, trained from the command line.

    python -m mbpo train --config examples/point_reach_sac.yaml

``PointReach``: each of ``num_envs`` points in ``[-1, 1]^dim`` steers towards a goal of its own. It is
written against our VecEnv contract (envs/base.py: batched tensors on ``device``, same-step auto-reset,
``info["final_obs"]``); a factory may as well return an rsl_rl VecEnv, a batched torchrl ``EnvBase`` or a
gymnasium ``VectorEnv`` (docs/envs.md). :func:`make_env` is what the config names:
``env.factory: examples.point_reach:make_env``; the trainer passes ``num_envs``, ``device`` and ``seed``,
``env.kwargs`` the rest. Collector processes import it by that name, from the directory the run starts in.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from envs import VecEnv, check_actions
from envs.base import check_num_envs, resolve_env_ids
from envs.device import resolve_device


class PointReach(VecEnv):
    """Reward ``-distance to the goal`` per step; terminated on reaching it, truncated at ``max_episode_steps``."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int | None = None, dim: int = 2,
                 goal_radius: float = 0.1, speed: float = 0.1, max_episode_steps: int = 50) -> None:
        self.num_envs, self.device = check_num_envs(num_envs), resolve_device(device)
        self.dim, self.goal_radius, self.speed = dim, goal_radius, speed
        self.max_episode_steps = self.time_limit = max_episode_steps
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2 * dim,), dtype=np.float32)  # position, goal
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(dim,), dtype=np.float32)  # a velocity
        self.generator = torch.Generator(device=self.device)
        if seed is not None:
            self.generator.manual_seed(seed)
        self.position = torch.zeros(self.num_envs, dim, device=self.device)
        self.goal = torch.zeros(self.num_envs, dim, device=self.device)
        self.episode_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)

    def _obs(self) -> torch.Tensor:
        return torch.cat([self.position, self.goal], dim=-1)

    def _start(self, mask: torch.Tensor) -> None:
        """New episodes in the envs of ``mask``: a random position and goal each, step counter 0."""
        draw = torch.rand(2, self.num_envs, self.dim, generator=self.generator, device=self.device) * 2 - 1
        self.position = torch.where(mask.unsqueeze(-1), draw[0], self.position)
        self.goal = torch.where(mask.unsqueeze(-1), draw[1], self.goal)
        self.episode_steps = torch.where(mask, torch.zeros_like(self.episode_steps), self.episode_steps)

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        if env_ids is not None:
            mask, _ = resolve_env_ids(env_ids, self.num_envs, self.device, seed)
        else:
            if seed is not None:
                self.generator.manual_seed(seed)
            mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._start(mask)
        return self._obs()

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        check_actions(actions, self.action_space, self.num_envs, self.device)
        self.position = (self.position + self.speed * actions.clamp(-1.0, 1.0)).clamp(-1.0, 1.0)
        distance = torch.linalg.vector_norm(self.position - self.goal, dim=-1)
        self.episode_steps += 1
        terminated = distance < self.goal_radius
        truncated = (self.episode_steps >= self.time_limit) & ~terminated
        final_obs = self._obs()
        self._start(terminated | truncated)  # same-step auto-reset: obs below starts the next episode
        return self._obs(), -distance, terminated, truncated, {"final_obs": final_obs}


def make_env(num_envs: int, device: str, seed: int, dim: int = 2, goal_radius: float = 0.1,
             max_episode_steps: int = 50) -> PointReach:
    """What ``env.factory`` names; ``dim``, ``goal_radius`` and ``max_episode_steps`` come from ``env.kwargs``."""
    return PointReach(num_envs, device, seed, dim=dim, goal_radius=goal_radius, max_episode_steps=max_episode_steps)
