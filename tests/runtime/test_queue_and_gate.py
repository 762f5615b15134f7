"""The bounded queue and the ratio gate, on their own."""

from __future__ import annotations

import itertools
import threading

import pytest

from mbpo.device.checks import HandoffError
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


def test_an_item_put_without_dropping_waits_for_room_even_under_drop_oldest() -> None:
    """A collector's last open n-step windows (drop=False) never evict a queued batch of real env steps."""
    dropped: list[int] = []
    q: TransitionQueue[int] = TransitionQueue(1, "drop_oldest", on_drop=dropped.append)
    stop = threading.Event()
    assert q.put(1, stop)
    stop_after_one_wait = lambda: stop.set()  # noqa: E731 - stop from inside the wait
    assert q.put(2, stop, on_wait=stop_after_one_wait, drop=False) is False
    assert q.drain() == [1] and q.dropped == 0 and dropped == []
    assert q.put(3, stop, drop=False) and q.drain() == [3]  # with room it is put, stopped or not


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


@pytest.mark.parametrize("learning_starts, num_envs", [(10, 4), (12, 4), (0, 4), (1, 4), (3, 1), (100, 64)])
def test_the_gate_earns_the_sync_trainers_updates_after_every_vector_step(learning_starts: int, num_envs: int) -> None:
    """The SyncTrainer counts whole vector steps from the first one that ends at or past learning_starts;
    the gate must earn the same updates after every step, whatever learning_starts' remainder.
    """
    gate = _gate(num_envs=num_envs, learning_starts=learning_starts, utd_ratio=0.5)
    env_steps = learning_env_steps = 0
    for _ in range(20):
        env_steps += num_envs
        if env_steps >= learning_starts:  # the SyncTrainer's rule (sync_trainer.py)
            learning_env_steps += num_envs
        assert gate.updates_earned(env_steps) == int(learning_env_steps * 0.5), env_steps


def test_the_lead_stops_growing_at_max_lead_but_never_drops_below_one_batch() -> None:
    """ratio_tolerance alone lets collectors run 10% of the run ahead; max_lead caps it in transitions."""
    unbounded, capped = _gate(total_env_steps=100_000), _gate(total_env_steps=100_000, max_lead=256)
    tiny_cap = _gate(total_env_steps=100_000, max_lead=4)  # below one batch (min_lead=10)
    for gate in (unbounded, capped, tiny_cap):
        gate.reserved = 50_100  # 50,000 transitions that earn updates
    assert (unbounded.lead(), capped.lead(), tiny_cap.lead()) == (5_000, 256, 10)
    for gate in (unbounded, capped, tiny_cap):
        gate.reserved = 1_100  # early in a run the relative bound is the tighter one
    assert (unbounded.lead(), capped.lead()) == (100, 100)
    # What the cap means to a collector: with the learner 300 transitions' updates behind, it waits.
    gate, stop = _gate(total_env_steps=100_000, max_lead=256), threading.Event()
    gate.reserved = 50_100  # taken and ingested, the learner 300 transitions' worth of updates behind
    gate.add(ingested=50_100, updates=gate.updates_earned(50_100 - 300))
    assert gate.reserve(10, stop, stop.set)[1] == 0
    stop.clear()
    gate.add(updates=gate.updates_earned(50_100 + 10 - 256) - gate.updates)  # now within 256 of the request
    assert gate.reserve(10, stop) == (50_100, 10)


def test_model_trainings_are_one_per_vector_step_that_crosses_a_multiple_of_train_freq() -> None:
    """The sync trainer fits once after a vector step however many multiples of train_freq it crossed; the
    count both trainers budget by says the same, vector step by vector step (a wide step earns one, not many).
    """
    from mbpo.model_based.budgets import budget_start, trainings_earned

    for num_envs, train_freq, learning_starts in itertools.product([1, 3, 8, 16, 50, 64, 100], [1, 8, 16, 50],
                                                                    [0, 10, 64, 120]):
        start = budget_start(train_freq, learning_starts)
        fits = 0
        for k in range(1, 40):
            before, after = (k - 1) * num_envs, k * num_envs
            fits += any(m > start for m in range(after - after % train_freq, before, -train_freq))  # one crossed
            assert trainings_earned(after, train_freq, start, num_envs) == fits, (num_envs, train_freq,
                                                                                  learning_starts, k)


def test_model_trainings_start_at_learning_starts() -> None:
    """The paper's code fits its first model right after the random steps, then every train_freq."""
    from mbpo.model_based.budgets import budget_start, trainings_earned

    def earned(steps: int, train_freq: int, learning_starts: int) -> int:
        return trainings_earned(steps, train_freq, budget_start(train_freq, learning_starts))

    assert [earned(s, 250, 5000) for s in (249, 4999, 5000, 5249, 5250, 30_000)] == [0, 0, 1, 1, 2, 101]
    assert [earned(s, 250, 0) for s in (249, 250, 500)] == [0, 1, 2]  # from the first multiple
    assert [earned(s, 50, 120) for s in (149, 150, 200)] == [0, 1, 2]  # 150: first multiple >= 120
    gate = _gate(utd_ratio=0.0, train_freq=250, learning_starts=5000, total_env_steps=6000)
    gate.ingested = 4999
    assert gate.trainings_due() == 0
    gate.ingested = 5000
    assert gate.trainings_due() == 1


def test_gate_waits_for_due_model_trainings_and_stops_at_the_budget() -> None:
    gate, stop = _gate(utd_ratio=0.0, train_freq=50, learning_starts=0, total_env_steps=155), threading.Event()
    assert gate.reserve(50, stop) == (0, 50)
    gate.add(ingested=50)
    assert gate.trainings_due() == 1
    assert gate.reserve(50, stop) == (50, 50)  # one training may be in flight while collection goes on
    gate.add(ingested=50)
    assert gate.reserve(50, stop, stop.set)[1] == 0  # two are owed: wait
    assert gate.waits == 1
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


def test_with_max_lag_collection_goes_on_while_that_many_trainings_are_owed_and_a_fit_counts_for_them() -> None:
    """model.max_lag=3: the learner is not stopped for a slow model until three trainings are owed; the fit that
    then ends trained on all the rows so far, so it counts for every training they earned.
    """
    gate, stop = _gate(utd_ratio=0.0, train_freq=50, learning_starts=0, total_env_steps=1000, max_lag=3), \
        threading.Event()
    for first in range(0, 200, 50):
        assert gate.reserve(50, stop) == (first, 50)  # one, two, three trainings owed: collection goes on
        gate.add(ingested=50)
    assert gate.trainings_due() == 4 and gate.reserve(50, stop, stop.set)[1] == 0  # four owed: wait
    stop.clear()
    assert gate.trainings_covered(200) == 4  # a fit on the first 200 transitions does the four
    gate.add(trainings=gate.trainings_covered(200))
    assert gate.trainings_due() == 0 and gate.reserve(50, stop) == (200, 50)


def test_by_default_a_fit_counts_for_one_training() -> None:
    gate = _gate(utd_ratio=0.0, train_freq=50, learning_starts=0)
    gate.add(ingested=150)
    assert gate.trainings_due() == 3 and gate.trainings_covered(150) == 1  # the paper's rule: one fit, one training


def test_a_request_held_back_counts_one_wait_however_many_wake_ups_it_takes() -> None:
    """gate_waits counts the requests a collector had to wait on, not the 50 ms polls of one wait."""
    gate, stop = _gate(utd_ratio=0.0, train_freq=50, learning_starts=0, total_env_steps=1000), threading.Event()
    gate.reserve(50, stop)
    gate.add(ingested=50)
    gate.reserve(50, stop)
    gate.add(ingested=50)  # two trainings owed: the next request waits
    beats: list[None] = []

    def heartbeat() -> None:  # called once per wake-up: let five pass, then release the gate
        beats.append(None)
        if len(beats) == 5:
            gate.add(trainings=1)

    assert gate.reserve(50, stop, heartbeat) == (100, 50)
    assert len(beats) == 5 and gate.waits == 1
