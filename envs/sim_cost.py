"""A simulator's cost added to any VecEnv: every ``step`` waits ``cost_us`` microseconds per env transition.

Our native envs step 1,024 Pendulums in tens of microseconds; a contact-rich simulator takes 10-1,000 µs per
transition. Which learner reaches a threshold first on wall-clock depends on that cost (PPO spends env steps,
MBPO spends compute), so ``benchmarks/vs_ppo.py --sim-cost-us C`` puts this wrapper around every learner's env.

``SimCostEnv(env, cost_us)`` waits ``cost_us * num_envs`` µs inside each ``step``, then steps ``env`` and returns
what it returns, unchanged; the trainers time ``step``, so the wait counts as env time. ``reset`` is free: in an
Isaac-style env the resets that matter happen inside ``step``. Any other attribute reads through to ``env``.

:func:`wait` sleeps all but the last :data:`SPIN_S`, then spins on ``time.perf_counter`` to the deadline.
``time.sleep`` alone overshoots by its timer slack and wake-up latency, 65-110 µs on Linux (measured on a
2-core EPYC with a benchmark beside it): +70% on a 0.1 ms vector step. Sleep then spin was 0.2-5 µs late
(median) from 0.1 ms to 100 ms there; a machine short of cores adds its scheduling delays to any wait. Sleeping
releases the GIL, as a simulator's C or CUDA code does, so a learner thread in the same process keeps working;
only the last <= 0.3 ms spins with the GIL held, as a Python simulator would.
A busy-wait for the whole cost would be as accurate but would hold the GIL and a core throughout.

:func:`slowed` builds one from ``env.factory=envs.sim_cost:slowed`` with ``env.kwargs={env_id: Pendulum-v1,
cost_us: 100}``. A factory named by string is imported by each collector process and Ray actor, so every
backend steps the same slowed env. ``only_num_envs`` keeps the cost to envs of that size (the training envs:
evaluation builds ``eval_episodes`` of them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from envs.base import StepResult, VecEnv
from envs.factory import EnvFactoryError

__all__ = ["SimCostEnv", "SPIN_S", "EXPECTED_COST", "check_cost_us", "slowed", "wait"]

SPIN_S = 3e-4
"""The end of a wait spent spinning rather than sleeping: above ``time.sleep``'s overshoot (65-110 µs measured,
growing with the sleep), so the sleep ends before the deadline and the spin lands on it."""


EXPECTED_COST = "a finite number >= 0 of microseconds per env transition (e.g. 100 for a contact-rich simulator)"


def check_cost_us(cost_us: Any) -> float:
    """``cost_us`` as a float, or a ValueError saying what is allowed: a finite number >= 0 (not a bool)."""
    ok = isinstance(cost_us, (int, float, np.integer, np.floating)) and not isinstance(cost_us, bool)
    if not ok or not math.isfinite(cost_us) or cost_us < 0:
        raise ValueError(f"cost_us={cost_us!r} is not allowed; expected {EXPECTED_COST}")
    return float(cost_us)


def wait(seconds: float, clock: Callable[[], float] = time.perf_counter,
         sleep: Callable[[float], None] = time.sleep) -> None:
    """Return ``seconds`` after the call: sleep to :data:`SPIN_S` before the deadline, then spin (module
    docstring: why both).
    """
    deadline = clock() + seconds
    if seconds > SPIN_S:
        sleep(seconds - SPIN_S)
    while clock() < deadline:
        pass


class SimCostEnv(VecEnv):
    """``env`` whose every ``step`` first waits ``cost_us * num_envs`` microseconds (module docstring)."""

    def __init__(self, env: VecEnv, cost_us: float) -> None:
        self.env, self.cost_us = env, check_cost_us(cost_us)
        self.step_cost_s = self.cost_us * env.num_envs / 1e6
        """What each vector step adds, in seconds."""
        self.num_envs, self.device = env.num_envs, env.device
        self.observation_space, self.action_space = env.observation_space, env.action_space
        self.max_episode_steps, self.spec_id = env.max_episode_steps, env.spec_id
        self.render_fps, self.renders_batch = env.render_fps, env.renders_batch

    @property
    def episode_steps(self) -> torch.Tensor:  # reads through to the wrapped env
        return self.env.episode_steps

    @episode_steps.setter
    def episode_steps(self, value: torch.Tensor) -> None:  # rsl_rl's runners may set episode_length_buf
        self.env.episode_steps = value

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.env.reset(seed=seed, env_ids=env_ids)

    def step(self, actions: torch.Tensor) -> StepResult:
        wait(self.step_cost_s)
        return self.env.step(actions)

    def render(self, env_index: int = 0) -> np.ndarray:
        return self.env.render(env_index)

    def close(self) -> None:
        self.env.close()


def slowed(num_envs: int, device: str = "cpu", seed: int | None = None, *, env_id: str, cost_us: float,
           source: str = "auto", only_num_envs: int | None = None) -> VecEnv:
    """An ``env.factory``: ``envs.make(env_id, ..., source=source)`` with ``cost_us`` µs per transition added to
    its steps (:class:`SimCostEnv`); envs of another size than ``only_num_envs`` (when given) are left as they are.
    """
    try:
        cost_us = check_cost_us(cost_us)
    except ValueError:
        raise EnvFactoryError("envs.sim_cost:slowed", f"cannot take env.kwargs.cost_us={cost_us!r}; expected "
                                                      f"{EXPECTED_COST}") from None
    from envs.registry import make

    env = make(env_id, num_envs, device=device, seed=seed, source=source)
    if only_num_envs is not None and num_envs != only_num_envs:
        return env
    return SimCostEnv(env, cost_us)
