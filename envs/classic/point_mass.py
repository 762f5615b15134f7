"""PointMass-v0: a one-dimensional point mass to steer to the origin.

Not a gymnasium env: a deliberately easy continuous task whose optimum is
obvious (push toward 0), so a tiny training budget shows measurable learning.
The smoke stages and the MBPO tests use it. x' = clip(x + 0.2 a, -2, 2),
reward -x'^2, 25 steps per episode, x0 ~ U(-1, 1).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from envs.classic.core import ClassicTask
from envs.classic.render import Canvas


def initial_state(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.rand(n, 1, generator=generator, device=device, dtype=torch.float32) * 2.0 - 1.0


def dynamics(state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    next_state = (state + 0.2 * action.clamp(-1.0, 1.0)).clamp(-2.0, 2.0)
    return next_state, -next_state[:, 0].square(), torch.zeros(state.shape[0], dtype=torch.bool, device=state.device)


def observe(state: torch.Tensor) -> torch.Tensor:
    return state.clone()


def render(state: np.ndarray) -> np.ndarray:
    """The mass on its line, the origin it steers to marked (640 x 160)."""
    canvas = Canvas(640, 160, scale=640 / 4.4)
    canvas.line((-2.0, 0.0), (2.0, 0.0), 0.02, (0, 0, 0))
    canvas.line((0.0, -0.2), (0.0, 0.2), 0.03, (0, 160, 0))
    canvas.circle((float(state[0]), 0.0), 0.12, (204, 77, 77))
    return canvas.image()


POINT_MASS = ClassicTask(
    env_id="PointMass-v0",
    state_dim=1,
    observation_space=gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32),
    action_space=gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32),
    max_episode_steps=25,
    initial_state=initial_state,
    dynamics=dynamics,
    observe=observe,
    render=render,
    render_fps=10,
)
