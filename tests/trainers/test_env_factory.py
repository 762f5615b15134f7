"""``AsyncTrainer(env_factory=...)`` takes what ``env.factory`` takes: the env is wrapped by its type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

from mbpo.config import Config, ConfigError
from mbpo.trainers import AsyncTrainer

pytestmark = [pytest.mark.timeout(120)]


def gymnasium_vector_env(collector_id: int, incarnation: int, seed: int) -> gym.vector.VectorEnv:
    """A collector's env as gymnasium builds it (module level: a collector process imports it)."""
    return gym.make_vec("Pendulum-v1", num_envs=1,
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})


def not_an_env(collector_id: int, incarnation: int, seed: int) -> Any:
    return {"obs": 0}


def test_a_gymnasium_vector_env_from_env_factory_trains_on_every_backend(
        tiny_config: Callable[..., Config], thread_baseline: int, every_backend: str) -> None:
    cfg = tiny_config(f"runtime.backend={every_backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=gymnasium_vector_env)
    row = trainer.run()
    assert row["env_steps"] == 384 and len(trainer.buffer) == 384 and row["collector_restarts"] == 0


def test_an_env_factory_that_returns_no_env_is_named_with_what_it_returned(
        tiny_config: Callable[..., Config]) -> None:
    cfg = tiny_config()
    with pytest.raises(ConfigError, match=r"env_factory tests.trainers.test_env_factory:not_an_env returned "
                                          r"builtins.dict; expected an envs.VecEnv, an rsl_rl VecEnv"):
        AsyncTrainer(cfg, cfg.run_dir, env_factory=not_an_env)
