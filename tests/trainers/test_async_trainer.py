"""AsyncTrainer end to end: ratios, versioned weights, shutdown, signals, debug mode."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import envs
from envs.base import StepResult
from envs.faults import FaultyEnv
from mbpo.config import Config, rollouts_per_transition, updates_per_transition
from mbpo.data.transitions import NEXT_OBS, OBS, REWARD
from mbpo.runtime.collectors import COLLECTOR_ID, POLICY_VERSION, CollectorBatch
from mbpo.runtime.gate import RatioGate
from mbpo.trainers import AsyncTrainer
from tests.runtime.conftest import snapshot_batches

pytestmark = pytest.mark.timeout(120)

MODEL = ("model.enabled=true", "model.train_freq=64", "model.rollouts_per_real=4", "model.hidden_sizes=[16,16]",
         "model.weight_decay=[0.0,0.0,0.0]", "model.max_epochs=3", "model.epoch_length=64")
"""A small MBPO model: a training every 64 env steps, each fit a few epochs."""


def gate_after_resume(cfg: Config, counters: Callable[[AsyncTrainer], None]) -> tuple[RatioGate, int]:
    """The gate (and learning_env_steps) a resume builds from a checkpoint of a trainer whose counters
    ``counters`` set: the resume's arithmetic, without a run.
    """
    first = AsyncTrainer(cfg, cfg.run_dir)
    try:
        counters(first)
        state = first.state_dict()
    finally:
        first.close()
    second = AsyncTrainer(cfg, cfg.run_dir)
    try:
        second.load_state_dict(state)
        second._gate_from_counters()
        return second.gate, second.learning_env_steps
    finally:
        second.close()


def test_async_sac_run_keeps_the_update_ratio_and_closes_every_thread(
    tiny_config: Callable[..., Config], thread_baseline: int, backend: str, no_leaks: None
) -> None:
    cfg = tiny_config("agent.utd_ratio=2", f"runtime.backend={backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    assert row["env_steps"] == 384
    # Exactly the updates the SyncTrainer would issue: utd_ratio per transition from learning_starts on.
    assert trainer.updates_issued == 2 * (384 - 63) and row["utd_ratio_realised"] == pytest.approx(2.0)
    assert len(trainer.buffer) == 384
    assert row["weights_version"] >= trainer.updates_issued // 8
    assert row["collector_restarts"] == 0 and row["queue_drops"] == 0
    for key in ("env_steps_per_s", "updates_per_s", "queue_depth", "policy_lag_versions", "policy_lag_s",
                "learner_busy", "weights_version"):
        assert row[key] is not None, key
    trainer.close()  # idempotent: run() already closed it
    trainer.close()
    assert (trainer.run_dir / "checkpoints").is_dir()


def test_batches_carry_policy_version_and_collector_id(tiny_config: Callable[..., Config],
                                                       thread_baseline: int, backend: str) -> None:
    """The run lasts until both collectors delivered and a newer snapshot reached one (total_env_steps is only
    a bound): on a loaded machine a spawned child can start after the other took a short budget alone.
    """
    cfg = tiny_config(f"runtime.backend={backend}", "total_env_steps=200000")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    seen: list[CollectorBatch] = []
    snapshot_batches(trainer, seen)
    ingest = trainer._ingest

    def stop_when_seen(item: CollectorBatch) -> None:
        ingest(item)
        if {b.collector_id for b in seen} == {0, 1} and max(b.policy_version for b in seen) > 1:
            trainer.stop_event.set()

    trainer._ingest = stop_when_seen  # type: ignore[method-assign]  # a spy in place of the bound method
    trainer.run()
    assert {b.collector_id for b in seen} == {0, 1}
    for b in seen:
        assert torch.equal(b.data[COLLECTOR_ID], torch.full((b.data.shape[0],), b.collector_id))
        # warm-up steps (before learning_starts=64) act randomly and carry version 0
        assert set(b.data[POLICY_VERSION].tolist()) <= {0, b.policy_version}
    versions = [b.policy_version for b in seen]
    assert versions[0] >= 1 and max(versions) > 1  # collectors picked up newer snapshots
    assert {v for b in seen for v in b.data[POLICY_VERSION].tolist()} >= {0, max(versions)}


def test_zeroed_weights_reach_every_collector_within_one_batch(tiny_config: Callable[..., Config],
                                                               thread_baseline: int, backend: str) -> None:
    """DQN: zero Q-net and epsilon 0 make every action 0. A batch a collector started after the
    publication must act with them: at most the batch in progress at that moment used the old ones.
    The run lasts until both collectors have started a batch after the publication (total_env_steps is
    only a bound): a spawned child can take seconds to start on a loaded machine.
    """
    import time

    cfg = tiny_config("env.id=CartPole-v1", "agent.name=dqn", "agent.learning_starts=0", "agent.utd_ratio=0.25",
                      "runtime.publish_every=1000000", "total_env_steps=200000", f"runtime.backend={backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    seen: list[CollectorBatch] = []
    published: list[tuple[int, float]] = []
    snapshot_batches(trainer, seen)
    ingest = trainer._ingest

    def spy(item: CollectorBatch) -> None:
        ingest(item)
        # mid-run, from the learner's thread, once both collectors are running (a spawned child can take
        # seconds to start on a loaded machine, and one that never ran has no batch after the publication)
        if len(seen) >= 4 and len({b.collector_id for b in seen}) == 2 and not published:
            snap = trainer.agent.snapshot()
            for net in ("q_net", "target_q_net"):
                snap[net] = {k: torch.zeros_like(v) for k, v in snap[net].items()}
            snap["epsilon"] = 0.0
            version = trainer.weights.publish(snap)
            published.append((version, time.monotonic()))
        elif published and {b.collector_id for b in seen if b.started_at > published[0][1]} == {0, 1}:
            trainer.stop_event.set()  # both have acted after the publication: all the test needs

    trainer._ingest = spy  # type: ignore[method-assign]  # a spy in place of the bound method
    trainer.run()
    version, at = published[0]
    for c in (0, 1):
        mine = [b for b in seen if b.collector_id == c]
        in_progress = [b for b in mine if b.started_at <= at < b.created_at]
        after = [b for b in mine if b.started_at > at]
        assert len(in_progress) <= 1 and len(after) >= 1, (len(in_progress), len(after))
        for b in after:
            assert b.policy_version == version and torch.all(b.data["policy_version"] == version)
            assert torch.all(b.data["action"] == 0)


def test_sigterm_drains_joins_checkpoints_and_exits_143(tiny_config: Callable[..., Config],
                                                        thread_baseline: int) -> None:
    class SigtermAt(FaultyEnv):
        def step(self, actions: torch.Tensor) -> StepResult:
            if self.steps + 1 == self.at_step:
                os.kill(os.getpid(), signal.SIGTERM)  # delivered to the main thread's handler
            return super().step(actions)

    def factory(cid: int, inc: int, seed: int) -> envs.VecEnv:
        env = envs.make("Pendulum-v1", 1, device="cpu", seed=seed)
        return SigtermAt(env, "slow", at_step=150) if cid == 0 else env

    previous = signal.getsignal(signal.SIGTERM)
    cfg = tiny_config("total_env_steps=100000")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=factory)
    trainer.run()
    assert trainer.exit_code == 143
    assert trainer.env_steps < 100000 and len(trainer.buffer) == trainer.env_steps  # the queue was drained
    ckpts = sorted((trainer.run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts and ckpts[-1].name == f"ckpt_{trainer.env_steps:012d}.pt"
    assert signal.getsignal(signal.SIGTERM) is previous  # handlers restored


def test_debug_mode_runs_one_collector_with_checks_and_says_what_is_on(
    tiny_config: Callable[..., Config], thread_baseline: int, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiny_config("debug=true", "total_env_steps=160", "model.enabled=true", "model.train_freq=64",
                      "model.rollouts_per_real=2", "model.hidden_sizes=[16,16]",
                      "model.weight_decay=[0.0,0.0,0.0]", "model.max_epochs=2", "model.epoch_length=64")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    assert trainer.num_collectors == 1 and trainer.queue.max_size == 2
    trainer.run()
    err = capsys.readouterr().err
    assert "autograd anomaly detection: on" in err
    assert "TORCH_USE_CUDA_DSA" in err and "hand-off checks" in err and "bounds checks" in err
    if torch.version.cuda is None:
        assert "built without CUDA" in err or "not set" in err
    assert not torch.is_anomaly_enabled()  # restored after the run
    assert trainer.model is not None and trainer.model.trainings >= 1


def test_async_mbpo_overlaps_the_model_thread_and_tags_rollouts(tiny_config: Callable[..., Config],
                                                                 thread_baseline: int, backend: str) -> None:
    cfg = tiny_config(*MODEL, f"runtime.backend={backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    assert trainer.model is not None
    # The run ends after the last training it earned, as the SyncTrainer's does: its final model is whole.
    assert trainer.model.trainings == trainer.gate.trainings_earned() >= (384 - 64) // 64
    assert not trainer.model.fit_pending
    assert row["model_busy"] > 0 and row["rollout_policy_version"] >= 1
    tolerance = cfg.runtime.ratio_tolerance  # the realised ratios of the gate's rule, whatever runs collectors
    assert abs(row["utd_ratio_realised"] / updates_per_transition(cfg) - 1) <= tolerance
    assert abs(row["rollouts_per_real_realised"] / rollouts_per_transition(cfg) - 1) <= tolerance
    assert row["model_trainings_per_real"] >= (1 - tolerance) * (384 - 64) / 64 / 384
    buf = trainer.model.model_buffer
    newest = buf.newest(len(buf))
    assert int(newest["model_version"].max()) == trainer.model.ensemble.version
    for key in (OBS, NEXT_OBS, REWARD):
        assert bool(torch.isfinite(trainer.buffer[: len(trainer.buffer)][key]).all())


def test_with_max_lag_the_learner_goes_on_past_a_slow_fit_and_the_next_fit_counts_for_the_owed_trainings(
        tiny_config: Callable[..., Config], thread_baseline: int, backend: str) -> None:
    """model.max_lag=3: the second fit is held until four trainings are earned (a model slower than collection);
    collection and updates go on meanwhile (by default the gate would stop them one training sooner), and the
    next fit, which trains on every row so far, counts for every training owed when it copied the rows. The run
    still ends with every training it earned done.
    """
    cfg = tiny_config(*MODEL, f"runtime.backend={backend}", "model.max_lag=3")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    assert trainer.model is not None
    model, gate, fit = trainer.model, trainer.gate, trainer.model.train
    updates: list[int] = []

    def slow_second_fit(*args: object, **kwargs: object) -> None:
        if model.trainings == 1:  # not the first: the learner waits for the first model, as the SyncTrainer does
            updates.append(gate.updates)
            while not gate.wait_for(lambda: gate.trainings_earned() >= 4, trainer.stop_event):
                assert not trainer.stop_event.is_set()
            updates.append(gate.updates)
        fit(*args, **kwargs)  # type: ignore[arg-type]

    model.train = slow_second_fit  # type: ignore[method-assign]
    row = trainer.run()
    assert len(updates) == 2 and updates[1] > updates[0]  # the learner went on while the model was behind
    assert model.trainings_folded >= 1 and row["model_trainings_folded"] == model.trainings_folded
    assert model.trainings + model.trainings_folded == gate.trainings == gate.trainings_earned()
    assert len(model.model_buffer) > 0 and row["skipped_updates"] == 0


def test_a_crossq_learner_without_target_critics_trains_async_mbpo_on_every_backend(
        tiny_config: Callable[..., Config], thread_baseline: int, every_backend: str) -> None:
    """CrossQ's snapshot has no target critic: it must publish to collectors (shared memory for processes, Ray's
    object store for actors) and to the model thread's rollouts, which act with the actor's running renorm
    statistics.
    """
    cfg = tiny_config(*MODEL, f"runtime.backend={every_backend}", "agent.sac.crossq=true", "agent.sac.num_critics=3",
                      "agent.sac.num_min=2", "agent.sac.dropout=0.05", "agent.sac.policy_delay=2",
                      "runtime.num_collectors=1")  # one is enough: each collector (each Ray actor) gets the same
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    assert trainer.agent.target_critic is None and row["skipped_updates"] == 0  # type: ignore[attr-defined]
    assert row["rollout_policy_version"] >= 1 and trainer.model is not None and len(trainer.model.model_buffer) > 0
    assert abs(row["utd_ratio_realised"] / updates_per_transition(cfg) - 1) <= cfg.runtime.ratio_tolerance
    assert all(bool(torch.isfinite(t).all()) for t in trainer.agent.snapshot()["critic"].values())


def test_resets_on_the_async_learner_are_counted_and_reach_the_collectors_and_the_model_thread(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """agent.sac.reset_every: the learner re-draws its networks inside its updates; the next publication carries
    them to the collectors and to the model thread's rollouts, as any update's weights, and the rows count them.
    """
    cfg = tiny_config(*MODEL, "agent.sac.reset_every=50")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    seen: list[CollectorBatch] = []
    snapshot_batches(trainer, seen)
    published: list[tuple[int, int]] = []  # (version, resets made before it)
    publish = trainer.weights.publish

    def spy(snapshot: dict[str, object]) -> int:
        version = publish(snapshot)
        published.append((version, trainer.agent.num_resets))  # type: ignore[attr-defined]
        return version

    trainer.weights.publish = spy  # type: ignore[method-assign]  # a spy in place of the bound method
    row = trainer.run()
    resets = trainer.agent.num_resets  # type: ignore[attr-defined]
    assert resets == (trainer.updates_issued - 1) // 50 >= 5 and row["resets"] == resets
    first_after = min(version for version, made in published if made >= 1)
    assert max(made for _, made in published) == resets  # a publication followed the last reset
    assert max(b.policy_version for b in seen) >= first_after  # collectors acted with re-drawn weights
    assert row["rollout_policy_version"] >= first_after and row["skipped_updates"] == 0


def test_a_finished_run_waits_for_the_last_model_training_it_earned(tiny_config: Callable[..., Config],
                                                                     thread_baseline: int) -> None:
    """The SyncTrainer trains at its last step; the async run must not end (and cut that fit short) while
    the model thread still owes it: here the last fit starts only once every update is done.
    """
    cfg = tiny_config(*MODEL)
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    model = trainer.model
    assert model is not None
    last = trainer.gate.trainings_earned(cfg.total_env_steps) - 1  # trainings before the last one
    cond, passes, done_at = threading.Condition(), [0], []
    supervise, fit = trainer._supervise, model.ensemble.fit

    def count_passes() -> None:  # the main loop's every pass
        supervise()
        with cond:
            passes[0] += 1
            if not done_at and trainer.pool.finished and trainer.gate.updates_due() <= 0:
                done_at.append(passes[0])  # the old loop ended here
            cond.notify_all()

    def last_fit_after_the_updates(*args: torch.Tensor, **kwargs: object) -> dict[str, object]:
        if model.trainings == last:
            with cond:  # the loop went on past where it would have ended, or the run stopped
                cond.wait_for(lambda: (done_at and passes[0] >= done_at[0] + 2) or trainer.stop_event.is_set(), 60)
        return fit(*args, **kwargs)  # type: ignore[arg-type]  # forwards what ModelBased.train passed

    trainer._supervise = count_passes  # type: ignore[method-assign]  # a spy in place of the bound method
    model.ensemble.fit = last_fit_after_the_updates  # type: ignore[method-assign]  # a wrapping spy
    trainer.run()
    assert model.trainings == last + 1 and not model.fit_pending and model.last_fit["stopped_by"] != "stop"


def test_a_checkpoint_due_during_a_model_fit_is_written_after_it_without_failing_the_run(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """A periodic checkpoint used to wait at most runtime.shutdown_timeout_s for the model thread's
    cycle, then raise TimeoutError and end the run: any fit longer than that (minutes, on a big buffer).
    """
    cfg = tiny_config(*MODEL, "runtime.shutdown_timeout_s=1", "checkpoint.keep=10")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    assert trainer.model is not None and trainer.model_worker is not None
    worker, fit = trainer.model_worker, trainer.model.train
    held: list[bool] = []

    def first_fit_outlasts_a_due_checkpoint(*args: object, **kwargs: object) -> None:
        if not held:
            trainer._checkpoint_due = True  # the checkpoint cadence crosses while this fit runs
            held.append(worker.hold.wait(timeout=60))  # the fit goes on once the learner has asked to hold
        fit(*args, **kwargs)  # type: ignore[arg-type]  # forwards what the model worker passed

    trainer.model.train = first_fit_outlasts_a_due_checkpoint  # type: ignore[method-assign]  # a wrapping spy
    row = trainer.run()
    assert held == [True] and not worker.hold.is_set()
    ckpts = sorted((trainer.run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert len(ckpts) == 2 and ckpts[-1].name == f"ckpt_{trainer.env_steps:012d}.pt"
    periodic = torch.load(ckpts[0], weights_only=False)
    assert periodic["model"]["counters"]["trainings"] >= 1  # taken after the fit, not in the middle of it
    assert periodic["model"]["ensemble"]["version"] == periodic["model"]["counters"]["trainings"]
    assert row["env_steps"] == 384


def test_a_vector_step_wider_than_train_freq_earns_one_model_training(tiny_config: Callable[..., Config],
                                                                      thread_baseline: int) -> None:
    """As the sync trainer: one fit after a vector step that crossed several multiples of train_freq, not one
    per multiple, back to back on the same data (16 envs, train_freq 8: one per vector step, not two).
    """
    cfg = tiny_config("env.num_envs=16", "runtime.collection_batch_size=1", "model.enabled=true",
                      "model.train_freq=8", "model.rollouts_per_real=1", "model.hidden_sizes=[16,16]",
                      "model.weight_decay=[0.0,0.0,0.0]", "model.max_epochs=2", "model.epoch_length=64")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    assert trainer.model is not None
    first = (56 + 8) // 16  # budget start 56 (the multiple of 8 before learning_starts=64): vector step 4 reaches 64
    assert trainer.model.trainings == 384 // 16 - first + 1 == 21  # (384 - 56) // 8 = 41 per multiple
    assert row["model_trainings_per_real_target"] == 1 / 16


def test_a_fit_cut_short_by_a_stop_is_redone_on_resume_and_no_rollouts_are_lost(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """A stop (Ctrl-C, SIGTERM) as the second fit starts: the fit is not counted and makes no rollouts, and the
    resume fits again and rolls out that interval: every real step since the budget start paid for its branches.
    """
    from mbpo.trainers import resume_trainer

    cfg = tiny_config(*MODEL, "total_env_steps=100000")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    model = trainer.model
    assert model is not None
    fit, rollouts_before = model.ensemble.fit, []

    def stop_as_the_second_fit_starts(*args: torch.Tensor, **kwargs: object) -> dict[str, object]:
        if model.trainings == 1 and not rollouts_before:
            rollouts_before.append(model.rollouts_started)
            trainer.stop_event.set()  # what a signal sets: the fit stops before its first gradient step
        return fit(*args, **kwargs)  # type: ignore[arg-type]  # forwards what ModelBased.train passed

    model.ensemble.fit = stop_as_the_second_fit_starts  # type: ignore[method-assign]  # a wrapping spy
    trainer.run()
    assert model.last_fit["stopped_by"] == "stop" and model.fit_pending
    assert (model.trainings, model.rollouts_started) == (1, rollouts_before[0])
    resumed = resume_trainer(cfg.run_dir, [f"total_env_steps={trainer.env_steps + 256}"])
    assert isinstance(resumed, AsyncTrainer) and resumed.model is not None
    resumed.run()
    m = resumed.model
    assert m.trainings >= 2 and not m.fit_pending
    assert m.rollouts_started == 4 * (m.last_rollout_env_steps - m.budget_start)


def stopped_after_fit(cfg: Config, fits: int) -> AsyncTrainer:
    """Run until the ``fits``-th model fit is done (and counted), then stop before its rollouts."""
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    model = trainer.model
    assert model is not None
    fit = model.ensemble.fit

    def stop_once_the_fit_is_done(*args: torch.Tensor, **kwargs: object) -> dict[str, object]:
        result = fit(*args, **kwargs)  # type: ignore[arg-type]  # forwards what ModelBased.train passed
        if model.trainings == fits - 1:  # this fit is the fits-th (train() counts it on return)
            trainer.stop_event.set()  # what a signal sets, after the fit's last gradient step
        return result

    model.ensemble.fit = stop_once_the_fit_is_done  # type: ignore[method-assign]  # a wrapping spy
    trainer.run()
    assert model.trainings == fits and model.rollouts_owed
    return trainer


def hold_the_owed_rollouts_until(trainer: AsyncTrainer, event: threading.Event) -> None:
    """The resume's owed rollouts wait (at most 2 s) for ``event``: whatever the trainer lets happen before
    they are made, happens in that time. Set by the learner's first update or the run's stop, it is never
    set where the trainer waits for them, which then costs the 2 s.
    """
    model = trainer.model
    assert model is not None
    fresh_rows = model.fresh_rows

    def held(*args: object) -> torch.Tensor:  # the owed cycle calls it before its stop check and rollouts
        event.wait(2.0)
        return fresh_rows(*args)  # type: ignore[arg-type]  # forwards the model thread's arguments

    model.fresh_rows = held  # type: ignore[method-assign]  # a wrapping spy


@pytest.mark.parametrize("fits", [1, 2])
def test_a_stop_between_a_fit_and_its_rollouts_makes_them_first_on_resume(
        tiny_config: Callable[..., Config], thread_baseline: int, fits: int) -> None:
    """A fit is done (and counted) when the stop comes, its rollouts are not: the resumed learner waits for
    them, as for the first model, instead of training on model data older than the model it has.
    """
    from mbpo.trainers import resume_trainer

    cfg = tiny_config(*MODEL, "total_env_steps=100000")
    trainer = stopped_after_fit(cfg, fits)
    resumed = resume_trainer(cfg.run_dir, [f"total_env_steps={trainer.env_steps + 64}"])
    assert isinstance(resumed, AsyncTrainer) and resumed.model is not None
    m, update, seen, updated = resumed.model, resumed.agent.update, [], threading.Event()

    def note_the_model(batch: object) -> object:
        seen.append((m.rollouts_owed, len(m.model_buffer)))
        updated.set()
        return update(batch)  # type: ignore[arg-type]  # forwards the learner's batch

    resumed.agent.update = note_the_model  # type: ignore[method-assign]  # a wrapping spy
    hold_the_owed_rollouts_until(resumed, updated)
    resumed.run()
    assert seen and seen[0][0] is False and seen[0][1] > 0  # the first resumed update mixes in the new model's data
    assert m.rollouts_started == 4 * (m.last_rollout_env_steps - m.budget_start)


def test_a_resume_at_the_end_makes_the_owed_rollouts_before_the_run_is_done(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """A resume with no env steps left still makes the rollouts a stop left owed before it calls the run
    finished: the final checkpoint holds a whole model, as it does after an unbroken run.
    """
    from mbpo.trainers import resume_trainer

    cfg = tiny_config(*MODEL, "total_env_steps=100000")
    trainer = stopped_after_fit(cfg, 2)
    resumed = resume_trainer(cfg.run_dir, [f"total_env_steps={trainer.env_steps}"])
    assert isinstance(resumed, AsyncTrainer) and resumed.model is not None
    hold_the_owed_rollouts_until(resumed, resumed.stop_event)
    resumed.run()
    assert resumed.exit_code == 0 and not resumed.work_owed() and not resumed.model.rollouts_owed


def test_a_final_evaluation_that_failed_is_owed_to_the_resume(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """The loop ended but the final evaluation raised: the checkpoint must not call the run finished."""
    from mbpo.trainers import resume_trainer

    cfg = tiny_config("eval_every=128")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    evaluate = trainer._evaluate

    def eval_env_dies_at_the_end(poll: Callable[[], None] | None = None) -> None:
        if trainer.env_steps >= cfg.total_env_steps:
            raise RuntimeError("the eval env crashed")
        evaluate(poll)

    trainer._evaluate = eval_env_dies_at_the_end  # type: ignore[method-assign]  # a fault in the final one
    with pytest.raises(RuntimeError, match="eval env crashed"):
        trainer.run()
    resumed = resume_trainer(cfg.run_dir)  # not RunAlreadyDone
    resumed.run()
    assert resumed.last_eval_env_steps == cfg.total_env_steps and not resumed.work_owed()


def test_a_stop_after_the_last_env_step_is_finished_by_the_resume(tiny_config: Callable[..., Config],
                                                                  thread_baseline: int) -> None:
    """Ctrl-C once every env step is in, but before the learner's last updates (up to max_lead * utd_ratio
    of them), the model's last fit and the final evaluation: the resume does them, and only then is the run done.
    """
    from mbpo.run.metrics import read_metrics
    from mbpo.trainers import RunAlreadyDone, resume_trainer

    cfg = tiny_config(*MODEL, "agent.utd_ratio=2", "eval_every=128")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    update, sent = trainer.agent.update, []

    def ctrl_c_once_every_env_step_is_in(batch: object) -> object:
        if trainer.env_steps >= cfg.total_env_steps and not sent:
            sent.append(trainer.updates_issued)
            os.kill(os.getpid(), signal.SIGINT)  # the main thread's handler: the learner is the main thread
        return update(batch)  # type: ignore[arg-type]  # forwards the learner's batch

    trainer.agent.update = ctrl_c_once_every_env_step_is_in  # type: ignore[method-assign]  # a wrapping spy
    trainer.run()
    owed = 2 * (cfg.total_env_steps - 63)  # utd_ratio 2 from the end of the vector step reaching learning_starts
    assert trainer.exit_code == 130 and trainer.env_steps == cfg.total_env_steps
    assert trainer.updates_issued < owed  # the last batch alone earned 64 updates, a chunk is at most 8
    resumed = resume_trainer(cfg.run_dir)
    assert isinstance(resumed, AsyncTrainer) and resumed.model is not None
    row = resumed.run()
    assert resumed.exit_code == 0 and resumed.updates_issued == owed and row["env_steps"] == cfg.total_env_steps
    m = resumed.model
    assert m.trainings == resumed.gate.trainings_earned(cfg.total_env_steps) and not m.fit_pending
    evals = [int(r["env_steps"]) for r in read_metrics(f"{cfg.run_dir}/metrics.csv") if r["eval_return"]]
    assert evals == [128, 256, 384]  # the final one, after the last updates
    with pytest.raises(RunAlreadyDone):
        resume_trainer(cfg.run_dir)


def test_cli_returns_130_on_ctrl_c_with_a_final_checkpoint(
    tmp_path: object, thread_baseline: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    from mbpo import cli
    from tests.conftest import only_learner
    from tests.runtime.conftest import TINY

    make = envs.make

    class CtrlCAt(FaultyEnv):
        def step(self, actions: torch.Tensor) -> StepResult:
            if self.steps + 1 == self.at_step:
                os.kill(os.getpid(), signal.SIGINT)
            return super().step(actions)

    def make_with_ctrl_c(env_id: str, num_envs: int = 1, **kw: object) -> envs.VecEnv:
        env = make(env_id, num_envs, **kw)  # type: ignore[arg-type]  # forwards envs.make's keywords
        return CtrlCAt(env, "slow", at_step=120) if num_envs == 1 else env  # training envs, not eval (2 envs)

    monkeypatch.setattr(envs, "make", make_with_ctrl_c)
    run = Path(str(tmp_path)) / "run"
    code = cli.main(["train", "--config", "configs/pendulum_sac.yaml", *only_learner(TINY), f"run_dir={run}",
                     "total_env_steps=100000"])
    assert code == 130
    saved = list((run / "checkpoints").glob("ckpt_*.pt"))
    assert saved
    assert (f"[mbpo] final checkpoint: {max(saved)}; `python -m mbpo resume {run}` goes on from it"
            in capsys.readouterr().err)  # what to do next


@pytest.mark.gpu
def test_async_mbpo_on_cuda_hands_off_between_streams(tiny_config: Callable[..., Config], cuda_device: str,
                                                      thread_baseline: int) -> None:
    cfg = tiny_config(f"device={cuda_device}", "model.enabled=true", "model.train_freq=64",
                      "model.rollouts_per_real=8", "model.hidden_sizes=[32,32]", "model.weight_decay=[0.0,0.0,0.0]",
                      "model.max_epochs=3", "model.epoch_length=64", "debug=true")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    assert row["env_steps"] == 384 and trainer.model is not None and trainer.model.trainings >= 5
    data = trainer.model.model_buffer.newest(len(trainer.model.model_buffer))
    assert data["obs"].device.type == "cuda" and bool(torch.isfinite(data["next_obs"]).all())


def test_an_async_run_resumes_from_its_checkpoint(tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    from mbpo.trainers import resume_trainer

    cfg = tiny_config("agent.utd_ratio=2")
    first = AsyncTrainer(cfg, cfg.run_dir)
    first.run()
    resumed = resume_trainer(cfg.run_dir, ["total_env_steps=512"])
    assert isinstance(resumed, AsyncTrainer) and resumed.env_steps == 384
    assert resumed.agent.num_updates == first.agent.num_updates
    row = resumed.run()
    assert row["env_steps"] == 512 and len(resumed.buffer) == 512
    assert resumed.updates_issued == 2 * (512 - 63)  # the ratio carries on across the resume


def test_a_periodic_checkpoint_holds_the_seconds_so_far_and_the_run_counts_go_on_after_a_resume(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """A run resumed from a periodic checkpoint (a crash after it) reports the seconds it had run, not those of its
    last logged row, and its publications, gate waits and drops count on from the checkpoint's.
    """
    from mbpo.run.checkpoint import list_checkpoints, load_checkpoint
    from mbpo.run.metrics import read_metrics
    from mbpo.trainers import resume_trainer

    cfg = tiny_config("checkpoint.every=128", "checkpoint.keep=5", "log_every=384", "eval_every=384")
    first = AsyncTrainer(cfg, cfg.run_dir)
    first.run()
    ckpt = Path(cfg.run_dir) / "checkpoints/ckpt_000000000256.pt"
    state = load_checkpoint(ckpt)["trainer"]
    assert 0.0 < state["wall_s"] <= first.wall_s  # no row was logged before it (log_every=384)
    counts = state["run_counts"]
    assert counts["weights_version"] > 0
    for later in list_checkpoints(Path(cfg.run_dir) / "checkpoints"):
        if later != ckpt and int(later.stem.split("_")[1]) > 256:
            later.unlink()  # the run as a crash after ckpt 256 left it
    resumed = resume_trainer(cfg.run_dir, [])
    row = resumed.run()
    assert row["weights_version"] > counts["weights_version"] and row["gate_waits"] >= counts["gate_waits"]
    assert float(read_metrics(Path(cfg.run_dir) / "metrics.csv")[-1]["wall_s"]) > state["wall_s"]


def test_a_finished_run_trained_longer_evaluates_on_its_cadence_only(tiny_config: Callable[..., Config],
                                                                     thread_baseline: int) -> None:
    """The final evaluation is part of the finished run's checkpoint: training it longer does not evaluate
    again right after the resume (off the cadence), only at the next multiples of eval_every.
    """
    from mbpo.run.metrics import read_metrics
    from mbpo.trainers import resume_trainer

    cfg = tiny_config("eval_every=128", "runtime.num_collectors=1")
    AsyncTrainer(cfg, cfg.run_dir).run()
    resume_trainer(cfg.run_dir, ["total_env_steps=512"]).run()
    evals = [int(r["env_steps"]) for r in read_metrics(f"{cfg.run_dir}/metrics.csv") if r["eval_return"]]
    assert evals == [128, 256, 384, 512]


def test_a_checkpoint_that_counted_a_training_per_multiple_resumes_fitting(tiny_config: Callable[..., Config],
                                                                         thread_baseline: int) -> None:
    """Checkpoints from before the one-training-per-vector-step rule counted one per multiple of train_freq
    crossed: the resumed gate takes at most what the data earned, or the model thread would wait for the
    count to catch up (num_envs / train_freq times the env steps taken).
    """
    cfg = tiny_config("env.num_envs=16", "model.enabled=true", "model.train_freq=8", "model.hidden_sizes=[16,16]",
                      "model.weight_decay=[0.0,0.0,0.0]")
    def counted_per_multiple(trainer: AsyncTrainer) -> None:
        assert trainer.model is not None
        trainer.env_steps = trainer.gate.ingested = 384
        trainer.model.trainings = (384 - 56) // 8  # 41: one per multiple, as the old rule counted

    gate, _ = gate_after_resume(cfg, counted_per_multiple)
    assert gate.trainings == gate.trainings_earned() == 21 and gate.trainings_due() == 0


def test_a_resume_keeps_the_transitions_a_full_queue_dropped_out_of_the_learning_budget(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """With runtime.queue_full=drop_oldest, env steps = ingested + discarded; a resume that took every env step
    as ingested would issue discarded * utd_ratio updates for data the buffer never held.
    """
    cfg = tiny_config("runtime.queue_full=drop_oldest", "agent.utd_ratio=2")
    def one_batch_dropped(trainer: AsyncTrainer) -> None:
        trainer.env_steps, trainer.gate.ingested, trainer.gate.discarded = 160, 128, 32
        trainer.learning_env_steps = trainer.gate.learning_transitions()

    g, learning_env_steps = gate_after_resume(cfg, one_batch_dropped)
    assert (g.reserved, g.ingested, g.discarded) == (160, 128, 32)
    assert g.updates_earned() == 2 * (128 - 63) == 2 * learning_env_steps


@pytest.mark.parametrize("eval_every", [128, 10_000])
def test_async_evaluates_on_the_sync_trainers_cadence(tiny_config: Callable[..., Config], thread_baseline: int,
                                                      eval_every: int) -> None:
    """Evaluations at every multiple of eval_every, the last one after the final updates, and no other."""
    from mbpo.run.metrics import read_metrics

    cfg = tiny_config(f"eval_every={eval_every}", "runtime.num_collectors=1")
    AsyncTrainer(cfg, cfg.run_dir).run()
    evals = [int(r["env_steps"]) for r in read_metrics(f"{cfg.run_dir}/metrics.csv") if r["eval_return"]]
    assert evals == ([128, 256, 384] if eval_every == 128 else [])


@pytest.mark.reliability
@pytest.mark.parametrize("queue_full", ["block", "drop_oldest"])
def test_back_pressure_keeps_the_queue_and_the_ring_bounded(tiny_config: Callable[..., Config], thread_baseline: int,
                                                            backend: str, queue_full: str) -> None:
    """A one-batch queue behind a learner that stops at its first batch until a collector has met the queue full:
    collectors wait (block) or displace the oldest batch (drop_oldest, counted), and every transition is either
    stored or discarded. The gate is left wide open, so only the queue holds the collectors back.
    """
    cfg = tiny_config("runtime.max_queue_size=1", f"runtime.queue_full={queue_full}", f"runtime.backend={backend}",
                      "runtime.ratio_tolerance=1000", "runtime.max_lead=0", "total_env_steps=192")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    depths: list[int] = []
    met_full, learner_waited = threading.Event(), []
    ingest, put = trainer._ingest, trainer.queue.put

    def record_depth(item: CollectorBatch) -> None:
        if not learner_waited:  # the learner's first batch: it takes nothing more until the queue has been full
            learner_waited.append(met_full.wait(60))
        ingest(item)

    def put_seeing_full(item: CollectorBatch, *args: Any, **kwargs: Any) -> bool:
        if len(trainer.queue) >= trainer.queue.max_size:
            met_full.set()
        done = put(item, *args, **kwargs)
        depths.append(len(trainer.queue))
        return done

    trainer._ingest = record_depth  # type: ignore[method-assign]  # spies in place of the bound methods
    trainer.queue.put = put_seeing_full  # type: ignore[method-assign]
    row = trainer.run()
    assert learner_waited == [True]  # a collector met the queue full
    assert max(depths) <= 1 and row["env_steps"] == 192
    assert len(trainer.buffer) + trainer.gate.discarded == 192
    if queue_full == "block":
        assert row["queue_drops"] == 0 and len(trainer.buffer) == 192
    else:
        assert row["queue_drops"] >= 1 and trainer.gate.discarded == 32 * row["queue_drops"]
    if backend == "process":  # every shared slot came back: a dropped batch frees its slot too
        assert trainer.backend.ring.free_slots == trainer.backend.ring.num_slots


@pytest.mark.reliability
def test_a_slow_collector_holds_no_one_back(tiny_config: Callable[..., Config], thread_baseline: int,
                                            backend: str) -> None:
    from tests.runtime.conftest import faulty

    # A slow collector's batch in flight counts as collected for the gate; with a lead of one batch (a tiny
    # run at ratio_tolerance=0.1) it would pace everyone, so the lead here is the data so far.
    cfg = tiny_config(f"runtime.backend={backend}", "agent.utd_ratio=2", "runtime.ratio_tolerance=1.0")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("slow", {1}, at_step=1, delay_s=0.05))
    seen: list[CollectorBatch] = []
    snapshot_batches(trainer, seen)
    row = trainer.run()
    assert row["env_steps"] == 384 and row["utd_ratio_realised"] == pytest.approx(2.0, rel=0.01)
    assert len(trainer.buffer) == 384
    # From the fast one's first batch on (a spawned child can start late on a loaded machine), it collected most
    t0 = min(b.started_at for b in seen if b.collector_id == 0)
    per = {c: sum(b.collector_id == c and b.started_at >= t0 for b in seen) for c in (0, 1)}
    assert per[0] > per[1]


def stop_at(trainer: AsyncTrainer, env_steps: int) -> None:
    """Set the stop event (what Ctrl-C and SIGTERM set) once the trainer has ingested ``env_steps``: a spy in place
    of the bound ``_ingest``.
    """
    ingest = trainer._ingest

    def stop_after_some(item: CollectorBatch) -> None:
        ingest(item)
        if trainer.env_steps >= env_steps:
            trainer.stop_event.set()

    trainer._ingest = stop_after_some  # type: ignore[method-assign]


@pytest.mark.reliability
def test_stopping_under_load_drains_and_closes_everything(tiny_config: Callable[..., Config], thread_baseline: int,
                                                          backend: str, no_leaks: None) -> None:
    """A stop (what Ctrl-C and SIGTERM set) in the middle of a busy run: the queue is drained into the
    buffer, workers end, a final checkpoint holds exactly the env steps taken.
    """
    cfg = tiny_config(f"runtime.backend={backend}", "total_env_steps=100000", "runtime.num_collectors=3")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    stop_at(trainer, 256)
    row = trainer.run()
    assert 256 <= row["env_steps"] < 100000 and len(trainer.buffer) == trainer.env_steps
    assert not any(c.is_alive() for c in trainer.pool.collectors.values())
    ckpts = sorted((trainer.run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts[-1].name == f"ckpt_{trainer.env_steps:012d}.pt"


def test_n_step_transitions_are_built_by_every_backends_collectors(tiny_config: Callable[..., Config],
                                                                   thread_baseline: int, every_backend: str) -> None:
    from mbpo.data.transitions import DISCOUNT

    cfg = tiny_config("agent.n_step=3", "env.num_envs=2", f"runtime.backend={every_backend}",
                      "runtime.num_collectors=1")  # one is enough: each collector builds its own (each a Ray actor)
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    data = trainer.buffer[: len(trainer.buffer)]
    assert row["env_steps"] == 384 and len(trainer.buffer) == 384  # each collector's open windows pushed at its end
    assert abs(float(data[DISCOUNT].min()) - 0.99 ** 3) < 1e-6  # full 3-step windows
    assert bool(torch.isfinite(data["reward"]).all()) and data["obs"].shape == (len(trainer.buffer), 3)


def test_an_n_step_batch_where_every_episode_ends_at_once_reaches_the_buffer_on_every_backend(
        tiny_config: Callable[..., Config], thread_baseline: int, every_backend: str) -> None:
    """Pendulum's episodes all end at step 200: with one vector step per batch, that step closes each env's three
    pending windows at once, three times the rows of a vector step. A process collector's ring slot once held only
    one vector step's rows, so the child died and was restarted at every episode end. At the end of the budget
    (step 220) each env's open windows are pushed as time-outs, so no step is lost there either.
    """
    from mbpo.data.transitions import DISCOUNT

    cfg = tiny_config("agent.n_step=3", "env.num_envs=2", "runtime.collection_batch_size=2", "runtime.num_collectors=1",
                      "total_env_steps=440", f"runtime.backend={every_backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    assert row["collector_restarts"] == 0
    assert row["env_steps"] == 440 and len(trainer.buffer) == 440  # the last n - 1 steps too, pushed at the end
    discounts = trainer.buffer[:440][DISCOUNT]
    short = int((discounts > 0.99 ** 3 + 1e-6).sum())  # windows of 1 and 2 steps (gamma, gamma^2): at step 200
    assert short == 2 * 2 * 2 and int((discounts > 0.99 ** 2 + 1e-6).sum()) == 2 * 2  # and at the end, per env


def test_a_stop_keeps_each_envs_open_n_step_windows(tiny_config: Callable[..., Config], thread_baseline: int,
                                                    every_backend: str) -> None:
    """Ctrl-C or SIGTERM (the stop event) mid-run: a resume starts new episodes, so each env's last n - 1 steps
    are stored as time-outs before the final checkpoint, on a process collector too (its ring slot taken without
    waiting, as the stop asks).
    """
    cfg = tiny_config("agent.n_step=3", "env.num_envs=2", "runtime.collection_batch_size=8", "runtime.num_collectors=1",
                      "total_env_steps=100000", f"runtime.backend={every_backend}")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    stop_at(trainer, 64)
    row = trainer.run()
    assert 64 <= row["env_steps"] < 100000 and len(trainer.buffer) == trainer.env_steps


def test_the_progress_bar_ends_at_the_env_steps_taken(tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    from mbpo.run.metrics import MetricsLogger

    cfg = tiny_config("total_env_steps=300", "runtime.collection_batch_size=64", "runtime.num_collectors=1")
    logger = MetricsLogger(cfg.run_dir, cfg.total_env_steps, progress=True)  # a disabled bar counts nothing
    try:
        row = AsyncTrainer(cfg, cfg.run_dir).run(logger)
        assert logger.bar.n == row["env_steps"] == 300
    finally:
        logger.close()


def test_a_bf16_learner_trains_with_collectors_on_a_cpu_without_native_bf16(
    tiny_config: Callable[..., Config], thread_baseline: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """precision=auto resolves bf16 for the learner's device (a GPU); the collectors' CPU policies only act
    (fp32 replicas) and must not be refused on a CPU without AVX512-BF16/AMX.
    """
    monkeypatch.setattr("mbpo.device.precision.native_bf16", lambda device: (True, "the learner's device"))
    cfg = tiny_config("agent.sac.precision=auto", "runtime.backend=thread", "total_env_steps=128")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    assert trainer.agent.precision == "bf16"
    monkeypatch.setattr("mbpo.device.precision.native_bf16", lambda device: (False, "the collectors' CPU"))
    row = trainer.run()  # the thread backend builds its collectors' policies here
    assert row["env_steps"] == 128 and row["collector_restarts"] == 0


def test_runtime_max_lead_caps_how_far_collectors_run_ahead_of_the_learner(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """Every batch a collector is granted leaves the learner at most max_lead transitions of updates behind,
    and the cap is what binds once 10% of the run exceeds it (without it the lead grows with the run).
    """
    cfg = tiny_config("agent.learning_starts=64", "total_env_steps=1024", "runtime.collection_batch_size=16",
                      "runtime.max_lead=48", "agent.utd_ratio=0.5")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    gate: RatioGate = trainer.gate
    leads: list[int] = []
    behind: list[int] = []  # per grant: updates owed for transitions beyond the lead (must be none)
    reserve = gate.reserve

    def spy(*args: object, **kw: object) -> tuple[int, int] | None:
        granted = reserve(*args, **kw)  # type: ignore[arg-type]
        if granted is not None and granted[1]:
            with gate._cond:
                lead = gate.lead()
                leads.append(lead)
                behind.append(gate.updates_earned(gate.reserved - gate.discarded - lead) - gate.updates)
        return granted

    gate.reserve = spy  # type: ignore[method-assign]  # a spy in place of the bound method
    trainer.run()
    assert max(behind) <= 0  # at every grant the learner had caught up with all but the last `lead` transitions
    assert gate.max_lead == 48 and max(leads) == 48 and min(leads) >= 16  # one batch of 16 at least


def test_an_env_factory_whose_env_is_not_the_configs_task_is_refused_at_start_up(
        tiny_config: Callable[..., Config], thread_baseline: int) -> None:
    """The evaluation env is built from the config: an env_factory returning another task's env would train to the
    end and then fail at the first evaluation; it is one error before anything starts.
    """
    from mbpo.runtime.env_builder import EnvContractError

    cfg = tiny_config("env.id=MountainCarContinuous-v0")

    def pendulum(collector_id: int, incarnation: int, seed: int) -> envs.VecEnv:
        return envs.make("Pendulum-v1", 1, device="cpu", seed=seed)

    with pytest.raises(EnvContractError, match=r"^env.id='MountainCarContinuous-v0': the training env's "
                                               r"observation_space is Box\(.*\(3,\), float32\), the evaluation env's "
                                               r"\(built from the config\) Box\(.*\(2,\), float32\); expected one "
                                               r"task"):
        AsyncTrainer(cfg, cfg.run_dir, env_factory=pendulum)
