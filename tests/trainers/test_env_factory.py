"""A trainer's ``env_factory`` takes what ``env.factory`` takes (the env is wrapped by its type), on every trainer,
and a run trained with one resumes with it.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from envs.adapters.gymnasium_vector import GymnasiumVecEnv
from mbpo import cli
from mbpo.config import Config, ConfigError
from mbpo.errors import MbpoError, RemoteMbpoError
from mbpo.trainers import AsyncTrainer, make_trainer, resume_trainer
from tests.conftest import TRAINER_RUNS
from tests.runtime.conftest import faulty

pytestmark = [pytest.mark.timeout(120)]


def gymnasium_vector_env(collector_id: int, incarnation: int, seed: int) -> gym.vector.VectorEnv:
    """A collector's env as gymnasium builds it (module level: a collector process imports it)."""
    return gym.make_vec("Pendulum-v1", num_envs=1,
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})


def not_an_env(collector_id: int, incarnation: int, seed: int) -> Any:
    return {"obs": 0}


@pytest.mark.parametrize("trainer_run", ["sync", "thread", "process"])  # a Ray actor builds its env as a child does
def test_a_gymnasium_vector_env_from_env_factory_trains_on_every_trainer(
        tiny_config: Callable[..., Config], thread_baseline: int, trainer_run: str) -> None:
    cfg = tiny_config(*TRAINER_RUNS[trainer_run])
    trainer = make_trainer(cfg, cfg.run_dir, env_factory=gymnasium_vector_env)
    row = trainer.run()
    assert row["env_steps"] == 384 and len(trainer.buffer) == 384
    assert isinstance(trainer.env, GymnasiumVecEnv) or trainer_run in ("process", "ray")  # children build theirs


@pytest.mark.filterwarnings("ignore:Pendulum-v1 cannot save its simulator state")  # gymnasium's: new episodes
@pytest.mark.parametrize("trainer_run", ["sync", "thread"])
def test_a_run_trained_with_an_env_factory_resumes_with_it(
        tiny_config: Callable[..., Config], thread_baseline: int, trainer_run: str) -> None:
    cfg = tiny_config(*TRAINER_RUNS[trainer_run], "total_env_steps=256", "checkpoint.every=128")
    make_trainer(cfg, cfg.run_dir, env_factory=gymnasium_vector_env).run()
    trainer = resume_trainer(cfg.run_dir, ["total_env_steps=384"], env_factory=gymnasium_vector_env)
    assert isinstance(trainer.env, GymnasiumVecEnv) and trainer.env_steps == 256
    assert trainer.run()["env_steps"] == 384


def pendulum_renamed(collector_id: int, incarnation: int, seed: int) -> gym.vector.VectorEnv:
    """gymnasium_vector_env by another name: a factory the user renamed or moved since the run started."""
    return gymnasium_vector_env(collector_id, incarnation, seed)


def four_pendulums(collector_id: int, incarnation: int, seed: int) -> gym.vector.VectorEnv:
    return gym.make_vec("Pendulum-v1", num_envs=4,
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})


def four_for_collector_1(collector_id: int, incarnation: int, seed: int) -> gym.vector.VectorEnv:
    """Collector 0's env fits env.num_envs=1 (the one the trainer builds first); collector 1's does not."""
    return (four_pendulums if collector_id == 1 else gymnasium_vector_env)(collector_id, incarnation, seed)


@pytest.mark.parametrize("factory", [four_pendulums, four_for_collector_1], ids=["every-collector", "collector-1"])
def test_an_env_factory_that_builds_another_number_of_envs_than_the_config_is_one_error(
        tiny_config: Callable[..., Config], thread_baseline: int, trainer_run: str,
        factory: Callable[..., gym.vector.VectorEnv]) -> None:
    """The run counts env.num_envs envs per collector: 4 envs under env.num_envs=1 trained with a gate and rates
    four times off (the thread backend), or crashed on resume at the first broadcast of a per-env tensor. Every
    collector's env is held to it, wherever it is built (the trainer, a thread, a child process, a Ray actor).
    """
    if trainer_run == "sync" and factory is four_for_collector_1:
        pytest.skip("the sync trainer has collector 0 alone")
    cfg = tiny_config(*TRAINER_RUNS[trainer_run], "env.num_envs=1", "runtime.num_collectors=2")
    cid = 0 if factory is four_pendulums else 1
    message = (rf"env_factory tests.trainers.test_env_factory:{factory.__name__} built 4 envs for collector {cid}; "
               r"expected env.num_envs=1, .*: build that many, or start the run with env.num_envs=4")
    with pytest.raises(MbpoError, match=message):
        make_trainer(cfg, cfg.run_dir, env_factory=factory).run()
    # before anything ran; collector 1 may fail after collector 0 delivered (what it trained is checkpointed)
    assert factory is four_for_collector_1 or not Path(cfg.run_dir, "checkpoints").exists()


@pytest.mark.filterwarnings("ignore:Pendulum-v1 cannot save its simulator state")
def test_a_run_trained_with_an_env_factory_is_not_resumed_on_the_configs_env(
        tiny_config: Callable[..., Config], thread_baseline: int, trainer_run: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The config names the same task (Pendulum-v1), so only the checkpoint can tell: resumed from the command
    line, the run is one error line naming the factory and exit 2, and its checkpoints stay as they were.
    """
    cfg = tiny_config(*TRAINER_RUNS[trainer_run], "total_env_steps=256", "checkpoint.every=128",
                      "runtime.num_collectors=1")  # what the checkpoint says, not how many collected it
    make_trainer(cfg, cfg.run_dir, env_factory=gymnasium_vector_env).run()
    checkpoints = {p.name: p.stat().st_mtime_ns for p in Path(cfg.run_dir, "checkpoints").iterdir()}
    capsys.readouterr()
    assert cli.main(["resume", str(cfg.run_dir), "total_env_steps=384"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {cfg.run_dir} trained on the envs of env_factory tests.trainers.test_env_factory:"
                      "gymnasium_vector_env, passed from Python; expected that factory to resume it, got none (the "
                      "run would build env.id='Pendulum-v1' instead): resume it from Python with the factory it "
                      "trained with, mbpo.trainers.resume_trainer(run_dir, env_factory=...)"]
    assert {p.name: p.stat().st_mtime_ns for p in Path(cfg.run_dir, "checkpoints").iterdir()} == checkpoints


@pytest.mark.filterwarnings("ignore:Pendulum-v1 cannot save its simulator state")
def test_a_run_resumes_only_on_the_kind_of_env_it_trained_on_and_a_renamed_factory_is_one_line(
        tiny_config: Callable[..., Config], capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tiny_config("trainer=sync", "total_env_steps=128", "checkpoint.every=64")
    make_trainer(cfg, cfg.run_dir).run()
    with pytest.raises(ConfigError, match=r"trained on env.id='Pendulum-v1', built from its config; expected no "
                                          r"env_factory to resume it, got tests.trainers.test_env_factory:"
                                          r"gymnasium_vector_env: resume it without one"):
        resume_trainer(cfg.run_dir, ["total_env_steps=192"], env_factory=gymnasium_vector_env)
    factory_run = tiny_config("trainer=sync", "total_env_steps=128", "checkpoint.every=64",
                              f"run_dir={cfg.run_dir}_factory")
    make_trainer(factory_run, factory_run.run_dir, env_factory=gymnasium_vector_env).run()
    capsys.readouterr()
    trainer = resume_trainer(factory_run.run_dir, ["total_env_steps=192"], env_factory=pendulum_renamed)
    assert (f"[mbpo] resuming {factory_run.run_dir} with env_factory tests.trainers.test_env_factory:pendulum_renamed; "
            "it trained with tests.trainers.test_env_factory:gymnasium_vector_env") in capsys.readouterr().err
    assert trainer.run()["env_steps"] == 192


def test_a_factory_is_named_by_what_tells_it_apart() -> None:
    """A checkpoint names the factory a run trained with: two partials of one function are two factories."""
    from mbpo.runtime.env_builder import factory_name

    here = "tests.trainers.test_env_factory"
    assert factory_name(gymnasium_vector_env) == f"{here}:gymnasium_vector_env"
    assert factory_name(functools.partial(gymnasium_vector_env, 0, seed=3)) == (
        f"functools.partial({here}:gymnasium_vector_env, 0, seed=3)")
    assert factory_name(faulty("exit", {0})) == "envs.faults:FaultyFactory"  # a callable object: its class


def test_an_env_factory_that_returns_no_env_is_named_with_what_it_returned(
        tiny_config: Callable[..., Config]) -> None:
    cfg = tiny_config()
    with pytest.raises(ConfigError, match=r"env_factory tests.trainers.test_env_factory:not_an_env returned "
                                          r"builtins.dict; expected an envs.VecEnv, an rsl_rl VecEnv"):
        AsyncTrainer(cfg, cfg.run_dir, env_factory=not_an_env)


def env_for_collector_0_only(collector_id: int, incarnation: int, seed: int) -> Any:
    """The trainer's env (it asks as collector 0) and collector 0's are envs; collector 1's is not."""
    return gymnasium_vector_env(collector_id, incarnation, seed) if collector_id == 0 else not_an_env(0, 0, seed)


@pytest.mark.reliability
@pytest.mark.parametrize("backend", ["thread", "process", "ray"])
def test_a_collector_that_meets_the_users_mistake_stops_the_run_without_a_restart(
        backend: str, tiny_config: Callable[..., Config], thread_baseline: int,
        request: pytest.FixtureRequest) -> None:
    """A user's mistake (an MbpoError: here the factory's) met in a collector is raised at once on every backend,
    as an env fault is: a restarted collector would meet it again, three restarts later.
    """
    if backend == "ray":
        request.getfixturevalue("module_ray")
    cfg = tiny_config(*TRAINER_RUNS[backend], "runtime.num_collectors=2", "runtime.max_restarts=3")
    built: list[AsyncTrainer] = []
    with pytest.raises(MbpoError, match=r"env_factory tests.trainers.test_env_factory:env_for_collector_0_only "
                                        r"returned builtins.dict; expected an envs.VecEnv") as info:
        built.append(make_trainer(cfg, cfg.run_dir, env_factory=env_for_collector_0_only))  # type: ignore[arg-type]
        built[0].run()  # a thread collector builds its env with the trainer, a process or an actor when it starts
    assert backend == "thread" or built[0].pool.restarts == 0
    assert isinstance(info.value, ConfigError if backend == "thread" else RemoteMbpoError)
    assert backend == "thread" or "collector 1" in info.value.detail, info.value.detail  # where: kept for the log
    del info, built  # the trainer and its actor handles, released while the Ray they belong to still runs
    gc.collect()


class SimulatorConfigError(RuntimeError):
    """A simulator's own error, named as mbpo's ConfigError is (set below): not the user's mistake to mbpo."""


SimulatorConfigError.__name__ = SimulatorConfigError.__qualname__ = "ConfigError"


def env_whose_collector_1_fails_once(collector_id: int, incarnation: int, seed: int) -> Any:
    if (collector_id, incarnation) == (1, 0):
        raise SimulatorConfigError("the simulator's licence server is busy")
    return gymnasium_vector_env(collector_id, incarnation, seed)


@pytest.mark.reliability
@pytest.mark.parametrize("backend", ["process", "ray"])
def test_an_error_that_only_shares_a_name_with_a_users_mistake_is_restarted(
        backend: str, tiny_config: Callable[..., Config], thread_baseline: int,
        request: pytest.FixtureRequest) -> None:
    """A collector process or actor says whether its error is an MbpoError; its type's name alone does not."""
    if backend == "ray":
        request.getfixturevalue("module_ray")
    cfg = tiny_config(*TRAINER_RUNS[backend], "runtime.num_collectors=2", "runtime.max_restarts=3")
    trainer = make_trainer(cfg, cfg.run_dir, env_factory=env_whose_collector_1_fails_once)
    row = trainer.run()
    assert row["collector_restarts"] == 1 and row["env_steps"] == 384
    del trainer
    gc.collect()
