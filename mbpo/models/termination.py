"""Known termination rules, batched in torch, for model rollouts.

A learned dynamics model predicts ``next_obs`` but not whether gymnasium would call the
transition ``terminated``. For the envs whose rule is a closed-form function of the
observation we reproduce that rule exactly here, so rollouts do not depend on a learned
termination head; for every other id :func:`known_termination` returns ``None`` and the
caller falls back to the learned head.

Every function mirrors gymnasium 1.x's own ``step``/``is_healthy`` for the *default*
constructor arguments and the default observation layout
(``exclude_current_positions_from_observation=True`` for MuJoCo). Comparisons keep
gymnasium's strictness (``<`` vs ``<=``) so NaN is handled the way gymnasium handles it:
a NaN fails a strict range test (unhealthy) but is only checked explicitly where
gymnasium calls ``np.isfinite``. A generic "absurd state" guard is the rollout code's job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import torch

__all__ = ["TerminationFn", "known_termination", "supported_env_ids"]

TerminationFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(obs (B, obs_dim), action (B, act_dim) or (B,), next_obs (B, obs_dim)) -> bool (B,)``."""


def _never(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """Tasks whose ``step`` always returns ``terminated=False`` (Pendulum; MuJoCo HalfCheetah, Swimmer,
    Reacher, Pusher): only the time limit ends their episodes, so a model rollout never terminates.
    """
    return torch.zeros(next_obs.shape[:-1], dtype=torch.bool, device=next_obs.device)


# gymnasium classic_control/cartpole.py: x_threshold = 2.4, theta_threshold_radians = 12 * 2 * pi / 360.
_CARTPOLE_X = 2.4
_CARTPOLE_THETA = 12 * 2 * math.pi / 360


def _cartpole(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """gymnasium cartpole.py ``step``: x < -2.4 or x > 2.4 or theta < -12deg or theta > 12deg."""
    x, theta = next_obs[..., 0], next_obs[..., 2]
    return (x < -_CARTPOLE_X) | (x > _CARTPOLE_X) | (theta < -_CARTPOLE_THETA) | (theta > _CARTPOLE_THETA)


def _mountain_car_rule(goal_position: float) -> TerminationFn:
    """Both mountain cars: ``position >= goal_position and velocity >= goal_velocity (= 0)``."""

    def rule(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        return (next_obs[..., 0] >= goal_position) & (next_obs[..., 1] >= 0.0)

    return rule


# gymnasium continuous_mountain_car.py ``step``: goal_position = 0.45, goal_velocity = 0.
_mountain_car_continuous = _mountain_car_rule(0.45)
# gymnasium mountain_car.py ``step``: goal_position = 0.5, goal_velocity = 0.
_mountain_car = _mountain_car_rule(0.5)


def _acrobot(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """gymnasium acrobot.py ``_terminal``: -cos(t1) - cos(t2 + t1) > 1, from obs [c1, s1, c2, s2, ...]."""
    c1, s1, c2, s2 = next_obs[..., 0], next_obs[..., 1], next_obs[..., 2], next_obs[..., 3]
    return -c1 - (c1 * c2 - s1 * s2) > 1.0


def _hopper(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """gymnasium mujoco/hopper_v5.py ``is_healthy`` (same in hopper_v4.py), default ranges.

    obs = [qpos[1:], clip(qvel, -10, 10)], so z = obs[0], torso angle = obs[1] and
    gymnasium's ``state_vector()[2:]`` is obs[1:] -- except that the velocities are clipped
    to +-10 in the observation, so a true |qvel| >= 100 (unhealthy in gymnasium) cannot be
    seen from obs; for clipped velocities the state-range test can only fail on qpos[2:]
    or NaN, exactly as gymnasium would on the same (clipped) numbers.
    """
    z, angle, state = next_obs[..., 0], next_obs[..., 1], next_obs[..., 1:]
    healthy_state = ((-100.0 < state) & (state < 100.0)).all(dim=-1)  # healthy_state_range (-100, 100)
    healthy_z = (0.7 < z) & (z < math.inf)  # healthy_z_range (0.7, inf)
    healthy_angle = (-0.2 < angle) & (angle < 0.2)  # healthy_angle_range (-0.2, 0.2)
    return ~(healthy_state & healthy_z & healthy_angle)


def _walker2d(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """gymnasium mujoco/walker2d_v5.py ``is_healthy`` (same in v4): 0.8 < z < 2 and -1 < angle < 1.

    obs = [qpos[1:], clip(qvel, -10, 10)]: z = obs[0], torso angle = obs[1]; no finiteness
    check in gymnasium (a NaN z/angle still fails the strict range test).
    """
    z, angle = next_obs[..., 0], next_obs[..., 1]
    return ~((0.8 < z) & (z < 2.0) & (-1.0 < angle) & (angle < 1.0))


# Ant's gymnasium ``state_vector()`` is qpos (15) + qvel (14); obs drops qpos[0:2], so the
# first 13 + 14 = 27 obs entries are state_vector()[2:]; v5's default obs then appends
# cfrc_ext (78 more, 105 total), which gymnasium's finiteness test does not look at.
_ANT_STATE_DIM = 27


def _ant(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """gymnasium mujoco/ant_v5.py ``is_healthy`` (same in ant_v4.py): isfinite(state).all() and 0.2 <= z <= 1.

    z = qpos[2] = obs[0]. The x/y positions in state_vector are not in obs: a non-finite
    x/y alone (which would also make gymnasium terminate) is invisible here.
    """
    z = next_obs[..., 0]
    finite = torch.isfinite(next_obs[..., :_ANT_STATE_DIM]).all(dim=-1)
    return ~(finite & (0.2 <= z) & (z <= 1.0))


def _humanoid(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """gymnasium mujoco/humanoid_v5.py ``is_healthy`` (same in v4): 1.0 < qpos[2] < 2.0, qpos[2] = obs[0]."""
    z = next_obs[..., 0]
    return ~((1.0 < z) & (z < 2.0))


def _inverted_pendulum(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """gymnasium mujoco/inverted_pendulum_v5.py ``step`` (same in v4): not isfinite(obs).all() or |obs[1]| > 0.2."""
    return ~torch.isfinite(next_obs).all(dim=-1) | (next_obs[..., 1].abs() > 0.2)


# (family, version) -> rule. Only versions whose default layout and rule we checked against
# gymnasium 1.x source: MuJoCo v4 and v5 agree for these five envs (v4's Ant default obs is
# the 27 state entries without contact forces, which the Ant rule handles); MuJoCo v2/v3
# need mujoco-py and are not in gymnasium 1.x, so they return None rather than a guess.
_RULES: dict[tuple[str, int], TerminationFn] = {
    ("Pendulum", 1): _never,
    ("CartPole", 0): _cartpole,  # v0 differs from v1 only in max_episode_steps
    ("CartPole", 1): _cartpole,
    ("MountainCarContinuous", 0): _mountain_car_continuous,
    ("MountainCar", 0): _mountain_car,
    ("Acrobot", 1): _acrobot,
    ("Hopper", 4): _hopper,
    ("Hopper", 5): _hopper,
    ("Walker2d", 4): _walker2d,
    ("Walker2d", 5): _walker2d,
    ("Ant", 4): _ant,
    ("Ant", 5): _ant,
    ("Humanoid", 4): _humanoid,
    ("Humanoid", 5): _humanoid,
    ("InvertedPendulum", 4): _inverted_pendulum,
    ("InvertedPendulum", 5): _inverted_pendulum,
    # gymnasium mujoco/{half_cheetah,swimmer,reacher}_v{4,5}.py and pusher_v5.py: terminated is always False
    # (Pusher-v4 needs mujoco < 3, which gymnasium 1.x does not run).
    **{(name, version): _never for name in ("HalfCheetah", "Swimmer", "Reacher") for version in (4, 5)},
    ("Pusher", 5): _never,
}

# gymnasium's id grammar: [namespace/]name[-vN].
_ID_RE = re.compile(r"^(?:(?P<namespace>[\w:.-]+)/)?(?P<name>[\w:.-]+?)(?:-v(?P<version>\d+))?$")


def known_termination(env_id: str) -> TerminationFn | None:
    """The closed-form termination rule for ``env_id``, or ``None`` when we do not know one.

    Matches on gymnasium's (name, version) without namespace; unversioned ids, namespaced ids
    (e.g. ``phys2d/CartPole-v1``) and non-default constructor kwargs are not covered, because
    the rule or layout could differ. Callers that pass non-default healthy ranges or
    ``exclude_current_positions_from_observation=False`` must not use these functions.
    """
    match = _ID_RE.match(env_id)
    if match is None or match["namespace"] is not None or match["version"] is None:
        return None
    return _RULES.get((match["name"], int(match["version"])))


def supported_env_ids() -> list[str]:
    """Every id :func:`known_termination` answers for (for logs and tests)."""
    return [f"{name}-v{version}" for name, version in _RULES]
