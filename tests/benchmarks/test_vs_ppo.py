"""benchmarks/vs_ppo.py's ``--sim-cost-us``: the slowed env reaches every learner's env, PPO's in-process and ours
by factory name on every backend, and the crossover cost is computed from the curves (its runs take 10+ minutes
and are not part of the suite).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from envs import sim_cost
from envs.sim_cost import SimCostEnv
from mbpo import cli
from mbpo.config import load_config
from mbpo.models.rules import model_rules
from mbpo.models.termination import known_termination

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import vs_ppo  # noqa: E402

pytestmark = pytest.mark.timeout(120)

NUM_ENVS, STEPS, COST_US = 2, 200, 1000.0
TINY = ["device=cpu", "progress=false", f"total_env_steps={STEPS}", f"eval_every={STEPS}", "eval_episodes=3",
        f"log_every={STEPS}", "agent.learning_starts=100", "agent.batch_size=16", "agent.sac.hidden_sizes=[16,16]",
        "model.enabled=false", "agent.utd_ratio=1", "checkpoint.every=100000", f"env.num_envs={NUM_ENVS}",
        "runtime.num_collectors=1", "runtime.collection_batch_size=20"]
SLOWED = ["env.id=SimCost-Pendulum-v1", "env.factory=envs.sim_cost:slowed", "env.kwargs.env_id=Pendulum-v1",
          f"env.kwargs.cost_us={COST_US}", f"env.kwargs.only_num_envs={NUM_ENVS}"]
STEP_COST_S = COST_US * NUM_ENVS / 1e6


def reached(env_steps: int, train_s: float) -> dict[str, Any]:
    return {"reached": True, "env_steps_to_threshold": env_steps, "train_s_to_threshold": train_s}


NOT_REACHED = {"reached": False, "env_steps_to_threshold": None, "train_s_to_threshold": None}
PPO = reached(110_000, 10.0)


@pytest.mark.parametrize(("learner", "cost_us", "expected"), [
    (reached(10_000, 30.0), 0.0, 200.0),  # 20 s more, 100,000 env steps fewer: 20e6 µs / 1e5 = 200 µs each
    (reached(10_000, 30.0), 50.0, 250.0),  # measured at 50 µs: the same lines, crossing 200 µs higher
    (reached(10_000, 5.0), 0.0, "always"),  # faster already at no cost, and fewer env steps
    (reached(10_000, 5.0), 100.0, 50.0),  # faster at 100 µs; below 50 µs PPO's saved 5 s outweigh 1e5 steps
    (reached(10_000, 5.0), 20.0, "always"),  # the crossing (20 - 50 µs) is below any cost
    (reached(110_000, 5.0), 0.0, "always"),  # PPO's env steps in less time: faster at every cost
    (reached(110_000, 10.0), 0.0, "never"),  # a tie is not a win
    (reached(110_000, 30.0), 0.0, "never"),
    (reached(200_000, 30.0), 0.0, "never"),  # more env steps: a dearer sim only widens the gap
    (reached(200_000, 5.0), 0.0, "never"),  # faster now, but no cost above which it wins
    (NOT_REACHED, 0.0, None),
])
def test_crossover_on_hand_computed_cases(learner: dict[str, Any], cost_us: float, expected: Any) -> None:
    assert vs_ppo.crossover_us(learner, PPO, cost_us) == expected


def test_at_the_crossover_both_take_the_same_wall_clock_by_the_model() -> None:
    learner, cost = reached(69_632, 401.0), 5.0
    crossing = vs_ppo.crossover_us(learner, reached(884_736, 5.8), cost)
    assert isinstance(crossing, float)
    ours = 401.0 + (crossing - cost) * 1e-6 * 69_632
    theirs = 5.8 + (crossing - cost) * 1e-6 * 884_736
    assert ours == pytest.approx(theirs, abs=0.1)  # C* rounded to 0.1 µs
    assert vs_ppo.crossover_us(learner, NOT_REACHED, cost) is None


@pytest.mark.parametrize("value", ["-1", "-0.001", "abc", "nan", "inf", ""])
def test_a_bad_cost_is_one_error_line_and_exit_2(value: str, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["vs_ppo.py", "--learners", "ppo", "--sim-cost-us", value])
    monkeypatch.setattr(vs_ppo, "run_ppo", lambda *a: pytest.fail("ran with a bad cost"))
    with pytest.raises(SystemExit) as exit_info:
        vs_ppo.main()
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == ""
    assert err.splitlines() == [f"error: --sim-cost-us {value!r} is not allowed; expected a finite number >= 0 of "
                                "microseconds per env transition (e.g. 100 for a contact-rich simulator)"]


def test_the_report_gives_the_cost_and_each_learners_crossover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The learners' runs replaced by curves (env steps, training s, return): PPO reaches -200 at 110,000 env
    steps in 10 s, SAC at 10,000 in 30 s (so C* = 25 + 20e6 / 1e5 = 225 µs), MBPO not at all.
    """
    def curve(points: list[tuple[int, float, float]]) -> vs_ppo.Curve:
        return vs_ppo.Curve(points=points, time_s={"env": 1.0})

    curves = {"ppo": curve([(55_000, 5.0, -900.0), (110_000, 10.0, -150.0), (165_000, 15.0, -140.0)]),
              "sac_scale": curve([(10_000, 30.0, -180.0), (20_000, 60.0, -150.0)]),
              "mbpo_scale": curve([(10_000, 30.0, -900.0)])}
    monkeypatch.setattr(vs_ppo, "run_ppo", lambda task, args: curves["ppo"])
    monkeypatch.setattr(vs_ppo, "run_ours", lambda task, name, args, root: curves[name])
    monkeypatch.setattr(sys, "argv", ["vs_ppo.py", "--learners", "ppo", "sac_scale", "mbpo_scale", "--stay", "2",
                                      "--sim-cost-us", "25", "--out", str(tmp_path)])
    vs_ppo.main()
    report = json.loads(capsys.readouterr().out)
    assert report["sim_cost_us"] == 25.0
    assert report["pendulum"]["crossover_us"] == {"sac_scale": 225.0, "mbpo_scale": None}
    assert report["pendulum"]["fastest_to_threshold"] == "ppo"
    assert report["pendulum"]["mbpo_vs_sac_scale"]["targets_met"] == {"env_steps": False, "train_s": False}


def test_mbpo_against_sac_scale_is_two_ratios_with_issue_52s_bounds() -> None:
    """MBPO at 30,000 env steps in 100 s against SAC at 70,000 in 60 s: 0.429x the env steps (within 0.5x),
    1.667x the seconds (within 2x); the fastest is the one with the fewest training seconds.
    """
    def reached(n: int, t: float) -> dict[str, Any]:
        return {"reached": True, "env_steps_to_threshold": n, "train_s_to_threshold": t}

    out = vs_ppo.mbpo_vs_sac(reached(30_000, 100.0), reached(70_000, 60.0))
    assert out["env_steps"] == 0.429 and out["train_s"] == 1.667
    assert out["targets_met"] == {"env_steps": True, "train_s": True}
    assert vs_ppo.fastest({"mbpo_scale": reached(30_000, 100.0), "sac_scale": reached(70_000, 60.0),
                           "ppo": {"reached": False}}) == "sac_scale"


def test_ppo_steps_the_slowed_env_and_the_baseline_is_unchanged_at_zero() -> None:
    task = vs_ppo.TASKS["pendulum"]
    args = argparse.Namespace(num_envs=4, device="cpu", seed=0, sim_cost_us=25.0)
    env = vs_ppo.ppo_env(task, args)
    assert isinstance(env, SimCostEnv) and env.step_cost_s == pytest.approx(25.0 * 4 / 1e6)
    assert not isinstance(vs_ppo.ppo_env(task, argparse.Namespace(**{**vars(args), "sim_cost_us": 0.0})), SimCostEnv)


@pytest.mark.parametrize("name", ["sac_scale", "mbpo_scale", "sac_single", "mbpo_single"])
def test_our_learners_build_the_slowed_env_by_name_and_keep_their_rules(name: str) -> None:
    """What the overrides make of each Pendulum config: the training envs slowed (evaluation's not), a label that
    names no built-in env, and an MBPO run's termination rule still the one known for Pendulum-v1.
    """
    task = vs_ppo.TASKS["pendulum"]
    args = argparse.Namespace(num_envs=None, sim_cost_us=100.0)
    overrides = vs_ppo.learner_overrides(task, name, args)
    config = ROOT / "configs" / task.configs[name][0]
    plain, slowed = load_config(config, task.configs[name][1]), load_config(config, overrides)
    assert slowed.env.factory == "envs.sim_cost:slowed" and slowed.env.id == "SimCost100us-Pendulum-v1"  # validated
    assert slowed.env.kwargs == {"env_id": "Pendulum-v1", "cost_us": 100.0, "source": "auto",
                                 "only_num_envs": plain.env.num_envs}
    if plain.model.enabled:
        rule, unslowed = (model_rules(c.model, c.env.id).termination for c in (slowed, plain))
        assert rule is not None and unslowed is not None
        assert rule.fn is unslowed.fn is known_termination("Pendulum-v1")  # what the run has without the cost
    else:
        assert slowed.model == plain.model
    no_cost = argparse.Namespace(num_envs=None, sim_cost_us=0.0)
    assert vs_ppo.learner_overrides(task, name, no_cost) == task.configs[name][1]


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """What each slowed ``step`` asks :func:`envs.sim_cost.wait` for, in seconds; nothing is waited."""
    asked: list[float] = []
    monkeypatch.setattr(sim_cost, "wait", asked.append)
    return asked


def last_row(run_dir: Path) -> dict[str, str]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))[-1]


@pytest.mark.parametrize("trainer", [["trainer=sync"], ["trainer=async", "runtime.backend=thread"]])
def test_mbpo_train_steps_the_slowed_env_by_factory_name(trainer: list[str], tmp_path: Path, waits: list[float],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Every vector step of the training env asks for the cost (the wait itself replaced by a recorder); the
    evaluation env, of eval_episodes=3 envs, does not.
    """
    assert cli.main(["train", *SLOWED, *TINY, *trainer, f"run_dir={tmp_path / 'run'}"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == STEPS
    assert waits == [pytest.approx(STEP_COST_S)] * len(waits)
    steps = STEPS // NUM_ENVS
    assert steps <= len(waits) <= steps + 10, "the training env's vector steps (and a probe's), no evaluation's"


@pytest.mark.parametrize(("cost", "shown"), [("-1", "-1"), ("fast", "'fast'")])
def test_a_bad_cost_in_env_kwargs_is_one_error_line_and_exit_2(cost: str, shown: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    slowed = [f"env.kwargs.cost_us={cost}" if o.startswith("env.kwargs.cost_us=") else o for o in SLOWED]
    assert cli.main(["train", *slowed, *TINY, f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        f"error: env.factory='envs.sim_cost:slowed' cannot take env.kwargs.cost_us={shown}; "
        "expected a finite number >= 0 of microseconds per env transition (e.g. 100 for a contact-rich simulator)"]
    assert "Traceback" not in err


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["process"])  # as a parameter: the worker's fork server (tests/conftest.py)
def test_collectors_in_other_processes_build_the_slowed_env_by_name(backend: str, tmp_path: Path) -> None:
    """A child imports the factory by name and waits in its own steps: the env time it reports is at least one
    wait per vector step (a wait never returns early), where Pendulum's own steps take ~1% of that. A Ray actor
    builds a factory by name the same way (tests/runtime/test_ray_backend.py), so the process backend stands
    for both here: a Ray run costs this suite over a minute.
    """
    run_dir = tmp_path / "run"
    assert cli.main(["train", *SLOWED, *TINY, "trainer=async", f"runtime.backend={backend}",
                     f"run_dir={run_dir}"]) == 0
    row = last_row(run_dir)
    assert int(row["env_steps"]) == STEPS
    assert float(row["time_env_s"]) >= STEPS // NUM_ENVS * STEP_COST_S


def test_kept_runs_land_under_the_folder_and_an_existing_one_is_refused(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``--keep-runs DIR``: our learners run in DIR/<env>/<learner>; a second invocation onto the same folder is
    one error line and exit 2 before anything runs, so a kept run is never written over.
    """
    roots: list[Path] = []

    def fake_run(task: vs_ppo.Task, name: str, args: Any, root: Path) -> vs_ppo.Curve:
        roots.append(root)
        (root / name).mkdir()
        return vs_ppo.Curve(points=[(4096, 1.0, -150.0)])

    monkeypatch.setattr(vs_ppo, "run_ours", fake_run)
    argv = ["vs_ppo.py", "--learners", "sac_scale", "--stay", "1", "--out", str(tmp_path),
            "--keep-runs", str(tmp_path / "kept")]
    monkeypatch.setattr(sys, "argv", argv)
    vs_ppo.main()
    assert roots == [tmp_path / "kept" / "pendulum"] and (tmp_path / "kept" / "pendulum" / "sac_scale").is_dir()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        vs_ppo.main()
    assert exit_.value.code == 2 and len(roots) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: --keep-runs {tmp_path / 'kept'} already holds {tmp_path / 'kept' / 'pendulum' / 'sac_scale'}; "
        "expected a folder without this invocation's run dirs (move them, or name another folder)"]
