"""Where the time goes: every trainer and backend logs env, act, update, model and eval seconds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mbpo.config import Config
from mbpo.trainers import AsyncTrainer, SyncTrainer
from mbpo.trainers.base import TIME_PARTS

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("trainer", ["sync", "thread", "process"])
def test_the_final_row_says_where_the_time_went(tiny_config: Callable[..., Config], trainer: str) -> None:
    cfg = tiny_config("model.enabled=true", "model.rollouts_per_real=2", "model.train_freq=128",
                      "model.hidden_sizes=[16,16]", "model.weight_decay=[0.0,0.0,0.0]", "model.max_epochs=2",
                      "model.epoch_length=32", "eval_every=192", "runtime.num_collectors=1",
                      f"runtime.backend={'thread' if trainer == 'sync' else trainer}")
    run = SyncTrainer(cfg, cfg.run_dir) if trainer == "sync" else AsyncTrainer(cfg, cfg.run_dir)
    row = run.run()
    parts = {part: row[f"time_{part}_s"] for part in TIME_PARTS}
    assert all(seconds > 0 for seconds in parts.values()), parts  # each part ran, and was timed where it ran
    # One collector, so even in the async trainer no part can take longer than the run itself.
    assert max(parts.values()) <= row["wall_s"]
    if trainer == "sync":  # one thread: the parts happen one after another
        assert sum(parts.values()) <= row["wall_s"]
