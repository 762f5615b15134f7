"""The batched, pure-torch engine shared by the native classic-control envs.

A task (Pendulum, CartPole, ...) is data plus three pure functions over batched
tensors; :class:`ClassicVecEnv` adds what every Isaac-style env needs around
them: seeding, per-env step counters, time limits and same-step auto-reset.

The step is written without host synchronisation (no ``.any()``/``.item()``):
finished envs are replaced with ``torch.where`` against freshly sampled initial
states, so a GPU never waits on the CPU inside the loop. The only optional sync
is the NaN/range check on incoming actions (``validate_actions``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import torch

from envs.base import StepResult, VecEnv, check_actions, check_num_envs
from envs.device import resolve_device

__all__ = ["ClassicTask", "ClassicVecEnv"]

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


class ClassicVecEnv(VecEnv):
    """``num_envs`` copies of a :class:`ClassicTask` on one device."""

    def __init__(
        self,
        task: ClassicTask,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        validate_actions: bool = True,
        compile: bool = False,
    ) -> None:
        self.task = task
        self.num_envs = check_num_envs(num_envs)
        self.device = resolve_device(device)
        self.observation_space = task.observation_space
        self.action_space = task.action_space
        self.max_episode_steps = task.max_episode_steps
        self.validate_actions = validate_actions
        self.spec_id = task.env_id
        self._generator = torch.Generator(device=self.device)
        if seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(int(seed))
        self._state: torch.Tensor | None = None
        self.episode_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._step_fn = _compile(self._transition) if compile else self._transition

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

    # -- contract --------------------------------------------------------------
    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self._generator.manual_seed(int(seed))
        self._state = self.task.initial_state(self.num_envs, self._generator, self.device)
        self.episode_steps.zero_()
        return self.task.observe(self._state)

    def step(self, actions: torch.Tensor) -> StepResult:
        if self._state is None:
            raise RuntimeError(f"{self.task.env_id}: call reset() before step()")
        check_actions(actions, self.action_space, self.num_envs, self.device, self.validate_actions)
        fresh = self.task.initial_state(self.num_envs, self._generator, self.device)
        state, steps, obs, reward, terminated, truncated, final_obs = self._step_fn(
            self._state, self.episode_steps, actions, fresh
        )
        self._state, self.episode_steps = state, steps
        return obs, reward, terminated, truncated, {"final_obs": final_obs}

    def _transition(
        self, state: torch.Tensor, steps: torch.Tensor, actions: torch.Tensor, fresh: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """One step of every env plus same-step auto-reset; pure, so it can be compiled."""
        next_state, reward, terminated = self.task.dynamics(state, actions)
        steps = steps + 1
        truncated = steps >= self.max_episode_steps
        done = terminated | truncated
        final_obs = self.task.observe(next_state)
        next_state = torch.where(done.unsqueeze(-1), fresh, next_state)
        obs = torch.where(done.unsqueeze(-1), self.task.observe(fresh), final_obs)
        steps = torch.where(done, torch.zeros_like(steps), steps)
        return next_state, steps, obs, reward, terminated, truncated, final_obs


def _compile(fn: Callable) -> Callable:
    """``torch.compile`` the step, or explain why this platform cannot."""
    import shutil

    if shutil.which("cc") is None and shutil.which("gcc") is None and shutil.which("g++") is None:
        raise RuntimeError(
            "compile=True needs a C/C++ compiler for torch.compile on CPU and none was found; "
            "install one (e.g. apt-get install g++) or use compile=False"
        )
    return torch.compile(fn, dynamic=False, fullgraph=True)
