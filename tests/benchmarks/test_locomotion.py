"""benchmarks/locomotion.py's report, on a run root made by hand (its runs take hours and are not part of the suite)."""

from __future__ import annotations

import csv
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import locomotion  # noqa: E402

pytestmark = pytest.mark.timeout(60)
needs_rliable = pytest.mark.skipif(isinstance(locomotion.load_rliable(), str),
                                   reason="rliable (the bench extra) does not import here")


@pytest.fixture(autouse=True)
def few_resamples(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bootstrap of the report with 300 resamples, not rliable's 50,000: a second, not a minute."""
    for name in ("BOOTSTRAP_REPS", "POI_REPS", "CHART_REPS"):
        monkeypatch.setattr(locomotion, name, 300)


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


def test_the_chart_draws_the_runs_the_score_counts_not_one_still_in_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A seed in progress at 12,500 ended every curve there: the chart said 'screens', dropped the 30k target
    and named 3 seeds beside a score of 2. It draws the done runs the score counts, as the JSON line does.
    """
    pytest.importorskip("matplotlib")
    for seed in (0, 1):
        scored_run(tmp_path, "redq", seed, 2_000.0)
    in_progress = tmp_path / "hopper" / "redq-s2"
    finished_run(in_progress, [0.0, 100.0, 200.0, 300.0])
    (in_progress / "run.json").write_text(json.dumps({"done": False, "label": "ours"}))
    drawn: dict[str, list[Any]] = {}

    def draw(env: str, runs: dict[str, list[Any]], out: Path, *args: Any, **kwargs: Any) -> Path:
        drawn.update(runs)
        return out

    monkeypatch.setattr(locomotion, "draw", draw)
    result = locomotion.report("hopper", tmp_path, [0, 1, 2], charts=tmp_path / "img")
    assert result["learners"]["redq"]["score_seeds"] == [0, 1]
    assert sorted(r.path.name for r in drawn["redq"]) == ["redq-s0", "redq-s1"]


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


def scored_run(root: Path, learner: str, seed: int, score: float, evals: int = 11) -> None:
    """A finished Hopper run whose last three evaluations (of ``evals``, from 5,000 env steps) are ``score``."""
    finished_run(root / "hopper" / f"{learner}-s{seed}", [0.0] * (evals - 3) + [score] * 3)


@needs_rliable
def test_mean_and_iqm_come_with_intervals_that_hold_them_and_are_the_same_on_every_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rliable 1.2 resamples from numpy's global generator whatever random_state it is given: the report seeds
    that generator for each bootstrap, and leaves the caller's state as it found it.
    """
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    scores = [300.0, 2_400.0, 900.0, 1_500.0, 1_200.0]
    for seed, score in enumerate(scores):
        scored_run(tmp_path, "mbpo_redq", seed, score)
    np.random.seed(123)
    caller = np.random.get_state()[1].copy()
    first = locomotion.report("hopper", tmp_path, list(range(5)))
    assert (np.random.get_state()[1] == caller).all()
    np.random.seed(7)  # another caller's state: the same intervals
    second = locomotion.report("hopper", tmp_path, list(range(5)))
    summary = first["learners"]["mbpo_redq"]
    assert summary["score_seeds"] == [0, 1, 2, 3, 4]
    assert (summary["mean_score"], summary["iqm_score"]) == (1_260.0, 1_200.0)  # IQM: 900, 1,200 and 1,500
    for name in ("mean", "iqm"):
        low, high = summary[f"{name}_score_ci"]
        assert min(scores) <= low < summary[f"{name}_score"] < high <= max(scores)
    assert summary["median_score"] == 1_200.0  # kept beside them: the docs read it
    assert second["learners"] == first["learners"]
    assert first["intervals"]["reps"] == 300 and first["intervals"]["confidence"] == 0.95


@needs_rliable
def test_a_learner_above_redq_on_every_seed_improves_on_it_with_probability_one_on_the_seeds_both_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for seed in range(5):
        scored_run(tmp_path, "mbpo_redq", seed, 2_000.0 + 100 * seed)
        scored_run(tmp_path, "redq", seed, 1_000.0 + 100 * seed)
    scored_run(tmp_path, "redq", 5, 5_000.0)  # a seed MBPO has not run: left out of the comparison
    result = locomotion.report("hopper", tmp_path, list(range(6)))
    assert result["probability_of_improvement"] == {"of": "mbpo_redq", "over": "redq", "seeds": [0, 1, 2, 3, 4],
                                                    "probability": 1.0, "ci": [1.0, 1.0]}
    targets = result["targets"]
    assert (targets["mean_at_least_1850"], targets["iqm_at_least_redq"], targets["improvement_lower_bound_above_0.5"],
            targets["5_common_seeds"], targets["common_seeds"]) == (True, True, True, True, [0, 1, 2, 3, 4])
    assert (targets["iqm_score"], targets["peer_iqm_score"]) == (2_200.0, 1_200.0)  # both on seeds 0-4
    assert targets["over_each_model_free"]["redq"] == round(2_200.0 / 1_250.0, 3)  # the medians, as before


@needs_rliable
def test_the_targets_wait_for_five_seeds_both_learners_finished_at_full_length(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two MBPO seeds above five REDQ seeds do not meet the targets: nothing is judged until both learners have
    five finished 30k seeds in common, and a screen's 15k run is no 30k seed.
    """
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for seed in range(5):
        scored_run(tmp_path, "redq", seed, 1_000.0 + 100 * seed)
    for seed in range(2):
        scored_run(tmp_path, "mbpo_redq", seed, 3_000.0)
    scored_run(tmp_path, "mbpo_redq", 2, 3_000.0, evals=5)  # evaluations at 5k-15k: a screen, no 30k seed
    targets = locomotion.report("hopper", tmp_path, list(range(5)))["targets"]
    assert targets["common_seeds"] == [0, 1] and targets["5_common_seeds"] is False
    assert (targets["mean_at_least_1850"], targets["iqm_at_least_redq"],
            targets["improvement_lower_bound_above_0.5"]) == (None, None, None)


@needs_rliable
def test_a_learner_with_screens_only_is_not_compared_with_one_at_full_length(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MBPO with five 15k screens and REDQ with five 30k runs: each one's score is its own length's, and a
    15k score against a 30k one compares two other things. The probability of improvement, the targets and the
    ratios to the model-free learners were computed on them all the same.
    """
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for seed in range(5):
        scored_run(tmp_path, "redq", seed, 1_000.0 + 100 * seed)
        scored_run(tmp_path, "mbpo_redq", seed, 3_000.0, evals=5)  # 5,000 to 15,000 env steps: screens
    unscored = tmp_path / "hopper" / "mbpo_redq-s5"  # at 30k, its 27,500 evaluation missing: no score
    scored_run(tmp_path, "mbpo_redq", 5, 3_000.0)
    scored_run(tmp_path, "redq", 5, 1_000.0)
    lines = (unscored / "metrics.csv").read_text().splitlines(keepends=True)
    (unscored / "metrics.csv").write_text("".join(line for line in lines if not line.startswith("27500,")))
    result = locomotion.report("hopper", tmp_path, list(range(6)))
    assert result["learners"]["mbpo_redq"]["mean_score"] == 3_000.0  # still reported, at its own length
    assert (result["probability_of_improvement"]["seeds"], result["probability_of_improvement"]["probability"]) == (
        [], None)
    targets = result["targets"]
    assert targets["common_seeds"] == [] and targets["5_common_seeds"] is False
    assert targets["mean_at_least_1850"] is None and targets["over_each_model_free"] == {}


def test_the_score_is_the_evaluations_at_25k_27_5k_and_30k_never_others_by_position() -> None:
    """The async trainer evaluates a few steps past each mark; an extra evaluation past the end, or a missing one,
    must not shift which three are averaged.
    """
    evals = {s: 0.0 for s in range(5_000, 25_000, 2_500)} | {25_024: 900.0, 27_520: 1_000.0, 30_000: 1_100.0}
    assert locomotion.last_evals_mean(evals) == 1_000.0
    assert locomotion.last_evals_mean(evals | {32_500: 0.0}) == 1_000.0  # past the run's end: not one of them
    assert locomotion.last_evals_mean({k: v for k, v in evals.items() if k != 25_024}) is None  # 22.5k no stand-in
    screen = {s: float(s) for s in range(5_000, 15_001, 2_500)}
    assert locomotion.last_evals_mean(screen) is None  # a 15k screen has no 30k score
    assert locomotion.last_evals_mean(screen, end=15_000) == 12_500.0  # its own: 10k, 12.5k and 15k


@needs_rliable
def test_under_two_seeds_the_estimates_stand_without_intervals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    scored_run(tmp_path, "mbpo_redq", 0, 1_500.0)
    scored_run(tmp_path, "redq", 0, 1_000.0)
    result = locomotion.report("hopper", tmp_path, [0])
    summary = result["learners"]["mbpo_redq"]
    assert (summary["mean_score"], summary["mean_score_ci"], summary["iqm_score"], summary["iqm_score_ci"]) == (
        1_500.0, None, 1_500.0, None)
    assert result["probability_of_improvement"]["probability"] == 1.0
    assert result["probability_of_improvement"]["ci"] is None
    assert result["targets"]["improvement_lower_bound_above_0.5"] is None


def test_without_rliable_the_json_line_says_how_to_get_intervals_and_keeps_every_other_figure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A queue of runs stops at a failed invocation: a missing bench extra costs the intervals, nothing else."""
    monkeypatch.setitem(sys.modules, "rliable", None)  # what import sees without the package
    for seed, score in enumerate([900.0, 1_500.0, 1_200.0, 1_100.0, 1_300.0]):
        scored_run(tmp_path, "mbpo_redq", seed, score)
        scored_run(tmp_path, "redq", seed, score - 100.0)
    monkeypatch.setattr(sys, "argv", ["locomotion.py", "--report-only", "--run-root", str(tmp_path),
                                      "--seeds", "0", "1", "2", "3", "4", "--charts", str(tmp_path / "img")])
    locomotion.main()
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["intervals"] == {"note": "intervals need rliable: pip install -e '.[bench]' (ModuleNotFoundError: "
                                           "import of rliable halted; None in sys.modules)"}
    summary = result["learners"]["mbpo_redq"]
    assert (summary["mean_score"], summary["median_score"]) == (1_200.0, 1_200.0)  # five seeds: judged
    assert summary["iqm_score"] is summary["mean_score_ci"] is summary["iqm_score_ci"] is None
    assert result["probability_of_improvement"]["probability"] is None
    assert result["targets"]["mean_at_least_1850"] is False and result["targets"]["iqm_at_least_redq"] is None
    notes = [line for line in captured.err.splitlines() if "no intervals" in line]
    assert len(notes) == 1 and "pip install -e '.[bench]'" in notes[0]
    assert ("plot" in result) == (importlib.util.find_spec("matplotlib") is not None)  # drawn without bands


def test_the_question_panel_holds_redq_the_best_mbpo_and_each_variant_with_three_seeds_at_30k() -> None:
    def runs(done: int, env_steps: int = locomotion.STEPS) -> dict[str, object]:
        return {"runs": [{"done": True, "env_steps": env_steps}] * done}

    learners = {"mbpo": runs(3), "redq": runs(3), "mbpo_redq": runs(3), "mbpo_redq_masked": runs(3),
                "mbpo_redq_macura": runs(2), "crossq": runs(3)}
    assert locomotion.question_learners(learners) == ["redq", "mbpo_redq", "mbpo_redq_masked"]
    screens = {"mbpo_redq": runs(1, 15_000), "mbpo_redq_macura": runs(2, 15_000), "mbpo": runs(2, 15_000)}
    assert locomotion.question_learners(screens) == ["mbpo_redq", "mbpo_redq_macura"]  # a screen: every idea


def test_screens_are_reported_on_their_own_length_and_not_judged_against_the_30k_target(tmp_path: Path) -> None:
    """docs/results/screens holds 15,000-step runs: drawn apart, their score is no answer to the 30k target."""
    pytest.importorskip("matplotlib")
    for seed in (0, 1):
        scored_run(tmp_path, "mbpo_redq", seed, 2_000.0, evals=5)  # 5,000 to 15,000 env steps
        scored_run(tmp_path, "mbpo_redq_real_half", seed, 2_100.0, evals=5)
    result = locomotion.report("hopper", tmp_path, [0, 1], charts=tmp_path / "img")
    assert result["learners"]["mbpo_redq"]["mean_score"] == 2_000.0
    assert result["targets"]["mean_at_least_1850"] is None
    assert Path(result["plot"]) == tmp_path / "img" / "hopper_learning_curves.png"
    assert statistics.fmean([2_000.0, 2_100.0]) > locomotion.SCORE_TARGETS["hopper"]


def test_a_screen_score_is_the_mean_of_the_evaluations_from_5k_to_15k_once_the_run_reached_15k(
        tmp_path: Path) -> None:
    """The async trainer's evaluations land a few dozen steps past each milestone (5,056 ... 15,040); the one
    before the random steps end and any after 15k are not the screen's. A run at 30k has one too.
    """
    evals = {2_560: 9.0, 5_056: 100.0, 7_552: 200.0, 10_048: 300.0, 12_544: 400.0, 15_040: 500.0, 17_536: 9e3}
    assert locomotion.screen_score(evals) == 300.0
    assert locomotion.screen_score({k: v for k, v in evals.items() if k < 15_000}) is None  # not there yet
    run_dir = locomotion.run_dir_of(tmp_path, "hopper", "redq", 3)
    finished_run(run_dir, [100.0, 200.0, 300.0, 400.0, 500.0] + [1_000.0] * 6)  # 5,000 to 30,000 env steps
    summary = locomotion.summarize("redq", [run_dir], reps=10)
    assert summary["screen_scores"] == {3: 300.0} and summary["runs"][0]["screen_score"] == 300.0


@pytest.mark.parametrize("env", ["hopper", "walker2d"])
def test_every_learner_loads_on_each_env_and_macura_takes_its_authors_border_for_that_env(env: str) -> None:
    """MACURA's border is xi times the zeta percentile of the first step's disagreement: the authors set
    xi 30, zeta 90 on Hopper and xi 0.3, zeta 95 on Walker2d (their overrides/macura_{hopper,walker}.yaml).
    """
    from mbpo.config import load_config

    for learner in locomotion.CONFIGS:
        load_config(*locomotion.learner_config(env, learner))  # a key or value a config refuses fails here
    model = load_config(*locomotion.learner_config(env, "mbpo_redq_macura")).model
    assert model.macura and model.rollout_schedule[-1] == 10
    assert (model.macura_scale, model.macura_quantile) == {"hopper": (30.0, 0.9), "walker2d": (0.3, 0.95)}[env]
