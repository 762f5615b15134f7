"""``RslRlVecEnvWrapper``: an Isaac Lab env as an rsl_rl ``VecEnv`` (observation groups in a TensorDict)."""

from __future__ import annotations

from typing import Any

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict


class RslRlVecEnvWrapper(VecEnv):
    def __init__(self, env: Any, clip_actions: float | None = None) -> None:
        self.env, self.clip_actions = env, clip_actions
        self.num_envs, self.device = env.unwrapped.num_envs, env.unwrapped.device
        self.num_actions, self.max_episode_length = 1, env.unwrapped.max_episode_length
        self.cfg = env.unwrapped.cfg
        self.env.reset()

    @property
    def unwrapped(self) -> Any:
        return self.env.unwrapped

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.unwrapped.episode_length_buf

    def seed(self, seed: int = -1) -> int:
        self.unwrapped.generator.manual_seed(seed)
        return seed

    def get_observations(self) -> TensorDict:
        return TensorDict(self.unwrapped._obs(), batch_size=[self.num_envs])

    def reset(self) -> tuple[TensorDict, dict]:
        obs, extras = self.env.reset()
        return TensorDict(obs, batch_size=[self.num_envs]), extras

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        obs, rew, terminated, truncated, extras = self.env.step(actions)
        extras["time_outs"] = truncated
        return TensorDict(obs, batch_size=[self.num_envs]), rew, (terminated | truncated).long(), extras

    def close(self) -> None:
        self.env.close()
