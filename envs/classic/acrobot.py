"""Acrobot-v1 as batched torch: Sutton & Barto's "book" dynamics with one RK4 step of 0.2 s."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from envs.classic.core import ClassicTask
from envs.classic.render import Canvas

DT = 0.2
LINK_LENGTH_1 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi
G = 9.8


def initial_state(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Both angles and both velocities ~ U(-0.1, 0.1), as gymnasium's reset."""
    return torch.rand(n, 4, generator=generator, device=device, dtype=torch.float32) * 0.2 - 0.1


def _dsdt(s: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
    m1, m2, l1 = LINK_MASS_1, LINK_MASS_2, LINK_LENGTH_1
    lc1, lc2, i1, i2 = LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI, LINK_MOI
    theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + i2
    phi2 = m2 * lc2 * G * torch.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
        + (m1 * lc1 + m2 * l1) * G * torch.cos(theta1 - math.pi / 2)
        + phi2
    )
    ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2) / (
        m2 * lc2**2 + i2 - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), dim=-1)


def _wrap(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """gymnasium's ``wrap`` (repeatedly add/subtract the range) without a loop."""
    diff = high - low
    x = torch.where(x > high, x - diff * torch.ceil((x - high) / diff), x)
    return torch.where(x < low, x + diff * torch.ceil((low - x) / diff), x)


def dynamics(state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Integrated in float64 like gymnasium: at the velocity bounds the terms reach ~1e3
    # and cancel, so float32 RK4 drifts ~5e-4 from gymnasium in a single step.
    dtype = state.dtype
    state = state.double()
    torque = action.double() - 1.0  # 0, 1, 2 -> -1, 0, +1
    k1 = _dsdt(state, torque)
    k2 = _dsdt(state + DT / 2 * k1, torque)
    k3 = _dsdt(state + DT / 2 * k2, torque)
    k4 = _dsdt(state + DT * k3, torque)
    ns = state + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    t1, t2, v1, v2 = ns.unbind(-1)
    ns = torch.stack(
        (
            _wrap(t1, -math.pi, math.pi),
            _wrap(t2, -math.pi, math.pi),
            v1.clamp(-MAX_VEL_1, MAX_VEL_1),
            v2.clamp(-MAX_VEL_2, MAX_VEL_2),
        ),
        dim=-1,
    )
    terminated = -torch.cos(ns[:, 0]) - torch.cos(ns[:, 1] + ns[:, 0]) > 1.0
    return ns.to(dtype), terminated.to(dtype) - 1.0, terminated


def observe(state: torch.Tensor) -> torch.Tensor:
    t1, t2, v1, v2 = state.unbind(-1)
    return torch.stack((torch.cos(t1), torch.sin(t1), torch.cos(t2), torch.sin(t2), v1, v2), dim=-1)


def render(state: np.ndarray) -> np.ndarray:
    """gymnasium's picture: two links hanging from the pivot, the line their tip must swing above (400 x 400)."""
    canvas = Canvas(400, 400, scale=400 / 4.4)
    t1, t2 = float(state[0]), float(state[1])
    p1 = (LINK_LENGTH_1 * math.sin(t1), -LINK_LENGTH_1 * math.cos(t1))
    p2 = (p1[0] + math.sin(t1 + t2), p1[1] - math.cos(t1 + t2))  # the second link is 1 long too
    canvas.line((-2.2, 1.0), (2.2, 1.0), 0.01, (0, 0, 0))
    for a, b in (((0.0, 0.0), p1), (p1, p2)):
        canvas.line(a, b, 0.2, (0, 204, 204))
        canvas.circle(a, 0.1, (204, 204, 0))
    return canvas.image()


_high = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)
ACROBOT = ClassicTask(
    env_id="Acrobot-v1",
    state_dim=4,
    observation_space=gym.spaces.Box(-_high, _high, dtype=np.float32),
    action_space=gym.spaces.Discrete(3),
    max_episode_steps=500,
    initial_state=initial_state,
    dynamics=dynamics,
    observe=observe,
    render=render,
    render_fps=15,
)
