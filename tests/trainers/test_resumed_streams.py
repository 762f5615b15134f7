"""A resumed async run's collectors draw new streams, not the ones the run began with."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from mbpo.config import Config
from mbpo.trainers import AsyncTrainer

pytestmark = [pytest.mark.timeout(120)]


def test_a_resumed_run_collects_no_transition_it_collected_before(
        tiny_config: Callable[..., Config], thread_baseline: int, every_backend: str) -> None:
    """Collector seeds come from (seed, collector, restart): a resume drew the run's first reset states and random
    actions again, so before learning_starts its transitions were the buffer's first ones over again. One collector
    is enough: every collector's streams take the resume into account the same way, and on Ray each is an actor.
    """
    cfg = tiny_config(f"runtime.backend={every_backend}", "total_env_steps=128", "agent.learning_starts=10000",
                      "checkpoint.every=128", "runtime.num_collectors=1")
    AsyncTrainer(cfg, cfg.run_dir).run()
    trainer = AsyncTrainer.resume(cfg.run_dir, ["total_env_steps=256"])
    assert trainer.run()["env_steps"] == 256
    rows = torch.cat([trainer.buffer[:256]["obs"], trainer.buffer[:256]["action"]], dim=-1)
    before, after = rows[:128], rows[128:]
    repeated = (after[:, None, :] == before[None, :, :]).all(-1).any(-1)
    assert int(repeated.sum()) == 0
