"""benchmarks/headlines.py's pure logic: the rules that turn a curve into env steps, the medians, the noise bands,
and the stored figures it compares with (the runs themselves take minutes and are not part of the suite).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import headlines  # noqa: E402

pytestmark = pytest.mark.timeout(30)

CURVE = [(200, -1300.0), (400, -190.0), (600, -250.0), (800, -170.0), (1000, -150.0)]


def test_stays_counts_from_the_evaluation_after_the_last_one_below_the_threshold() -> None:
    assert headlines.steps_for("stays", -200.0, CURVE) == 800
    assert headlines.steps_for("stays", -200.0, [*CURVE, (1200, -200.0)]) == 800  # at the threshold is enough
    assert headlines.steps_for("stays", -200.0, [*CURVE, (1200, -201.0)]) is None  # the last one fell below
    assert headlines.steps_for("stays", -100.0, CURVE) is None


def test_first_counts_the_first_evaluation_at_the_threshold_whatever_follows() -> None:
    curve = [(500, 100.0), (1000, 475.0), (1500, 20.0)]
    assert headlines.steps_for("first", 475.0, curve) == 1000
    assert headlines.steps_for("first", 476.0, curve) is None
    assert headlines.settled("first", 475.0, curve) and not headlines.settled("first", 476.0, curve)
    assert not headlines.settled("stays", -200.0, CURVE)  # known only at the end of the budget


def test_median_counts_a_seed_that_never_reached_as_the_largest() -> None:
    assert headlines.steps_figures({0: 800, 1: None, 2: 1000}) == {"0": 800, "1": None, "2": 1000, "median": 1000}
    assert headlines.steps_figures({0: 800, 1: None, 2: None})["median"] is None


STEPS_ROW = {"figures": {"0": 800, "1": 1000, "2": 800, "median": 800},
             "band": {"unit": "env_steps", "same_cpu": 0, "other_cpu": 200, "other_cpu_compares": ["median"]}}


def test_steps_rows_are_exact_on_the_same_cpu_and_compare_the_median_within_the_band_on_another() -> None:
    same = {"0": 800, "1": 1000, "2": 800, "median": 800}
    assert headlines.compare(STEPS_ROW, same, same_cpu=True) == {}
    seed_moved = {**same, "1": 1600}
    assert headlines.compare(STEPS_ROW, seed_moved, same_cpu=True) == {"1": {"stored": 1000, "measured": 1600}}
    assert headlines.compare(STEPS_ROW, seed_moved, same_cpu=False) == {}  # another CPU: the median only
    assert headlines.compare(STEPS_ROW, {**same, "median": 1000}, same_cpu=False) == {}  # one evaluation
    assert headlines.compare(STEPS_ROW, {**same, "median": 1200}, same_cpu=False) == {
        "median": {"stored": 800, "measured": 1200}}
    assert headlines.compare(STEPS_ROW, {**same, "median": None}, same_cpu=False) == {
        "median": {"stored": 800, "measured": None}}  # never reached is outside any band


def test_ratio_rows_move_only_beyond_their_relative_band() -> None:
    row = {"figures": {"pendulum": 300.0, "cartpole": 1.2},
           "band": {"unit": "relative", "same_cpu": 0.25, "other_cpu": 0.5}}
    assert headlines.compare(row, {"pendulum": 240.0, "cartpole": 1.45}, same_cpu=True) == {}
    assert headlines.compare(row, {"pendulum": 220.0, "cartpole": 1.2}, same_cpu=True) == {
        "pendulum": {"stored": 300.0, "measured": 220.0}}
    assert headlines.compare(row, {"pendulum": 220.0, "cartpole": 1.2}, same_cpu=False) == {}


def test_a_cpu_is_the_same_only_with_the_same_model_and_flags() -> None:
    stored = {"cpu": "AMD EPYC", "cpu_flags": ["avx2", "avx512f"]}
    assert headlines.same_machine(stored, {"cpu": "AMD EPYC", "cpu_flags": ["avx512f", "avx2"]})
    assert not headlines.same_machine(stored, {"cpu": "AMD EPYC", "cpu_flags": ["avx2"]})
    assert not headlines.same_machine(stored, {"cpu": "Intel Xeon", "cpu_flags": ["avx2", "avx512f"]})


def test_a_cpu_with_figures_of_its_own_is_held_to_them_seed_by_seed() -> None:
    """CartPole's runs take another path on an Intel Xeon than on the EPYC its figures came from (the stored
    commit reproduces the Xeon's evaluations there): the Xeon's own figures, stored beside, are what it matches.
    """
    xeon = {"cpu": "Intel Xeon", "cpu_flags": ["avx2", "avx512f"]}
    epyc = {"cpu": "AMD EPYC", "cpu_flags": ["avx2", "avx512_bf16", "avx512f"]}
    on_xeon = {"0": 600, "1": 1400, "2": 800, "median": 800}
    row = {**STEPS_ROW, "measured_on": epyc, "on_other_machines": [{**xeon, "figures": on_xeon}]}
    assert headlines.reference(row, xeon) == (row["on_other_machines"][0]["figures"], True)
    assert headlines.reference(row, {"cpu": "Intel Xeon", "cpu_flags": ["avx2"]}) == (row["figures"], False)
    assert headlines.reference(row, epyc) == (row["figures"], True)
    figures, same_cpu = headlines.reference(row, xeon)
    assert headlines.compare(row, {"0": 600, "1": 1400, "2": 800, "median": 800}, same_cpu, figures) == {}
    assert headlines.compare(row, {"0": 600, "1": 1000, "2": 800, "median": 800}, same_cpu, figures) == {
        "1": {"stored": 1400, "measured": 1000}}


def test_the_stored_figures_are_complete_and_match_themselves() -> None:
    stored = json.loads(headlines.STORED.read_text())
    assert set(stored["rows"]) == {"pendulum", "cartpole", "throughput"}
    for name, row in stored["rows"].items():
        assert {"what", "command", "figures", "band", "measured_on"} <= set(row), name
        assert {"cpu", "cpu_flags", "date", "commit"} <= set(row["measured_on"]), name
        assert headlines.compare(row, row["figures"], same_cpu=True) == {}, name
        if "seeds" in row:
            assert row["rule"] in headlines.RULES, name
            assert set(row["figures"]) == {str(s) for s in row["seeds"]} | {"median"}, name
            assert "{seed}" in row["command"] and "{run_dir}" in row["command"], name
    assert "configs/pendulum_mbpo.yaml trainer=sync" in stored["rows"]["pendulum"]["command"]


@pytest.mark.parametrize(("content", "why"), [
    (None, "cannot be read (No such file or directory)"),
    ("{not json", "is not JSON"),
    ('{"figures": {}}', 'has no "rows" mapping'),
])
def test_stored_figures_that_cannot_be_read_are_one_line_and_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        content: str | None, why: str) -> None:
    stored = tmp_path / "stored.json"
    if content is not None:
        stored.write_text(content)
    monkeypatch.setattr(sys, "argv", ["headlines.py", "--stored", str(stored)])
    assert headlines.main() == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: --stored {stored} {why}")
