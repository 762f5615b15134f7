"""The batched, pure-torch engine shared by the native classic-control envs.

A task (Pendulum, CartPole, ...) is data plus three pure functions over batched
tensors; :class:`ClassicVecEnv` adds what every Isaac-style env needs around
them: seeding, per-env step counters, time limits and same-step auto-reset.

Two ways to reset finished envs, chosen by ``sync_free`` (default: on for CUDA):

* sync-free (GPU): every step samples fresh initial states for all envs and
  picks them with ``torch.where``; no ``.any()``/``.item()``, so the GPU never
  waits on the host inside the loop. The only optional sync is the NaN/range
  check on incoming actions (``validate_actions``).
* sparse (CPU): a host read costs nothing on CPU, so only the rows that
  finished are re-sampled: one ``nonzero``, then a few ops on those rows;
  drawing and observing 4,096 unused initial states would cost more than the
  physics.

On CPU an eager op on a few thousand floats costs about its dispatch, so the
step is written to need few of them; ``compile=True`` fuses the physics into
one kernel, which wins per step but costs seconds of compile time up front.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

import gymnasium as gym
import numpy as np
import torch

from envs.base import RenderError, StepResult, VecEnv, check_actions, check_num_envs, resolve_env_ids
from envs.device import resolve_device, restore_generator

__all__ = ["ClassicEnvState", "ClassicTask", "ClassicVecEnv", "device_constants"]

Dynamics = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class ClassicTask:
    """Everything that makes one classic-control task, as batched pure functions."""

    env_id: str
    state_dim: int
    observation_space: gym.spaces.Box
    action_space: gym.spaces.Space
    max_episode_steps: int
    initial_state: Callable[[int, torch.Generator, torch.device], torch.Tensor]
    """``(n, generator, device) -> (n, state_dim)`` float32, gymnasium's reset distribution."""
    dynamics: Dynamics
    """``(state, action) -> (next_state, reward, terminated)``, gymnasium's ``step``."""
    observe: Callable[[torch.Tensor], torch.Tensor]
    """``state -> obs``, gymnasium's observation of a state."""
    render: Callable[[np.ndarray], np.ndarray] | None = None
    """``state of one env (state_dim,) -> (height, width, 3)`` uint8: the picture gymnasium's ``rgb_array`` render
    shows, drawn with numpy (envs.classic.render); None for a task with no picture."""
    render_fps: float | None = None
    """Frames per second of a video of it (gymnasium's ``metadata["render_fps"]`` for the same id)."""


class ClassicEnvState(TypedDict):
    """:meth:`ClassicVecEnv.state_dict`: physical state (None before the first reset), counters, RNG."""

    state: torch.Tensor | None
    episode_steps: torch.Tensor
    generator: torch.Tensor


class ClassicVecEnv(VecEnv):
    """``num_envs`` copies of a :class:`ClassicTask` on one device."""

    max_episode_steps: int  # every classic task has a time limit

    def __init__(
        self,
        task: ClassicTask,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        validate_actions: bool = True,
        compile: bool = False,
        sync_free: bool | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r} is not supported by the native {task.env_id}; expected "
                             "None or 'rgb_array' (it draws offscreen either way)")
        self.task = task
        self.num_envs = check_num_envs(num_envs)
        self.device = resolve_device(device)
        self.observation_space = task.observation_space
        self.action_space = task.action_space
        self.max_episode_steps = task.max_episode_steps
        self.validate_actions = validate_actions
        self.spec_id = task.env_id
        self.render_fps = task.render_fps
        self._generator = torch.Generator(device=self.device)
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(int(seed))
        self._state: torch.Tensor | None = None
        self.episode_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self.sync_free = self.device.type == "cuda" if sync_free is None else bool(sync_free)
        self._physics = _compile(task, self.device) if compile else _physics_of(task)

    # -- state -----------------------------------------------------------------
    @property
    def state(self) -> torch.Tensor:
        """Physical state ``(num_envs, k)`` in the layout of gymnasium's ``env.unwrapped.state``."""
        if self._state is None:
            raise RuntimeError(f"{self.task.env_id}: call reset() before reading env.state")
        return self._state

    @state.setter
    def state(self, value: torch.Tensor) -> None:
        expected = (self.num_envs, self.task.state_dim)
        value = torch.as_tensor(value)
        if tuple(value.shape) != expected:
            raise ValueError(
                f"{self.task.env_id}: env.state must have shape {expected}, got {tuple(value.shape)}"
            )
        self._state = value.to(device=self.device, dtype=torch.float32).clone()

    def state_dict(self) -> ClassicEnvState:
        """Physical state, counters and RNG: restoring it continues the exact same trajectories."""
        return {
            "state": None if self._state is None else self._state.cpu().clone(),
            "episode_steps": self.episode_steps.cpu().clone(),
            "generator": self._generator.get_state(),
        }

    def load_state_dict(self, state: ClassicEnvState) -> None:
        self._state = None if state["state"] is None else state["state"].to(self.device).clone()
        self.episode_steps = state["episode_steps"].to(self.device).clone()
        restore_generator(self._generator, state["generator"])

    def render(self, env_index: int = 0) -> np.ndarray:
        """Env ``env_index``'s current state drawn with numpy (no display, no pygame): ``(H, W, 3)`` uint8."""
        if self.task.render is None:
            raise RenderError(f"{self.task.env_id} has no picture to render")
        if not 0 <= env_index < self.num_envs:
            raise IndexError(f"env_index={env_index} is out of range for num_envs={self.num_envs}")
        return self.task.render(self.state[env_index].detach().cpu().numpy())

    # -- contract --------------------------------------------------------------
    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Full reset, or (``env_ids``) re-sample just those rows' initial states; see :class:`VecEnv`."""
        if env_ids is not None:
            return self._reset_ids(env_ids, seed)
        if seed is not None:
            self._generator.manual_seed(int(seed))
        self._state = self.task.initial_state(self.num_envs, self._generator, self.device)
        self.episode_steps.zero_()
        return self.task.observe(self._state)

    def _reset_ids(self, env_ids: torch.Tensor, seed: int | None) -> torch.Tensor:
        _, ids = resolve_env_ids(env_ids, self.num_envs, self.device, seed)
        if self._state is None:
            raise RuntimeError(f"{self.task.env_id}: call reset() before a partial reset(env_ids=...)")
        if ids.numel():  # the generator draws for the reset rows only
            fresh = self.task.initial_state(ids.numel(), self._generator, self.device)
            self._state = self._state.index_put((ids,), fresh)
            self.episode_steps = self.episode_steps.index_put((ids,), torch.zeros_like(ids))
        return self.task.observe(self._state)

    def step(self, actions: torch.Tensor) -> StepResult:
        if self._state is None:
            raise RuntimeError(f"{self.task.env_id}: call reset() before step()")
        check_actions(actions, self.action_space, self.num_envs, self.device, self.validate_actions)
        state, reward, terminated, final_obs = self._physics(self._state, actions)
        steps = self.episode_steps + 1
        truncated = steps >= self.max_episode_steps
        done = terminated | truncated
        if self.sync_free:
            fresh = self.task.initial_state(self.num_envs, self._generator, self.device)
            state = torch.where(done.unsqueeze(-1), fresh, state)
            obs = torch.where(done.unsqueeze(-1), self.task.observe(fresh), final_obs)
            steps = torch.where(done, torch.zeros_like(steps), steps)
        else:
            obs = final_obs  # nothing finished: the same tensor, treat both as read-only
            idx = _nonzero(done)  # the count is on the host already: no separate .any()
            if idx.numel():
                fresh = self.task.initial_state(idx.numel(), self._generator, self.device)
                state = state.clone().index_copy_(0, idx, fresh)  # a copy: final_obs keeps the true last rows
                obs = final_obs.clone().index_copy_(0, idx, self.task.observe(fresh))
                steps.index_fill_(0, idx, 0)  # steps is this step's own tensor
        self._state, self.episode_steps = state, steps
        return obs, reward, terminated, truncated, {"final_obs": final_obs}


def _nonzero(mask: torch.Tensor) -> torch.Tensor:
    """Indices of the True entries of a 1-D mask.

    On CPU numpy counts them in half the time of ``torch.any`` and finds them
    faster than ``torch.nonzero`` at a few thousand rows; most steps of a
    time-limited task (Pendulum) have none.
    """
    if mask.device.type != "cpu":
        return mask.nonzero().view(-1)
    flags = mask.numpy()
    if not np.count_nonzero(flags):
        return torch.empty(0, dtype=torch.int64)
    return torch.from_numpy(np.flatnonzero(flags))


def _physics_of(task: ClassicTask, float_terminated: bool = False) -> Callable:
    """``(state, action) -> (next_state, reward, terminated, obs)``: the pure part worth compiling.

    Counters and resets stay outside: compiling them too made the fused step
    slower (more outputs, int64 counters) than compiling the physics alone.
    ``float_terminated`` hands ``terminated`` back as 0/1 floats (see :func:`_compile`).
    """

    def physics(state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        next_state, reward, terminated = task.dynamics(state, actions)
        if float_terminated:
            terminated = torch.where(terminated, 1.0, 0.0)
        return next_state, reward, terminated, task.observe(next_state)

    return physics


def _compile(task: ClassicTask, device: torch.device) -> Callable:
    """``torch.compile`` the physics, or explain why this platform cannot.

    On CPU inductor's kernel is only vectorized with two changes: its tiling
    heuristic would fall back to scalar code for the strided columns of an
    ``(n, k)`` state, so it is off; and it stores bool vectors slowly, so
    ``terminated`` leaves the kernel as 0/1 floats and becomes bool outside.
    """
    import shutil

    if device.type == "cuda":
        return torch.compile(_physics_of(task), dynamic=False, fullgraph=True)
    if shutil.which("cc") is None and shutil.which("gcc") is None and shutil.which("g++") is None:
        raise RuntimeError(
            "compile=True needs a C/C++ compiler for torch.compile on CPU and none was found; "
            "install one (e.g. apt-get install g++) or use compile=False"
        )
    kernel = torch.compile(_physics_of(task, float_terminated=True), dynamic=False, fullgraph=True,
                           options={"cpp.enable_tiling_heuristics": False})

    def physics(state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        next_state, reward, terminated, obs = kernel(state, actions)
        return next_state, reward, terminated.bool(), obs

    return physics


_CONSTANTS: dict[tuple[torch.device, tuple[float, ...]], tuple[torch.Tensor, ...]] = {}


def device_constants(device: torch.device, *values: float) -> tuple[torch.Tensor, ...]:
    """``values`` as 0-dim float32 tensors on ``device``, made once and cached.

    An eager CPU op with a Python float operand first converts it to a tensor
    (about 1 us each, as much as the op on 4,096 floats); a ready tensor skips
    that. Read-only: never write to them.
    """
    if torch.compiler.is_compiling():  # traced: constants of the graph, nothing cached
        return tuple(torch.full((), v, dtype=torch.float32, device=device) for v in values)
    key = (device, values)
    found = _CONSTANTS.get(key)
    if found is None:  # torch.full fills on the device: no host-to-device copy, no sync on CUDA
        found = _CONSTANTS[key] = tuple(torch.full((), v, dtype=torch.float32, device=device) for v in values)
    return found
