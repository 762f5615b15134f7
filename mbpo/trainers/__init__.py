"""Training loops: AsyncTrainer (collectors, model thread and learner overlap) and SyncTrainer
(the deterministic reference).

May use: everything below the face (runtime, run records, model-based, learners, data, ...).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from mbpo.config import Config, RuntimeConfig, checked_copy
from mbpo.config.schema import as_override
from mbpo.config.unread import note_unread_overrides
from mbpo.trainers.async_trainer import AsyncTrainer
from mbpo.trainers.base import EnvFactory, Trainer
from mbpo.trainers.resume import RunAlreadyDone, load_for_resume
from mbpo.trainers.sync_trainer import SyncTrainer

__all__ = [
    "AsyncTrainer", "SyncTrainer", "Trainer", "EnvFactory", "RunAlreadyDone", "trainer_class", "make_trainer",
    "resume_trainer",
]


def trainer_class(config: Config) -> type[Trainer]:
    """The trainer ``config.trainer`` names."""
    return AsyncTrainer if config.trainer == "async" else SyncTrainer


def resume_trainer(run_dir: str | Path, overrides: list[str] | None = None, trust: bool = False,
                   debug: bool | None = None, env_factory: EnvFactory | None = None) -> Trainer:
    """Resume ``run_dir`` with the trainer its checkpoint's config names (the checkpoint is read once);
    ``debug``: debug mode from here (None: as the run was); ``env_factory``: the one the run trained with.
    """
    point = load_for_resume(run_dir, overrides, trust, debug)
    return trainer_class(point.config).resume(run_dir, overrides, trust, point=point, env_factory=env_factory)


def make_trainer(config: Config, run_dir: str | Path | None, overrides: list[str] | None = None,
                 env_factory: EnvFactory | None = None) -> Trainer:
    """A new run's trainer (a resumed run keeps its checkpoint's config: :func:`resume_trainer`); ``overrides``:
    the command line's, for the note on those its config leaves unread; ``env_factory``: the training envs from
    Python (see :class:`~mbpo.trainers.base.Trainer`).
    """
    if callable(overrides):
        raise TypeError("make_trainer's third argument is overrides, the command line's key=value list; pass the "
                        "factory by name: make_trainer(config, run_dir, env_factory=...)")
    config = checked_copy(config)  # what is raised or resolved below stays out of the caller's object
    raise_learning_starts_for_n_step(config)
    note_settings_without_effect(config, overrides or [])
    return trainer_class(config)(config, run_dir, env_factory)


def raise_learning_starts_for_n_step(config: Config) -> None:
    """With ``agent.n_step`` = n, a collector's first transitions reach the replay buffer when its first
    windows close, after n vector steps: updates that start earlier sample an empty buffer. A new run's
    updates start no earlier than when some collector must have closed one (the pigeonhole bound over the
    async trainer's collectors, each with env.num_envs envs; the sync trainer is one).
    """
    n_step, num_envs = config.agent.n_step, config.env.num_envs
    collectors = 1 if config.trainer == "sync" or config.debug else config.runtime.num_collectors
    needed = ((n_step - 1) * collectors + 1) * num_envs
    if n_step > 1 and config.agent.learning_starts < needed:
        print(f"[mbpo] agent.learning_starts={config.agent.learning_starts:,} raised to {needed:,}: with "
              f"agent.n_step={n_step}, a collector's first transitions reach the replay buffer after {n_step} "
              f"vector steps of env.num_envs={num_envs:,} ({collectors} collector(s)), and updates need some "
              "to sample", file=sys.stderr)
        config.agent.learning_starts = needed


def note_settings_without_effect(config: Config, overrides: list[str]) -> None:
    """Say so in one line where a new run sets keys its trainer does not read: a sync run steps its one env in
    its own loop (of runtime.*, it reads nonfinite alone); an async run's threads take their torch threads from
    runtime.*_threads, not torch_threads; and the command line's keys of a part that is off (mbpo.config.unread).
    """
    note_unread_overrides(config, overrides)
    if config.trainer == "sync":
        unused = [f"{key}={as_override(value)}" for key, value in _changed(config.runtime, RuntimeConfig(), "runtime.")
                  if key != "runtime.nonfinite"]
        if unused:
            verb = "has" if len(unused) == 1 else "have"
            print(f"[mbpo] note: {', '.join(unused)} {verb} no effect with trainer=sync (one env, stepped by the "
                  "trainer's own loop); trainer=async runs collectors", file=sys.stderr)
    elif config.torch_threads != Config().torch_threads:
        print(f"[mbpo] note: torch_threads={config.torch_threads} has no effect on training with trainer=async: "
              "runtime.learner_threads, runtime.model_threads and runtime.collector_threads set each thread's",
              file=sys.stderr)


def _changed(section: object, default: object, prefix: str) -> list[tuple[str, object]]:
    """``(dotted key, value)`` of each leaf of the config ``section`` that differs from ``default``."""
    changed: list[tuple[str, object]] = []
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        value, was = getattr(section, f.name), getattr(default, f.name)
        if dataclasses.is_dataclass(value):
            changed += _changed(value, was, f"{prefix}{f.name}.")
        elif value != was:
            changed.append((f"{prefix}{f.name}", value))
    return changed
