"""The bounded queue and the ratio gate, on their own."""

from __future__ import annotations

import threading

import pytest

from mbpo.debug import HandoffError
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.queue import TransitionQueue
from mbpo.runtime.weights import WeightStore

pytestmark = pytest.mark.timeout(20)


def test_drop_oldest_keeps_the_queue_bounded_and_counts_drops() -> None:
    dropped: list[int] = []
    q: TransitionQueue[int] = TransitionQueue(3, "drop_oldest", on_drop=dropped.append)
    stop = threading.Event()
    for i in range(10):
        assert q.put(i, stop)
        assert len(q) <= 3
    assert q.dropped == 7 and dropped == list(range(7))
    assert q.drain() == [7, 8, 9]


def test_a_full_blocking_queue_gives_up_when_stopped() -> None:
    q: TransitionQueue[int] = TransitionQueue(1, "block")
    stop = threading.Event()
    assert q.put(1, stop)
    beats = []
    stop_after_one_wait = lambda: (beats.append(1), stop.set())  # noqa: E731 - stop from inside the wait
    assert q.put(2, stop, on_wait=stop_after_one_wait) is False
    assert beats and q.drain() == [1] and q.dropped == 0


def test_queue_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="expected one of"):
        TransitionQueue(2, "drop_newest")
    with pytest.raises(ValueError, match=">= 1"):
        TransitionQueue(0)


def _gate(**kw: object) -> RatioGate:
    args = dict(total_env_steps=1000, num_envs=1, learning_starts=100, utd_ratio=2.0, train_freq=None,
                tolerance=0.1, min_lead=10)
    args.update(kw)
    return RatioGate(**args)  # type: ignore[arg-type]  # the defaults, overridden by keyword per test


def test_gate_holds_collectors_until_the_learner_catches_up() -> None:
    gate, stop = _gate(), threading.Event()
    assert gate.reserve(100, stop) == (0, 100)  # before learning_starts nothing is owed
    gate.add(ingested=100)
    assert gate.updates_due() == 2  # the step reaching learning_starts earns updates, as in the SyncTrainer
    # The next batch would put the learner 10+ transitions behind: the collector must wait.
    waited = []
    stop_while_waiting = lambda: (waited.append(1), stop.set())  # noqa: E731 - stop from inside the wait
    assert gate.reserve(10, stop, stop_while_waiting)[1] == 0 and waited
    stop.clear()
    gate.add(updates=2)
    assert gate.reserve(10, stop) == (100, 10)


def test_gate_waits_for_due_model_trainings_and_stops_at_the_budget() -> None:
    gate, stop = _gate(utd_ratio=0.0, train_freq=50, learning_starts=0, total_env_steps=155), threading.Event()
    assert gate.reserve(50, stop) == (0, 50)
    gate.add(ingested=50)
    assert gate.trainings_due() == 1
    assert gate.reserve(50, stop) == (50, 50)  # one training may be in flight while collection goes on
    gate.add(ingested=50)
    assert gate.reserve(50, stop, stop.set)[1] == 0  # two are owed: wait
    stop.clear()
    gate.add(trainings=1)
    assert gate.reserve(50, stop) == (100, 50)
    gate.add(ingested=50, trainings=1)
    assert gate.reserve(50, stop) == (150, 5)  # only what is left of the budget
    assert gate.reserve(50, stop) == (155, 0) and gate.budget_spent


def test_weight_store_versions_and_rejects_device_tensors() -> None:
    import torch

    store = WeightStore()
    assert store.version == 0 and store.latest() is None
    assert store.publish({"w": torch.zeros(2)}) == 1
    assert store.publish({"w": torch.ones(2)}) == 2
    latest = store.latest()
    assert latest is not None and latest.version == 2 and latest.snapshot["w"].sum() == 2
    assert store.published_at(1) is not None and store.published_at(0) is None
    meta = torch.zeros(2, device="meta")
    with pytest.raises(HandoffError, match="CPU tensors only"):
        store.publish({"actor": {"w": meta}})
