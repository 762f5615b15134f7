"""Training loops: AsyncTrainer (collectors, model thread and learner overlap) and SyncTrainer
(the deterministic reference).

May use: everything below the face (runtime, run records, model-based, learners, data, ...).
"""

from __future__ import annotations

from pathlib import Path

from mbpo.config import Config
from mbpo.trainers.async_trainer import AsyncTrainer
from mbpo.trainers.base import Trainer
from mbpo.trainers.resume import RunAlreadyDone, load_for_resume
from mbpo.trainers.sync_trainer import SyncTrainer

__all__ = [
    "AsyncTrainer", "SyncTrainer", "Trainer", "RunAlreadyDone", "trainer_class", "make_trainer", "resume_trainer",
]


def trainer_class(config: Config) -> type[Trainer]:
    """The trainer ``config.trainer`` names."""
    return AsyncTrainer if config.trainer == "async" else SyncTrainer


def resume_trainer(run_dir: str | Path, overrides: list[str] | None = None, trust: bool = False) -> Trainer:
    """Resume ``run_dir`` with the trainer its checkpoint's config names (the checkpoint is read once)."""
    point = load_for_resume(run_dir, overrides, trust)
    return trainer_class(point.config).resume(run_dir, overrides, trust, point=point)


def make_trainer(config: Config, run_dir: str | Path) -> Trainer:
    return trainer_class(config)(config, run_dir)
