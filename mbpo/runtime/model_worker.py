"""The model thread: dynamics-ensemble training and branched rollouts, concurrent with policy updates.

The ensemble is touched only by this thread (training, then rollouts, in one
cycle), so it needs no lock of its own; a checkpoint sets
:attr:`ModelWorker.hold` so that no new cycle starts, and takes
:attr:`ModelWorker.cycle_lock` between two cycles for a consistent ensemble. The model buffer is
shared with the learner under ``ModelBased.lock``. Rollouts act with a device
copy of the policy loaded from the newest published snapshot, never with the
learner's live networks (which change mid-rollout), and on GPU run on their
own stream, handed to the learner through events.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from torchrl.data import ReplayBuffer

from mbpo.model_based.learner import ModelBased
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.streams import Lane
from mbpo.runtime.thread_worker import ThreadWorker
from mbpo.runtime.weights import WeightStore

__all__ = ["ModelWorker"]


class ModelWorker(ThreadWorker):
    """Fit the ensemble whenever the gate says a training is due, then roll out into the model buffer."""

    def __init__(
        self,
        model: ModelBased,
        real: ReplayBuffer,
        real_lock: threading.Lock,
        gate: RatioGate,
        weights: WeightStore,
        rollout_agent: Any,
        stop: threading.Event,
        torch_threads: int,
    ) -> None:
        self.model, self.real, self.real_lock = model, real, real_lock
        self.gate, self.weights, self.rollout_agent, self.stop = gate, weights, rollout_agent, stop
        super().__init__("mbpo-model", torch_threads)
        self.cycle_lock = threading.Lock()
        """Held for a whole train + rollout cycle: whoever reads the ensemble's state takes it."""
        self.hold = threading.Event()
        """Set while a checkpoint is due: no new cycle starts until it is written and clears this."""
        self.policy_version = 0
        """Published weight version the last rollouts acted with."""
        self._busy_lock = threading.Lock()
        self._done_s = 0.0
        self._cycle_started: float | None = None
        self.lane = Lane(model.device)

    @property
    def busy_s(self) -> float:
        """Seconds spent in train + rollout cycles so far, the running one's included: a row's ``model_busy``
        counts a fit that spans rows in each row it spans (never more than the row's seconds).
        """
        with self._busy_lock:
            running = 0.0 if self._cycle_started is None else time.perf_counter() - self._cycle_started
            return self._done_s + running

    def _work(self) -> None:
        with self.lane.active():
            if self.model.rollouts_owed:  # a stop came between a fit and its rollouts: a resume makes them first
                self._cycle(fit=False)
            while not self.stop.is_set():
                if self.gate.wait_for(lambda: not self.hold.is_set()
                                      and self.gate.trainings_earned() > self.gate.trainings, self.stop, 0.1):
                    self._cycle()

    def _cycle(self, fit: bool = True) -> None:
        """Fit on every real transition so far, then roll out; ``fit=False``: the rollouts of the last fit only."""
        with self._busy_lock:
            self._cycle_started = start = time.perf_counter()
        try:
            with self.cycle_lock:
                try:
                    with self.real_lock:
                        self.lane.wait_default()  # the learner's writes to the replay buffer come first
                        env_steps = self.gate.ingested if fit else self.model.last_train_env_steps
                        data = self.real[: len(self.real)].clone()
                        fresh = self.model.fresh_rows(self.real)
                        starts = self.model.start_rows(self.real)
                        self.lane.synchronize()  # copied before the learner may overwrite rows (full ring)
                    if fit and data.shape[0] < 2:
                        self.gate.add(trainings=1)
                        return
                    covered = self.gate.trainings_covered(env_steps) if fit else 0
                    if fit:
                        self.model.train(data, env_steps, should_stop=self.stop.is_set, fresh=fresh)
                    if self.stop.is_set():  # a stopping run needs no rollouts: its resume makes them first (after
                        return  # fitting again if this fit was cut short: ModelBased.fit_pending)
                    latest = self.weights.latest()
                    if latest is not None and latest.version != self.policy_version:
                        self.rollout_agent.load_snapshot(latest.snapshot)
                        self.policy_version = latest.version
                    # Writes to the model buffer wait for the learner's reads (ModelBased.rollout) and
                    # publish buffer_ready for the learner's next sample.
                    self.model.rollout(data, env_steps, self.rollout_agent, starts, should_stop=self.stop.is_set)
                finally:
                    self.lane.synchronize()  # the ensemble's state is complete before anyone reads it
        finally:  # a cycle that returns early or raises counts its seconds too, and none after it
            with self._busy_lock:
                self._done_s += time.perf_counter() - start
                self._cycle_started = None
        if fit:
            self.model.trainings_folded += covered - 1
            self.gate.add(trainings=covered)
