"""The model thread's busy seconds count a cycle while it runs: a metrics row in the middle of a long fit gets
its share (``model_busy`` never above 1 in the row after), and a finished cycle adds nothing more.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mbpo.runtime.model_worker import ModelWorker

pytestmark = pytest.mark.timeout(30)


class _BlockingModel:
    """Just what one ``_cycle`` reads of ModelBased; ``train`` waits until released."""

    device = torch.device("cpu")
    rollouts_owed = False
    last_train_env_steps = 0
    trainings_folded = 0

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def fresh_rows(self, real: Any) -> None:
        return None

    def start_rows(self, real: Any) -> None:
        return None

    def train(self, *args: Any, **kwargs: Any) -> None:
        self.entered.set()
        assert self.release.wait(20)

    def rollout(self, *args: Any, **kwargs: Any) -> None:
        pass


def test_busy_seconds_count_the_running_cycle_and_stop_when_it_ends() -> None:
    model = _BlockingModel()
    gate = SimpleNamespace(ingested=8, trainings_covered=lambda env_steps: 1, add=lambda trainings: None)
    weights = SimpleNamespace(latest=lambda: None)
    worker = ModelWorker(model, torch.zeros(8, 3), threading.Lock(), gate, weights, None,  # type: ignore[arg-type]
                         threading.Event(), 1)
    assert worker.busy_s == 0.0
    cycle = threading.Thread(target=worker._cycle)
    cycle.start()
    assert model.entered.wait(20)
    during = worker.busy_s
    assert during > 0.0  # a row logged now counts the fit so far, not all of it in the row after it ends
    model.release.set()
    cycle.join(20)
    done = worker.busy_s
    assert done >= during and worker.busy_s == done  # ended: it grows no more
