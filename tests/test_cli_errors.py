"""A user's mistake is one line on stderr, ``error: <what was wrong and how to fix it>``, and exit 2.

The first cases run ``python -m mbpo`` as a subprocess, as a user would, and check the exit code, the
message and that no traceback is printed; a bug keeps its traceback, and ``--debug`` shows it always. The rest
call ``cli.main`` in this process (the same path, without a process and an import of torch per case).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
REPO = Path(__file__).resolve().parents[1]
FAST = ["device=cpu", "progress=false", "total_env_steps=64", "agent.learning_starts=32", "eval_every=64",
        "eval_episodes=1"]
FAST_RUN = [*FAST, "agent.utd_ratio=1"]
"""FAST for a run of the default config that trains to its end or to a checkpoint: one update per env step instead
of the config's 20 (about 4 s of CPU per 64 steps), as nothing these tests check depends on the learning."""


def mbpo(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mbpo", *args], cwd=cwd, capture_output=True, text=True, timeout=100)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The ``error:`` line, after checking exit 2 and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-2000:]
    return errors[0]


def error_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``python -m mbpo ARGV`` in this process: exit 2 and one ``error:`` line, no traceback; that line (``capfd``
    also sees what a child process or C code writes to stderr).
    """
    from mbpo import cli

    capsys.readouterr()
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err[-2000:]
    return errors[0]


def test_config_errors(tmp_path: Path) -> None:
    assert "env.num_envs=0 is out of range" in one_error_line(mbpo("train", "env.num_envs=0"))
    assert "nope.yaml' does not exist" in one_error_line(mbpo("train", "--config", "nope.yaml"))
    line = one_error_line(mbpo("train", "--config", "myconf.yaml", cwd=tmp_path))  # as typed, not under the repo
    assert line == (f"error: config file 'myconf.yaml' does not exist here ({tmp_path}) nor in mbpo's folder "
                    f"({REPO}); expected a YAML file such as configs/pendulum_sac.yaml")
    assert "is a directory; expected a YAML file" in one_error_line(mbpo("train", "--config", "configs"))
    (tmp_path / "broken.yaml").write_text("seed: 0\nenv:\n  id: [Pendulum-v1\n")
    (tmp_path / "list.yaml").write_text("- seed: 0\n")
    line = one_error_line(mbpo("train", "--config", str(tmp_path / "broken.yaml")))
    assert "broken.yaml is not valid YAML" in line and "line 4" in line
    line = one_error_line(mbpo("train", "--config", str(tmp_path / "list.yaml")))
    assert "holds a YAML list at the top level" in line


def test_env_and_agent_errors(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    line = error_line(capfd, "train", "env.id=Pendulm-v1", f"run_dir={tmp_path / 'a'}", *FAST)
    assert "unknown env id 'Pendulm-v1'" in line and "Did you mean: Pendulum-v1" in line
    line = error_line(capfd, "train", "env.id=HalfCheetah-v5", "agent.name=dqn", "model.enabled=false",
                      f"run_dir={tmp_path / 'b'}", *FAST)
    assert "agent.name=dqn needs a discrete action space" in line and "use agent.name=sac" in line
    line = error_line(capfd, "train", "env.num_envs=100000000000", f"run_dir={tmp_path / 'c'}", *FAST)
    assert "need about" in line and "GiB" in line and "lower env.num_envs to at most" in line
    line = error_line(capfd, "train", f"run_dir={tmp_path / 'd'}", *FAST, "eval_episodes=100000000000")
    assert ("eval_episodes=100,000,000,000 runs as many Pendulum-v1 envs at once (one per episode), more than cpu "
            "has memory for; lower eval_episodes to at most") in line and "env.num_envs" not in line


def test_a_gymnasium_build_of_an_id_with_a_native_one_is_sized_as_gymnasiums(
        capfd: pytest.CaptureFixture[str]) -> None:
    """source=gymnasium builds gymnasium instances (tens of kB each), not the native batch: too many of them is the
    same one line at once, not minutes of building before memory runs out.
    """
    import envs

    with pytest.raises(envs.EnvTooLargeError, match="per gymnasium env instance"):
        envs.make("CartPole-v1", 10**9, source="gymnasium")


def test_gymnasium_envs_are_sized_against_host_memory_on_any_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gymnasium env's simulator lives in host memory whatever device its tensors go to: its batch was checked
    against the GPU's free memory (a small GPU refused what the host holds; a large one let through what it cannot).
    """
    from envs import registry

    asked: list[str] = []

    def available(device: torch.device) -> int:
        asked.append(str(device))
        return 10**12 if device.type == "cpu" else 10**6

    monkeypatch.setattr(registry, "available_memory", available)
    registry._check_fits("HalfCheetah-v5", 1_000, torch.device("cuda:0"), native=False)  # host RAM holds it
    registry._check_fits("Pendulum-v1", 1_000, torch.device("cuda:0"), native=True)  # a native env: the GPU's
    assert asked == ["cpu", "cuda:0"]


def test_env_factory_errors(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    line = error_line(capfd, "train", "env.id=Mine", "env.factory=examples.nope:make_env", *FAST,
                      f"run_dir={tmp_path / 'a'}")
    assert "env.factory='examples.nope:make_env' cannot be imported: no module named 'examples.nope'" in line
    line = error_line(capfd, "train", "env.id=Mine", "env.factory=envs.base:check_num_envs", *FAST,
                      f"run_dir={tmp_path / 'b'}")
    assert "env.factory='envs.base:check_num_envs' returned builtins.int; expected an envs.VecEnv" in line


def test_task_rule_errors(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A rule that does not import, or returns the wrong thing on real transitions, stops the start-up."""
    line = error_line(capfd, "train", "model.reward=nowhere_module:fn", f"run_dir={tmp_path / 'a'}", *FAST)
    assert "model.reward='nowhere_module:fn': importing 'nowhere_module' failed with ModuleNotFoundError" in line
    line = error_line(capfd, "train", "model.termination=tests.models.test_rules:pendulum_reward",
                      f"run_dir={tmp_path / 'b'}", *FAST)
    assert "returned torch.float32 (1,) on cpu; expected a tensor of torch.bool, shape (1,)" in line


@pytest.mark.skipif(torch.cuda.device_count() > 3, reason="this machine has a cuda:3")
def test_a_device_this_machine_lacks(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    line = error_line(capfd, "train", *FAST, "device=cuda:3", f"run_dir={tmp_path / 'r'}")
    assert "device='cuda:3' was requested but this machine has" in line


def test_a_device_mismatch_is_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's mismatch lists every component on its own line; the CLI folds it into one (a CPU-only
    machine cannot build a real mismatch from the command line, so the trainer raises it here).
    """
    from mbpo import cli
    from mbpo.device.plan import DeviceMismatchError

    def mismatch(*args: object) -> None:
        raise DeviceMismatchError("device plan: cuda:0. Components:\n  env: cpu\n  learner actor: cuda:0\n"
                                  "set env.device=cuda:0")

    monkeypatch.setattr("mbpo.trainers.make_trainer", mismatch)
    assert cli.main(["train", "device=cpu", "progress=false"]) == 2
    err = capsys.readouterr().err
    assert "error: device plan: cuda:0. Components: env: cpu; learner actor: cuda:0; set env.device=cuda:0\n" in err


def test_checkpoint_and_run_dir_errors(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """In this process (each subprocess costs an import of torch): the one-line rule is cli.main's, which the
    subprocess cases above check through ``python -m mbpo``.
    """
    from mbpo import cli

    assert "checkpoint 'nope.pt' does not exist" in error_line(capfd, "eval", "--checkpoint", "nope.pt")
    (tmp_path / "ckpt_000000000100.pt").write_bytes(b"PK\x03\x04 truncated")
    assert "is unreadable" in error_line(capfd, "eval", "--checkpoint", str(tmp_path / "ckpt_000000000100.pt"))
    assert "--episodes 0 is not allowed" in error_line(capfd, "eval", "--checkpoint", "nope.pt", "--episodes", "0")
    assert "does not exist" in error_line(capfd, "resume", str(tmp_path / "no-run"))
    line = error_line(capfd, "train", "run_dir=/proc/mbpo-run", *FAST)
    assert "run dir /proc/mbpo-run cannot be written" in line and "writable run_dir" in line
    run = tmp_path / "run"
    assert cli.main(["train", f"run_dir={run}", "trainer=sync", *FAST_RUN]) == 0
    assert "already holds a run with checkpoints" in error_line(capfd, "train", f"run_dir={run}", *FAST)


def test_overrides_before_and_after_the_config_and_debug_shows_the_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mbpo import cli

    code = cli.main(["train", "seed=1", "--config", "configs/pendulum_sac.yaml", f"run_dir={tmp_path / 'r'}",
                     "trainer=sync", *FAST])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    lines = out.strip().splitlines()
    assert lines[-2].startswith("[mbpo] 64 env steps,") and f"run dir {tmp_path / 'r'}" in lines[-2]
    assert '"last_eval_return"' in lines[-1] and '"last_eval_env_steps": 64' in lines[-1]
    assert cli.main(["--debug", "train", "env.id=Pendulm-v1", *FAST, f"run_dir={tmp_path / 'd'}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "UnknownEnvError" in err
    assert err.splitlines()[-1].startswith("error: unknown env id 'Pendulm-v1'")


def test_options_before_the_command_are_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse read ``--config X train`` as the command ``X`` ("invalid choice")."""
    line = error_line(capsys, "--config", "configs/pendulum_sac.yaml", "train", "env.num_envs=0")
    assert line == "error: env.num_envs=0 is out of range; expected a value in [1, inf)"


def test_an_option_abbreviated_as_argparse_allows_keeps_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse takes ``--num 64`` for ``--num-envs 64``; the reordering of overrides split the abbreviation from its
    value (``argument --num-envs: expected one argument``).
    """
    from mbpo import cli

    assert cli.main(["rollout", "--num", "3", "--st", "2", "--dev", "cpu", "--env", "CartPole-v1"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == 6
    line = error_line(capsys, "--conf", "configs/pendulum_sac.yaml", "train", "env.num_envs=0")
    assert line == "error: env.num_envs=0 is out of range; expected a value in [1, inf)"


@pytest.mark.parametrize(("argv", "line"), [
    (["train", "--seed", "1"], "error: --seed is not an option of train; config keys are overrides: write seed=1"),
    (["--seed", "2"], "error: --seed is not an option of train; config keys are overrides: write seed=2"),
    (["train", "--total-env-steps=500"],
     "error: --total-env-steps is not an option of train; config keys are overrides: write total_env_steps=500"),
    (["train", "--conf", "configs/pendulum_sac.yaml", "--env.num_envs", "4"],
     "error: --env.num_envs is not an option of train; config keys are overrides: write env.num_envs=4"),
    (["train", "--total-env-steps", "500", "--config", "configs/pendulum_sac.yaml"],
     "error: --total-env-steps is not an option of train; config keys are overrides: write total_env_steps=500"),
    (["--env", "Pendulum-v1"], "error: --env is not an option of train; config keys are overrides by their dotted "
                               "name, such as env.id=Pendulum-v1 (python -m mbpo --help-config lists them)"),
    (["configs/cartpole_dqn.yaml"], "error: override 'configs/cartpole_dqn.yaml' is not of the form key=value (e.g. "
                                    "env.num_envs=8); a config file is passed as --config configs/cartpole_dqn.yaml"),
])
def test_habits_of_other_trainers_command_lines_are_one_line_saying_how_we_spell_it(
        argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    """SB3 and rl-zoo take ``--seed 1`` and a config's path as an argument; argparse said "unrecognized arguments"
    after its usage, and the path was an override "not of the form key=value".
    """
    assert error_line(capsys, *argv) == line


def test_mistakes_that_once_ended_in_a_traceback_or_a_run_are_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "train", "--config", "configs/cartpole_dqn.yaml", "agent.sac.crossq=true", *FAST)
    assert "agent.sac.crossq=true is for agent.name=sac, and this run's agent.name=dqn does not use it" in line
    assert "seed=-1 is out of range; expected a value in [0, " in error_line(capsys, "train", "seed=-1", *FAST)
    line = error_line(capsys, "train", "seed=99999999999999999999", *FAST)
    assert "seed=99999999999999999999 is out of range" in line
    line = error_line(capsys, "train", "env.id=" + "A" * 300, "env.factory=examples.point_reach:make_env", *FAST)
    assert "is 300 characters long; expected at most 100: it names the run dir" in line
    line = error_line(capsys, "train", "agent.sac.num_critics=100000000", f"run_dir={tmp_path / 'big'}", *FAST)
    assert "the networks and buffers need" in line and "SAC networks with their optimizer state about" in line
    assert line.endswith("lower agent.sac.num_critics, agent.sac.hidden_sizes, agent.sac.critic_hidden_sizes")
    assert not (tmp_path / "big").exists()
    line = error_line(capsys, "train", f"run_dir={tmp_path / ('B' * 300)}", *FAST)
    assert "cannot be used (File name too long); choose another run_dir=<dir>" in line


def test_what_a_path_is_and_which_option_to_lower_are_named_truly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mbpo import cli

    file = tmp_path / "notes.txt"
    file.write_text("not a run\n")
    line = error_line(capsys, "train", f"run_dir={file}", *FAST)
    assert line == f"error: run dir {file} is a file; expected a directory: choose another run_dir=<dir>"
    line = error_line(capsys, "train", f"run_dir={file / 'run'}", *FAST)
    assert f"cannot be made: {file} on its path is a file, not a directory" in line
    assert f"run dir '{file}' is a file; expected a directory" in error_line(capsys, "resume", str(file))
    run = tmp_path / "run"
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", f"run_dir={run}", "trainer=sync", *FAST]) == 0
    line = error_line(capsys, "resume", str(run), "total_env_stepz=128")
    assert line.startswith("error: unknown config key 'total_env_stepz' (did you mean total_env_steps?); keys a "
                           "resume may change: total_env_steps, ")
    assert "'agent.sac.actor_lr' cannot change when resuming" in error_line(capsys, "resume", str(run),
                                                                            "agent.sac.actor_lr=0.1")
    # no run dir: said so, with the parent where that is one, and no .lock left in the user's directory
    notes = tmp_path / "notes"
    (notes / "checkpoints").mkdir(parents=True)  # another tool's
    (notes / "checkpoints" / "model_epoch10.pth").write_text("")
    (notes / "config.yaml").write_text("lr: 0.1\n")
    line = error_line(capsys, "resume", str(notes))
    assert line == (f"error: run dir '{notes}' holds no run.json and no mbpo checkpoint; expected a "
                    "directory written by `python -m mbpo train`")
    line = error_line(capsys, "resume", str(run / "checkpoints"))
    assert line.endswith(f"expected a directory written by `python -m mbpo train`; its parent is one: python -m mbpo "
                         f"resume {run}")
    assert not (notes / ".lock").exists() and not (run / "checkpoints" / ".lock").exists()
    line = error_line(capsys, "eval", "--checkpoint", str(run / "checkpoints" / "ckpt_000000000064.pt"),
                      "--episodes", "100000000000")
    assert "--episodes 100,000,000,000 runs as many Pendulum-v1 envs at once (one per episode)" in line
    assert "lower --episodes to at most" in line and "env.num_envs" not in line


def test_what_is_not_a_checkpoint_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run dir names its newest checkpoint; another file is 'not a checkpoint', without torch's advice to
    load it with weights_only=False (which would be wrong: it is no torch file at all).
    """
    from mbpo import cli

    run = tmp_path / "run"
    assert cli.main(["train", f"run_dir={run}", *FAST_RUN]) == 0
    capsys.readouterr()
    for path in (run, run / "checkpoints"):
        assert cli.main(["eval", "--checkpoint", str(path)]) == 2
        assert (f"error: {path} is a directory (a run dir?); expected a checkpoint file; its newest checkpoint is "
                f"{run / 'checkpoints' / 'ckpt_000000000064.pt'}") in capsys.readouterr().err
    (tmp_path / "notes.json").write_text('{"a": 1}\n')
    assert cli.main(["eval", "--checkpoint", str(tmp_path / "notes.json")]) == 2
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'notes.json'} is not a checkpoint: not a file torch.save writes" in err
    assert "weights_only" not in err
    (tmp_path / "empty").mkdir()
    for path, line in ((str(tmp_path / "empty"), f"error: {tmp_path / 'empty'} is a directory holding no checkpoint; "
                                                 "expected a checkpoint file (ckpt_*.pt)"),
                       ("", "error: --checkpoint is empty; expected the path of a ckpt_*.pt file")):
        assert cli.main(["eval", "--checkpoint", path]) == 2
        assert [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")] == [line]


def test_a_checkpoint_whose_weights_or_device_do_not_fit_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint edited by hand (its env, its agent's entries) or trained on a GPU this machine lacks: eval says
    what does not fit and, for the device, what to pass.
    """
    from mbpo import cli

    run = tmp_path / "run"
    assert cli.main(["train", "--config", "configs/cartpole_dqn.yaml", f"run_dir={run}", *FAST,
                     "agent.dqn.hidden_sizes=[16,16]"]) == 0
    state = torch.load(run / "checkpoints/ckpt_000000000064.pt", weights_only=True)
    capsys.readouterr()
    cases = {
        "other_env": ({**state, "config": state["config"].replace("CartPole-v1", "Acrobot-v1")},
                      "its agent does not fit the dqn learner on Acrobot-v1 that its own config builds (Error(s) in "
                      "loading state_dict"),
        "no_target": ({**state, "agent": {k: v for k, v in state["agent"].items() if k != "target_updater"}},
                      "its agent does not fit the dqn learner on CartPole-v1 that its own config builds (no "
                      "'target_updater' entry)"),
    }
    if not torch.cuda.is_available():
        cases["gpu_run"] = ({**state, "config": state["config"].replace("device: cpu", "device: cuda")},
                            "the checkpoint's run trained with device='cuda', which this machine does not have")
    for name, (edited, expected) in cases.items():
        path = tmp_path / f"{name}.pt"
        torch.save(edited, path)
        assert cli.main(["eval", "--checkpoint", str(path), "--episodes", "1"]) == 2, name
        lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")]
        assert len(lines) == 1 and expected in lines[0], (name, lines)
    if "gpu_run" in cases:
        assert lines[0].endswith("evaluate it here with --device cpu")
        assert cli.main(["eval", "--checkpoint", str(tmp_path / "gpu_run.pt"), "--episodes", "1", "--device",
                         "cpu"]) == 0


def test_eval_builds_env_and_policy_where_the_run_had_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with ``device=auto`` and ``env.device=cpu`` trained everything on CPU, GPU or not: eval of its
    checkpoint on a machine with a GPU builds the env there too (not on ``auto``'s GPU), so one ``--seed`` gives
    the episodes the run's own evaluations saw.
    """
    import envs
    from mbpo import cli
    from mbpo.runtime import env_builder

    run = tmp_path / "run"
    assert cli.main(["train", "--config", "configs/cartpole_dqn.yaml", f"run_dir={run}", *FAST, "device=auto",
                     "env.device=cpu", "agent.dqn.hidden_sizes=[16,16]"]) == 0
    capsys.readouterr()
    built: list[str] = []
    build = env_builder.build_env

    def spy_build(config: object, num_envs: int, device: object, *args: object, **kwargs: object) -> object:
        built.append(str(device))
        return build(config, num_envs, device, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(env_builder, "build_env", spy_build)
    monkeypatch.setattr(envs, "resolve_device", lambda d: torch.device("cuda:0" if d in ("auto", "cuda") else d))
    assert cli.main(["eval", "--checkpoint", str(run / "checkpoints/ckpt_000000000064.pt"), "--episodes", "2"]) == 0
    assert built == ["cpu"], built
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["episodes"] == 2


@pytest.mark.parametrize("command", [["eval", "--checkpoint", "x.pt"], ["rollout"]])
@pytest.mark.parametrize(("seed", "expected"), [("-5", "-5 is out of range; expected an integer in [0, 2**64 - 1]"),
                                                (str(2**64), f"{2**64} is out of range; expected an integer in [0, "
                                                             "2**64 - 1]"),
                                                ("x", "'x' is not an integer; expected one in [0, 2**64 - 1]")])
def test_a_seed_no_generator_takes_is_refused_by_eval_and_rollout(
        command: list[str], seed: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    from mbpo import cli

    with pytest.raises(SystemExit) as caught:
        cli.main([*command, "--seed", seed])
    assert caught.value.code == 2 and f"argument --seed: {expected}" in capsys.readouterr().err


def test_a_device_this_machine_lacks_is_named_by_the_commands_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """rollout and eval take --device; the error named the config's spelling, device='cuda:99'."""
    line = error_line(capsys, "rollout", "--env", "Pendulum-v1", "--device", "cuda:99", "--steps", "1")
    assert line.startswith("error: --device 'cuda:99' was requested but this machine has ") and "device=" not in line


def test_rollout_names_its_own_option_for_too_many_envs(capsys: pytest.CaptureFixture[str]) -> None:
    from mbpo import cli

    assert cli.main(["rollout", "--env", "CartPole-v1", "--num-envs", str(10**14), "--device", "cpu"]) == 2
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")][-1]
    assert line.startswith("error: --num-envs 100,000,000,000,000 CartPole-v1 envs are more than cpu has memory for; "
                           "lower --num-envs to at most ") and "env.num_envs" not in line


@pytest.mark.parametrize(("flag", "value"), [("--num-envs", "0"), ("--steps", "-1")])
def test_rollout_refuses_what_it_cannot_run(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from mbpo import cli

    assert cli.main(["rollout", flag, value, "--device", "cpu"]) == 2
    assert f"error: {flag} {value} is not allowed; expected at least 1" in capsys.readouterr().err


def test_a_config_mistake_is_reported_before_torch_is_imported() -> None:
    """The CLI imports torch, torchrl and envs in the commands that use them: a mistake on the command line or in
    the config is its one line without seconds of imports first (and a subprocess test of one stays cheap).
    """
    probe = ("import sys; from mbpo.cli import main; code = main(['train', 'env.num_envs=0']); "
             "print(code, sorted(m for m in ('torch', 'torchrl', 'envs') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=100)
    assert result.stdout.split("\n")[0] == "2 []", (result.stdout, result.stderr[-2000:])
    assert result.stderr.splitlines()[-1] == "error: env.num_envs=0 is out of range; expected a value in [1, inf)"


def test_a_repeated_yaml_key_a_bad_device_a_section_set_to_a_value_and_mistyped_names_are_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each once ended in a traceback (a key given twice: OmegaConf's, naming no file; ``--device gpu``: a
    ValueError from the env) or blamed what the user never gave (``plot`` of a mistyped dir: its ``--out``).
    """
    from mbpo import cli

    twice = tmp_path / "twice.yaml"
    twice.write_text("total_env_steps: 300\nenv:\n  id: Pendulum-v1\n  id: CartPole-v1\ntotal_env_steps: 500\n")
    line = error_line(capsys, "train", "--config", str(twice))
    assert line == (f"error: {twice} is not valid YAML: the key 'total_env_steps' is given twice (first at line 1) at "
                    "line 5, column 1")
    twice.write_text("env:\n  id: Pendulum-v1\n  id: CartPole-v1\n")
    line = error_line(capsys, "train", "--config", str(twice))
    assert line.endswith("the key 'id' is given twice (first at line 2) at line 3, column 3")
    for argv, said in ((["eval", "--checkpoint", "x.pt", "--device", "gpu"], "argument --device: 'gpu' is not a "
                        "device; expected auto, cpu, cuda or cuda:N"),
                       (["rollout", "--device", "cuda:x"], "argument --device: 'cuda:x' is not a device"),
                       (["train", "--config"], "argument --config: expected one argument"),  # once: "'.' is a dir"
                       (["resume"], "the following arguments are required: run_dir\n")):  # once: ", overrides"
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2 and "Traceback" not in err and said in err, err
    line = error_line(capsys, "train", "checkpoint=5", *FAST)  # once: "config key None: Merge error: ..."
    assert line == ("error: 'checkpoint=5': checkpoint is a section of keys, not a value; set its keys "
                    "(checkpoint.<key>=...): every, keep")
    line = error_line(capsys, "resme", str(tmp_path))  # once: "override 'resme' is not of the form key=value"
    assert line.startswith("error: unknown command 'resme' (did you mean resume?); expected one of train, eval, ")
    line = error_line(capsys, "plot", str(tmp_path / "no_such_run"))
    assert line == (f"error: {tmp_path / 'no_such_run'} is not a directory; expected run dirs written by "
                    "`python -m mbpo train`")


def _needs_a_package() -> None:
    import gymnasium as gym

    raise gym.error.DependencyNotInstalled('Box2D is not installed, run `pip install "gymnasium[box2d]"`')


@pytest.mark.parametrize("command", ["train", "rollout"])
@pytest.mark.parametrize(("env_id", "expected"), [
    ("FrozenLake-v1", "error: only 1-D Box observation spaces are supported, got Discrete(16); flatten it first: an "
                      "env.factory of your own returning gymnasium.make_vec("),
    ("MbpoTest/NeedsPackage-v0", "error: MbpoTest/NeedsPackage-v0 needs a package that is not installed here: Box2D "
                                 "is not installed, run `pip install \"gymnasium[box2d]\"`"),
])
def test_a_gymnasium_id_that_cannot_be_used_here_is_one_line(
        command: str, env_id: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A registered id whose observation is no 1-D Box, or whose package is missing, is the user's to fix: one
    line naming what to do, in train and rollout alike, not gymnasium's traceback.
    """
    import gymnasium as gym

    from mbpo import cli

    registered = env_id not in gym.registry
    if registered:
        gym.register(env_id, entry_point=f"{__name__}:_needs_a_package")
    args = (["train", f"env.id={env_id}", "agent.name=dqn", *FAST, f"run_dir={tmp_path / 'r'}"] if command == "train"
            else ["rollout", "--env", env_id, "--device", "cpu", "--steps", "4", "--num-envs", "1"])  # not 4,096
    try:
        assert cli.main(args) == 2
    finally:
        if registered:
            del gym.registry[env_id]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and lines[0].startswith(expected), lines


@pytest.mark.reliability
def test_a_checkpoint_that_cannot_be_written_is_one_line_saying_how_to_go_on(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk at a periodic checkpoint ends the run, on every trainer and backend, with one line naming the
    file, the OS's reason and the resume that goes on from the newest checkpoint (not three chained tracebacks).
    """
    from mbpo import cli
    from mbpo.run import checkpoint as ckpt
    from tests.conftest import TRAINER_RUNS

    def disk_full(obj: object, f: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", disk_full)
    run = tmp_path / "r"
    code = cli.main(["train", *FAST_RUN, "total_env_steps=128", "checkpoint.every=64", "eval_every=64", "log_every=64",
                     "runtime.num_collectors=1", "runtime.collection_batch_size=16", "agent.sac.hidden_sizes=[16,16]",
                     *TRAINER_RUNS[trainer_run], f"run_dir={run}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and lines == [f"error: cannot write {run / 'checkpoints' / 'ckpt_000000000064.pt'} (No space "
                                   "left on device); free space or make the dir writable, then `python -m mbpo "
                                   f"resume {run}` goes on from the newest checkpoint"], err[-3000:]
    assert "Traceback" not in err and not list((run / "checkpoints").glob(".ckpt*"))


def test_resume_of_a_run_killed_before_its_first_checkpoint_says_to_train_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """And a run whose checkpoints were all found corrupt says so, the first time and every time after (a second
    resume once took the renamed files for none ever written).
    """
    from mbpo import cli

    run = tmp_path / "r"
    assert cli.main(["train", *FAST_RUN, "checkpoint.every=1000", "total_env_steps=64", f"run_dir={run}"]) == 0
    saved = sorted((run / "checkpoints").glob("ckpt_*.pt"))
    for path in saved:
        os.truncate(path, 100)
    corrupt = ", ".join(f"{path.name}.corrupt" for path in saved)
    for attempt in range(2):
        capsys.readouterr()
        assert cli.main(["resume", str(run), "total_env_steps=128"]) == 2
        assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")] == [
            f"error: no checkpoint in '{run / 'checkpoints'}' loads: each was found unreadable and renamed *.corrupt "
            f"({corrupt}); put back a good copy of one (named without .corrupt), or train again with "
            "run_dir=<new dir>"], attempt
    for path in (run / "checkpoints").glob("ckpt_*"):
        path.unlink()  # as a SIGKILL before the first checkpoint leaves the dir
    capsys.readouterr()
    assert cli.main(["resume", str(run)]) == 2
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")] == [
        f"error: {run} holds a run that stopped before its first checkpoint, so there is nothing to resume; train it "
        f"again with run_dir=<new dir> (its config: {run / 'config.yaml'})"]


def console_script() -> list[str]:
    """What the ``mbpo`` console script runs (pyproject.toml's entry point), as a command line."""
    import tomllib

    module, function = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["mbpo"].split(":")
    return [sys.executable, "-c", f"import sys; sys.argv[0] = 'mbpo'; from {module} import {function}; {function}()"]


@pytest.mark.parametrize("how", ["python -m mbpo", "console script"])
def test_output_into_a_closed_pipe_ends_quietly(how: str) -> None:
    """`python -m mbpo --help-config | head -3`: once the reader is gone, no BrokenPipeError traceback; the same
    for the ``mbpo`` console script, which ran mbpo.cli.main without the handlers of ``python -m mbpo``.
    """
    read, write = os.pipe()
    os.close(read)  # the reader already gone: every write fails with EPIPE
    command = [sys.executable, "-m", "mbpo"] if how == "python -m mbpo" else console_script()
    try:
        done = subprocess.run([*command, "--help-config"], cwd=REPO, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=100)
    finally:
        os.close(write)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.reliability
@pytest.mark.parametrize("backend", ["thread", "process", "ray"])
def test_a_collector_that_keeps_failing_ends_in_its_own_traceback_and_one_error_line(
        backend: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A spent restart budget is not a bug in the trainer: the collector's traceback (where it failed) is logged,
    then one ``error:`` line and exit 1, after the final checkpoint; no second traceback through the trainer.
    """
    from mbpo import cli
    from tests.conftest import TRAINER_RUNS

    if backend == "ray":
        request.getfixturevalue("module_ray")
    run = tmp_path / "r"
    code = cli.main(["train", *FAST, "total_env_steps=100000", "runtime.max_restarts=0", "runtime.num_collectors=1",
                     "runtime.collection_batch_size=16",
                     "env.factory=envs.faults:faulty", "env.kwargs={fault: raise, at_step: 40, env_id: Pendulum-v1}",
                     "env.id=Faulty-v0", *TRAINER_RUNS[backend], f"run_dir={run}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 1 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: collector 0 failed; restart budget spent (0/0): "), lines
    assert lines[0].endswith("InjectedFault: injected fault at step 40; its traceback is above (runtime.max_restarts "
                             "sets the budget)"), lines
    logged = err[: err.index("error: ")]  # the collector's traceback, down to the env's frame
    assert "Traceback" in logged and 'faults.py", line' in logged and "in step" in logged, err[-3000:]
    assert "Traceback" not in lines[0] and "supervisor.py" not in err and "async_trainer.py" not in err, err[-3000:]
    assert "final checkpoint" in err and list((run / "checkpoints").glob("ckpt_*.pt"))


@pytest.mark.reliability
def test_a_run_dir_removed_while_the_run_runs_stops_it_with_one_line_and_is_not_made_again(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics writer made the dir again (parents and all) for a new column, and TensorBoard's writer thread
    ended in a traceback: a run dir holding the rows after the removal and a checkpoint, said to resume.
    """
    import shutil

    from mbpo import cli
    from mbpo.run.metrics import MetricsLogger
    from tests.conftest import TRAINER_RUNS

    run = tmp_path / "r"
    log = MetricsLogger.log

    def remove_after_the_first_row(self: MetricsLogger, row: dict[str, object]) -> None:
        log(self, row)
        shutil.rmtree(run)

    monkeypatch.setattr(MetricsLogger, "log", remove_after_the_first_row)
    code = cli.main(["train", *FAST, "total_env_steps=256", "log_every=64", "eval_every=1000", "agent.utd_ratio=1",
                     "runtime.num_collectors=1", "runtime.collection_batch_size=16", "agent.sac.hidden_sizes=[16,16]",
                     *TRAINER_RUNS[trainer_run], f"run_dir={run}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 1 and lines == [f"error: the run dir {run} was removed while the run ran; the run stops, as nothing "
                                   "more can be recorded there (start it again with `python -m mbpo train`)"], \
        err[-3000:]
    assert "Traceback" not in err and not run.exists(), err[-3000:]


def test_a_config_file_that_is_not_utf8_text_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A YAML saved as Latin-1, or a checkpoint passed as --config by mistake: the file and what was expected,
    not a UnicodeDecodeError traceback.
    """
    (tmp_path / "latin1.yaml").write_bytes("# réglage\nseed: 1\n".encode("latin-1"))
    line = error_line(capfd, "train", "--config", str(tmp_path / "latin1.yaml"))
    assert line == (f"error: config file '{tmp_path / 'latin1.yaml'}' is not UTF-8 text (byte 3: b'\\xe9'); expected "
                    "a YAML text file such as configs/pendulum_sac.yaml (saved as UTF-8)")
    (tmp_path / "ckpt.pt").write_bytes(b"PK\x03\x04\x14\x00\x80\xff")
    assert "ckpt.pt' is not UTF-8 text" in error_line(capfd, "train", "--config", str(tmp_path / "ckpt.pt"))


def test_a_quoted_tilde_in_a_path_argument_is_the_home_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """As in `run_dir=~/...`: `resume '~/run'` said "run dir '~/run' does not exist"."""
    from mbpo import cli

    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli.main(["train", "run_dir=~/run", *FAST_RUN, "model.enabled=false"]) == 0  # the paths, not MBPO
    assert cli.main(["resume", "~/run", "total_env_steps=128"]) == 0
    capsys.readouterr()
    assert cli.main(["eval", "--checkpoint", "~/run/checkpoints/ckpt_000000000128.pt", "--episodes", "1"]) == 0
    assert '"episodes": 1' in capsys.readouterr().out

