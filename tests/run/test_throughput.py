"""Rate columns: per logging interval (measured from a start or a resume, never from step 0), whole-run beside."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from mbpo.run.checkpoint import list_checkpoints
from mbpo.run.metrics import read_metrics
from mbpo.run.throughput import Throughput, interval_rates, steady_rate
from mbpo.trainers import SyncTrainer
from tests.trainers.test_sync_trainer import tiny

pytestmark = pytest.mark.timeout(120)


class FakeClock:
    """Each reading is ``tick`` seconds after the previous one, from an arbitrary origin (as perf_counter's)."""

    def __init__(self, start: float = 1000.0, tick: float = 0.25) -> None:
        self.now, self.tick = start, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_a_row_has_the_interval_rate_and_the_whole_run_average() -> None:
    clock = FakeClock(tick=0.0)
    meter = Throughput(0, 0, clock=clock)
    clock.now += 10.0  # a slow start: 100 steps in the first 10 s
    first = meter.row(100, 0)
    assert first == {"wall_s": 10.0, "env_steps_per_s": 10.0, "updates_per_s": 0.0,
                     "env_steps_per_s_whole_run": 10.0, "updates_per_s_whole_run": 0.0}
    clock.now += 2.0  # then 1,000 steps and 500 updates in 2 s
    assert meter.live(1100, 500) == {"env_steps_per_s": 500.0, "updates_per_s": 250.0}
    second = meter.row(1100, 500)
    assert meter.interval_s == 2.0
    assert second == {"wall_s": 12.0, "env_steps_per_s": 500.0, "updates_per_s": 250.0,
                      "env_steps_per_s_whole_run": 1100 / 12, "updates_per_s_whole_run": 500 / 12}


def test_the_live_rates_keep_the_last_rows_until_the_interval_counts_something() -> None:
    """The progress bar, updated right after a row or once the run is done, shows the rates just measured; it
    never reads 0 steps/s for a run that was busy all along.
    """
    clock = FakeClock(tick=0.0)
    meter = Throughput(0, 0, clock=clock)
    assert meter.live(0, 0) == {"env_steps_per_s": 0.0, "updates_per_s": 0.0}  # nothing measured yet
    clock.now += 2.0
    meter.row(400, 100)
    clock.now += 1.0
    assert meter.live(400, 100) == {"env_steps_per_s": 200.0, "updates_per_s": 50.0}
    assert meter.live(500, 100) == {"env_steps_per_s": 100.0, "updates_per_s": 0.0}  # the new interval's


def test_after_a_resume_the_first_interval_starts_at_the_resume() -> None:
    clock = FakeClock(start=5.0, tick=0.0)  # a new process: its clock has nothing to do with the old one's
    meter = Throughput(300, 40, wall_s=30.0, clock=clock)
    clock.now += 4.0
    row = meter.row(400, 90)
    assert row["wall_s"] == 34.0
    assert row["env_steps_per_s"] == 25.0 and row["updates_per_s"] == 12.5  # (400 - 300) / 4, not 400 / 4
    assert row["env_steps_per_s_whole_run"] == 400 / 34 and row["updates_per_s_whole_run"] == 90 / 34


def test_the_steady_rate_leaves_the_start_up_out() -> None:
    rows = [{"env_steps": "100", "updates": "0", "wall_s": "10.0"},  # start-up: 10 s for the first 100 steps
            {"env_steps": "600", "updates": "50", "wall_s": "11.0"},
            {"env_steps": "1200", "updates": "150", "wall_s": "12.0"},
            {"env_steps": "1300", "updates": "200", "wall_s": "14.0"}]  # a slow last interval (shutdown)
    assert steady_rate(rows) == 500.0 and steady_rate(rows, "updates") == 50.0  # medians of 500/600/50, 50/100/25
    assert steady_rate(rows[:1]) is None


def test_the_last_interval_shows_a_run_that_slowed_down() -> None:
    """10 env steps/s for three intervals, then 2.2: the median says 10, the last interval 2.2."""
    rows = [{"env_steps": s, "wall_s": w} for s, w in ((0, 0), (100, 10), (200, 20), (300, 30), (322, 40))]
    assert steady_rate(rows) == 10.0
    assert interval_rates(rows)[-1] == pytest.approx(2.2)


def check_intervals(rows: list[dict[str, str]], start: tuple[int, int, float]) -> None:
    """Each row's interval rates are its steps and updates since the row before (``start`` for the first)
    over the seconds between them; its whole-run rates are its counts over its ``wall_s``.
    """
    steps, updates, wall = start
    for row in rows:
        s, u, w = int(row["env_steps"]), int(row["updates"]), float(row["wall_s"])
        assert float(row["env_steps_per_s"]) == pytest.approx((s - steps) / (w - wall), abs=1e-3)
        assert float(row["updates_per_s"]) == pytest.approx((u - updates) / (w - wall), abs=1e-3)
        assert float(row["env_steps_per_s_whole_run"]) == pytest.approx(s / w, abs=1e-3)
        assert float(row["updates_per_s_whole_run"]) == pytest.approx(u / w, abs=1e-3)
        steps, updates, wall = s, u, w


def test_sync_rows_rate_each_logging_interval_and_a_resume_from_its_checkpoint(tmp_path: Path) -> None:
    half = SyncTrainer(tiny(tmp_path, "total_env_steps=300", "checkpoint.every=300"), tmp_path)
    half.clock = FakeClock()
    half.run()
    rows = read_metrics(tmp_path / "metrics.csv")
    assert [r["env_steps"] for r in rows] == ["100", "200", "300"]
    check_intervals(rows, (0, 0, 0.0))
    resumed = SyncTrainer.resume(tmp_path, ["total_env_steps=600"])
    resumed.clock = FakeClock(start=7.0)
    at_resume = (resumed.env_steps, resumed.agent.num_updates, resumed.wall_s)
    assert at_resume[0] == 300 and at_resume[2] >= float(rows[-1]["wall_s"])
    resumed.run()
    rows = read_metrics(tmp_path / "metrics.csv")
    assert [r["env_steps"] for r in rows] == ["100", "200", "300", "400", "500", "600"]
    check_intervals(rows[3:], at_resume)  # measured from the checkpoint's counters and wall_s, not from 0


def test_cpu_s_is_this_process_s_cpu_seconds_summed_over_resumes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``cpu_s`` reads the process's CPU clock (faked: a second per reading), counts from the trainer's start,
    and a resume adds its own to the checkpoint's; a checkpoint that did not record it leaves the column empty.
    """
    monkeypatch.setattr(time, "process_time", FakeClock(start=5000.0, tick=1.0))
    half = SyncTrainer(tiny(tmp_path, "total_env_steps=300", "checkpoint.every=300"), tmp_path)
    half.run()
    first = [float(r["cpu_s"]) for r in read_metrics(tmp_path / "metrics.csv")]
    assert 0 < first[0] < first[1] < first[2] < 100  # from the trainer's start, not the clock's origin
    monkeypatch.setattr(time, "process_time", FakeClock(start=9000.0, tick=1.0))  # a new process's clock
    resumed = SyncTrainer.resume(tmp_path, ["total_env_steps=400"])
    resumed.run()
    after = [float(r["cpu_s"]) for r in read_metrics(tmp_path / "metrics.csv")][3:]
    assert first[2] < after[0] < first[2] + 100  # carried from the checkpoint, plus the resume's own

    ckpt = list_checkpoints(tmp_path / "checkpoints")[-1]
    state = torch.load(ckpt, weights_only=True)
    del state["trainer"]["cpu_s"]  # as an mbpo that did not count CPU seconds wrote it
    torch.save(state, ckpt)
    SyncTrainer.resume(tmp_path, ["total_env_steps=500"]).run()
    assert read_metrics(tmp_path / "metrics.csv")[-1]["cpu_s"] == ""
