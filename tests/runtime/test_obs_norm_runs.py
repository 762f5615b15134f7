"""agent.obs_norm in a run: the learner's statistics see every real observation and no model rollout."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from mbpo.config import Config
from mbpo.trainers import AsyncTrainer, SyncTrainer

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("trainer", ["sync", "async"])
def test_trainers_feed_every_real_observation_to_the_statistics(tiny_config: Callable[..., Config],
                                                                trainer: str) -> None:
    cfg = tiny_config("agent.obs_norm=true", "model.enabled=true", "model.rollouts_per_real=2",
                      "model.train_freq=128", "model.hidden_sizes=[16,16]", "model.weight_decay=[0.0,0.0,0.0]",
                      "model.max_epochs=2", "model.epoch_length=32", "runtime.num_collectors=1")
    run = (AsyncTrainer if trainer == "async" else SyncTrainer)(cfg, cfg.run_dir)
    row = run.run()
    norm = run.agent.obs_norm  # type: ignore[attr-defined]
    assert norm.count.item() == row["env_steps"]  # real obs only: no model rollout counted
    pendulum_obs_scale = torch.tensor([1.0, 1.0, 8.0])  # cos, sin, angular velocity bounds
    assert (norm.var.sqrt() < pendulum_obs_scale).all() and (norm.var > 0).all()
