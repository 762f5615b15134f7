"""The staged smoke checks and the CLI's random rollout behave as documented."""

from __future__ import annotations

import json

import pytest

from mbpo import cli, smoke

pytestmark = pytest.mark.timeout(180)


def test_smoke_stages_print_in_order_and_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert smoke.main(["--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[Test] Starting simple async test with device: cpu"
    assert out[1] == "[Test] Environment created: obs_dim=3, act_dim=1"
    assert out[2] == "[Test 1] Basic environment interaction..."
    assert "  Step 0: obs shape=(4, 3), rewards shape=(4,)" in out
    assert out[-1] == "[Test] All tests completed successfully!"


def test_first_failing_stage_stops_with_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    def broken(ctx: object) -> None:
        raise RuntimeError("boom from stage 1")

    monkeypatch.setattr(smoke, "STAGES", [("Broken", broken), ("Never", lambda ctx: ran.append("x"))])
    assert smoke.main(["--device", "cpu"]) == 1
    captured = capsys.readouterr()
    assert "[Test 1] Error: boom from stage 1" in captured.out
    assert "Traceback (most recent call last)" in captured.err and "boom from stage 1" in captured.err
    assert ran == [] and "All tests completed" not in captured.out


def test_smoke_runs_a_discrete_env(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The stages that use ``--env``; the last trains PointMass whatever ``--env`` is (the test above runs it)."""
    assert smoke.STAGES[-1][1] is smoke.stage_training
    monkeypatch.setattr(smoke, "STAGES", smoke.STAGES[:-1])
    assert smoke.main(["--device", "cpu", "--env", "CartPole-v1"]) == 0
    out = capsys.readouterr().out
    assert "obs_dim=4, act_dim=2" in out and out.splitlines()[-1] == "[Test] All tests completed successfully!"


def test_rollout_is_labelled_and_measures_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["rollout", "--num-envs", "8", "--steps", "250", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert "random-policy rollout" in captured.err
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert result["env_id"] == "Pendulum-v1" and result["env_steps"] == 2000
    assert result["episodes"] == 8  # every env truncates once at step 200
    assert -2000 < result["mean_return"] < 0


def test_cli_without_a_command_trains_the_default_config(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_train(args: object) -> int:
        seen["args"] = args
        return 0

    monkeypatch.setattr(cli, "cmd_train", fake_train)  # build_parser binds the name at call time
    assert cli.main(["--debug", "seed=3"]) == 0
    assert seen["args"].config == "configs/pendulum_mbpo.yaml" and seen["args"].overrides == ["seed=3"]
    assert seen["args"].debug


def test_debug_flag_is_accepted_after_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["rollout", "--num-envs", "2", "--steps", "3", "--device", "cpu", "--debug"]) == 0
    assert "debug mode" in capsys.readouterr().err


def test_the_training_stage_fails_where_the_model_never_trained_or_rolled_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain SAC learns PointMass too: with the model's rollouts broken the stage passed on the return alone."""
    from pathlib import Path
    from types import SimpleNamespace

    import mbpo.trainers

    class Learned:  # a run whose return improved while its model did nothing
        def __init__(self, config: object, run_dir: str) -> None:
            self.run_dir = Path(run_dir)

        def run(self) -> dict[str, float]:
            (self.run_dir / "metrics.csv").write_text("env_steps,eval_return\n100,-8.0\n200,-0.6\n300,-0.5\n")
            return {"env_steps": 300, "updates": 300, "utd_ratio_realised": 1.0, "model_version": 0,
                    "model_buffer_size": 0}

    monkeypatch.setattr(mbpo.trainers, "AsyncTrainer", Learned)
    context = SimpleNamespace(env=SimpleNamespace(device="cpu"))
    with pytest.raises(AssertionError, match="the model never trained or rolled out"):
        smoke.stage_training(context)  # type: ignore[arg-type]
