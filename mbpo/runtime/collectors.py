"""Collectors: CPU acting against a vectorized env, pushing TensorDict batches into a bounded queue.

Each collector owns one vectorized env (on the env's device) and a CPU replica
of the policy at some published version. Per vector step it moves the
observations to CPU, acts there, sends the actions back to the env's device
and steps; every ``collection_batch_size`` transitions it pushes one
:class:`CollectorBatch` whose transitions carry ``policy_version`` and
``collector_id``. Between batches it picks up the newest snapshot and asks the
:class:`~mbpo.runtime.gate.RatioGate` for more budget.

The trainer only talks to the :class:`Collector` protocol (start, stop, join,
close, heartbeat, error), so a process backend (spawn + shared memory) or a
Ray backend can implement it later without changing the trainer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import gymnasium as gym
import torch
from tensordict import TensorDict

import envs
from mbpo.buffers import real_transitions
from mbpo.config import AgentConfig
from mbpo.debug import check_transitions
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.queue import TransitionQueue
from mbpo.runtime.thread_worker import ThreadWorker
from mbpo.runtime.weights import WeightStore

__all__ = ["Collector", "CollectorBatch", "CollectorSetup", "ThreadCollector", "NonFiniteEnvError",
           "POLICY_VERSION", "COLLECTOR_ID"]

POLICY_VERSION = "policy_version"
"""int64 ``(B,)``: the published weight version the collector acted with (0: random warm-up actions)."""
COLLECTOR_ID = "collector_id"
"""int64 ``(B,)``: which collector produced the transition."""


class NonFiniteEnvError(RuntimeError):
    """An env returned a non-finite observation or reward (runtime.nonfinite=raise)."""


@dataclass
class CollectorBatch:
    data: TensorDict
    """Transitions (mbpo.buffers keys + policy_version + collector_id) on the env's device."""
    collector_id: int
    policy_version: int
    episode_returns: list[float] = field(default_factory=list)
    """Returns of the episodes that finished in this batch."""
    env_steps: int = 0
    """Env transitions taken for this batch, dropped ones included."""
    dropped_nonfinite: int = 0
    """Transitions dropped because the env returned a non-finite value (runtime.nonfinite=drop)."""
    created_at: float = 0.0
    """time.monotonic() when the batch was complete."""
    started_at: float = 0.0
    """time.monotonic() when its first env step began (after the collector picked up weights)."""


@dataclass
class CollectorSetup:
    """Everything collectors share; plain data, so another backend could ship it to its workers."""

    agent: AgentConfig
    observation_space: gym.spaces.Box
    action_space: gym.spaces.Space
    num_envs: int
    vector_steps_per_batch: int
    learning_starts: int
    nonfinite: str = "raise"
    torch_threads: int = 1
    debug: bool = False


class Collector(Protocol):
    """What the trainer needs from a collector, whatever runs it."""

    collector_id: int
    incarnation: int
    """0 for the first start, +1 per restart."""
    last_beat: float
    """time.monotonic() of the last sign of progress (an env step returned, a batch pushed, or waiting on
    the queue or the gate)."""
    error: BaseException | None
    """Set when the collector died of an exception (with its traceback)."""
    batches: int

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float) -> bool: ...
    def is_alive(self) -> bool: ...
    def abandon(self) -> int:
        """Give up on a hung collector: it pushes nothing more; returns its in-flight reservation."""
    def close(self) -> None:
        """Stop, and close the env (which releases one stuck in ``step``). Idempotent."""


class ThreadCollector(ThreadWorker):
    """A collector on its own Python thread (torch releases the GIL inside its ops)."""

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
        self.collector_id, self.incarnation = collector_id, incarnation
        self.setup, self.env, self.queue, self.weights, self.gate = setup, env, queue, weights, gate
        self.seed = seed
        self._make_agent = make_agent
        super().__init__(f"mbpo-collector-{collector_id}.{incarnation}", setup.torch_threads)
        self.batches = 0
        self.policy_version = 0
        self.last_beat = time.monotonic()
        self.in_flight = 0
        """Transitions reserved from the budget and not yet pushed (returned to the gate if abandoned)."""
        self.abandoned = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False

    # -- the Collector protocol (start, join, is_alive, error: ThreadWorker) ---------------
    def stop(self) -> None:
        self._stop.set()

    def start(self) -> None:
        self.beat()  # the timeout counts from the start, not from construction
        super().start()

    def abandon(self) -> int:
        """Give up on this collector (hung): it will push nothing more. Returns its in-flight reservation,
        which the caller hands back to the gate."""
        with self._lock:
            self.abandoned = True
            self._stop.set()
            in_flight, self.in_flight = self.in_flight, 0
            return in_flight

    def close(self) -> None:
        """Stop and close the env (which also releases an env stuck in ``step``). Idempotent."""
        self.stop()
        if not self._closed:
            self._closed = True
            self.env.close()

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    # -- the thread ----------------------------------------------------------------------
    def _work(self) -> None:
        s, env = self.setup, self.env
        policy = self._make_agent(s.agent, s.observation_space, s.action_space, "cpu", self.seed)
        random_gen = torch.Generator().manual_seed(self.seed + 1)
        obs = env.reset(seed=self.seed)
        episode_return = torch.zeros(env.num_envs, dtype=torch.float64)
        self.beat()  # set-up done (building the replica can take a while on a loaded machine)
        while not self._stop.is_set():
            first, granted = self.gate.reserve(s.vector_steps_per_batch, self._stop, self.beat)
            with self._lock:
                if self.abandoned:
                    self.gate.release(granted)
                    return
                self.in_flight = granted
            if granted == 0:
                return
            try:
                latest = self.weights.latest()  # the newest weights, right before the batch starts
                if latest is not None and latest.version != self.policy_version:
                    policy.load_snapshot(latest.snapshot)  # atomic: a published snapshot never changes
                    self.policy_version = latest.version
                batch, obs = self._batch(policy, random_gen, obs, first, granted // env.num_envs, episode_return)
                if s.debug:
                    check_transitions(batch.data, f"collector {self.collector_id} -> queue", env.device,
                                      env.obs_dim, env.action_space)
            except BaseException:
                self._give_back()
                raise
            with self._lock:
                if self.abandoned:
                    return  # declared hung meanwhile: its reservation was already handed back
            if not self.queue.put(batch, self._stop, self.beat):
                self._give_back()  # stopped while the queue was full: never ingested
                return
            with self._lock:
                self.in_flight = 0
            self.batches += 1
            self.beat()

    def _give_back(self) -> None:
        with self._lock:
            in_flight, self.in_flight = self.in_flight, 0
        self.gate.release(in_flight)

    def _batch(
        self, policy: Any, random_gen: torch.Generator, obs: torch.Tensor, first: int, vector_steps: int,
        episode_return: torch.Tensor,
    ) -> tuple[CollectorBatch, torch.Tensor]:
        env, n = self.env, self.env.num_envs
        parts: list[TensorDict] = []
        returns: list[float] = []
        dropped = 0
        started = time.monotonic()
        for t in range(vector_steps):
            random = first + t * n < self.setup.learning_starts
            if random:
                actions = envs.random_actions(env, random_gen)
            else:
                actions = policy.act(obs.cpu(), explore=True).to(env.device)
            next_obs, reward, terminated, truncated, info = env.step(actions)
            self.beat()  # only a step that never returns makes a collector hung, not a slow one
            done = terminated | truncated
            step = real_transitions(obs, actions, reward, next_obs, terminated, truncated, info)
            step[POLICY_VERSION] = torch.full((n,), 0 if random else self.policy_version, dtype=torch.int64,
                                              device=step.device)
            finite = (torch.isfinite(obs).all(-1) & torch.isfinite(reward)
                      & torch.isfinite(step["next_obs"]).all(-1))
            finite_cpu = finite.cpu()
            reward_cpu, done_cpu = reward.cpu().double(), done.cpu()
            if not bool(finite_cpu.all()):
                self._nonfinite(step, finite_cpu, first + t * n)
                dropped += int((~finite_cpu).sum())
                step = step[finite.to(step.device)]
                reward_cpu = torch.where(finite_cpu, reward_cpu, 0.0)
            parts.append(step)
            episode_return += reward_cpu
            if bool(done_cpu.any()):
                returns.extend(episode_return[done_cpu].tolist())
                episode_return[done_cpu] = 0.0
            obs = next_obs
            poisoned = ~torch.isfinite(obs).all(-1)
            if bool(poisoned.any()):  # a poisoned state cannot be acted on: restart those envs only
                obs = env.reset(env_ids=poisoned)
                episode_return[poisoned.cpu()] = 0.0
        data = torch.cat(parts)
        b = data.shape[0]
        data[COLLECTOR_ID] = torch.full((b,), self.collector_id, dtype=torch.int64, device=data.device)
        return CollectorBatch(data, self.collector_id, self.policy_version, returns, vector_steps * n, dropped,
                              time.monotonic(), started), obs

    def _nonfinite(self, step: TensorDict, finite: torch.Tensor, at_transition: int) -> None:
        if self.setup.nonfinite == "drop":
            return
        row = int((~finite).nonzero()[0, 0])
        fields = [name for name, value in (("obs", step["obs"][row]), ("reward", step["reward"][row]),
                                           ("next_obs", step["next_obs"][row]))
                  if not bool(torch.isfinite(value).all())]
        raise NonFiniteEnvError(
            f"collector {self.collector_id}: env index {row} returned a non-finite {' and '.join(fields)} "
            f"(values {[step[f][row].tolist() for f in fields]}) at env step {at_transition + row}; "
            "set runtime.nonfinite=drop to drop such transitions and count them instead")
