"""``runtime.backend=thread``: each collector is a thread of the trainer's process.

torch releases the GIL inside its kernels, so threads suit GPU envs and fast
torch envs; a CPU-bound Python simulator is better off in a process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import envs
from mbpo.device.checks import check_transitions
from mbpo.runtime.collectors import CollectorBatch, CollectorLoop, CollectorSetup, EnvStepper
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.queue import TransitionQueue
from mbpo.runtime.weights import WeightStore

__all__ = ["ThreadCollector", "ThreadBackend"]


class ThreadCollector(CollectorLoop):
    """A collector on its own Python thread, stepping an env it was handed."""

    def __init__(
        self,
        collector_id: int,
        incarnation: int,
        setup: CollectorSetup,
        env: envs.VecEnv,
        queue: TransitionQueue[CollectorBatch],
        weights: WeightStore,
        gate: RatioGate,
        seed: int,
        make_agent: Callable[..., Any],
    ) -> None:
        super().__init__(collector_id, incarnation, setup, queue, weights, gate)
        self.env, self.seed, self._make_agent = env, seed, make_agent
        self._stepper: EnvStepper | None = None
        self._closed = False

    def close(self) -> None:
        """Stop and close the env (which also releases an env stuck in ``step``). Idempotent."""
        self.stop()
        if not self._closed:
            self._closed = True
            self.env.close()

    def _prepare(self) -> None:
        s = self.setup
        torch.set_num_threads(s.torch_threads)  # intra-op threads are chosen per role
        seed = s.stream_seed(self.seed)
        policy = self._make_agent(s.agent, s.observation_space, s.action_space, "cpu", seed)
        self._stepper = EnvStepper(self.collector_id, s, self.env, policy, seed, self.beat)

    def _finish(self, handle: CollectorBatch) -> CollectorBatch:
        return handle

    def _submit(self, first: int, granted: int) -> CollectorBatch:
        """Collect right away, on this thread (depth 1: one batch at a time)."""
        stepper = self._stepper
        assert stepper is not None
        latest = self.weights.latest()  # the newest weights, right before the batch starts
        if latest is not None:
            stepper.use_weights(latest.version, latest.snapshot)  # a published snapshot never changes
        batch = stepper.collect(first, granted // self.env.num_envs)
        if self.setup.debug:
            check_transitions(batch.data, f"collector {self.collector_id} -> queue", self.env.device,
                              self.env.obs_dim, self.env.action_space)
        return batch


class ThreadBackend:
    """Builds thread collectors; ``make_env(collector_id, incarnation)`` gives each its env."""

    name = "thread"
    uses_trainer_env = True
    """Collector 0 steps the env the trainer built first."""

    def __init__(self, setup: CollectorSetup, queue: TransitionQueue[CollectorBatch], weights: WeightStore,
                 gate: RatioGate, make_env: Callable[[int, int], envs.VecEnv],
                 action_seed: Callable[[int, int], int], make_agent: Callable[..., Any]) -> None:
        self.setup, self.queue, self.weights, self.gate = setup, queue, weights, gate
        self.make_env, self.action_seed, self.make_agent = make_env, action_seed, make_agent

    def make_collector(self, collector_id: int, incarnation: int) -> ThreadCollector:
        return ThreadCollector(collector_id, incarnation, self.setup, self.make_env(collector_id, incarnation),
                               self.queue, self.weights, self.gate, self.action_seed(collector_id, incarnation),
                               self.make_agent)

    def close(self) -> None:
        """Nothing of its own to release: each collector closes its env."""
