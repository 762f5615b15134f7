"""Training loops: SyncTrainer (the deterministic reference); the async runtime comes next."""

from mbpo.trainers.sync_trainer import SyncTrainer

__all__ = ["SyncTrainer"]
