"""Where the time goes: every trainer and backend logs env, act, update, model and eval seconds, and rates
and busy fractions per logging interval.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mbpo.config import Config
from mbpo.run.metrics import read_metrics
from mbpo.trainers import AsyncTrainer, SyncTrainer
from mbpo.trainers.base import TIME_PARTS
from tests.run.test_throughput import FakeClock, check_intervals

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("trainer", ["sync", "thread", "process"])
def test_the_final_row_says_where_the_time_went(tiny_config: Callable[..., Config], trainer: str) -> None:
    cfg = tiny_config("model.enabled=true", "model.rollouts_per_real=2", "model.train_freq=128",
                      "model.hidden_sizes=[16,16]", "model.weight_decay=[0.0,0.0,0.0]", "model.max_epochs=2",
                      "model.epoch_length=32", "eval_every=192", "runtime.num_collectors=1",
                      f"runtime.backend={'thread' if trainer == 'sync' else trainer}")
    run = SyncTrainer(cfg, cfg.run_dir) if trainer == "sync" else AsyncTrainer(cfg, cfg.run_dir)
    row = run.run()
    parts = {part: row[f"time_{part}_s"] for part in TIME_PARTS}
    assert all(seconds > 0 for seconds in parts.values()), parts  # each part ran, and was timed where it ran
    # One collector, so even in the async trainer no part can take longer than the run itself.
    assert max(parts.values()) <= row["wall_s"]
    if trainer == "sync":  # one thread: the parts happen one after another
        assert sum(parts.values()) <= row["wall_s"]


def test_async_rates_and_busy_fractions_are_per_logging_interval(tiny_config: Callable[..., Config]) -> None:
    """Every row's rates and busy fractions cover the interval since the row before (the first: since the
    start); the whole-run rates are the row's counts over its wall_s. A fake clock times the rows.
    """
    cfg = tiny_config("model.enabled=true", "model.rollouts_per_real=2", "model.train_freq=64",
                      "model.hidden_sizes=[16,16]", "model.weight_decay=[0.0,0.0,0.0]", "model.max_epochs=2",
                      "model.epoch_length=32", "log_every=64")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    trainer.clock = FakeClock()
    trainer.run()
    rows = read_metrics(Path(cfg.run_dir) / "metrics.csv")
    assert len(rows) >= 4
    check_intervals(rows, (0, 0, 0.0))
    before = {"time_update_s": 0.0, "time_model_s": 0.0, "wall_s": 0.0}
    for row in rows:
        now = {key: float(row[key]) for key in before}
        seconds = now["wall_s"] - before["wall_s"]  # >= one tick (0.25 s): time_*_s's rounding moves it < 0.005
        assert float(row["learner_busy"]) == pytest.approx((now["time_update_s"] - before["time_update_s"]) / seconds,
                                                           abs=0.005)
        assert float(row["model_busy"]) == pytest.approx((now["time_model_s"] - before["time_model_s"]) / seconds,
                                                         abs=0.005)
        before = now


def test_a_resumed_async_run_never_logs_a_wall_s_below_the_one_before(tiny_config: Callable[..., Config]) -> None:
    """The final checkpoint's wall_s was taken when the workers stopped and the final row's after the checkpoint
    was written, so a resume, whose clock starts from the checkpoint's, logged less than the row before it (a plot
    against wall_s drew the curve going back). A fake clock that ticks at every reading makes that gap sure.
    """
    from mbpo.run.checkpoint import list_checkpoints, load_checkpoint
    from mbpo.trainers import resume_trainer

    cfg = tiny_config("total_env_steps=128", "log_every=64", "runtime.num_collectors=1")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    trainer.clock = FakeClock()
    trainer.run()
    final = load_checkpoint(list_checkpoints(Path(cfg.run_dir) / "checkpoints")[-1])
    rows = read_metrics(Path(cfg.run_dir) / "metrics.csv")
    assert float(rows[-1]["wall_s"]) == pytest.approx(final["trainer"]["wall_s"], abs=1e-3)
    resumed = resume_trainer(cfg.run_dir, ["total_env_steps=256"])
    resumed.clock = FakeClock()
    resumed.run()
    walls = [float(row["wall_s"]) for row in read_metrics(Path(cfg.run_dir) / "metrics.csv")]
    assert walls == sorted(walls), walls


def test_the_progress_bars_learner_busy_is_the_last_rows_until_the_learner_updates_again() -> None:
    """Right after a row the interval holds no update yet: the bar read learner_busy=0 at the end of every run and
    after each row while the row said 0.9 (the rates already fell back to the row's).
    """
    from mbpo.trainers.async_telemetry import AsyncTelemetry

    telemetry = AsyncTelemetry()
    assert telemetry.learner_busy(0.5, 1.0) == 0.5  # no row yet: the interval's own
    assert telemetry.row(update_s=0.9, model_s=None, interval_s=1.0)["learner_busy"] == 0.9
    assert telemetry.learner_busy(0.9, 0.01) == 0.9  # nothing updated since the row
    assert telemetry.learner_busy(1.0, 0.2) == pytest.approx(0.5)  # updating again: the new interval's
