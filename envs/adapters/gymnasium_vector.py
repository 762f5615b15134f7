"""Any gymnasium 1.x vector env (MuJoCo included) as one of our VecEnvs.

The simulation always runs on CPU in numpy (gymnasium has no other backend);
only the tensors handed out and taken in live on ``device``. That lets a MuJoCo
env feed a learner on ``cuda`` directly, at the price of one host<->device copy
per step in each direction.

Our contract wants same-step auto-reset, and gymnasium 1.x has three autoreset
modes (``vector_env.metadata["autoreset_mode"]``):

* ``DISABLED`` (what :meth:`GymnasiumVecEnv.from_id` builds): the vector env
  never resets by itself; after a step in which some envs finished we reset just
  those with ``reset(options={"reset_mask": done})``. The step's observation is
  then exactly the true final observation, with no object arrays to unpack.
* ``SAME_STEP``: gymnasium already resets inside ``step``; the true last
  observations come in ``info["final_obs"]`` (object array, mask ``"_final_obs"``).
* ``NEXT_STEP`` (gymnasium's default) returns the final observation and resets
  on the *following* call, which cannot be turned into same-step semantics, so
  it is rejected with an explanation.

A partial ``reset(env_ids=...)`` is ``reset(options={"reset_mask": mask})`` in
both accepted modes, for ``SyncVectorEnv`` and ``AsyncVectorEnv`` alike: only the
masked sub-envs reset; the others keep running.

``render(i)`` is sub-env ``i``'s ``rgb_array`` render: build with ``render_mode="rgb_array"``
(``envs.make(..., render_mode="rgb_array")``). MuJoCo renders offscreen through
``MUJOCO_GL``: on Linux with no display, :meth:`GymnasiumVecEnv.from_id` sets it where
it is unset, to ``egl`` (as mjlab does on import), or ``osmesa`` where only libOSMesa is
installed (docs/envs.md lists the system packages).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from envs.base import (
    MissingExtraError,
    RenderError,
    StepResult,
    UnsupportedSpaceError,
    VecEnv,
    check_actions,
    check_num_envs,
    resolve_env_ids,
)
from envs.contract import ContractError
from envs.device import resolve_device
from envs.offscreen import headless_gl

__all__ = ["GymnasiumVecEnv"]

_VECTORIZATION_MODES = ("sync", "async")


class GymnasiumVecEnv(VecEnv):
    """Wrap ``vector_env`` (simulated on CPU) so its tensors live on ``device``."""

    def __init__(
        self,
        vector_env: gym.vector.VectorEnv,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        validate_actions: bool = True,
    ) -> None:
        if not isinstance(vector_env, gym.vector.VectorEnv):
            raise TypeError(
                f"vector_env must be a gymnasium.vector.VectorEnv (e.g. from gym.make_vec), "
                f"got {type(vector_env).__name__}"
            )
        self._autoreset_mode = _autoreset_mode(vector_env)
        self.observation_space = _observation_space(vector_env.single_observation_space)
        self.action_space = _action_space(vector_env.single_action_space)
        self.vector_env = vector_env
        self.num_envs = check_num_envs(vector_env.num_envs)
        self.device = resolve_device(device)
        self.validate_actions = validate_actions
        spec = vector_env.spec
        self.spec_id = spec.id if spec is not None else None
        self.max_episode_steps = _max_episode_steps(spec)
        fps = vector_env.metadata.get("render_fps")
        self.render_fps = float(fps) if isinstance(fps, (int, float)) and fps > 0 else None
        self.episode_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._pending_seed = seed
        self._obs: torch.Tensor | None = None  # what the last step/reset returned: None until reset
        self._closed = False

    @classmethod
    def from_id(
        cls,
        env_id: str,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        vectorization_mode: str = "sync",
        validate_actions: bool = True,
        **env_kwargs: Any,
    ) -> GymnasiumVecEnv:
        """Build ``num_envs`` copies of gymnasium id ``env_id``; ``env_kwargs`` go to ``gym.make``.

        ``vectorization_mode="async"`` runs each copy in its own subprocess.
        """
        num_envs = check_num_envs(num_envs)
        device = resolve_device(device)  # fail before spawning any simulator
        if vectorization_mode not in _VECTORIZATION_MODES:
            raise ValueError(
                f"vectorization_mode={vectorization_mode!r} is not supported; expected one of "
                f"{_VECTORIZATION_MODES}"
            )
        if env_kwargs.get("render_mode") == "rgb_array":
            headless_gl()  # before make_vec: async sub-envs inherit the environment of their spawn
        try:
            vector_env = gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode=vectorization_mode,
                vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED},
                **env_kwargs,
            )
        except (gym.error.DependencyNotInstalled, ModuleNotFoundError) as exc:  # registered, but its package is not
            raise MissingExtraError(f"{env_id} needs a package that is not installed here: "
                                    f"{str(exc).strip().splitlines()[0]}") from exc
        try:
            return cls(vector_env, device=device, seed=seed, validate_actions=validate_actions)
        except Exception:
            vector_env.close()
            raise

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Reset all envs (seed ``s`` seeds env ``i`` with ``s + i``, gymnasium's rule), or just ``env_ids``."""
        self._check_open()
        if env_ids is not None:
            return self._reset_ids(env_ids, seed)
        if seed is None:  # the constructor's seed applies to the first reset only
            seed, self._pending_seed = self._pending_seed, None
        else:
            self._pending_seed = None
        obs, _ = _unpacked(self.vector_env.reset(seed=None if seed is None else int(seed)), "reset")
        self.episode_steps.zero_()
        self._obs = self._to_device(np.array(obs, dtype=np.float32))
        return self._obs

    def _reset_ids(self, env_ids: torch.Tensor, seed: int | None) -> torch.Tensor:
        mask, _ = resolve_env_ids(env_ids, self.num_envs, self.device, seed)
        if self._obs is None:
            raise RuntimeError(f"{self.spec_id or 'GymnasiumVecEnv'}: call reset() before reset(env_ids=...)")
        mask_np = mask.cpu().numpy()
        if mask_np.any():  # gymnasium rejects an all-False reset_mask
            fresh, _ = _unpacked(self.vector_env.reset(options={"reset_mask": mask_np}), "reset")
            fresh_t = self._to_device(np.array(fresh, dtype=np.float32))
            # the other rows stay the obs we handed out, whatever the vector env echoes for them
            self._obs = torch.where(mask.unsqueeze(-1), fresh_t, self._obs)
            self.episode_steps = torch.where(mask, torch.zeros_like(self.episode_steps), self.episode_steps)
        return self._obs

    def step(self, actions: torch.Tensor) -> StepResult:
        self._check_open()
        if self._obs is None:
            raise RuntimeError(f"{self.spec_id or 'GymnasiumVecEnv'}: call reset() before step()")
        check_actions(actions, self.action_space, self.num_envs, self.device, self.validate_actions)
        np_actions = actions.detach().cpu().numpy().astype(self.action_space.dtype, copy=False)
        obs, reward, terminated, truncated, info = _unpacked(self.vector_env.step(np_actions), "step")
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        done = terminated | truncated
        obs = np.array(obs, dtype=np.float32)  # always a copy: gym may reuse its buffers
        final_obs = obs.copy()
        if done.any():
            if self._autoreset_mode is AutoresetMode.DISABLED:
                new_obs, _ = _unpacked(self.vector_env.reset(options={"reset_mask": done.copy()}), "reset")
                obs = np.array(new_obs, dtype=np.float32)
            else:  # SAME_STEP: obs is already the next episode's first observation
                mask = np.asarray(info.get("_final_obs", done), dtype=bool)
                for i in np.flatnonzero(mask):
                    final_obs[i] = np.asarray(info["final_obs"][i], dtype=np.float32)
        steps = self.episode_steps + 1
        done_t = self._to_device(done)
        self.episode_steps = torch.where(done_t, torch.zeros_like(steps), steps)
        self._obs = self._to_device(obs)
        return (
            self._obs,
            self._to_device(np.asarray(reward, dtype=np.float32)),
            self._to_device(terminated),
            self._to_device(truncated),
            {"final_obs": self._to_device(final_obs)},
        )

    def render(self, env_index: int = 0) -> np.ndarray:
        """Sub-env ``env_index``'s ``rgb_array`` frame; see the module docstring."""
        self._check_open()
        if not 0 <= env_index < self.num_envs:
            raise IndexError(f"env_index={env_index} is out of range for num_envs={self.num_envs}")
        name = self.spec_id or "GymnasiumVecEnv"
        if self.vector_env.render_mode != "rgb_array":
            raise RenderError(f"{name} was built with render_mode={self.vector_env.render_mode!r}, so it draws no "
                              "frames; build it with envs.make(..., render_mode='rgb_array')")
        vector_env: Any = self.vector_env  # SyncVectorEnv renders one sub-env; AsyncVectorEnv all, through call()
        sub_envs = getattr(vector_env, "envs", None)
        try:
            frame = sub_envs[env_index].render() if sub_envs is not None else vector_env.call("render")[env_index]
        except Exception as exc:  # any renderer failure becomes one RenderError naming the way out
            hint = "" if isinstance(exc, gym.error.DependencyNotInstalled) else (
                "; a MuJoCo env renders without a display through MUJOCO_GL=egl or osmesa (now "
                f"{os.environ.get('MUJOCO_GL', 'unset')}): install libegl1 or libosmesa6 (docs/envs.md)")
            raise RenderError(f"{name} could not render ({type(exc).__name__}: {exc}){hint}") from exc
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[-1] != 3:
            raise RenderError(f"{name}'s render gave an array of shape {frame.shape}; expected (height, width, 3)")
        return frame.astype(np.uint8, copy=False)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.vector_env.close()

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        if array.dtype != np.bool_:
            array = np.asarray(array, dtype=np.float32)
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.spec_id or 'GymnasiumVecEnv'} is closed")


def _autoreset_mode(vector_env: gym.vector.VectorEnv) -> AutoresetMode:
    """The vector env's autoreset mode, or a clear error if we cannot honour it."""
    mode = vector_env.metadata.get("autoreset_mode")
    try:
        mode = AutoresetMode(mode) if isinstance(mode, str) else mode
    except ValueError:
        pass
    if mode in (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED):
        return mode
    how = (
        "build it with gym.make_vec(env_id, num_envs, vector_kwargs={'autoreset_mode': "
        "gymnasium.vector.AutoresetMode.SAME_STEP}) (or AutoresetMode.DISABLED), "
        "or use GymnasiumVecEnv.from_id"
    )
    if mode is AutoresetMode.NEXT_STEP:
        raise ValueError(
            "the vector env uses AutoresetMode.NEXT_STEP (gymnasium's default), which resets a "
            "finished env one step late and cannot give our same-step auto-reset; " + how
        )
    raise ValueError(
        f"the vector env declares metadata['autoreset_mode']={mode!r}; expected "
        f"AutoresetMode.SAME_STEP or AutoresetMode.DISABLED: {how}"
    )


def _observation_space(space: gym.spaces.Space) -> gym.spaces.Box:
    """The single-env observation space as a float32 Box, since obs are handed out as float32."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise UnsupportedSpaceError(
            f"only 1-D Box observation spaces are supported, got {space}; flatten it first: an env.factory of your "
            "own returning gymnasium.make_vec(id, num_envs, vectorization_mode='sync', vector_kwargs={'autoreset_mode':"
            " AutoresetMode.SAME_STEP}, wrappers=[gymnasium.wrappers.FlattenObservation]) (a Discrete observation "
            "becomes one-hot; docs/envs.md)"
        )
    if space.dtype == np.float32:
        return space
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    return gym.spaces.Box(low, high, shape=space.shape, dtype=np.float32)


def _action_space(space: gym.spaces.Space) -> gym.spaces.Space:
    """Accept the action spaces our contract can express: 1-D Box and Discrete."""
    if isinstance(space, gym.spaces.Discrete):
        return space
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return space
    raise UnsupportedSpaceError(
        f"only 1-D Box (continuous) or Discrete action spaces are supported, got {space}"
    )


def _max_episode_steps(spec: gym.envs.registration.EnvSpec | None) -> int | None:
    """The time limit the sub-envs really run under: a ``make`` override wins over the spec (an override of None
    does not: gymnasium then applies the spec's own).
    """
    if spec is None:
        return None
    limit = spec.kwargs.get("max_episode_steps")
    if limit is None:
        limit = spec.max_episode_steps
    return None if limit is None or limit < 0 else int(limit)


GYMNASIUM_RETURNS = {"reset": "(obs, info)", "step": "(obs, reward, terminated, truncated, info)"}
"""What a gymnasium (>= 0.26) vector env's ``reset`` and ``step`` return."""


def _unpacked(result: Any, call: str) -> tuple[Any, ...]:
    """``result`` of the wrapped env's ``call`` if it is gymnasium's tuple; else a ContractError naming what it
    was. Unpacked unchecked, an old gym env's 4-value step was a ValueError traceback, and a reset that returns obs
    alone unpacked its rows as (obs, info) when num_envs is 2.
    """
    want = GYMNASIUM_RETURNS[call]
    if isinstance(result, tuple) and len(result) == want.count(",") + 1:
        return result
    got = (f"{len(result)} values" if isinstance(result, tuple) else
           f"a {type(result).__name__}" + (f" of shape {tuple(result.shape)}" if hasattr(result, "shape") else ""))
    old = {"reset": "gym's old reset returned obs alone", "step": "gym's old step returned (obs, reward, done, info), "
           "with TimeLimit.truncated in info"}[call]
    raise ContractError(call, "", got, f"gymnasium's {want}",
                        f"return {want} as gymnasium >= 0.26 does ({old}; shimmy's GymV21CompatibilityV0 wraps such "
                        "an env)")
