"""Collectors: what every backend shares (the batch format, the env-stepping loop, the gate/queue loop).

A collector owns one vectorized env (on the env's device) and a CPU replica of
the policy at some published version. :class:`EnvStepper` is the env side:
per vector step it moves the observations to CPU, acts there, sends the
actions back to the env's device and steps; every ``collection_batch_size``
transitions it returns one :class:`CollectorBatch` whose transitions carry
``policy_version`` and ``collector_id``. It runs in the collector's thread
(``runtime.backend=thread``) or in the collector's spawned process
(``process``, mbpo.runtime.backends.child).

:class:`CollectorLoop` is the control side, in the trainer's process for every
backend: ask the :class:`~mbpo.runtime.gate.RatioGate` for budget, have a batch
collected (however the backend does it), push it into the bounded queue, and
hand back any reservation that will never be ingested. The trainer only talks
to the :class:`Collector` protocol.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import torch
from tensordict import TensorDict

import envs
from mbpo.config import AgentConfig, ModelConfig
from mbpo.config.seeding import derive
from mbpo.data.nstep import n_step_builder
from mbpo.data.transitions import real_transitions
from mbpo.runtime.env_builder import check_training_env
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.nonfinite import NonFiniteEnvError, reset_poisoned, screen
from mbpo.runtime.queue import TransitionQueue
from mbpo.runtime.weights import WeightStore

__all__ = ["Collector", "CollectorBatch", "CollectorSetup", "CollectorLoop", "CollectorStopped", "EnvStepper",
           "NonFiniteEnvError", "POLICY_VERSION", "COLLECTOR_ID"]

POLICY_VERSION = "policy_version"
"""int64 ``(B,)``: the published weight version the collector acted with (0: random warm-up actions)."""
COLLECTOR_ID = "collector_id"
"""int64 ``(B,)``: which collector produced the transition."""


@dataclass
class CollectorBatch:
    data: TensorDict
    """Transitions (mbpo.data.transitions keys + policy_version + collector_id). Valid until :meth:`release`: with
    the process backend it is a view of a shared-memory slot that is reused afterwards."""
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
    env_s: float = 0.0
    """Seconds spent in ``env.step`` for this batch (the time breakdown's env part)."""
    act_s: float = 0.0
    """Seconds spent choosing actions for this batch (policy forward, or random actions in warm-up)."""
    planned: int = 0
    """Actions of this batch planned through the model (model.lookahead), not the actor's alone."""
    cpu_s: float = 0.0
    """CPU seconds a process or Ray collector's own process spent since its previous batch (start-up included
    in the first): the trainer adds them to its ``cpu_s``. 0 for a thread collector, whose CPU is the
    trainer process's and counted there."""
    on_release: Callable[[], None] | None = None
    """Frees the storage behind ``data`` (a shared-memory slot); None when ``data`` is the batch's own."""

    def release(self) -> None:
        """Call once the data has been copied (into the replay buffer) or dropped. Idempotent."""
        free, self.on_release = self.on_release, None
        if free is not None:
            free()


class CpuSinceLast:
    """This process's CPU seconds since the previous call (start-up included in the first): what a process or
    Ray collector sends with each batch as ``CollectorBatch.cpu_s``, so that the trainer adds each second once.
    """

    def __init__(self) -> None:
        self._reported = 0.0

    def __call__(self) -> float:
        now = time.process_time()
        cpu, self._reported = now - self._reported, now
        return cpu


@dataclass
class CollectorSetup:
    """Everything collectors share; plain data, so the process backend ships it to its children."""

    agent: AgentConfig
    observation_space: gym.spaces.Box
    action_space: gym.spaces.Space
    num_envs: int
    vector_steps_per_batch: int
    learning_starts: int
    nonfinite: str = "raise"
    torch_threads: int = 1
    debug: bool = False
    float32_fields: tuple[str, ...] = ()
    """Env fields the trainer's start-up check found in another float dtype: collectors cast them to float32
    (envs.contract.as_float32)."""
    keep_first_step: bool = False
    """n-step rows also carry their first step (mbpo.data.transitions.FIRST_STEP): a dynamics model learns from them."""
    lookahead: ModelConfig | None = None
    """The model's config where model.lookahead plans the exploring actions (None: the agent acts): each collector
    then plans through a replica of the ensemble that the published snapshots fill."""
    env_id: str = ""
    """env.id, for the task's rules a planning collector's model needs (model.lookahead)."""
    env_label: str = "the env"
    """How errors name the env (mbpo.runtime.env_builder.env_label: its factory, else its id)."""
    resumed_at: int = 0
    """The env steps the run resumed from (0: a new run). Collector seeds come from (seed, collector, restart);
    without this a resumed run's collectors drew the streams the run began with again: its first reset states
    and random actions, transitions the replay buffer already held."""

    def stream_seed(self, seed: int) -> int:
        """The seed of a collector's streams (its env's resets, its actions): ``seed``, or after a resume one
        derived from it and the resume point.
        """
        return derive(seed, "resumed_at", self.resumed_at) if self.resumed_at else seed


class Collector(Protocol):
    """What the trainer needs from a collector, whatever runs it."""

    collector_id: int
    incarnation: int
    """0 for the first start, +1 per restart."""
    error: BaseException | None
    """Set when the collector died (an exception with its traceback, or a process's exit code or signal)."""
    batches: int
    """Batches pushed so far."""
    policy_version: int
    """The weight version of the newest batch."""
    killable: bool
    """True if :meth:`close` can stop a collector stuck in ``env.step`` (a process), so a hung one is
    replaced; False for a thread, which is abandoned instead."""

    @property
    def last_beat(self) -> float:
        """time.monotonic() of the last sign of progress (an env step returned, a batch pushed, or waiting
        on the queue or the gate).
        """

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float) -> bool: ...
    def is_alive(self) -> bool: ...
    def abandon(self) -> int:
        """Give up on a hung collector: it pushes nothing more; returns its in-flight reservation."""
    def close(self) -> None:
        """Stop, and release the env (closing it, or ending the process stuck in ``step``). Idempotent."""


class EnvStepper:
    """One vectorized env and a CPU policy: the env side of a collector, wherever it runs."""

    def __init__(self, collector_id: int, setup: CollectorSetup, env: envs.VecEnv, policy: Any, seed: int,
                 beat: Callable[[], None]) -> None:
        self.collector_id, self.setup, self.policy, self.beat = collector_id, setup, policy, beat
        self.env = envs.as_float32(env, setup.float32_fields)
        self.random_gen = torch.Generator().manual_seed(derive(seed, "random_actions"))
        self.obs = self.env.reset(seed=seed)
        self.who = f"collector {collector_id}: {setup.env_label}"
        check_training_env(self.env, self.who, obs=self.obs)
        self.step_checked = False
        """The first step is held to the contract too (check_training_env), then no other."""
        self.episode_return = torch.zeros(env.num_envs, dtype=torch.float64)
        self.policy_version = 0
        """The published weight version the policy holds (0: none yet)."""
        self.n_step = n_step_builder(setup.agent, setup.keep_first_step)
        """Builds n-step transitions (agent.n_step > 1); None for 1-step."""
        if setup.lookahead is not None:  # imported here: a collector that does not plan never loads the ensemble's code
            from mbpo.model_based.planning_policy import PlanningPolicy

            self.policy = PlanningPolicy.replica(policy, setup.lookahead, setup.env_id, setup.observation_space,
                                                 setup.action_space, env, derive(seed, "lookahead"))
        self.end_episodes: Callable[[torch.Tensor], None] | None = getattr(self.policy, "end_episodes", None)
        """The planner's warm starts reset where an episode ends (model.lookahead); None for the agent."""

    def use_weights(self, version: int, snapshot: dict[str, Any]) -> None:
        """Load published weights into the policy, if they are newer than what it holds."""
        if version != self.policy_version:
            self.policy.load_snapshot(snapshot)
            self.policy_version = version

    def collect(self, first: int, vector_steps: int) -> CollectorBatch:
        """``vector_steps`` vector steps from transition index ``first`` on (random actions before
        ``learning_starts``), acting with the policy's current weights. ``vector_steps`` 0 is a collector's last
        batch with n-step returns: no step, each env's open windows cut as time-outs (its episodes end here).
        """
        env, n, policy_version = self.env, self.env.num_envs, self.policy_version
        parts: list[TensorDict] = []
        returns: list[float] = []
        dropped = 0
        started = time.monotonic()
        obs, episode_return = self.obs, self.episode_return
        env_s = act_s = 0.0
        planned = 0
        result: Any = None
        try:
            for t in range(vector_steps):
                random = first + t * n < self.setup.learning_starts
                tick = time.perf_counter()
                if random:
                    actions = envs.random_actions(env, self.random_gen)
                else:
                    actions = self.policy.act(obs.cpu(), explore=True).to(env.device)
                    planned += int(getattr(self.policy, "planned", False)) * n
                tock = time.perf_counter()
                result = env.step(actions)
                if not self.step_checked:
                    check_training_env(env, self.who, step=result)
                    self.step_checked = True
                next_obs, reward, terminated, truncated, info = result
                act_s, env_s = act_s + tock - tick, env_s + time.perf_counter() - tock
                self.beat()  # only a step that never returns makes a collector hung, not a slow one
                done = terminated | truncated
                step = real_transitions(obs, actions, reward, next_obs, terminated, truncated, info)
                step[POLICY_VERSION] = torch.full((n,), 0 if random else policy_version, dtype=torch.int64,
                                                  device=step.device)
                keep = screen(step, self.setup.nonfinite, first + t * n, f"collector {self.collector_id}: ")
                reward_cpu, done_cpu = reward.cpu().double(), done.cpu()
                if keep is not None:
                    dropped += int((~keep).sum())
                    reward_cpu = torch.where(keep, reward_cpu, 0.0)
                if self.n_step is not None:  # n-step transitions: emitted as their windows close
                    parts.append(self.n_step.push(step, truncated, keep=keep))
                else:
                    parts.append(step if keep is None else step[keep.to(step.device)])
                episode_return += reward_cpu
                if bool(done_cpu.any()):
                    returns.extend(episode_return[done_cpu].tolist())
                    episode_return[done_cpu] = 0.0
                    if self.end_episodes is not None:
                        self.end_episodes(done_cpu)
                obs, poisoned = reset_poisoned(env, next_obs, self.who)
                if poisoned is not None:
                    episode_return[poisoned] = 0.0
                    if self.end_episodes is not None:
                        self.end_episodes(poisoned)
        except Exception:  # noqa: BLE001 - re-raised: an env's broken later step is named as such, not by where it broke
            if result is not None:  # the contract's one line for a broken step or observations (EnvContractError)
                check_training_env(env, self.who, step=result, first=False)
                check_training_env(env, self.who, obs=obs, first=False)
            raise
        self.obs = obs
        if vector_steps == 0 and self.n_step is not None:
            flushed = self.n_step.flush()
            if flushed is not None:
                parts.append(flushed)
        data: TensorDict = torch.cat(parts)  # torch.cat on TensorDicts gives a TensorDict
        b = data.shape[0]
        data[COLLECTOR_ID] = torch.full((b,), self.collector_id, dtype=torch.int64, device=data.device)
        return CollectorBatch(data, self.collector_id, policy_version, returns, vector_steps * n, dropped,
                              time.monotonic(), started, env_s=env_s, act_s=act_s, planned=planned)


class CollectorStopped(Exception):
    """Raised inside a collector's loop when it was stopped or abandoned while waiting; not an error."""


class CollectorLoop:
    """The gate -> collect -> queue loop of a collector, on its own thread of the trainer's process.

    Subclasses say what runs the env (:meth:`_launch`: nothing for a thread, a
    child process, a Ray actor), how the collector is set up (:meth:`_prepare`,
    on the thread) and how a batch is collected (:meth:`_submit`, :meth:`_finish`). The budget
    bookkeeping is here once: a reservation that will never be ingested (a
    failure, a stop while the queue is full, an abandoned collector) goes back
    to the gate exactly once. An exception that ends the loop is kept, with its
    traceback, in :attr:`error` for the supervisor in the main thread.
    """

    killable = False

    def __init__(self, collector_id: int, incarnation: int, setup: CollectorSetup,
                 queue: TransitionQueue[CollectorBatch], weights: WeightStore, gate: RatioGate) -> None:
        self.collector_id, self.incarnation = collector_id, incarnation
        self.setup, self.queue, self.weights, self.gate = setup, queue, weights, gate
        self.batches = 0
        self.policy_version = 0
        self.error: BaseException | None = None
        self._beat = time.monotonic()
        self.in_flight = 0
        """Transitions reserved from the budget and not yet pushed (returned to the gate if abandoned)."""
        self.abandoned = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"mbpo-collector-{collector_id}.{incarnation}",
                                        daemon=True)

    @property
    def last_beat(self) -> float:
        return self._beat

    def beat(self) -> None:
        self._beat = time.monotonic()

    def start(self) -> None:
        self.beat()  # the timeout counts from the start, not from construction
        self._launch()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> bool:
        if self._thread.ident is not None:
            self._thread.join(max(timeout, 0.0))
        return not self._thread.is_alive()

    def _launch(self) -> None:
        """Start what runs the env, from the caller's thread (a child process, a Ray actor)."""

    def _main(self) -> None:
        try:
            self._loop()
        except CollectorStopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the supervisor
            self.error = exc

    def abandon(self) -> int:
        """Give up on this collector (hung): it will push nothing more. Returns its in-flight reservation,
        which the caller hands back to the gate.
        """
        with self._lock:
            self.abandoned = True
            self._stop.set()
            in_flight, self.in_flight = self.in_flight, 0
            return in_flight

    def _prepare(self) -> None:
        """Set-up before the first reservation (build the replica, wait for the child, ...)."""

    def _submit(self, first: int, granted: int) -> Any:
        """Start collecting a granted batch; returns a handle for :meth:`_finish` (up to ``depth`` at once)."""
        raise NotImplementedError

    def _finish(self, handle: Any) -> CollectorBatch:
        """The batch of the oldest handle, once it is there."""
        raise NotImplementedError

    depth = 1
    """Batches a collector may have granted and not yet pushed. Remote collectors ask for the next batch
    while one runs, so the env never waits on a round trip; the next is only asked for if the gate lets it
    through at once, so the learner never waits on data it cannot have yet."""

    def _loop(self) -> None:
        s = self.setup
        self._prepare()
        self.beat()  # set-up done (building the replica can take a while on a loaded machine)
        pending: collections.deque[tuple[int, Any]] = collections.deque()
        try:
            while True:
                while len(pending) < self.depth and not self._stop.is_set():
                    grant = self.gate.reserve(s.vector_steps_per_batch, self._stop, self.beat, wait=not pending)
                    if grant is None:
                        break  # the gate says wait: first finish what is outstanding
                    first, granted = grant
                    with self._lock:
                        if self.abandoned:
                            self.gate.release(granted)
                            return
                        self.in_flight += granted
                    if granted == 0:
                        break
                    pending.append((granted, self._submit(first, granted)))
                if not pending:
                    self._push_open_windows()
                    return  # the budget is spent, or the collector was stopped
                granted, handle = pending.popleft()
                batch = self._finish(handle)
                with self._lock:
                    if self.abandoned:
                        batch.release()
                        return  # declared hung meanwhile: its reservations were already handed back
                if not self.queue.put(batch, self._stop, self.beat):
                    batch.release()  # stopped while the queue was full: never ingested
                    return
                with self._lock:
                    self.in_flight -= granted
                self.policy_version = batch.policy_version
                self.batches += 1
                self.beat()
        finally:
            self._give_back()  # whatever is still reserved will never be ingested

    def _push_open_windows(self) -> None:
        """With n-step returns, each env's last n - 1 steps wait in open windows; the collector's episodes end
        with it (a resume starts new ones), so they are pushed as time-outs, a batch of no env steps, rather
        than lost. It never evicts a queued batch (drop_oldest); on a stop it never waits: skipped if the queue
        or, for a process, every ring slot is full.
        """
        with self._lock:
            if self.abandoned or self.setup.agent.n_step <= 1 or self.batches == 0:
                return
        batch = self._finish(self._submit(0, 0))
        if not self.queue.put(batch, self._stop, self.beat, drop=False):
            batch.release()

    def _give_back(self) -> None:
        with self._lock:
            in_flight, self.in_flight = self.in_flight, 0
        self.gate.release(in_flight)
