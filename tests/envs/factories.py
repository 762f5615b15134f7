"""Env factories named by ``"tests.envs.factories:<name>"`` in the env.factory tests, one per kind of return."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from rsl_rl.env import VecEnv as RslRlVecEnvBase
from tensordict import TensorDict

import envs
from envs.base import StepResult

calls: list[dict[str, Any]] = []
"""The keyword arguments of every call in this process, newest last."""


def ours(num_envs: int, device: str, seed: int) -> envs.VecEnv:
    calls.append({"num_envs": num_envs, "device": device, "seed": seed})
    return envs.make("Pendulum-v1", num_envs, device=device, seed=seed)


def torchrl_env(num_envs: int, device: str) -> Any:
    calls.append({"num_envs": num_envs, "device": device})
    return envs.to_torchrl(envs.make("Pendulum-v1", num_envs, device=device))


def gymnasium_vector(num_envs: int, env_id: str = "CartPole-v1") -> gym.vector.VectorEnv:
    calls.append({"num_envs": num_envs, "env_id": env_id})
    return gym.make_vec(env_id, num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})


class Groups(RslRlVecEnvBase):
    """An rsl_rl VecEnv whose observations are the groups named in ``groups`` (3 values each)."""

    def __init__(self, num_envs: int, groups: tuple[str, ...]) -> None:
        self.num_envs, self.num_actions, self.device, self.max_episode_length = num_envs, 2, "cpu", 10
        self.groups = groups

    def get_observations(self) -> TensorDict:
        return TensorDict({g: torch.full((self.num_envs, 3), float(i)) for i, g in enumerate(self.groups)},
                          batch_size=[self.num_envs])

    def seed(self, seed: int = -1) -> int:
        return seed

    def reset(self) -> tuple[TensorDict, dict]:  # as Isaac Lab's and mjlab's envs have (rsl_rl's contract has none)
        return self.get_observations(), {}

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        zeros = torch.zeros(self.num_envs)
        return self.get_observations(), zeros, zeros.long(), {"time_outs": zeros.bool()}


def rsl_rl_env(num_envs: int, seed: int, groups: tuple[str, ...] = ("critic", "policy")) -> Groups:
    calls.append({"num_envs": num_envs, "seed": seed})
    return Groups(num_envs, tuple(groups))


def only_num_envs(num_envs: int, **options: Any) -> envs.VecEnv:
    """Names num_envs only: device and seed are not passed, even though ``**options`` would take them."""
    calls.append({"num_envs": num_envs, **options})
    return envs.make("Pendulum-v1", num_envs)


def single_gymnasium_env(num_envs: int) -> gym.Env:
    return gym.make("CartPole-v1")


def a_list(num_envs: int) -> list[int]:
    return [num_envs]


def too_few(num_envs: int) -> envs.VecEnv:
    return envs.make("Pendulum-v1", max(num_envs - 1, 1))


def no_num_envs(n: int) -> envs.VecEnv:
    return envs.make("Pendulum-v1", n)


def unbatched_torchrl(num_envs: int) -> Any:
    from torchrl.envs import GymEnv

    return GymEnv("Pendulum-v1")


NOT_CALLABLE = 3


class BreaksContract(envs.VecEnv):
    """Pendulum-v1 with one field of what ``reset`` and ``step`` return broken as ``breaks`` says (None: none):
    the cases a start-up check of the VecEnv contract must catch (tests/envs/test_contract.py,
    tests/runtime/test_env_contract.py).
    """

    BREAKS = ("float64_obs", "int64_obs", "obs_shape", "float_terminated", "reward_column", "no_final_obs",
              "nan_first_obs", "no_observation_space", "discrete_observation_space", "device_gpu", "device_cpu0",
              "reset_without_keywords", "unbounded_actions", "huge_actions", "no_max_episode_steps", "squeezed_reward",
              "reset_with_info", "reset_ignores_seed", "step_ignores_seed", "integer_actions", "fixed_actions")
    DEVICES = {"device_gpu": "gpu", "device_cpu0": "cpu:0"}
    """``env.device`` as a user may spell it: no torch device at all, and the right device in another spelling."""

    def __init__(self, num_envs: int, device: str, seed: int, breaks: str | None, from_step: int = 0) -> None:
        if breaks is not None and breaks not in self.BREAKS:
            raise ValueError(f"breaks={breaks!r}; expected None (nothing) or one of {self.BREAKS}")
        self.pendulum = envs.make("Pendulum-v1", num_envs, device=device, seed=seed)
        self.breaks = breaks
        self.from_step, self.steps = from_step, 0
        self.unseeded = torch.Generator().manual_seed(seed)
        """Draws ``reset(seed=...)`` never re-seeds (``reset_ignores_seed``, ``step_ignores_seed``)."""
        """``step``'s break applies from its ``from_step``-th call on (0: from the first): an env that breaks the
        contract only later, where the start-up probe cannot see it."""
        self.num_envs, self.device = self.pendulum.num_envs, self.DEVICES.get(breaks or "", self.pendulum.device)
        if breaks != "no_observation_space":
            self.observation_space = (gym.spaces.Discrete(3) if breaks == "discrete_observation_space"
                                      else self.pendulum.observation_space)
        huge = float(np.finfo(np.float32).max)  # finite bounds whose width is not, in float32
        self.action_space = (gym.spaces.Box(-np.inf, np.inf, (1,), np.float32) if breaks == "unbounded_actions"
                             else gym.spaces.Box(-huge, huge, (1,), np.float32) if breaks == "huge_actions"
                             else gym.spaces.Box(-2, 2, (1,), np.int64) if breaks == "integer_actions"
                             else gym.spaces.Box(0.5, 0.5, (1,), np.float32) if breaks == "fixed_actions"
                             else self.pendulum.action_space)
        if breaks != "no_max_episode_steps":  # without it: VecEnv's default, None (no time limit of its own)
            self.max_episode_steps = self.pendulum.max_episode_steps

    @property
    def episode_steps(self) -> torch.Tensor:  # type: ignore[override]  # reads through to Pendulum's
        return self.pendulum.episode_steps

    def _obs(self, obs: torch.Tensor) -> torch.Tensor:
        if self.breaks == "float64_obs":
            return obs.double()
        if self.breaks == "int64_obs":
            return obs.long()
        return obs[:, :2] if self.breaks == "obs_shape" else obs

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        if self.breaks == "reset_ignores_seed" and seed is not None:  # seeds from its own stream, not from seed
            seed = int(torch.randint(2**31, (1,), generator=self.unseeded))
        obs = self._obs(self.pendulum.reset(seed=seed, env_ids=env_ids))
        if self.breaks == "nan_first_obs":
            obs[0] = float("nan")
        if self.breaks == "reset_with_info":  # gymnasium's reset, where ours returns the observations alone
            return (obs, {})  # type: ignore[return-value]
        return obs

    def step(self, actions: torch.Tensor) -> envs.base.StepResult:
        obs, reward, terminated, truncated, info = self.pendulum.step(actions)
        self.steps += 1
        if self.steps <= self.from_step:
            return obs, reward, terminated, truncated, info
        info = {} if self.breaks == "no_final_obs" else {"final_obs": self._obs(info["final_obs"])}
        if self.breaks == "step_ignores_seed":  # noise from a generator reset(seed=...) does not touch
            obs = obs + 0.01 * torch.randn(obs.shape, generator=self.unseeded)
        if self.breaks == "squeezed_reward":  # a bug that shows at num_envs=1 only: shape () instead of (1,)
            reward = reward.squeeze()
        return (self._obs(obs), reward.unsqueeze(-1) if self.breaks == "reward_column" else reward,
                terminated.float() if self.breaks == "float_terminated" else terminated, truncated, info)


class ResetWithoutKeywords(BreaksContract):
    """A ``reset`` written as ``reset(self)``: no ``seed`` to seed it with, no ``env_ids`` to reset some envs."""

    def reset(self) -> torch.Tensor:  # type: ignore[override]  # the break under test
        return self.pendulum.reset()


def breaks_contract(num_envs: int, device: str, seed: int, breaks: str, from_step: int = 0) -> BreaksContract:
    """``env.factory=tests.envs.factories:breaks_contract env.kwargs.breaks=<case>`` (``env.kwargs.from_step=k``:
    its steps break from the k-th on).
    """
    kind = ResetWithoutKeywords if breaks == "reset_without_keywords" else BreaksContract
    return kind(num_envs, device, seed, breaks, from_step)


def reports_where_it_runs(num_envs: int, device: str, seed: int) -> envs.VecEnv:
    """``ours``, after one line on stderr with this process's pid and its ``MBPO_PROBE`` variable."""
    import os
    import sys

    print(f"[probe] pid {os.getpid()} MBPO_PROBE={os.environ.get('MBPO_PROBE')}", file=sys.stderr, flush=True)
    return ours(num_envs, device, seed)


def reports_global_draws(num_envs: int, device: str, seed: int) -> envs.VecEnv:
    """``ours``, after one line on stderr with a draw from numpy's and torch's process-global generators, as a
    simulator that draws from them would make.
    """
    import os
    import sys

    print(f"[globals] pid {os.getpid()} {np.random.uniform():.12f} {float(torch.rand(())):.12f}", file=sys.stderr,
          flush=True)
    return ours(num_envs, device, seed)


class FinishedRowsOnly(envs.VecEnv):
    """A VecEnv that fills ``info["final_obs"]`` for finished envs only (zeros elsewhere, as the contract allows)
    and, with ``lost``, reports those rows as placeholders (``final_obs_valid`` False, as rsl_rl envs without
    final observations do). Observation: (episode step + 1, env index); every episode is 3 steps.
    """

    def __init__(self, lost: bool = False) -> None:
        self.num_envs, self.device, self.lost = 3, torch.device("cpu"), lost
        self.observation_space = gym.spaces.Box(-10, 10, (2,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1, 1, (1,), dtype=np.float32)
        self.episode_steps = torch.tensor([0, 1, 2])  # the envs finish on different steps
        self.max_episode_steps = 3

    def _observe(self) -> torch.Tensor:
        return torch.stack([self.episode_steps.float() + 1, torch.arange(3.0)], -1)

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self._observe()

    def step(self, actions: torch.Tensor) -> StepResult:
        self.episode_steps = self.episode_steps + 1
        truncated = self.episode_steps >= 3
        final = torch.where(truncated[:, None], self._observe(), torch.zeros(3, 2))
        self.episode_steps = torch.where(truncated, 0, self.episode_steps)
        info = {"final_obs": final, **({"final_obs_valid": ~truncated} if self.lost else {})}
        return self._observe(), torch.zeros(3), torch.zeros_like(truncated), truncated, info
