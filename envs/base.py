"""The VecEnv contract: Isaac-style batched environments on one torch device.

Everything the trainer touches is a batched torch tensor on ``env.device``:

* ``reset(seed=None, env_ids=None) -> obs``: ``(num_envs, obs_dim)`` float32.
  ``env_ids=None`` resets every env. A partial reset, ``env_ids`` = int64 indices
  (Isaac Lab / mjlab convention) or a bool mask ``(num_envs,)`` on any device,
  starts a new episode in those envs only; the others keep their state and step
  counters (an env that draws every start from one generator, as the native envs
  and GPU simulators do, advances it: the others' later episodes start from
  other draws), and their rows of the returned obs are their current
  observation. ``seed`` applies to full resets only (with ``env_ids`` it is a
  ValueError); an empty ``env_ids`` is a no-op. :func:`resolve_env_ids` checks them.
* ``step(actions) -> (obs, reward, terminated, truncated, info)``:
  ``reward`` float32 ``(num_envs,)``; ``terminated``/``truncated`` bool ``(num_envs,)``.
* Auto-reset is same-step: for a finished env, ``obs`` is already the first
  observation of its next episode and ``info["final_obs"]`` holds the true last
  observation. Our envs fill every row of ``final_obs`` (for unfinished envs it
  equals ``obs``); callers must only rely on the rows of finished envs.
  Optional ``info["final_obs_valid"]``, bool ``(num_envs,)``: False for a finished
  env whose true last observation is unknown (some same-step auto-reset envs lose
  it; its ``final_obs`` row is then a placeholder). Absent means every
  ``final_obs`` row of a finished env is true.
* ``terminated`` (a true terminal state: do not bootstrap) is separate from
  ``truncated`` (time limit: bootstrap). Both can be true on the same step.
* ``episode_steps``: per-env step counter of the running episode, int64.

Actions: continuous spaces take float32 ``(num_envs, act_dim)``; discrete
spaces take int64 ``(num_envs,)``. Both on ``env.device``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from envs.device import same_device

__all__ = ["VecEnv", "StepResult", "ActionError", "MissingExtraError", "EnvTooLargeError", "UnknownEnvError",
           "UnsupportedSpaceError", "RenderError", "check_actions", "check_num_envs", "random_actions",
           "resolve_env_ids", "available_memory"]

StepResult = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


class ActionError(ValueError):
    """Actions handed to ``step`` do not match the env's action contract."""


class UnknownEnvError(KeyError):
    """No native env, no mjlab task and no gymnasium registration has this id."""

    def __str__(self) -> str:  # KeyError would print the message with quotes
        return str(self.args[0])


class MissingExtraError(ImportError):
    """An env needs an optional dependency (a pip extra) that is not installed; the message names the extra."""


class UnsupportedSpaceError(TypeError):
    """An env's observation or action space is one the VecEnv contract cannot express (a Discrete observation,
    a Dict, a MultiDiscrete action); the message says how to bring it to one it can.
    """


class EnvTooLargeError(MemoryError):
    """``num_envs`` copies of an env cannot fit in this device's memory; the message says how much they need.

    ``fits`` is the most copies that would (None where unknown), for a caller whose own option sets
    ``num_envs`` (``eval --episodes``) to say what to lower.
    """

    def __init__(self, message: str, fits: int | None = None) -> None:
        super().__init__(message)
        self.fits = fits


class RenderError(RuntimeError):
    """The env cannot draw a frame (:meth:`VecEnv.render`): the message says why and what would let it."""


class VecEnv(ABC):
    """A batch of ``num_envs`` copies of one task, stepped together on ``device``."""

    num_envs: int
    """Number of environments stepped together (the batch dimension)."""
    device: torch.device
    """Where every tensor going in and out of the env lives."""
    observation_space: gym.spaces.Box
    """Space of ONE env's observation (gymnasium convention, no batch dim)."""
    action_space: gym.spaces.Space
    """Space of ONE env's action: ``Box`` (continuous) or ``Discrete``."""
    max_episode_steps: int | None = None
    """Time limit after which an episode is truncated; None (the default) if unlimited."""
    episode_steps: torch.Tensor
    """Steps taken in each env's current episode, int64 ``(num_envs,)``."""
    spec_id: str | None = None
    """The task's registered id (e.g. ``"Pendulum-v1"``); None for an env whose id is not known."""
    render_fps: float | None = None
    """Frames per second of real time in :meth:`render`'s frames (one per step); None if the env does not say."""
    renders_batch: bool = False
    """True where :meth:`render` draws one view of the batch (env 0 with its neighbours, as mjlab's and Isaac Lab's
    viewers do) rather than the env it is given: a video then shows that one view."""

    @abstractmethod
    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Start new episodes; returns the observations of all envs, ``(num_envs, obs_dim)``.

        ``env_ids=None``: reset every env, re-seeding first when given ``seed``.
        ``env_ids`` (int64 indices or a bool mask ``(num_envs,)``, any device):
        reset only those envs (their ``episode_steps`` go to 0) and leave the
        others untouched; their rows are their current observation. ``seed`` with
        ``env_ids`` is a ValueError; an empty ``env_ids`` changes nothing.
        Implementations validate ``env_ids`` with :func:`resolve_env_ids`.
        """

    @abstractmethod
    def step(self, actions: torch.Tensor) -> StepResult:
        """Advance every env one step, auto-resetting the ones that finish."""

    def close(self) -> None:  # noqa: B027 - a no-op default: envs that hold nothing need not override it
        """Release resources (subprocesses, simulators). Safe to call twice."""

    def render(self, env_index: int = 0) -> np.ndarray:
        """Env ``env_index``'s current state as an RGB image, ``(height, width, 3)`` uint8, drawn offscreen (no
        display). Envs that can draw override this; the rest raise :class:`RenderError`.
        """
        raise RenderError(f"{type(self).__name__} ({self.spec_id or 'no id'}) cannot render frames: it does not "
                          "implement VecEnv.render(env_index) -> (height, width, 3) uint8")

    # Derived facts every consumer asks for; computed from the spaces.
    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.observation_space.shape))

    @property
    def is_discrete(self) -> bool:
        return isinstance(self.action_space, gym.spaces.Discrete)

    @property
    def act_dim(self) -> int:
        """Action width: ``n`` choices for a discrete env, the vector size otherwise."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return int(space.n)
        return int(np.prod(cast(gym.spaces.Box, space).shape))  # the contract: Box unless Discrete

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device}, "
            f"obs_dim={self.obs_dim}, action_space={self.action_space})"
        )


def random_actions(env: VecEnv, generator: torch.Generator) -> torch.Tensor:
    """Uniform random actions for every env (within the Box bounds), drawn on CPU, moved to ``env.device``."""
    n, space = env.num_envs, env.action_space
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        actions = torch.randint(start, start + env.act_dim, (n,), generator=generator)
    else:
        box = cast(gym.spaces.Box, space)  # the contract: Box unless Discrete
        # float64 arithmetic: bounds near float32's limits are finite, their width in float32 is not
        low = torch.as_tensor(box.low, dtype=torch.float64).expand(env.act_dim)
        high = torch.as_tensor(box.high, dtype=torch.float64).expand(env.act_dim)
        draws = torch.rand(n, env.act_dim, generator=generator).double()
        actions = (low + (high - low) * draws).clamp(low, high)
        lo_ok, hi_ok = torch.isfinite(low), torch.isfinite(high)
        if not bool((lo_ok & hi_ok).all()):  # an unbounded side (only then more draws: a bounded Box's stream stays)
            # as gymnasium's Box.sample: a normal where both sides are unbounded, an exponential off the finite one
            normal = torch.randn(n, env.act_dim, generator=generator).double()
            exponential = torch.empty(n, env.act_dim, dtype=torch.float64).exponential_(generator=generator)
            actions = torch.where(lo_ok & hi_ok, actions, torch.where(
                lo_ok, low + exponential, torch.where(hi_ok, high - exponential, normal)))
        actions = actions.float()
    return actions.to(env.device)


def check_num_envs(num_envs: Any) -> int:
    """Reject a batch size that is not a positive integer."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)):
        raise TypeError(f"num_envs must be an int >= 1, got {num_envs!r} ({type(num_envs).__name__})")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return int(num_envs)


def check_actions(
    actions: Any,
    action_space: gym.spaces.Space,
    num_envs: int,
    device: torch.device,
    check_values: bool = True,
) -> None:
    """Raise :class:`ActionError` naming what is wrong with ``actions``.

    Shape, dtype and device checks read only metadata. ``check_values`` adds the
    NaN / out-of-range check, which reads the data back and so synchronises with
    a GPU: envs let a caller turn it off on their hot path.
    """
    if not isinstance(actions, torch.Tensor):
        raise ActionError(
            f"actions must be a torch.Tensor on {device}, got {type(actions).__name__}"
        )
    if not same_device(actions.device, device):
        raise ActionError(
            f"actions are on {actions.device} but the env is on {device}; "
            f"move them with actions.to('{device}')"
        )
    if isinstance(action_space, gym.spaces.Discrete):
        if actions.dtype != torch.int64:
            raise ActionError(
                f"discrete actions must be int64 of shape ({num_envs},), got {actions.dtype}"
            )
        if tuple(actions.shape) != (num_envs,):
            raise ActionError(
                f"discrete actions must have shape ({num_envs},) (one index per env), "
                f"got {tuple(actions.shape)}"
            )
        if check_values:
            low, n = int(action_space.start), int(action_space.n)
            lo, hi = torch.aminmax(actions)  # one reduction, one sync
            if int(lo) < low or int(hi) >= low + n:
                bad = (actions < low) | (actions >= low + n)
                idx = int(bad.nonzero()[0, 0])
                raise ActionError(
                    f"discrete action {int(actions[idx])} at env {idx} is out of range; "
                    f"expected an integer in [{low}, {low + n - 1}]"
                )
        return
    expected = (num_envs, *cast(gym.spaces.Box, action_space).shape)  # the contract: Box unless Discrete
    if actions.dtype != torch.float32:
        raise ActionError(f"continuous actions must be float32 of shape {expected}, got {actions.dtype}")
    if tuple(actions.shape) != expected:
        raise ActionError(f"continuous actions must have shape {expected}, got {tuple(actions.shape)}")
    # A finite sum means every action is finite (one reduction); only a sum that is not (a NaN, an inf or an
    # overflow) pays for the exact check.
    if check_values and not math.isfinite(float(actions.sum())):
        if not bool(torch.isfinite(actions).all()):
            idx = int((~torch.isfinite(actions)).nonzero()[0, 0])
            raise ActionError(
                f"action for env {idx} is not finite ({actions[idx].tolist()}); "
                "the policy produced NaN or inf"
            )


def resolve_env_ids(
    env_ids: Any, num_envs: int, device: torch.device, seed: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a partial reset's ``env_ids``; return ``(mask, ids)`` on ``device``.

    ``mask`` is bool ``(num_envs,)``; ``ids`` the sorted, unique int64 indices
    where it is True (empty for an empty ``env_ids``). Reads the ids back to the
    host to range-check them: a partial reset is rare, not on the hot path.
    """
    expected = f"int64 env indices in [0, {num_envs - 1}] or a bool mask of shape ({num_envs},)"
    if seed is not None:
        raise ValueError(
            f"reset(seed={seed}, env_ids=...) is not allowed: seeding applies to full resets only; "
            "call reset(seed=...) without env_ids, or reset(env_ids=...) without a seed"
        )
    if not isinstance(env_ids, torch.Tensor):
        raise ValueError(f"env_ids must be a torch.Tensor of {expected}, got {type(env_ids).__name__}")
    if env_ids.dtype == torch.bool:
        if tuple(env_ids.shape) != (num_envs,):
            raise ValueError(f"env_ids bool mask must have shape ({num_envs},), got {tuple(env_ids.shape)}")
        mask = env_ids.to(device)
    elif env_ids.dtype == torch.int64:
        if env_ids.dim() != 1:
            raise ValueError(f"env_ids indices must be 1-D ({expected}), got shape {tuple(env_ids.shape)}")
        bad = env_ids[(env_ids < 0) | (env_ids >= num_envs)]
        if bad.numel():
            raise ValueError(f"env_ids {bad.tolist()} out of range: expected {expected}")
        mask = torch.zeros(num_envs, dtype=torch.bool, device=device)
        mask[env_ids.to(device)] = True
    else:
        raise ValueError(f"env_ids must be {expected}, got dtype {env_ids.dtype}")
    return mask, mask.nonzero().squeeze(-1)


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device`` (CPU: MemAvailable; CUDA: free memory); None if unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
