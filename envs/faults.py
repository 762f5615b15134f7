"""A fault-injecting VecEnv wrapper, shared by the reliability tests and the benchmarks.

``FaultyEnv(env, fault, at_step)`` behaves exactly like ``env`` until its
``at_step``-th ``step`` call (counting from 1), then:

* ``raise``: raises :class:`InjectedFault`;
* ``broken_pipe``: raises ``BrokenPipeError`` (a simulator over a socket whose connection broke);
* ``hang``: blocks until :meth:`FaultyEnv.close` (or ``hang_s`` passes), like a stuck simulator;
* ``nan_obs`` / ``nan_reward``: returns NaN in row ``env_index`` of the observation / reward;
* ``slow``: sleeps ``delay_s`` in every step from ``at_step`` on (a slow simulator);
* ``busy``: computes in Python for ``delay_s`` in every step from ``at_step`` on (a CPU-bound Python
  simulator: it holds the GIL, so threads in one process take turns);
* ``exit`` / ``sigkill``: the process exits with code 3 / kills itself with SIGKILL (a crashing
  simulator; only for collectors in their own process, ``runtime.backend=process``);
* ``bad_action``: writes the out-of-range index ``start + n`` of its ``Discrete`` space into row
  ``env_index`` of the action tensor it was handed, in place (a simulator that edits its input), and steps
  with the original actions: the collector records an action index no Q-net has (what ``--debug`` on a GPU
  is for).

:func:`faulty` builds one from ``env.factory=envs.faults:faulty`` with ``env.kwargs``.

Faults fire once (``slow`` and ``busy`` keep going). Pair it with the async trainer's
``env_factory(collector_id, incarnation, seed)`` to choose which collectors fail:
:class:`FaultyFactory` is such a factory, picklable so a collector process can use it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import torch

from envs.base import StepResult, VecEnv

__all__ = ["FaultyEnv", "FaultyFactory", "InjectedFault", "FAULTS", "faulty"]

FAULTS = ("raise", "broken_pipe", "hang", "nan_obs", "nan_reward", "slow", "busy", "exit", "sigkill", "bad_action")
EXIT_CODE = 3


class InjectedFault(RuntimeError):
    """The error a ``raise`` fault throws."""


class FaultyEnv(VecEnv):
    """Wraps ``env``; see the module docstring."""

    def __init__(self, env: VecEnv, fault: str, at_step: int = 1, env_index: int = 0, hang_s: float = 600.0,
                 delay_s: float = 0.0) -> None:
        if fault not in FAULTS:
            raise ValueError(f"fault={fault!r} is not allowed; expected one of {', '.join(FAULTS)}")
        if at_step < 1:
            raise ValueError(f"at_step must be >= 1 (the first step call is 1), got {at_step}")
        if not 0 <= env_index < env.num_envs:
            raise ValueError(f"env_index={env_index} is out of range for num_envs={env.num_envs}")
        if fault == "bad_action" and not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(f"fault='bad_action' needs a Discrete action space; the env has {env.action_space}")
        self.env, self.fault, self.at_step, self.env_index = env, fault, at_step, env_index
        self.hang_s, self.delay_s = hang_s, delay_s
        self.num_envs, self.device = env.num_envs, env.device
        self.observation_space, self.action_space = env.observation_space, env.action_space
        self.max_episode_steps = env.max_episode_steps
        self.steps = 0
        self.fired = False
        self._released = threading.Event()

    @property
    def episode_steps(self) -> torch.Tensor:  # type: ignore[override]  # reads through to the wrapped env
        return self.env.episode_steps

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.env.reset(seed=seed, env_ids=env_ids)

    def step(self, actions: torch.Tensor) -> StepResult:
        self.steps += 1
        if self.fault == "slow" and self.steps >= self.at_step:
            time.sleep(self.delay_s)
            return self.env.step(actions)
        if self.fault == "busy" and self.steps >= self.at_step:
            until = time.perf_counter() + self.delay_s
            while time.perf_counter() < until:  # pure Python: the GIL is held throughout
                pass
            return self.env.step(actions)
        if self.steps != self.at_step or self.fired:
            return self.env.step(actions)
        self.fired = True
        if self.fault == "raise":
            raise InjectedFault(f"injected fault at step {self.steps}")
        if self.fault == "broken_pipe":  # a simulator over a socket, a vector env whose worker died
            raise BrokenPipeError(f"injected: the simulator's connection broke at step {self.steps}")
        if self.fault == "exit":
            os._exit(EXIT_CODE)
        if self.fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fault == "hang":
            self._released.wait(self.hang_s)
            raise InjectedFault(f"injected hang at step {self.steps} ended (env closed)")
        if self.fault == "bad_action":
            valid = actions.clone()
            space = cast(gym.spaces.Discrete, self.action_space)
            actions[self.env_index] = int(space.start) + int(space.n)
            return self.env.step(valid)
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if self.fault == "nan_obs":
            obs = obs.clone()
            obs[self.env_index] = float("nan")
            if "final_obs" in info:
                info = {**info, "final_obs": info["final_obs"].clone()}
                info["final_obs"][self.env_index] = float("nan")
        else:
            reward = reward.clone()
            reward[self.env_index] = float("nan")
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Closes the wrapped env and releases a ``hang`` in progress."""
        self._released.set()
        self.env.close()


@dataclass(frozen=True)
class FaultyFactory:
    """``env_factory(collector_id, incarnation, seed)``: ``env_id`` envs, with ``fault`` in the first
    incarnation of the ``collectors`` chosen (``options`` go to :class:`FaultyEnv`). Plain data, so it
    can be sent to a spawned collector process.
    """

    fault: str
    collectors: tuple[int, ...]
    at_step: int = 3
    env_id: str = "Pendulum-v1"
    num_envs: int = 1
    every_incarnation: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    def __call__(self, collector_id: int, incarnation: int, seed: int) -> VecEnv:
        from envs.registry import make

        env = make(self.env_id, self.num_envs, device="cpu", seed=seed)
        if collector_id in self.collectors and (incarnation == 0 or self.every_incarnation):
            return FaultyEnv(env, self.fault, at_step=self.at_step, **self.options)
        return env


def faulty(num_envs: int, device: str, seed: int | None = None, env_id: str = "CartPole-v1",
           fault: str = "bad_action", at_step: int = 5, env_index: int = 0, only_num_envs: int | None = None) -> VecEnv:
    """An ``env.factory`` for a whole run: ``env_id`` with ``fault`` (e.g. ``env.factory=envs.faults:faulty
    env.kwargs={fault: bad_action, at_step: 40}``). Every env the run builds has it, the evaluation env too,
    unless ``only_num_envs`` keeps it to envs of that size (the training envs, where ``eval_episodes`` differs).
    """
    from envs.registry import make

    env = make(env_id, num_envs, device=device, seed=seed)
    if only_num_envs is not None and num_envs != only_num_envs:
        return env
    return FaultyEnv(env, fault, at_step=at_step, env_index=env_index)
