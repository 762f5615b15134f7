"""Ratio gating: the run's shared counters and the rule that holds collectors back.

MBPO's budgets are per real transition: ``utd_ratio`` policy updates,
``1 / train_freq`` model trainings and ``rollouts_per_real`` branched rollouts.
Asynchronously, nothing forces them, so collectors ask :meth:`RatioGate.reserve`
before each batch and wait while the learner's update backlog is larger than
``tolerance`` of the data so far, capped at ``max_lead`` transitions (so the
lead, and the age of the policy that collects, does not grow with the run;
at least one batch, so the run can always move), or while more than
``model.max_lag`` model trainings are owed (by default one, which may be in
flight while collection goes on). The learner
never runs ahead either: it only issues the updates ingested data has earned.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from mbpo.model_based.budgets import budget_start, trainings_earned
from mbpo.runtime.timing import POLL_S

__all__ = ["RatioGate"]


class RatioGate:
    """Counters (reserved, ingested, updates, model trainings) under one condition variable."""

    def __init__(
        self,
        total_env_steps: int,
        num_envs: int,
        learning_starts: int,
        utd_ratio: float,
        train_freq: int | None,
        tolerance: float,
        min_lead: int,
        max_lead: int = 0,
        max_lag: int = 1,
    ) -> None:
        self.total_env_steps = total_env_steps
        self.num_envs = num_envs
        self.learning_starts = learning_starts
        self.utd_ratio = utd_ratio
        self.train_freq = train_freq
        self.tolerance = tolerance
        self.min_lead = min_lead
        self.max_lead = max_lead
        """Absolute cap on the lead (runtime.max_lead); 0 = only the relative ``tolerance`` bound."""
        self.max_lag = max_lag
        """Model trainings that may be owed while collection goes on (model.max_lag)."""
        self.model_start = 0 if train_freq is None else budget_start(train_freq, learning_starts)
        """Where model trainings count from (a resumed run takes its model's, ``ModelBased.budget_start``)."""
        self.reserved = 0
        """Transitions handed to collectors (env steps taken or about to be)."""
        self.ingested = 0
        """Transitions in the replay buffer."""
        self.updates = 0
        """Policy updates issued."""
        self.trainings = 0
        """Model trainings completed."""
        self.discarded = 0
        """Reserved transitions that will never be ingested (queue drop_oldest)."""
        self.waits = 0
        """Requests a collector had to wait on at the gate (one each, however long the wait)."""
        self._cond = threading.Condition()

    # -- what has been earned ------------------------------------------------------
    def learning_transitions(self, ingested: int | None = None) -> int:
        """Transitions that earn updates: from the vector step that reaches ``learning_starts`` on
        (the SyncTrainer's rule, so both trainers issue the same number of updates).
        """
        ingested = self.ingested if ingested is None else ingested
        if ingested < self.learning_starts:
            return 0
        first_step_end = -(-self.learning_starts // self.num_envs) * self.num_envs  # a whole vector step's end
        return ingested - max(first_step_end - self.num_envs, 0)

    def updates_earned(self, ingested: int | None = None) -> int:
        return math.floor(self.learning_transitions(ingested) * self.utd_ratio + 1e-9)

    def updates_due(self) -> int:
        with self._cond:
            return self.updates_earned() - self.updates

    def trainings_earned(self, ingested: int | None = None) -> int:
        if self.train_freq is None:
            return 0
        return trainings_earned(self.ingested if ingested is None else ingested, self.train_freq, self.model_start,
                                self.num_envs)

    def trainings_covered(self, env_steps: int) -> int:
        """Trainings a fit on the first ``env_steps`` real transitions counts for: one, or with ``max_lag`` above
        1 every training those transitions earned that is not done yet (the fit trains on all of them).
        """
        with self._cond:
            if self.max_lag <= 1:
                return 1
            return max(self.trainings_earned(env_steps) - self.trainings, 1)

    def trainings_due(self) -> int:
        with self._cond:
            return self.trainings_earned() - self.trainings

    def lead(self) -> int:
        """How many collected transitions the learner or the model may lag behind: ``tolerance`` of the
        transitions that earn updates, at most ``max_lead`` (when set), and at least ``min_lead`` (one batch)
        so the run can always move.
        """
        lead = int(self.tolerance * self.learning_transitions(self.reserved - self.discarded))
        if self.max_lead:
            lead = min(lead, self.max_lead)
        return max(lead, self.min_lead)

    def _blocked(self, request: int) -> str | None:
        """Why a collector must wait before taking ``request`` more transitions, or None. Measured against
        what collectors have taken (queued and in-flight batches included, the request too), so neither a
        full queue nor several collectors can hide a backlog from the gate.
        """
        behind = max(self.reserved + request - self.discarded - self.lead(), 0)
        if self.updates < self.updates_earned(behind):
            return "learner"
        if self.trainings < self.trainings_earned(behind) - self.max_lag:
            return "model"  # max_lag trainings (one by default) may be owed while collection goes on: the overlap
        return None

    # -- collectors ------------------------------------------------------------------
    def reserve(
        self, vector_steps: int, stop: threading.Event, heartbeat: Callable[[], None] | None = None,
        wait: bool = True,
    ) -> tuple[int, int] | None:
        """Wait until the ratios allow more data, then reserve up to ``vector_steps`` vector steps of the
        budget; returns ``(first transition index, transitions reserved)``, 0 reserved once the budget
        is spent or ``stop`` is set. With ``wait=False`` it returns None instead of waiting (a collector
        asking for a batch ahead, with one still outstanding).
        """
        with self._cond:
            waited = False
            while self._blocked(vector_steps * self.num_envs) is not None and not stop.is_set():
                if not wait:
                    return None
                if not waited:  # one wait per request held back, however many wake-ups it takes
                    self.waits, waited = self.waits + 1, True
                if heartbeat is not None:
                    heartbeat()  # waiting on the gate is not hanging
                self._cond.wait(POLL_S)
            first = self.reserved
            if stop.is_set():
                return first, 0
            left = -(-(self.total_env_steps - self.reserved) // self.num_envs)  # vector steps, rounded up
            granted = max(min(vector_steps, left), 0) * self.num_envs
            self.reserved += granted
            return first, granted

    def discard(self, transitions: int) -> None:
        """Collected transitions that were thrown away (queue drop_oldest): they spent budget but earn nothing."""
        with self._cond:
            self.discarded += transitions
            self._cond.notify_all()

    def release(self, transitions: int) -> None:
        """Give back a reservation that will never be ingested (a failed or hung collector's batch)."""
        with self._cond:
            self.reserved -= transitions
            self._cond.notify_all()

    @property
    def budget_spent(self) -> bool:
        with self._cond:
            return self.reserved >= self.total_env_steps

    # -- learner and model thread --------------------------------------------------------
    def add(self, ingested: int = 0, updates: int = 0, trainings: int = 0) -> None:
        """Record progress and wake waiting collectors."""
        with self._cond:
            self.ingested += ingested
            self.updates += updates
            self.trainings += trainings
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], stop: threading.Event, timeout: float = POLL_S) -> bool:
        """Wait up to ``timeout`` for ``predicate()`` (evaluated under the lock); returns its value."""
        with self._cond:
            if not predicate() and not stop.is_set():
                self._cond.wait(timeout)
            return predicate()
