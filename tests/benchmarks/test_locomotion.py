"""benchmarks/locomotion.py's report, on a run root made by hand (its runs take hours and are not part of the suite)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import locomotion  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def finished_run(run_dir: Path, returns: list[float], wall_per_eval: float = 10.0,
                 cpu_per_eval: float | None = None, label: str = "ours") -> None:
    """A finished run's metrics.csv (an evaluation every 2,500 env steps from 5,000; ``cpu_s`` only when
    ``cpu_per_eval`` is given, as runs logged before the column) and run.json.
    """
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "wall_s", "eval_return", "env_steps_per_s", "cpu_s"])
        for i, value in enumerate(returns):
            steps = 5_000 + 2_500 * i
            cpu = "" if cpu_per_eval is None else cpu_per_eval * (i + 1)
            writer.writerow([steps, wall_per_eval * (i + 1), value, 250.0, cpu])
    (run_dir / "run.json").write_text(json.dumps({"done": True, "label": label}))


def test_the_report_is_printed_without_matplotlib_and_says_there_are_no_charts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A queue of runs stops at a failed invocation: a missing plotting extra must not fail one after hours of
    training.
    """
    finished_run(tmp_path / "hopper" / "mbpo-s0", [100.0 * i for i in range(11)])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what find_spec and import see without the package
    result = locomotion.report("hopper", tmp_path, [0])
    assert result["learners"]["mbpo"]["median_score"] == 900.0  # the mean of 800, 900 and 1,000
    assert "plot" not in result
    assert "no charts: matplotlib is not installed" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.png"))


def test_compute_cost_is_a_ratio_to_mbpo_by_wall_clock_and_by_cpu_seconds_where_every_run_has_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that waited for a core half the time: twice MBPO's wall-clock, the same CPU seconds."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    returns = [100.0 * i for i in range(11)]
    for seed in (0, 1):
        finished_run(tmp_path / "hopper" / f"mbpo-s{seed}", returns, wall_per_eval=10.0, cpu_per_eval=9.0)
        finished_run(tmp_path / "hopper" / f"redq-s{seed}", returns, wall_per_eval=20.0, cpu_per_eval=9.0)
    finished_run(tmp_path / "hopper" / "crossq-s0", returns, wall_per_eval=5.0, cpu_per_eval=4.5)
    finished_run(tmp_path / "hopper" / "crossq-s1", returns, wall_per_eval=5.0)  # logged without cpu_s
    learners = locomotion.report("hopper", tmp_path, [0, 1])["learners"]
    assert learners["mbpo"]["median_cpu_s"] == 99.0  # the last row's, 11 evaluations in
    assert (learners["redq"]["wall_over_mbpo"], learners["redq"]["cpu_over_mbpo"]) == (2.0, 1.0)
    assert learners["crossq"]["wall_over_mbpo"] == 0.5
    assert learners["crossq"]["median_cpu_s"] is None and learners["crossq"]["cpu_over_mbpo"] is None


def test_charts_go_where_asked_and_leave_the_run_root_alone(tmp_path: Path) -> None:
    """docs/benchmarks.md shows docs/img's charts: ``--charts docs/img`` redraws them with the report, so they
    cannot lag the committed runs (copies from the run root went a day stale).
    """
    pytest.importorskip("matplotlib")
    runs, charts = tmp_path / "runs", tmp_path / "img"
    finished_run(runs / "hopper" / "mbpo-s0", [100.0 * i for i in range(11)], label="MBPO-SAC")
    finished_run(runs / "hopper" / "redq-s0", [50.0 * i for i in range(11)], label="REDQ")
    result = locomotion.report("hopper", runs, [0], charts=charts)
    assert Path(result["plot"]) == charts / "hopper_learning_curves.png"
    assert (charts / "hopper_learning_curves.png").stat().st_size > 0
    assert not list(runs.glob("*.png"))


@pytest.mark.parametrize(("metrics", "why"), [
    (b"env_steps,wall_s,eval_return\n", "no evaluations yet"),  # every run's first minutes
    (bytes(range(256)) * 4, "unreadable: {csv} is not a text CSV"),
    (b"env_steps,wall_s,eval_return\nabc,1.0,-5\n", "unreadable: {csv} line 2: env_steps 'abc' is not a number"),
    (b"step,reward\n1,2\n", "unreadable: {csv} has no env_steps and no eval_return column"),
], ids=["header-only", "binary", "non-numeric", "foreign-header"])
def test_a_run_in_progress_or_damaged_is_passed_over_by_name_and_the_rest_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        metrics: bytes, why: str) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    finished_run(tmp_path / "hopper" / "mbpo-s0", [100.0 * i for i in range(11)])
    other = tmp_path / "hopper" / "mbpo-s1"
    other.mkdir(parents=True)
    (other / "metrics.csv").write_bytes(metrics)
    summary = locomotion.report("hopper", tmp_path, [0, 1])["learners"]["mbpo"]
    assert [r["run_dir"] for r in summary["runs"]] == [str(tmp_path / "hopper" / "mbpo-s0")]
    assert summary["median_score"] == 900.0
    notes = [line for line in capsys.readouterr().err.splitlines() if "passed over" in line]
    assert len(notes) == 1
    assert notes[0].startswith(f"[locomotion] passed over {other}: {why.format(csv=other / 'metrics.csv')}")


def test_a_cut_last_row_is_not_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    run = tmp_path / "hopper" / "mbpo-s0"
    finished_run(run, [100.0 * i for i in range(11)])
    with open(run / "metrics.csv", "a") as f:
        f.write("32500,130.0,-1")  # cut mid-write from -1200.5 or so
    (summary,) = locomotion.report("hopper", tmp_path, [0])["learners"]["mbpo"]["runs"]
    assert summary["env_steps"] == 30_000 and summary["score"] == 900.0


def test_a_broken_config_yaml_keeps_the_run_in_the_json_and_out_of_the_chart_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    finished_run(tmp_path / "hopper" / "mbpo-s0", [100.0 * i for i in range(11)], label="MBPO-SAC")
    broken = tmp_path / "hopper" / "redq-s0"
    finished_run(broken, [50.0 * i for i in range(11)], label="REDQ")
    (broken / "config.yaml").write_text("env: [unclosed\n")
    result = locomotion.report("hopper", tmp_path, [0], charts=tmp_path / "img")
    assert result["learners"]["redq"]["median_score"] == 450.0 and Path(result["plot"]).is_file()
    err = capsys.readouterr().err
    assert f"[locomotion] charts: passed over {broken}: unreadable: {broken / 'config.yaml'} is not valid YAML" in err


@pytest.mark.parametrize("missing", ["root", "env"])
def test_report_only_on_a_root_without_runs_is_one_line_and_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], missing: str) -> None:
    root = tmp_path / "runs"
    if missing == "env":
        (root / "walker2d").mkdir(parents=True)
    monkeypatch.setattr(sys, "argv", ["locomotion.py", "--report-only", "--run-root", str(root), "--env", "hopper"])
    with pytest.raises(SystemExit) as info:
        locomotion.main()
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: --run-root {root} ")
    assert ("does not exist" if missing == "root" else "has no hopper folder") in captured.err
