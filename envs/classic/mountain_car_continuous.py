"""MountainCarContinuous-v0 as batched torch.

Like gymnasium, the force is the action clipped to [-1, 1] while the energy
penalty uses the action as given (unclipped).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from envs.classic.core import ClassicTask
from envs.classic.render import Canvas

MIN_ACTION = -1.0
MAX_ACTION = 1.0
MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.45
GOAL_VELOCITY = 0.0
POWER = 0.0015


def initial_state(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """position ~ U(-0.6, -0.4), velocity 0, as gymnasium's reset."""
    position = torch.rand(n, generator=generator, device=device, dtype=torch.float32) * 0.2 - 0.6
    return torch.stack((position, torch.zeros_like(position)), dim=-1)


def dynamics(state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    position, velocity = state.unbind(-1)
    raw = action[:, 0]
    force = raw.clamp(MIN_ACTION, MAX_ACTION)
    velocity = velocity + force * POWER - 0.0025 * torch.cos(3 * position)
    velocity = velocity.clamp(-MAX_SPEED, MAX_SPEED)
    position = (position + velocity).clamp(MIN_POSITION, MAX_POSITION)
    velocity = torch.where((position == MIN_POSITION) & (velocity < 0), torch.zeros_like(velocity), velocity)
    terminated = (position >= GOAL_POSITION) & (velocity >= GOAL_VELOCITY)
    reward = terminated.to(state.dtype) * 100.0 - raw**2 * 0.1
    return torch.stack((position, velocity), dim=-1), reward, terminated


def observe(state: torch.Tensor) -> torch.Tensor:
    """The state as the observation: a copy, so that a caller's in-place change of an observation (a running
    normaliser's ``obs.sub_``) cannot move the simulation (gymnasium hands out copies too).
    """
    return state.clone()


def _height(x: float) -> float:
    return float(np.sin(3 * x) * 0.45 + 0.55)


def render(state: np.ndarray) -> np.ndarray:
    """gymnasium's picture: the hill, the flag at the goal and the car on the slope (640 x 400)."""
    canvas = Canvas(640, 400, scale=640 / (MAX_POSITION - MIN_POSITION), center=(-0.3, 0.55))
    xs = np.linspace(MIN_POSITION, MAX_POSITION, 100)
    canvas.polyline([(float(x), _height(float(x))) for x in xs], 0.008, (0, 0, 0))
    flag = _height(GOAL_POSITION)
    canvas.line((GOAL_POSITION, flag), (GOAL_POSITION, flag + 0.1), 0.006, (0, 0, 0))
    canvas.rect((GOAL_POSITION, flag + 0.07), (GOAL_POSITION + 0.06, flag + 0.1), (204, 204, 0))
    position = float(state[0])
    canvas.circle((position, _height(position) + 0.035), 0.035, (0, 0, 0))
    return canvas.image()


MOUNTAIN_CAR_CONTINUOUS = ClassicTask(
    env_id="MountainCarContinuous-v0",
    state_dim=2,
    observation_space=gym.spaces.Box(
        np.array([MIN_POSITION, -MAX_SPEED], dtype=np.float32),
        np.array([MAX_POSITION, MAX_SPEED], dtype=np.float32),
        dtype=np.float32,
    ),
    action_space=gym.spaces.Box(MIN_ACTION, MAX_ACTION, shape=(1,), dtype=np.float32),
    max_episode_steps=999,
    initial_state=initial_state,
    dynamics=dynamics,
    observe=observe,
    render=render,
    render_fps=30,
)
