"""`python -m mbpo train|eval|resume|plot` end to end on a tiny run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mbpo import cli
from mbpo.run.metrics import read_metrics
from mbpo.run.run_dir import safe_name
from mbpo.run.throughput import interval_rates, steady_rate

pytestmark = pytest.mark.timeout(120)

TINY = ["device=cpu", "progress=false", "total_env_steps=300", "eval_every=150", "eval_episodes=2",
        "log_every=150", "agent.learning_starts=100", "agent.batch_size=32", "agent.sac.hidden_sizes=[32,32]",
        "checkpoint.every=150", "checkpoint.keep=1", "trainer=sync"]


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_train_eval_resume_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", f"run_dir={run}", *TINY]) == 0
    out = capsys.readouterr().out
    assert last_json(out)["env_steps"] == 300
    whole = last_json(out)["env_steps_per_s_whole_run"]  # the summary line: steady rate, whole-run rate beside it
    rows = read_metrics(run / "metrics.csv")
    assert (f"({steady_rate(rows):,.1f} env steps/s steady, {interval_rates(rows)[-1]:,.1f} in the last interval, "
            f"{whole:,.1f} over the whole run)") in out
    assert (run / "config.yaml").read_text().count("total_env_steps: 300") == 1
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["ckpt_000000000300.pt"]  # keep=1
    assert [r["env_steps"] for r in read_metrics(run / "metrics.csv")] == ["150", "300"]

    assert cli.main(["eval", "--checkpoint", str(run / "checkpoints/ckpt_000000000300.pt"), "--episodes", "3"]) == 0
    result = last_json(capsys.readouterr().out)
    assert result["episodes"] == 3 and result["env_steps"] == 300 and result["mean_return"] < 0

    assert cli.main(["resume", str(run), "total_env_steps=450"]) == 0
    assert last_json(capsys.readouterr().out)["env_steps"] == 450
    assert [r["env_steps"] for r in read_metrics(run / "metrics.csv")] == ["150", "300", "450"]
    assert "total_env_steps: 300" in (run / "config.yaml").read_text()  # the start; resumes.yaml logs the rest
    assert "total_env_steps=450" in (run / "resumes.yaml").read_text()

    assert cli.main(["plot", str(run)]) == 0
    png = Path(capsys.readouterr().out.strip())
    assert png == run / "learning_curve.png" and png.read_bytes()[:4] == b"\x89PNG"


def test_train_refuses_to_overwrite_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """And its start-up line names the device ``auto`` became (it said ``device=auto``, the next lines ``cpu``)."""
    run = tmp_path / "run"
    fast = ["model.enabled=false", "agent.utd_ratio=1"]  # the refusal and the start-up line, not the learning
    assert cli.main(["train", f"run_dir={run}", *TINY, "total_env_steps=150", "device=auto", *fast]) == 0
    assert re.search(r", device=auto \((cpu|cuda:\d+)\); run dir ", capsys.readouterr().err)
    assert cli.main(["train", f"run_dir={run}", *TINY]) == 2
    assert "already holds a run with checkpoints" in capsys.readouterr().err


def test_config_errors_exit_2_with_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "env.num_envs=0"]) == 2
    assert "env.num_envs=0 is out of range" in capsys.readouterr().err


def test_help_config_lists_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "--config", "configs/hopper_mbpo.yaml", "--help-config"]) == 0  # anywhere, as --debug
    assert capsys.readouterr().out.startswith("# every key with the schema's default")
    assert cli.main(["--help-config"]) == 0
    out = capsys.readouterr().out
    assert "agent.utd_ratio = null\n    Gradient updates per collected env transition" in out
    assert out.startswith("# every key with the schema's default and meaning; a config file sets its own")
    # spelled as an override or a YAML file takes it: what a user copies works
    assert "\nrun_dir = null\n" in out and "\neval_video = false\n" in out and "\ntrainer = async\n" in out
    assert "\nagent.sac.hidden_sizes = [256, 256]\n" in out and "\nenv.kwargs = {}\n" in out


def test_plot_compares_runs_with_seeds_as_median_and_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mbpo.run.plotting import curves

    runs = []
    few = "agent.learning_starts=250"  # 50 updates a run (100 at utd 2): the curves are the question, not the learning
    for name, extra in (("a0", ["seed=0"]), ("a1", ["seed=1"]), ("b0", ["seed=0", "agent.utd_ratio=2"])):
        runs.append(tmp_path / name)
        assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", f"run_dir={runs[-1]}", *TINY, few,
                         *extra]) == 0
    data = curves(runs)
    sync = ", sync trainer"  # TINY runs the sync trainer
    assert set(data) == {f"Pendulum-v1 SAC, utd 1{sync}", f"Pendulum-v1 SAC, utd 2{sync}"}  # the config's utd is 1
    two = data[f"Pendulum-v1 SAC, utd 1{sync}"]
    assert two["seeds"] == [0, 1] and two["x"] == [150.0, 300.0]
    evals = [[float(r["eval_return"]) for r in read_metrics(run / "metrics.csv")] for run in runs[:2]]
    per_eval = list(zip(*evals, strict=True))
    assert two["low"] == [min(v) for v in per_eval] and two["high"] == [max(v) for v in per_eval]
    capsys.readouterr()
    out = tmp_path / "cmp.png"
    assert cli.main(["plot", *map(str, runs), "--out", str(out), "--x", "wall_s"]) == 0
    assert Path(capsys.readouterr().out.strip()) == out and out.read_bytes()[:4] == b"\x89PNG"


def test_plot_of_an_mbpo_run_adds_the_model_health_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "mbpo"
    assert cli.main(["train", "--config", "configs/pendulum_mbpo.yaml", f"run_dir={run}", *TINY,
                     "model.hidden_sizes=[16,16]", "model.weight_decay=[0,0,0]", "model.max_epochs=3",
                     "model.rollouts_per_real=2", "agent.utd_ratio=1", "log_every=50"]) == 0
    rows = read_metrics(run / "metrics.csv")
    assert rows[-1]["model_err_delta"] and rows[-1]["model_open_loop_err_5"] and rows[-1]["rollout_mean_length"]
    assert [r["q_bias"] != "" for r in rows] == [bool(r["eval_return"]) for r in rows]  # with every evaluation
    capsys.readouterr()
    assert cli.main(["plot", str(run)]) == 0
    curve, health = map(Path, capsys.readouterr().out.split())
    assert curve == run / "learning_curve.png" and health == run / "learning_curve_model_health.png"
    assert health.read_bytes()[:4] == b"\x89PNG"


def test_a_factory_env_trains_evaluates_resumes_and_plots_from_the_cli(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """env.factory is stored in the run's config, so eval, resume and plot rebuild the same env from it."""
    from mbpo.config import config_from_yaml
    from mbpo.run.checkpoint import load_checkpoint
    from mbpo.run.plotting import curves

    run = tmp_path / "run"
    assert cli.main(["train", "--config", "examples/point_reach_sac.yaml", f"run_dir={run}", *TINY,
                     "env.num_envs=2", "env.kwargs.dim=3"]) == 0
    assert last_json(capsys.readouterr().out)["env_steps"] == 300
    checkpoint = run / "checkpoints/ckpt_000000000300.pt"
    stored = config_from_yaml(load_checkpoint(checkpoint)["config"])
    assert stored.env.factory == "examples.point_reach:make_env" and stored.env.kwargs == {"dim": 3, "goal_radius": 0.1}
    assert config_from_yaml((run / "config.yaml").read_text()) == stored

    assert cli.main(["eval", "--checkpoint", str(checkpoint), "--episodes", "3"]) == 0  # a 3-d PointReach, or fails
    result = last_json(capsys.readouterr().out)
    assert result["env_id"] == "PointReach" and result["episodes"] == 3 and result["mean_return"] < 0

    with pytest.warns(UserWarning, match="PointReach cannot save its simulator state"):
        assert cli.main(["resume", str(run), "total_env_steps=450"]) == 0
    assert last_json(capsys.readouterr().out)["env_steps"] == 450
    assert list(curves([run])) == ["PointReach SAC, utd 1, sync trainer"]


@pytest.mark.parametrize(("env_id", "name"), [
    ("../../evil/x", "evil_x"), ("a/b c", "a_b_c"), ("Pendülum-v1", "Pend_lum-v1"), ("..", "env"),
    ("ALE/Pong-v5", "ALE_Pong-v5"), ("MyTask-v0", "MyTask-v0"),
])
def test_an_env_id_becomes_one_safe_path_component(env_id: str, name: str) -> None:
    assert safe_name(env_id) == name


def test_a_run_dir_stays_under_runs_whatever_the_env_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    fast = ["model.enabled=false", "agent.utd_ratio=1"]  # the run dir's name is the question, not the learning
    assert cli.main(["train", "env.factory=tests.envs.factories:ours", "env.id=../../evil/x y", *TINY, *fast]) == 0
    run = Path(last_json(capsys.readouterr().out)["run_dir"])
    assert run.parent == Path("runs") and run.name.startswith("evil_x_y-sac-s0-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # nothing written outside
    model = ["model.hidden_sizes=[16,16]", "model.weight_decay=[0.0,0.0,0.0]", "model.max_epochs=1",
             "model.train_freq=150", "agent.utd_ratio=1"]
    assert cli.main(["train", "--config", str(Path(__file__).parents[1] / "configs/pendulum_mbpo.yaml"), *TINY,
                     *model]) == 0
    assert Path(last_json(capsys.readouterr().out)["run_dir"]).name.startswith("Pendulum-v1-mbpo-sac-s0-")


def test_a_run_dir_under_home_written_with_a_tilde_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``run_dir: ~/runs/x`` in YAML, or a quoted override, reaches Python with its ~ (no shell expands it): the
    run made a directory named ``~`` in the current one.
    """
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    fast = ["model.enabled=false", "agent.utd_ratio=1", "total_env_steps=150"]
    assert cli.main(["train", "run_dir=~/runs/x", *TINY, *fast]) == 0
    run = tmp_path / "home" / "runs" / "x"
    assert last_json(capsys.readouterr().out)["run_dir"] == str(run) and (run / "metrics.csv").is_file()
    assert list((tmp_path / "work").iterdir()) == []
    assert f"run_dir: {run}" in (run / "config.yaml").read_text()


def test_a_start_that_fails_before_its_first_step_leaves_no_run_dir(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", f"run_dir={run}", *TINY, "env.num_envs=100000000000"]) == 2
    assert "error: " in capsys.readouterr().err and not run.exists()
    kept = tmp_path / "kept"  # a dir the user made is theirs: it stays
    kept.mkdir()
    assert cli.main(["train", f"run_dir={kept}", *TINY, "env.num_envs=100000000000"]) == 2
    assert kept.is_dir()


def test_plot_passes_over_a_run_without_evaluations_and_says_so(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    good, empty, never = tmp_path / "good", tmp_path / "empty", tmp_path / "never"
    assert cli.main(["train", f"run_dir={good}", *TINY, "model.enabled=false", "agent.utd_ratio=1"]) == 0
    empty.mkdir()
    (empty / "metrics.csv").write_text("env_steps,updates,wall_s,train_return,eval_return\n")
    never.mkdir()
    (never / ".lock").write_text("")
    capsys.readouterr()
    assert cli.main(["plot", str(good), str(empty), str(never), "--out", str(tmp_path / "c.png")]) == 0
    err = capsys.readouterr().err
    assert f"passed over {empty}: no evaluations yet" in err and f"passed over {never}: no evaluations yet" in err
    assert cli.main(["plot", str(empty)]) == 2
    assert f"error: no evaluations yet in {empty}" in capsys.readouterr().err


def test_collector_settings_for_a_sync_trainer_are_said_to_have_no_effect(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sync run steps its one env in its own loop: it trains, with a line naming the runtime keys it does not use;
    a plain run prints no such line.
    """
    run = tmp_path / "run"
    capsys.readouterr()
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", f"run_dir={run}", *TINY,
                     "runtime.backend=process", "runtime.num_collectors=4"]) == 0
    captured = capsys.readouterr()
    assert last_json(captured.out)["env_steps"] == 300
    assert ("note: runtime.backend=process, runtime.num_collectors=4 have no effect with trainer=sync"
            in captured.err)
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", f"run_dir={tmp_path / 'more'}", *TINY,
                     "total_env_steps=150", "runtime.collection_batch_size=8", "runtime.ray.num_cpus_per_collector=2",
                     "runtime.nonfinite=drop"]) == 0
    assert ("note: runtime.collection_batch_size=8, runtime.ray.num_cpus_per_collector=2.0 have no effect with "
            "trainer=sync" in capsys.readouterr().err)  # every runtime key it does not read; nonfinite it does
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", f"run_dir={tmp_path / 'plain'}", *TINY,
                     "total_env_steps=150"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_the_summary_line_is_strict_json_with_null_for_a_loss_over_no_update(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run that stopped before its first update has no losses: null, as metrics.csv's empty cells, not NaN
    (which json.loads reads but strict parsers, jq and JavaScript do not).
    """
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the summary line")

    run = tmp_path / "run"
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", f"run_dir={run}", *TINY,
                     "total_env_steps=99", "eval_every=99", "log_every=99"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1], parse_constant=refuse)
    assert summary["updates"] == 0 and summary["loss_critic"] is None and summary["env_steps"] == 99


def test_torch_threads_under_async_a_key_of_a_part_left_off_and_a_run_that_never_evaluates_are_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An async run's threads take runtime.*_threads, not torch_threads; eval_every above the run's length means
    no evaluation at all: each trains, with one line that says so.
    """
    args = ["train", "--config", "configs/pendulum_sac.yaml", *TINY, "trainer=async", "runtime.num_collectors=1"]
    assert cli.main([*args, f"run_dir={tmp_path / 'a'}", "torch_threads=2", "eval_every=301",
                     "model.real_ratio=0.5"]) == 0
    err = capsys.readouterr().err
    assert "[mbpo] note: model.real_ratio=0.5 has no effect with model.enabled=false" in err
    assert ("[mbpo] note: torch_threads=2 has no effect on training with trainer=async: runtime.learner_threads, "
            "runtime.model_threads and runtime.collector_threads set each thread's") in err
    assert ("[mbpo] warning: eval_every=301 is above total_env_steps=300: this run never evaluates, so it has no "
            "eval_return to report or plot; lower eval_every") in err
    assert cli.main([*args, f"run_dir={tmp_path / 'b'}", "runtime.num_collectors=2"]) == 0
    err = capsys.readouterr().err
    assert "note:" not in err and "never evaluates" not in err
    assert "training of sac on Pendulum-v1 2 collectors x 1 envs, device=cpu" in err  # not x1: each collector's
