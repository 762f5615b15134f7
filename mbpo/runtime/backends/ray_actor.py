"""The collector as a Ray actor (``runtime.backend=ray``): it owns an env and a CPU policy replica.

Built from a :class:`~mbpo.runtime.backends.child.ChildSpec` (plain data), on
whatever node Ray places it. ``collect`` runs one granted batch and returns it
as numpy arrays and plain numbers, so the driver unpickles nothing but Ray's
own transport of arrays and plain data. The actor runs two threads
(``max_concurrency=2``) so that ``seconds_since_step`` answers while
``collect`` is stepping: that is the driver's heartbeat.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from typing import Any

import numpy as np
import torch

from mbpo.config.seeding import derive, seed_everything
from mbpo.runtime.backends.child import ChildSpec

__all__ = ["CollectorActor", "to_numpy", "to_torch"]


def to_numpy(tree: Any) -> Any:
    """Nested dicts of tensors -> the same of numpy arrays (plain data for Ray's transport)."""
    if isinstance(tree, dict):
        return {k: to_numpy(v) for k, v in tree.items()}
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().numpy()
    return tree


def to_torch(tree: Any, copy: bool = True) -> Any:
    """Inverse of :func:`to_numpy`. Ray hands out read-only arrays: ``copy=False`` wraps them anyway, for
    data that is only read (a batch on its way into the replay buffer, which copies it).
    """
    if isinstance(tree, dict):
        return {k: to_torch(v, copy) for k, v in tree.items()}
    if isinstance(tree, np.ndarray):
        if copy:
            return torch.from_numpy(np.array(tree))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(tree)
    return tree


class CollectorActor:
    """Decorated with ``ray.remote`` by the backend (so importing this module does not need Ray)."""

    def __init__(self, spec: ChildSpec) -> None:
        """What building the env or the policy raised is kept and raised by :meth:`where`, the driver's first call:
        raised here, Ray would hand the driver an ActorDiedError that keeps only the text, and the driver could
        not tell a user's mistake (an env fault, a factory that returns no env) from a crash a restart may clear.
        """
        from mbpo.agents import make_agent
        from mbpo.runtime.collectors import CpuSinceLast, EnvStepper

        self.spec, setup = spec, spec.setup
        torch.set_num_threads(setup.torch_threads)
        self._stepped = time.monotonic()
        self._cpu_since_last = CpuSinceLast()
        self.env: Any = None
        self._init_error: BaseException | None = None
        self._turn, self._turns = 0, threading.Condition()
        """The driver's next batch (:meth:`collect`), and the condition its calls wait on."""
        try:
            seed_everything(derive(spec.env_seed, "globals"))  # before the env: a simulator may draw from them
            self.env = spec.build_env()
            seed = setup.stream_seed(spec.action_seed)
            policy = make_agent(setup.agent, setup.observation_space, setup.action_space, "cpu", seed)
            self.stepper = EnvStepper(spec.collector_id, setup, self.env, policy, seed, self._beat)
        except Exception as exc:  # noqa: BLE001 - raised by where(), with its type
            self._init_error = exc

    def _beat(self) -> None:
        self._stepped = time.monotonic()

    def where(self) -> dict[str, Any]:
        """Where the actor runs, and in debug mode its own report of the debug switches: a Ray worker's
        environment is its raylet's, not the driver's, so ``CUDA_LAUNCH_BLOCKING`` may be set in one and not
        the other. The driver prints the lines (a worker's own stderr reaches it late, if at all).
        """
        if self._init_error is not None:
            raise self._init_error
        import gymnasium as gym
        import ray

        from mbpo.device.checks import switches

        setup = self.spec.setup
        report = (switches(1, "ray", discrete=isinstance(setup.action_space, gym.spaces.Discrete), in_collector=True)
                  if setup.debug else [])
        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(), "debug": report}

    def seconds_since_step(self) -> float:
        return time.monotonic() - self._stepped  # relative: clocks of different machines are not compared

    def collect(self, turn: int, first: int, granted: int, version: int,
                weights: dict[str, Any] | None) -> dict[str, Any]:
        """The driver's ``turn``-th batch (from 0), run after the one before it: Ray may start the later of two
        calls first (the earlier one waits for its weights' object), so each waits its turn.
        """
        with self._turns:
            while self._turn != turn:
                self._turns.wait()
        try:
            if weights is not None:
                self.stepper.use_weights(version, to_torch(weights))
            batch = self.stepper.collect(first, granted // self.env.num_envs)
            if self.spec.setup.debug:
                from mbpo.device.checks import check_transitions

                check_transitions(batch.data, f"collector {self.spec.collector_id} -> object store",
                                  self.env.device, self.env.obs_dim, self.env.action_space)
            return {"data": to_numpy(batch.data.to_dict()), "policy_version": batch.policy_version,
                    "episode_returns": batch.episode_returns, "env_steps": batch.env_steps,
                    "dropped": batch.dropped_nonfinite, "seconds": batch.created_at - batch.started_at,
                    "env_s": batch.env_s, "act_s": batch.act_s, "planned": batch.planned,
                    "cpu_s": self._cpu_since_last()}
        finally:
            with self._turns:
                self._turn = turn + 1
                self._turns.notify_all()

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
