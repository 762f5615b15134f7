"""With n-step returns the first transitions reach the replay buffer n vector steps late: updates wait for them.

A scale config at more envs than it was written for (pendulum_sac_1024.yaml at 4,096 envs: learning_starts is
two vector steps, n_step three) sampled an empty replay buffer and stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mbpo import cli

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("trainer", ["sync", "async"])
def test_updates_start_once_n_step_transitions_are_in_the_buffer(
    trainer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / trainer
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", f"trainer={trainer}", "device=cpu",
                     "progress=false", "env.num_envs=8", "agent.n_step=3", "agent.learning_starts=8",
                     "agent.batch_size=16", "total_env_steps=96", "eval_every=48", "eval_episodes=1",
                     "runtime.collection_batch_size=8", f"run_dir={run_dir}"]) == 0
    captured = capsys.readouterr()
    assert "agent.learning_starts=8 raised to 24: with agent.n_step=3" in captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["env_steps"] == 96 and summary["updates"] == 80  # 8 per vector step from the 3rd of 12


def test_learning_starts_already_past_the_first_windows_is_kept(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", "trainer=sync", "device=cpu",
                     "progress=false", "env.num_envs=8", "agent.n_step=3", "agent.learning_starts=24",
                     "agent.batch_size=16", "total_env_steps=48", "eval_every=48", "eval_episodes=1",
                     f"run_dir={tmp_path / 'r'}"]) == 0
    assert "raised to" not in capsys.readouterr().err


def test_a_run_whose_learning_starts_was_raised_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The raised value is what the run's identity and config.yaml record, so its checkpoints resume (again
    and again: a resume keeps its checkpoint's config as it is).
    """
    run_dir = tmp_path / "r"
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", "trainer=sync", "device=cpu",
                     "progress=false", "env.num_envs=8", "agent.n_step=3", "agent.learning_starts=8",
                     "agent.batch_size=16", "total_env_steps=96", "eval_every=48", "eval_episodes=1",
                     "checkpoint.every=48", f"run_dir={run_dir}"]) == 0
    capsys.readouterr()
    for steps in (144, 192):
        assert cli.main(["resume", str(run_dir), f"total_env_steps={steps}"]) == 0
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == steps


def test_the_bound_counts_each_async_collector(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two collectors, each 3 vector steps from its first windows: 5 vector steps in all make sure of one."""
    assert cli.main(["train", "--config", "configs/pendulum_sac.yaml", "trainer=async", "device=cpu",
                     "progress=false", "env.num_envs=8", "agent.n_step=3", "agent.learning_starts=8",
                     "agent.batch_size=16", "total_env_steps=96", "eval_every=48", "eval_episodes=1",
                     "runtime.collection_batch_size=8", "runtime.num_collectors=2", f"run_dir={tmp_path / 'r'}"]) == 0
    assert "agent.learning_starts=8 raised to 40: with agent.n_step=3" in capsys.readouterr().err


def test_a_resume_keeps_the_learning_starts_its_checkpoint_records(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A run written without the raise (learning_starts 17 with n_step 3 at 8 envs: its first update fell
    after the first windows closed) resumes as it was, again and again, its identity intact.
    """
    from mbpo.config import load_config
    from mbpo.trainers import SyncTrainer

    run_dir = tmp_path / "old"
    config = load_config("configs/pendulum_sac.yaml", [
        "trainer=sync", "device=cpu", "progress=false", "env.num_envs=8", "agent.n_step=3",
        "agent.learning_starts=17", "agent.batch_size=16", "total_env_steps=96", "eval_every=48",
        "eval_episodes=1", "checkpoint.every=48", f"run_dir={run_dir}"])
    trainer = SyncTrainer(config, run_dir)  # as a run started before make_trainer raised learning_starts
    trainer.run()
    assert trainer.config.agent.learning_starts == 17  # a trainer keeps the config it is given
    capsys.readouterr()
    for steps in (144, 192):
        assert cli.main(["resume", str(run_dir), f"total_env_steps={steps}"]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out.strip().splitlines()[-1])["env_steps"] == steps
        assert "raised" not in captured.err
