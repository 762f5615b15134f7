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


def finished_run(run_dir: Path, returns: list[float]) -> None:
    """A finished run's metrics.csv (an evaluation every 2,500 env steps from 5,000) and run.json."""
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "wall_s", "eval_return", "env_steps_per_s"])
        for i, value in enumerate(returns):
            steps = 5_000 + 2_500 * i
            writer.writerow([steps, 10.0 * (i + 1), value, 250.0])
    (run_dir / "run.json").write_text(json.dumps({"done": True}))


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
