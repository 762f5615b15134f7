"""metrics.csv keeps its base columns first, grows new ones, and truncates on resume; its reader takes a run in
progress (a cut last row) and names a damaged one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo.errors import MbpoError
from mbpo.run.metrics import BASE_COLUMNS, MetricsLogger, UnreadableMetricsError, eval_curve, read_metrics, read_runs

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


def test_a_resume_purges_the_tensorboard_events_after_its_checkpoint(tmp_path: Path) -> None:
    """As metrics.csv drops the rows after the checkpoint, TensorBoard shows each step once after a resume."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLogger(tmp_path, 100, progress=False)
    for step in (10, 20, 30, 40):
        log.log({"env_steps": step, "updates": step})
    log.close()
    log = MetricsLogger(tmp_path, 100, progress=False, resume_at=20)  # the run cut off after its checkpoint at 20
    for step in (30, 40, 50):
        log.log({"env_steps": step, "updates": step + 1})
    log.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("updates")] == [(10, 10), (20, 20), (30, 31), (40, 41),
                                                                     (50, 51)]


HEADER = ",".join(BASE_COLUMNS) + "\n"
COMPLETE = HEADER + "100,1,1.0,,-1500.0\n"


@pytest.mark.parametrize("cut", ["200,2,2.0,,-14", "200,2,2.0", "200,2,2.0\n"],
                         ids=["mid-value", "mid-row", "short-row"])
def test_a_last_row_cut_mid_write_is_left_out(tmp_path: Path, cut: str) -> None:
    """A run in progress: the writer may be half way through a row (-14 of -1457.4); no reader takes it."""
    path = tmp_path / "metrics.csv"
    path.write_text(COMPLETE + cut)
    assert eval_curve(path) == [(100, -1500.0)]
    assert [r["env_steps"] for r in read_metrics(path)] == ["100"]


def test_a_run_that_has_not_logged_yet_has_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    for text in (HEADER, ""):  # a header alone: every run's first minutes
        path.write_text(text)
        assert read_metrics(path) == [] and eval_curve(path) == []


@pytest.mark.parametrize(("content", "reason"), [
    (bytes(range(256)) * 4, "is not a text CSV"),
    (HEADER.encode() + b"100,1,\x00,,-5\n", "is not a text CSV"),
    (b"\x00" * 4096, "is not a text CSV"),  # its header gone too: not "nothing written yet"
    ((HEADER + "abc,1,1.0,,-5\n").encode(), "line 2: env_steps 'abc' is not a number; expected an integer"),
    ((COMPLETE + "200,2,2.0,,high\n").encode(), "line 3: eval_return 'high' is not a number"),
    (b"step,reward\n1,2\n", "has no env_steps and no eval_return column (header: step,reward)"),
    ((COMPLETE + "150,1\n" + "200,2,2.0,,-5\n").encode(), "line 3 has 2 fields; expected 5"),
], ids=["binary", "nul", "only-nul", "non-numeric-env_steps", "non-numeric-eval_return", "foreign-header",
        "short-middle-row"])
def test_an_unreadable_metrics_csv_is_one_user_error_naming_the_file_and_why(
        tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "metrics.csv"
    path.write_bytes(content)
    with pytest.raises(UnreadableMetricsError) as info:
        read_metrics(path)
    assert isinstance(info.value, MbpoError)  # the CLI prints it as one line and exits 2
    assert str(info.value).startswith(f"{path} ") and reason in str(info.value)
    assert "\n" not in str(info.value)


def test_read_runs_keeps_the_evaluated_runs_and_says_why_it_passed_over_each_other(tmp_path: Path) -> None:
    texts = {"good": COMPLETE, "started": HEADER, "cut": COMPLETE + "200,2,2.0,,-14", "foreign": "a,b\n1,2\n"}
    for name, text in texts.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.csv").write_text(text)
    (tmp_path / "never").mkdir()
    read, passed = read_runs([tmp_path / n for n in ("good", "started", "never", "cut", "foreign")])
    assert list(read) == [tmp_path / "good", tmp_path / "cut"] and len(read[tmp_path / "cut"]) == 1
    assert passed[tmp_path / "started"] == "no evaluations yet"
    assert passed[tmp_path / "never"] == "no evaluations yet (no metrics.csv)"
    assert passed[tmp_path / "foreign"].startswith(f"unreadable: {tmp_path / 'foreign' / 'metrics.csv'} has no")
    _, any_row = read_runs([tmp_path / "started"], column=None)
    assert any_row == {tmp_path / "started": "no rows yet"}


@pytest.mark.parametrize("tail", ["3", "3" + "\0" * 512, "\0" * 4096], ids=["cut", "cut-then-nul", "nul"])
def test_a_resume_after_a_cut_write_drops_the_cut_row(tmp_path: Path, tail: str) -> None:
    """A crash mid-append leaves "3" of a row at env step 30; a resume from 20 must not keep it as env step 3.
    A power loss may leave the last block zeroed instead: NUL bytes after the last whole row (they stopped every
    resume and plot of the run, as a file that is not text).
    """
    log = MetricsLogger(tmp_path, 100, progress=False)
    for step in (10, 20):
        log.log({"env_steps": step, "updates": step})
    log.close()
    with open(tmp_path / "metrics.csv", "a") as f:
        f.write(tail)
    assert [r["env_steps"] for r in read_metrics(tmp_path / "metrics.csv")] == ["10", "20"]
    MetricsLogger(tmp_path, 100, progress=False, resume_at=20).close()
    assert "\0" not in (tmp_path / "metrics.csv").read_text()
    assert [r["env_steps"] for r in read_metrics(tmp_path / "metrics.csv")] == ["10", "20"]
    assert (tmp_path / "metrics.csv").read_text().endswith("\n")
