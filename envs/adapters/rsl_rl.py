"""rsl_rl ``VecEnv`` (what Isaac Lab and mjlab expose) behind our VecEnv contract.

rsl_rl's contract: ``num_envs``, ``num_actions``, ``device``, ``max_episode_length``;
``get_observations()`` gives a TensorDict of observation groups (``actor``,
``critic``, ...; rsl_rl < 3 gave the policy tensor, or a ``(tensor, extras)``
tuple); ``step(actions) -> (obs, rewards, dones, extras)`` with
``extras["time_outs"]`` marking the dones that are time limits. We read one
group, split ``dones`` into terminated / truncated, and count episode steps.

These envs auto-reset on the same step and most of them lose the true last
observation. When the env hands it over in ``extras["final_obs"]`` (Isaac Lab's
``compute_final_obs=True``; mjlab through ``envs.make``, see
``envs.adapters.mjlab_tasks``) it becomes ``info["final_obs"]`` and
``info["final_obs_valid"]`` is all True. Otherwise ``final_obs`` holds the
post-reset observation as a placeholder and ``final_obs_valid`` is ``~done``:
False exactly for the finished envs whose last observation is unknown
(``mbpo.data.replay.real_transitions`` says what the trainers make of those rows).

A partial ``reset(env_ids=...)`` goes to the env's ``unwrapped.reset(env_ids=...)``
(Isaac Lab's ``ManagerBasedRLEnv``, mjlab's ``ManagerBasedRlEnv``; rsl_rl's own
contract has no reset), or to the env's ``reset(env_ids=...)`` if that takes them.

``render()`` is the env's ``rgb_array`` render (Isaac Lab and mjlab build it with
``render_mode="rgb_array"``): one view of the batch, env 0 with its neighbours
(mjlab's offscreen viewer, Isaac Lab's viewport camera), so ``renders_batch`` is True.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envs.base import RenderError, StepResult, VecEnv, check_actions, resolve_env_ids
from envs.device import as_tensor_device

__all__ = ["RslRlVecEnv", "from_rsl_rl", "is_rsl_rl_env", "policy_group", "POLICY_GROUPS"]

_REQUIRED = ("num_envs", "num_actions", "device", "get_observations", "step")


def _select(obs: Any, group: str, what: str) -> torch.Tensor:
    """The ``group`` tensor out of what rsl_rl envs return as observations."""
    if isinstance(obs, tuple) and len(obs) == 2:  # rsl_rl < 3: get_observations() -> (obs, extras)
        obs = obs[0]
    if isinstance(obs, torch.Tensor):  # rsl_rl < 3: the policy observation itself
        return obs
    if not hasattr(obs, "keys") or not hasattr(obs, "__getitem__"):  # TensorDict or Mapping
        raise TypeError(
            f"{what} must be a TensorDict (or dict) of observation groups or a tensor, "
            f"got {type(obs).__name__}"
        )
    keys = list(obs.keys())
    if group not in keys:
        raise KeyError(
            f"observation group {group!r} not in the env's {what}; available groups: {keys}. "
            "Pick one with from_rsl_rl(env, obs_group=...)"
        )
    value = obs[group]
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"observation group {group!r} is a {type(value).__name__} of terms, not one tensor; "
            "concatenate its terms in the env's observation config"
        )
    return value


POLICY_GROUPS = ("actor", "policy")
"""The policy's observation group by the names the field uses: rsl_rl's and mjlab's, then Isaac Lab's."""


def policy_group(obs: Any) -> str:
    """The group of ``obs`` (what ``get_observations()`` returned) that the policy reads: the first of
    :data:`POLICY_GROUPS` it holds; a KeyError naming the groups it does hold where it has none of them.
    """
    if isinstance(obs, tuple) and len(obs) == 2:  # rsl_rl < 3: (obs, extras)
        obs = obs[0]
    if isinstance(obs, torch.Tensor) or not hasattr(obs, "keys"):  # one tensor (rsl_rl < 3); _select checks the rest
        return POLICY_GROUPS[0]
    keys = list(obs.keys())
    found = next((group for group in POLICY_GROUPS if group in keys), None)
    if found is None:
        raise KeyError(f"neither 'actor' (rsl_rl's and mjlab's name) nor 'policy' (Isaac Lab's) is an observation "
                       f"group of the env's get_observations(); available groups: {keys}. Pick one with "
                       "from_rsl_rl(env, obs_group=...)")
    return found


class RslRlVecEnv(VecEnv):
    """An rsl_rl ``VecEnv`` as one of ours: one observation group, continuous Box actions.

    renders_batch = True: its render is one view of the batch (see the module docstring).

    rsl_rl envs take unbounded, normalised actions (the env's action terms scale
    them) while our learners need a bounded Box: actions are declared in
    ``[-action_limit, action_limit]`` (the env's ``clip_actions`` if it has one,
    else 1.0). The env's buffers may be reused in place, so every returned
    tensor is a copy.
    """

    def __init__(
        self,
        env: Any,
        obs_group: str | None = None,
        seed: int | None = None,
        action_limit: float | None = None,
        validate_actions: bool = True,
    ) -> None:
        missing = [name for name in _REQUIRED if not hasattr(env, name)]
        if missing:
            raise TypeError(
                f"from_rsl_rl expects an rsl_rl VecEnv (attributes {', '.join(_REQUIRED)}); "
                f"{type(env).__name__} lacks {', '.join(missing)}"
            )
        num_envs, num_actions = env.num_envs, env.num_actions
        for name, value in (("num_envs", num_envs), ("num_actions", num_actions)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"the env's {name} must be an int >= 1, got {value!r}")
        raw = env.get_observations()
        self.env, self.obs_group = env, policy_group(raw) if obs_group is None else obs_group
        self.spec_id: str | None = None  # the registered id, when envs.make built it
        self.num_envs = int(num_envs)
        self.device = as_tensor_device(env.device)  # 'cpu:0' or 'cuda' as the env's tensors report it
        self.validate_actions = validate_actions
        obs = self._obs(raw, "get_observations()")
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(obs.shape[1],), dtype=np.float32)
        if action_limit is None:
            clip = getattr(env, "clip_actions", None)
            action_limit = float(clip) if isinstance(clip, (int, float)) and clip > 0 else 1.0
        self.action_space = gym.spaces.Box(
            -float(action_limit), float(action_limit), shape=(int(num_actions),), dtype=np.float32
        )
        limit = getattr(env, "max_episode_length", None)
        self.max_episode_steps = None if limit is None else int(torch.as_tensor(limit).max())
        self.episode_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.renders_batch = True
        metadata = getattr(getattr(env, "unwrapped", env), "metadata", None)
        fps = metadata.get("render_fps") if isinstance(metadata, Mapping) else None
        self.render_fps = float(fps) if isinstance(fps, (int, float)) and fps > 0 else None
        self._pending_seed = seed  # applied at the first reset, like the gymnasium adapter
        if not callable(getattr(env, "reset", None)):  # rsl_rl's contract has none; Isaac Lab's and mjlab's envs do
            warnings.warn(f"{type(env).__name__} has no reset() method: reset() cannot start new episodes, so every "
                          "evaluation after the first scores the envs' running episodes from wherever they are; "
                          "give the env a reset() that starts every env over", RuntimeWarning, stacklevel=2)
        self._last_obs: torch.Tensor | None = None  # what the last step/reset returned: None until reset
        self._closed = False

    def _obs(self, raw: Any, what: str) -> torch.Tensor:
        obs = _select(raw, self.obs_group, what)
        if obs.dim() < 2 or obs.shape[0] != self.num_envs:
            raise ValueError(
                f"observation group {self.obs_group!r} from {what} must be ({self.num_envs}, ...) "
                f"(one row per env), got {tuple(obs.shape)}"
            )
        return obs.reshape(self.num_envs, -1).to(self.device, torch.float32, copy=True)

    def _per_env(self, value: Any, name: str) -> torch.Tensor:
        """One value per env from ``step()``, as a flat tensor on our device."""
        x = torch.as_tensor(value, device=self.device)
        if x.numel() != self.num_envs:
            raise ValueError(f"step() returned {name} of shape {tuple(x.shape)}; expected ({self.num_envs},)")
        return x.reshape(self.num_envs)

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Reset every env (re-seeding through the env's ``seed()`` first, when given a seed), or just ``env_ids``."""
        if env_ids is not None:
            return self._reset_ids(env_ids, seed)
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        else:
            self._pending_seed = None
        if seed is not None:
            if callable(getattr(self.env, "seed", None)):
                self.env.seed(int(seed))
            else:
                warnings.warn(
                    f"{type(self.env).__name__} has no seed() method; seed {seed} is ignored",
                    RuntimeWarning,
                    stacklevel=2,
                )
        if callable(getattr(self.env, "reset", None)):  # not in rsl_rl's contract, but Isaac Lab/mjlab have it
            self.env.reset()
        self.episode_steps.zero_()
        self._last_obs = self._obs(self.env.get_observations(), "get_observations()")
        return self._last_obs

    def _reset_ids(self, env_ids: torch.Tensor, seed: int | None) -> torch.Tensor:
        mask, ids = resolve_env_ids(env_ids, self.num_envs, self.device, seed)
        partial_reset = self._partial_reset()
        if self._last_obs is None:
            raise RuntimeError("call reset() before reset(env_ids=...)")
        if ids.numel():
            partial_reset(env_ids=ids)
            fresh = self._obs(self.env.get_observations(), "get_observations()")
            # the other rows stay the obs we handed out: recomputing them could redraw observation noise
            self._last_obs = torch.where(mask.unsqueeze(-1), fresh, self._last_obs)
            self.episode_steps = torch.where(mask, torch.zeros_like(self.episode_steps), self.episode_steps)
        return self._last_obs

    def _partial_reset(self) -> Callable[..., Any]:
        """``reset(env_ids=...)`` of the env underneath, or NotImplementedError saying what it lacks."""
        for owner in (getattr(self.env, "unwrapped", None), self.env):
            reset = getattr(owner, "reset", None)
            if callable(reset) and _takes_env_ids(reset):
                return reset
        raise NotImplementedError(
            f"{type(self.env).__name__} offers no partial reset: neither env.unwrapped.reset nor env.reset "
            "takes env_ids (Isaac Lab's and mjlab's manager-based envs do); only a full reset() is possible"
        )

    def step(self, actions: torch.Tensor) -> StepResult:
        check_actions(actions, self.action_space, self.num_envs, self.device, self.validate_actions)
        result = self.env.step(actions)
        if not isinstance(result, tuple) or len(result) != 4:
            raise TypeError(
                "an rsl_rl env's step() must return (obs, rewards, dones, extras), got "
                f"{type(result).__name__}{f' of length {len(result)}' if isinstance(result, tuple) else ''}"
            )
        raw_obs, rewards, dones, extras = result
        extras = extras if isinstance(extras, Mapping) else {}
        obs = self._obs(raw_obs, "step()")
        reward = self._per_env(rewards, "rewards").to(torch.float32, copy=True)
        done = self._per_env(dones, "dones").to(torch.bool, copy=True)
        time_outs = extras.get("time_outs")  # rsl_rl: the dones that are time limits
        truncated = torch.zeros_like(done)
        if time_outs is not None:
            truncated = done & self._per_env(time_outs, 'extras["time_outs"]').to(torch.bool)
        terminated = done & ~truncated
        provided = extras.get("final_obs")
        if provided is None:
            final_obs, valid = obs.clone(), ~done
        else:  # rows of unfinished envs may be stale: ours always equal obs there
            final_obs = torch.where(done.unsqueeze(-1), self._obs(provided, 'extras["final_obs"]'), obs)
            lost = extras.get("final_obs_valid")  # envs.to_rsl_rl's, where its env lost some
            valid = torch.ones_like(done) if lost is None else ~done | self._per_env(
                lost, 'extras["final_obs_valid"]').to(torch.bool)
        self.episode_steps = torch.where(done, torch.zeros_like(self.episode_steps), self.episode_steps + 1)
        self._last_obs = obs
        return obs, reward, terminated, truncated, {"final_obs": final_obs, "final_obs_valid": valid}

    def render(self, env_index: int = 0) -> np.ndarray:
        """The env's ``rgb_array`` frame: its one view of the batch, env 0 with its neighbours."""
        if env_index != 0:
            raise RenderError(f"{self.spec_id or type(self.env).__name__} renders one view of its batch (env 0 and "
                              f"its neighbours), not env {env_index} alone: render env 0")
        name = self.spec_id or type(self.env).__name__
        owner = next((o for o in (self.env, getattr(self.env, "unwrapped", None))
                      if callable(getattr(o, "render", None))), None)
        if owner is None:
            raise RenderError(f"{name} has no render() (neither the env nor env.unwrapped)")
        frame = owner.render()
        if frame is None:
            raise RenderError(f"{name} draws no frames: build it with render_mode='rgb_array' "
                              "(envs.make(..., render_mode='rgb_array') does for an Mjlab- id)")
        frame = np.asarray(frame.cpu() if isinstance(frame, torch.Tensor) else frame)
        if frame.ndim != 3 or frame.shape[-1] != 3:
            raise RenderError(f"{name}'s render gave an array of shape {frame.shape}; expected (height, width, 3)")
        return frame.astype(np.uint8, copy=False)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if callable(getattr(self.env, "close", None)):
                self.env.close()


def is_rsl_rl_env(obj: Any) -> bool:
    """Whether ``obj`` has what rsl_rl's ``VecEnv`` declares (its subclasses do; so may a duck-typed driver)."""
    return all(hasattr(obj, name) for name in _REQUIRED)


def _takes_env_ids(fn: Callable) -> bool:
    """Whether ``fn`` names an ``env_ids`` parameter (a bare ``**kwargs`` might drop it and reset everything)."""
    try:
        return "env_ids" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no introspectable signature
        return False


def from_rsl_rl(
    vec_env: Any,
    obs_group: str | None = None,
    *,
    seed: int | None = None,
    action_limit: float | None = None,
    validate_actions: bool = True,
) -> RslRlVecEnv:
    """Bring an rsl_rl ``VecEnv`` (Isaac Lab, mjlab) in as a VecEnv observing ``obs_group`` (None: ``actor``,
    else Isaac Lab's ``policy``: :func:`policy_group`).

    ``seed`` applies at the first ``reset()`` that is not given one;
    ``action_limit`` overrides the declared action bound (see :class:`RslRlVecEnv`).
    """
    return RslRlVecEnv(vec_env, obs_group, seed=seed, action_limit=action_limit, validate_actions=validate_actions)
