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
