"""``ManagerBasedRLEnv``: a batched 1-D cart on ``cfg.sim.device``; one simulation per process, as in Isaac Sim."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

_simulation: Any = None
"""The one simulation context of this process (Isaac Sim's SimulationContext is a singleton)."""


class ManagerBasedRLEnv(gym.Env):
    """Observation groups ``policy`` (x, v) and ``critic`` (x, v, x*v); same-step auto-reset, final obs lost."""

    def __init__(self, cfg: Any, render_mode: str | None = None) -> None:
        global _simulation
        if _simulation is not None:
            raise RuntimeError("Simulation context already exists. Cannot create a new one.")
        self.cfg, self.scene, self.device = cfg, cfg.scene, torch.device(cfg.sim.device)
        self.max_episode_length = cfg.episode_length
        self.generator = torch.Generator(device=self.device)
        if cfg.seed is not None:
            self.generator.manual_seed(cfg.seed)
        self.state = torch.zeros(self.num_envs, 2, device=self.device)
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._reset_ids(torch.arange(self.num_envs, device=self.device))
        _simulation = self

    @property
    def num_envs(self) -> int:
        """Isaac Lab's reads its scene, which close() deletes."""
        return int(self.scene.num_envs)

    def _obs(self) -> dict[str, torch.Tensor]:
        x, v = self.state.unbind(-1)
        return {"policy": self.state.clone(), "critic": torch.stack([x, v, x * v], -1)}

    def _reset_ids(self, env_ids: torch.Tensor) -> None:
        draw = torch.rand(len(env_ids), 2, generator=self.generator, device=self.device) - 0.5
        self.state[env_ids] = draw
        self.episode_length_buf[env_ids] = 0

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None,
              options: dict | None = None) -> tuple[dict[str, torch.Tensor], dict]:
        if seed is not None:
            self.generator.manual_seed(seed)
        self._reset_ids(torch.arange(self.num_envs, device=self.device) if env_ids is None else env_ids)
        return self._obs(), {}

    def step(self, action: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor,
                                                  torch.Tensor, dict]:
        x, v = self.state.unbind(-1)
        v = v + 0.1 * action[:, 0].clamp(-1.0, 1.0)
        self.state = torch.stack([x + 0.1 * v, v], -1)
        self.episode_length_buf += 1
        reward = -self.state[:, 0].square()
        terminated = self.state[:, 0].abs() > 2.0
        truncated = self.episode_length_buf >= self.max_episode_length
        done = (terminated | truncated).nonzero().squeeze(-1)
        if len(done):
            self._reset_ids(done)
        return self._obs(), reward, terminated, truncated, {}

    def close(self) -> None:
        global _simulation
        if _simulation is self:
            _simulation = None  # Isaac Lab's close() clears the simulation context
        if hasattr(self, "scene"):
            del self.scene  # and deletes its scene
