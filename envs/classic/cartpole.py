"""CartPole-v1 as batched torch: gymnasium's Euler dynamics, reward 1 per step."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from envs.classic.core import ClassicTask

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4


def initial_state(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Every state variable ~ U(-0.05, 0.05), as gymnasium's reset."""
    return torch.rand(n, 4, generator=generator, device=device) * 0.1 - 0.05


def dynamics(state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """gymnasium's Euler step, written with few ops: eager CPU cost is per op, not per env."""
    x_dot, theta, theta_dot = state[:, 1], state[:, 2], state[:, 3]
    force = action.to(state.dtype).mul_(2 * FORCE_MAG).sub_(FORCE_MAG)  # 1 -> +F, 0 -> -F
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    temp = torch.addcmul(force, theta_dot * theta_dot, sintheta, value=POLEMASS_LENGTH).div_(TOTAL_MASS)
    # LENGTH * (4/3 - MASSPOLE * cos^2 / TOTAL_MASS), expanded
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * 4.0 / 3.0 - (LENGTH * MASSPOLE / TOTAL_MASS) * costheta * costheta
    )
    xacc = temp - (POLEMASS_LENGTH / TOTAL_MASS) * thetaacc * costheta
    derivative = torch.stack((x_dot, xacc, theta_dot, thetaacc), dim=-1)
    next_state = torch.add(state, derivative, alpha=TAU)
    terminated = (next_state[:, 0].abs() > X_THRESHOLD) | (next_state[:, 2].abs() > THETA_THRESHOLD)
    return next_state, torch.ones_like(x_dot), terminated


def observe(state: torch.Tensor) -> torch.Tensor:
    return state


_high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)
CARTPOLE = ClassicTask(
    env_id="CartPole-v1",
    state_dim=4,
    observation_space=gym.spaces.Box(-_high, _high, dtype=np.float32),
    action_space=gym.spaces.Discrete(2),
    max_episode_steps=500,
    initial_state=initial_state,
    dynamics=dynamics,
    observe=observe,
)
