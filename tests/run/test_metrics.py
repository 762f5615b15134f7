"""metrics.csv keeps its base columns first, grows new ones, and truncates on resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo.run.metrics import BASE_COLUMNS, MetricsLogger, eval_curve, read_metrics

pytestmark = pytest.mark.timeout(30)


def test_columns_and_empty_cells(tmp_path: Path) -> None:
    log = MetricsLogger(tmp_path, 100, progress=False)
    log.log({"env_steps": 10, "updates": 0, "wall_s": 0.1, "train_return": None, "eval_return": None})
    log.log({"env_steps": 20, "updates": 5, "wall_s": 0.2, "train_return": -3.0, "eval_return": float("nan"),
             "loss_critic": 1.5})
    log.close()
    rows = read_metrics(tmp_path / "metrics.csv")
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[:5] == BASE_COLUMNS and header[5] == "loss_critic"
    assert rows[0]["eval_return"] == "" and rows[0]["loss_critic"] == ""
    assert rows[1]["eval_return"] == "" and rows[1]["loss_critic"] == "1.5"


def test_eval_curve_is_the_evaluated_rows_in_order(tmp_path: Path) -> None:
    """What the benchmarks score: (env_steps, eval_return) of each row with an evaluation, none of the others."""
    log = MetricsLogger(tmp_path, 100, progress=False)
    for step, ret in ((10, -900.5), (15, None), (20, float("nan")), (30, -150.0)):
        log.log({"env_steps": step, "updates": step, "eval_return": ret})
    log.close()
    assert eval_curve(tmp_path / "metrics.csv") == [(10, -900.5), (30, -150.0)]


def test_resume_drops_rows_after_the_checkpoint(tmp_path: Path) -> None:
    log = MetricsLogger(tmp_path, 100, progress=False)
    for step in (10, 20, 30):
        log.log({"env_steps": step, "updates": step})
    log.close()
    MetricsLogger(tmp_path, 100, progress=False, resume_at=20).close()
    assert [r["env_steps"] for r in read_metrics(tmp_path / "metrics.csv")] == ["10", "20"]


def test_amend_fills_the_row_at_its_env_step_and_appends_any_other(tmp_path: Path) -> None:
    """A resume that finishes the last step's work adds its measurements to that step's row, keeping the rest."""
    log = MetricsLogger(tmp_path, 100, progress=False)
    log.log({"env_steps": 10, "updates": 1, "eval_return": -5.0, "wall_s": 9.0})
    log.close()
    log = MetricsLogger(tmp_path, 100, progress=False, resume_at=10)
    log.amend({"env_steps": 10, "updates": 2, "eval_return": None, "model_trainings": 3, "wall_s": 0.5}, {"wall_s"})
    log.amend({"env_steps": 20, "updates": 4})
    log.close()
    rows = read_metrics(tmp_path / "metrics.csv")
    assert [(r["env_steps"], r["updates"], r["eval_return"], r["model_trainings"], r["wall_s"]) for r in rows] == [
        ("10", "2", "-5.0", "3", "9.0"), ("20", "4", "", "", "")]  # an interval column keeps the step's value


def test_tensorboard_events_when_installed(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    log = MetricsLogger(tmp_path, 100, progress=False)
    log.log({"env_steps": 10, "updates": 1, "eval_return": -5.0})
    log.close()
    assert list(tmp_path.rglob("events.out.tfevents.*"))
