"""The replay buffer: torchrl's storage, held in the trainer's process without any cross-process machinery."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from mbpo.data.replay import load_replay_state, make_replay_buffer, replay_state
from mbpo.data.transitions import transitions

pytestmark = pytest.mark.timeout(30)


def batch(n: int, seed: int) -> object:
    g = torch.Generator().manual_seed(seed)
    return transitions(torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g), torch.randn(n, generator=g),
                       torch.randn(n, 3, generator=g), torch.zeros(n, dtype=torch.bool))


def test_a_replay_buffer_creates_no_named_semaphore(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrl keeps its counters in multiprocessing.Values unless compilable: under the spawn start method
    (which importing torchrl makes the default) each holds a named semaphore in /dev/shm for the buffer's life,
    which other processes' leak checks then see, and nothing needs: the buffer never leaves its process.
    A named semaphore registers with multiprocessing's resource tracker: that is what is watched here.
    """
    import multiprocessing.resource_tracker as tracker

    monkeypatch.setattr(mp.context._default_context, "_actual_context", mp.get_context("spawn"))  # as in `mbpo`
    named: list[str] = []
    monkeypatch.setattr(tracker, "register", lambda name, rtype: named.append(f"{rtype} {name}"))
    monkeypatch.setattr(tracker, "unregister", lambda name, rtype: None)  # their finalizers, without the register
    rb = make_replay_buffer(100, "cpu", torch.Generator().manual_seed(0))
    rb.extend(batch(10, 0))
    rb.sample(batch_size=4)
    assert named == []


def test_replay_state_round_trips_with_the_write_cursor() -> None:
    rb = make_replay_buffer(8, "cpu", torch.Generator().manual_seed(0))
    rb.extend(batch(11, 1))  # wrapped: the cursor is not the length
    copy = make_replay_buffer(8, "cpu", torch.Generator().manual_seed(0))
    load_replay_state(copy, replay_state(rb))
    rb.extend(batch(3, 2))
    copy.extend(batch(3, 2))
    assert len(copy) == len(rb) == 8 and torch.equal(copy[:]["obs"], rb[:]["obs"])


def test_a_buffers_first_write_prints_nothing() -> None:
    """torchrl's "Initialized LazyTensorStorage" INFO line went to stdout on every run built from Python. What
    reaches torchrl's handlers is seen by one more handler (its stdout handler holds the stream of its import).
    """
    import logging

    seen: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    torchrl_log = logging.getLogger("torchrl")
    level = torchrl_log.level
    torchrl_log.addHandler(handler)
    torchrl_log.setLevel(logging.INFO)  # torchrl's own level (the CLI's tests lower it in this process)
    try:
        make_replay_buffer(8, "cpu", torch.Generator().manual_seed(0)).extend(batch(2, 0))
        torchrl_log.info("another torchrl line")
    finally:
        torchrl_log.removeHandler(handler)
        torchrl_log.setLevel(level)
    assert seen == ["another torchrl line"]  # the rest of torchrl's log is left as it is
