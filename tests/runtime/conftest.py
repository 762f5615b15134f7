"""A tiny async run: small nets, a few hundred env steps, seconds per test."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

import envs
from envs.faults import FaultyEnv
from mbpo.config import Config, load_config

TINY = [
    "total_env_steps=384", "eval_every=10000", "eval_episodes=2", "log_every=128", "progress=false",
    "agent.learning_starts=64", "agent.batch_size=32", "agent.sac.hidden_sizes=[32,32]",
    "agent.dqn.hidden_sizes=[32,32]", "runtime.collection_batch_size=32", "runtime.num_collectors=2",
    "runtime.publish_every=8", "runtime.collector_timeout_s=5", "runtime.shutdown_timeout_s=5",
    "checkpoint.every=100000", "device=cpu",
]


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., Config]:
    def make(*overrides: str, config: str | None = None) -> Config:
        cfg = load_config(config, [*TINY, f"run_dir={tmp_path / 'run'}", *overrides])
        return cfg

    return make


def faulty(fault: str, collectors: set[int], at_step: int = 3, **kw: object) -> Callable[[int, int, int], envs.VecEnv]:
    """An env_factory whose first incarnation of the chosen collectors gets ``fault`` at ``at_step``."""

    def factory(collector_id: int, incarnation: int, seed: int, env_id: str = "Pendulum-v1") -> envs.VecEnv:
        env = envs.make(env_id, 1, device="cpu", seed=seed)
        if collector_id in collectors and incarnation == 0:
            return FaultyEnv(env, fault, at_step=at_step, **kw)  # type: ignore[arg-type]
        return env

    return factory


@pytest.fixture
def thread_baseline() -> Iterator[int]:
    """The thread count before the test; the test must end with the same count."""
    before = threading.active_count()
    yield before
    assert threading.active_count() == before, [t.name for t in threading.enumerate()]
