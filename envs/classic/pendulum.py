"""Pendulum-v1 as batched torch: gymnasium's dynamics, reward and reset, per env."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from envs.classic.core import ClassicTask, device_constants
from envs.classic.render import Canvas

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
G = 10.0
M = 1.0
L = 1.0


def initial_state(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """theta ~ U(-pi, pi), theta_dot ~ U(-1, 1), as gymnasium's reset. No tensor from a host list: on CUDA
    that is a copy from pageable memory, a host sync inside every step that resets an env.
    """
    state = torch.rand(n, 2, generator=generator, device=device, dtype=torch.float32).mul_(2.0).sub_(1.0)
    state[:, 0].mul_(math.pi)
    return state


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """``(x + pi) mod 2 pi - pi`` as ``x - 2 pi floor(x / 2 pi + 1/2)``: three cheap ops where ``torch.remainder``
    costs as much as the rest of the step on CPU.
    """
    (half,) = device_constants(x.device, 0.5)
    turns = torch.add(half, x, alpha=1.0 / (2 * math.pi)).floor_()
    return torch.add(x, turns, alpha=-2 * math.pi)


def dynamics(state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """gymnasium's step with fused multiply-adds: eager CPU cost is per op, not per env."""
    th, thdot = state.unbind(1)
    u = action[:, 0].clamp(-MAX_TORQUE, MAX_TORQUE)
    an = angle_normalize(th)
    # costs = an^2 + 0.1 * thdot^2 + 0.001 * u^2
    costs = (an * an).addcmul_(thdot, thdot, value=0.1).addcmul_(u, u, value=0.001)
    # newthdot = thdot + (3g/(2l) sin(th) + 3/(m l^2) u) * dt, clipped
    acc = torch.sin(th).mul_(3 * G / (2 * L)).add_(u, alpha=3.0 / (M * L**2))
    newthdot = torch.add(thdot, acc, alpha=DT).clamp_(-MAX_SPEED, MAX_SPEED)
    newth = torch.add(th, newthdot, alpha=DT)
    return torch.stack((newth, newthdot), dim=-1), costs.neg_(), torch.zeros_like(th, dtype=torch.bool)


def observe(state: torch.Tensor) -> torch.Tensor:
    th, thdot = state.unbind(-1)
    return torch.stack((torch.cos(th), torch.sin(th), thdot), dim=-1)


def render(state: np.ndarray) -> np.ndarray:
    """gymnasium's picture: a rod of length 1 from the axle, upright at theta 0 (400 x 400)."""
    canvas = Canvas(400, 400, scale=400 / 4.4)
    tip = (-L * math.sin(float(state[0])), L * math.cos(float(state[0])))
    canvas.line((0.0, 0.0), tip, 0.2, (204, 77, 77))
    canvas.circle((0.0, 0.0), 0.05, (0, 0, 0))
    return canvas.image()


_high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
PENDULUM = ClassicTask(
    env_id="Pendulum-v1",
    state_dim=2,
    observation_space=gym.spaces.Box(-_high, _high, dtype=np.float32),
    action_space=gym.spaces.Box(-MAX_TORQUE, MAX_TORQUE, shape=(1,), dtype=np.float32),
    max_episode_steps=200,
    initial_state=initial_state,
    dynamics=dynamics,
    observe=observe,
    render=render,
    render_fps=30,
)
