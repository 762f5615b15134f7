"""CartPole-v1 as batched torch: gymnasium's Euler dynamics, reward 1 per step."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from envs.classic.core import ClassicTask, device_constants
from envs.classic.render import Canvas

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
RESET_HIGH = 0.05


def initial_state(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Every state variable ~ U(-0.05, 0.05), as gymnasium's reset."""
    return torch.empty(n, 4, device=device, dtype=torch.float32).uniform_(-RESET_HIGH, RESET_HIGH, generator=generator)


def dynamics(state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """gymnasium's Euler step in ~20 ops: at 4,096 envs an eager CPU op costs about its dispatch, so fewer
    ops (fused multiply-adds, in-place updates of fresh tensors, constants as tensors) is a faster step.
    """
    neg_force, gravity, den_base, x_max, theta_max = device_constants(
        state.device, -FORCE_MAG / TOTAL_MASS, GRAVITY, LENGTH * 4.0 / 3.0, X_THRESHOLD, THETA_THRESHOLD
    )
    _, x_dot, theta, theta_dot = state.unbind(1)
    # temp = (force + POLEMASS_LENGTH * theta_dot^2 * sin) / TOTAL_MASS, force = +F for action 1, -F for 0
    temp = torch.add(neg_force, action, alpha=2 * FORCE_MAG / TOTAL_MASS)
    sintheta, costheta = torch.sin(theta), torch.cos(theta)
    temp.addcmul_(theta_dot * theta_dot, sintheta, value=POLEMASS_LENGTH / TOTAL_MASS)
    # thetaacc = (g sin - cos temp) / (LENGTH * (4/3 - MASSPOLE cos^2 / TOTAL_MASS))
    thetaacc = torch.mul(sintheta, gravity).addcmul_(costheta, temp, value=-1.0)
    thetaacc.div_(torch.addcmul(den_base, costheta, costheta, value=-LENGTH * MASSPOLE / TOTAL_MASS))
    xacc = temp.addcmul_(thetaacc, costheta, value=-POLEMASS_LENGTH / TOTAL_MASS)
    next_state = torch.add(state, torch.stack((x_dot, xacc, theta_dot, thetaacc), dim=-1), alpha=TAU)
    x, _, theta, _ = next_state.unbind(1)
    terminated = (x.abs() > x_max) | (theta.abs() > theta_max)
    return next_state, torch.ones_like(x_dot), terminated


def observe(state: torch.Tensor) -> torch.Tensor:
    """The state as the observation: a copy, so that a caller's in-place change of an observation (a running
    normaliser's ``obs.sub_``) cannot move the simulation (gymnasium hands out copies too).
    """
    return state.clone()


def render(state: np.ndarray) -> np.ndarray:
    """gymnasium's picture: the cart on its track, the pole (length 1) hinged on top (640 x 400)."""
    canvas = Canvas(640, 400, scale=640 / (2 * X_THRESHOLD), center=(0.0, 0.6))
    x, theta = float(state[0]), float(state[2])
    canvas.line((-X_THRESHOLD * 2, 0.0), (X_THRESHOLD * 2, 0.0), 0.01, (0, 0, 0))
    canvas.rect((x - 0.2, -0.06), (x + 0.2, 0.18), (0, 0, 0))
    axle = (x, 0.14)
    canvas.line(axle, (x + 2 * LENGTH * math.sin(theta), axle[1] + 2 * LENGTH * math.cos(theta)), 0.08,
                (202, 152, 101))
    canvas.circle(axle, 0.04, (129, 132, 203))
    return canvas.image()


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
    render=render,
    render_fps=50,
)
