"""Fault injection: collectors that raise, hang or return NaN; a failing model thread."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import envs
from envs.faults import FaultyEnv
from mbpo.config import Config
from mbpo.data.transitions import NEXT_OBS, OBS, REWARD
from mbpo.runtime import collectors
from mbpo.runtime.collectors import CollectorBatch, NonFiniteEnvError
from mbpo.runtime.supervisor import CollectorFailure, WorkerError
from mbpo.trainers import AsyncTrainer
from tests.runtime.conftest import faulty, wait_gone
from tests.runtime.helper_process_env import HangsWithAHelper

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]


def test_a_failed_collector_is_restarted_from_the_newest_weights(
    tiny_config: Callable[..., Config], thread_baseline: int, capsys: pytest.CaptureFixture[str], backend: str,
    no_leaks: None,
) -> None:
    """One collector, so its replacement must collect the rest of the budget (the failed batch's
    reservation is handed back): the run completes, and the replacement acts with published weights.
    """
    cfg = tiny_config("runtime.num_collectors=1", f"runtime.backend={backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("raise", {0}, at_step=100))
    row = trainer.run()
    assert row["collector_restarts"] == 1 and row["env_steps"] == 384 and len(trainer.buffer) == 384
    err = capsys.readouterr().err
    assert "collector 0 failed; restarting it" in err and "InjectedFault: injected fault at step 100" in err
    replacement = trainer.pool.collectors[0]
    assert replacement.incarnation == 1 and replacement.batches >= 1
    assert replacement.policy_version > 1  # it loaded a snapshot the learner published after the start


def test_an_envs_broken_pipe_is_its_error_not_the_trainers_pipe(
    tiny_config: Callable[..., Config], thread_baseline: int, every_backend: str, no_leaks: None
) -> None:
    """A collector process took the env's BrokenPipeError for its own pipe to the trainer: it exited 0 without a
    word, and the run stopped on 'exited with code 0; its traceback is above' over no traceback. Every backend
    reports it as the env's. One collector: the faulty one (each Ray actor's start is seconds of CPU).
    """
    cfg = tiny_config("runtime.max_restarts=0", "runtime.num_collectors=1", "total_env_steps=100000",
                      f"runtime.backend={every_backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("broken_pipe", {0}, at_step=50))
    with pytest.raises(CollectorFailure, match=r"BrokenPipeError.*the simulator's connection broke at step 50"):
        trainer.run()


def test_when_the_restart_budget_is_spent_the_run_stops_with_the_original_traceback(
    tiny_config: Callable[..., Config], thread_baseline: int, backend: str, no_leaks: None
) -> None:
    cfg = tiny_config("runtime.max_restarts=0", "total_env_steps=100000", f"runtime.backend={backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("raise", {0}, at_step=50))
    with pytest.raises(CollectorFailure, match=r"collector 0 failed; restart budget spent \(0/0\)") as info:
        trainer.run()
    cause = info.value.__cause__
    assert cause is not None and "injected fault at step 50" in str(cause)
    # where it was raised, in the collector: its frames (thread) or its traceback's text (process)
    frames = str(cause) + "".join(traceback.format_tb(cause.__traceback__))
    assert "envs/faults.py" in frames and "in step" in frames
    assert list((trainer.run_dir / "checkpoints").glob("ckpt_*.pt"))  # nothing trained is lost


def test_a_hung_collector_is_reported_and_the_run_goes_on(
    tiny_config: Callable[..., Config], thread_baseline: int, capsys: pytest.CaptureFixture[str], backend: str,
    no_leaks: None,
) -> None:
    """A thread cannot be killed: it is abandoned and the others collect the rest. A process is terminated
    and replaced (a restart), and its in-flight reservation goes back to the gate. The run lasts until the
    hang was handled and collector 0 delivered after it (total_env_steps is only a bound): on a loaded
    machine collector 1 can start so late that collector 0 would take a short budget alone.
    """
    cfg = tiny_config("runtime.collector_timeout_s=3", f"runtime.backend={backend}", "total_env_steps=200000")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("hang", {1}, at_step=40))
    ingest, handled = trainer._ingest, []

    def stop_after_the_hang(item: CollectorBatch) -> None:
        ingest(item)
        if handled and item.collector_id == 0:
            trainer.stop_event.set()  # the run went on after the hang: all the test needs
        elif trainer.pool.hung or trainer.pool.restarts:
            handled.append(True)

    trainer._ingest = stop_after_the_hang  # type: ignore[method-assign]  # a spy in place of the bound method
    row = trainer.run()
    assert handled and len(trainer.buffer) == row["env_steps"] < 200000
    assert "collector 1 is hung" in capsys.readouterr().err
    if backend == "thread":  # hung at the row while its thread runs: closing its env releases this hang
        assert trainer.pool.hung == {1} and row["collector_restarts"] == 0  # abandoned, not replaced
        # not hung at the row: abandoning it closed its env, which ends this hang (test_collector_pool: one that
        # ignores the close stays counted while it runs)
        assert row["hung_collectors"] == 0 and not trainer.pool.collectors[1].is_alive()
    else:
        assert row["hung_collectors"] == 0 and row["collector_restarts"] == 1
        assert trainer.pool.collectors[1].incarnation == 1  # replaced (collector 0 may have collected the rest)


def test_a_hung_collectors_own_processes_end_with_it(
    tiny_config: Callable[..., Config], thread_baseline: int, every_backend: str, tmp_path: Path, no_leaks: None,
) -> None:
    """A hung collector's env can have processes of its own (a simulator's server, an ``AsyncVectorEnv``'s
    workers). A process or an actor ended by force never closes its env, and those processes, orphaned, outlived
    the run; a hung thread's env is closed. On every backend, every helper process is gone once the run is.
    """
    pid_dir = tmp_path / "helpers"
    pid_dir.mkdir()
    cfg = tiny_config("runtime.collector_timeout_s=3", f"runtime.backend={every_backend}", "total_env_steps=200000")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=HangsWithAHelper(str(pid_dir)))
    ingest, handled = trainer._ingest, []

    def stop_after_the_hang(item: CollectorBatch) -> None:
        ingest(item)
        if handled and item.collector_id == 0:
            trainer.stop_event.set()
        elif trainer.pool.hung or trainer.pool.restarts:
            handled.append(True)

    trainer._ingest = stop_after_the_hang  # type: ignore[method-assign]  # a spy in place of the bound method
    trainer.run()
    helpers = {int(p.name) for p in pid_dir.iterdir()}
    assert handled and len(helpers) >= 2  # collector 0's and the hung collector 1's, at least
    assert wait_gone(helpers, timeout_s=10) == set(), "a collector's helper process outlived the run"


def test_nan_from_an_env_raises_naming_env_index_and_field(
    tiny_config: Callable[..., Config], thread_baseline: int, backend: str, no_leaks: None
) -> None:
    cfg = tiny_config("total_env_steps=100000", f"runtime.backend={backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("nan_reward", {0}, at_step=20))
    with pytest.raises(NonFiniteEnvError) as info:  # not restarted: a new env would meet the same value
        trainer.run()
    assert "collector 0: env index 0 returned a non-finite reward" in str(info.value)
    assert "runtime.nonfinite=drop" in str(info.value)
    assert trainer.pool.restarts == 0


@pytest.mark.parametrize("fault", ["nan_obs", "nan_reward"])
def test_dropped_nonfinite_transitions_are_counted_and_never_stored(
    tiny_config: Callable[..., Config], thread_baseline: int, fault: str, backend: str, no_leaks: None
) -> None:
    """The run lasts until both collectors are past their faulty step (total_env_steps is only a bound): on a
    loaded machine a spawned child can start so late that the other collector takes a short budget alone.
    """
    cfg = tiny_config("runtime.nonfinite=drop", f"runtime.backend={backend}", "total_env_steps=200000")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty(fault, {0, 1}, at_step=30))
    steps = {0: 0, 1: 0}
    ingest = trainer._ingest

    def spy(item: CollectorBatch) -> None:
        ingest(item)
        steps[item.collector_id] += item.env_steps
        if min(steps.values()) >= 64:  # both well past step 30
            trainer.stop_event.set()

    trainer._ingest = spy  # type: ignore[method-assign]  # a spy in place of the bound method
    row = trainer.run()
    # One bad transition per collector; after a NaN observation that env is reset, so the next
    # transition starts from a valid state instead of acting on NaN.
    assert row["nonfinite_dropped"] == 2
    data = trainer.buffer[: len(trainer.buffer)]
    assert len(trainer.buffer) == trainer.env_steps - row["nonfinite_dropped"]
    for key in (OBS, NEXT_OBS, REWARD):
        assert bool(torch.isfinite(data[key]).all()), key


def test_a_nan_observation_resets_only_the_poisoned_env(
    tiny_config: Callable[..., Config], thread_baseline: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runtime.nonfinite=drop restarts just the env that returned NaN (env 2, at vector step 30): the
    healthy envs of the same vector env keep their episodes, and their returns accumulate on.
    """
    cfg = tiny_config("runtime.nonfinite=drop", "runtime.num_collectors=1", "env.num_envs=4")
    limit, nan_at, poisoned = 40, 30, 2

    def factory(collector_id: int, incarnation: int, seed: int) -> envs.VecEnv:
        env = envs.make("Pendulum-v1", 4, device="cpu", seed=seed)
        env.max_episode_steps = limit  # episodes end within the run's 96 vector steps
        return FaultyEnv(env, "nan_obs", at_step=nan_at, env_index=poisoned)

    batches: list[CollectorBatch] = []

    @dataclass
    class Recorded(CollectorBatch):
        def __post_init__(self) -> None:
            batches.append(self)

    monkeypatch.setattr(collectors, "CollectorBatch", Recorded)
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=factory)
    row = trainer.run()
    assert row["nonfinite_dropped"] == 1 and row["env_steps"] == 384
    steps = trainer.pool.collectors[0].env.episode_steps.tolist()
    assert steps == [96 % limit] * 2 + [(96 - nan_at) % limit] + [96 % limit], steps
    # Each env's rewards, from the transitions in collection order (env 2's step 30 was dropped).
    rewards = iter(torch.cat([b.data[REWARD].reshape(-1) for b in batches]).double().tolist())
    per_env: list[list[float]] = [[], [], [], []]
    for t in range(1, 97):
        for k in range(4):
            per_env[k].append(float("nan") if (t, k) == (nan_at, poisoned) else next(rewards))

    def episode(k: int, first: int, last: int) -> float:
        total = 0.0
        for r in per_env[k][first - 1:last]:
            total += r
        return total

    # (batch of 8 vector steps, returns reported in it): healthy envs end at steps 40 and 80; env 2,
    # restarted at step 30, ends at 70 (its poisoned partial episode is not reported).
    expected = {4: [episode(k, 1, 40) for k in (0, 1, 3)], 8: [episode(poisoned, nan_at + 1, 70)],
                9: [episode(k, 41, 80) for k in (0, 1, 3)]}
    reported = {i: b.episode_returns for i, b in enumerate(batches) if b.episode_returns}
    assert reported.keys() == expected.keys(), reported
    for i, returns in expected.items():
        assert reported[i] == pytest.approx(returns, rel=1e-12)


def test_a_model_thread_error_reaches_the_main_thread_with_its_traceback(
    tiny_config: Callable[..., Config], thread_baseline: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tiny_config("model.enabled=true", "model.train_freq=64", "model.hidden_sizes=[16,16]",
                      "model.weight_decay=[0.0,0.0,0.0]", "total_env_steps=100000")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    assert trainer.model is not None

    def broken_fit(*args: object, **kwargs: object) -> None:
        raise FloatingPointError("injected: ensemble diverged")

    monkeypatch.setattr(trainer.model.ensemble, "fit", broken_fit)
    with pytest.raises(WorkerError, match="model thread") as info:
        trainer.run()
    assert isinstance(info.value.__cause__, FloatingPointError)
    assert "broken_fit" in "".join(traceback.format_tb(info.value.__cause__.__traceback__))
    # what a user reads last names the cause, as under the sync trainer
    last = traceback.format_exception(info.value)[-1].strip()
    assert last.endswith("failed: FloatingPointError: injected: ensemble diverged"), last
    assert trainer.env_steps < 100000


def test_a_run_that_fails_before_its_first_env_step_writes_no_checkpoint(
    tiny_config: Callable[..., Config], thread_baseline: int
) -> None:
    """Nothing was collected or trained, so there is nothing to resume; a checkpoint at 0 env steps would only
    stand in the way of the next `train` in the same run dir.
    """
    cfg = tiny_config("runtime.max_restarts=0")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("raise", {0, 1}, at_step=1))
    with pytest.raises(CollectorFailure):
        trainer.run()
    assert trainer.env_steps == 0
    assert list((Path(cfg.run_dir) / "checkpoints").glob("*.pt")) == []


def test_a_resume_may_take_the_fix_a_non_finite_value_asks_for(
    tiny_config: Callable[..., Config], thread_baseline: int
) -> None:
    cfg = tiny_config("total_env_steps=100000", "checkpoint.every=64")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("nan_reward", {0}, at_step=40))
    with pytest.raises(NonFiniteEnvError, match="runtime.nonfinite=drop"):
        trainer.run()
    assert trainer.env_steps > 0
    resumed = AsyncTrainer.resume(cfg.run_dir, ["runtime.nonfinite=drop", "total_env_steps=512"],
                                  env_factory=faulty("nan_reward", {0}, at_step=40))  # the same env, faults and all
    assert resumed.config.runtime.nonfinite == "drop"
    row = resumed.run()
    assert row["env_steps"] == 512 and row["nonfinite_dropped"] > 0  # the fault met again, and dropped
