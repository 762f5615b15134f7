"""A run's rows and checkpoints agree across a resume, on every trainer: the first metrics row after a resume
averages only the updates made since it, and the final row is written before the final checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo import cli
from mbpo.run.metrics import read_metrics
from tests.conftest import TRAINER_RUNS

pytestmark = [pytest.mark.timeout(180)]

DQN = ["--config", "configs/cartpole_dqn.yaml", "device=cpu", "progress=false", "total_env_steps=1000",
       "agent.learning_starts=200", "eval_every=500", "eval_episodes=2", "log_every=250",
       "agent.dqn.hidden_sizes=[16,16]", "checkpoint.every=500", "runtime.num_collectors=1",
       "runtime.collection_batch_size=50"]
DECAY, START, END = 3500, 1.0, 0.04
"""configs/cartpole_dqn.yaml's epsilon schedule: linear in the updates, so a row's mean epsilon says which
updates it averaged."""


def epsilon_mean(after: int, upto: int) -> float:
    """The mean epsilon DQN logs over updates ``after + 1 .. upto`` (each records the value after it)."""
    return sum(START + min(1.0, u / DECAY) * (END - START) for u in range(after + 1, upto + 1)) / (upto - after)


def test_the_first_row_after_a_resume_from_the_final_checkpoint_averages_only_its_own_updates(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "r"
    short = ["total_env_steps=500", "agent.learning_starts=100", "eval_every=250", "log_every=100",
             "checkpoint.every=250"]  # DQN's run halved: rows at 100 .. 500, checkpoints at 250 and 500
    assert cli.main(["train", *DQN, *short, *TRAINER_RUNS[trainer_run], f"run_dir={run}"]) == 0
    assert cli.main(["resume", str(run), "total_env_steps=750"]) == 0, capsys.readouterr().err[-3000:]
    rows = read_metrics(run / "metrics.csv")
    at_end = next(i for i, row in enumerate(rows) if int(row["env_steps"]) == 500)
    before, after = rows[at_end], rows[at_end + 1]
    u0, u1 = int(before["updates"]), int(after["updates"])
    assert u1 > u0 and int(after["skipped_updates"]) == 0
    assert float(after["epsilon"]) == pytest.approx(epsilon_mean(u0, u1), abs=1e-9)
    assert float(before["epsilon"]) == pytest.approx(epsilon_mean(int(rows[at_end - 1]["updates"]), u0), abs=1e-9)


@pytest.mark.parametrize("trainer", ["sync", "async"])
def test_a_trainer_built_from_python_never_overwrites_a_run_in_its_dir(tmp_path: Path, trainer: str) -> None:
    """`train` refuses a dir that holds a run; so does a trainer built from Python (it used to replace the first
    run's run.json, config.yaml and checkpoints with its own).
    """
    from mbpo.config import load_config
    from mbpo.errors import MbpoError
    from mbpo.trainers import trainer_class

    run = tmp_path / "r"
    config = load_config("configs/cartpole_dqn.yaml", [*DQN[2:], "total_env_steps=500", f"trainer={trainer}",
                                                       f"run_dir={run}"])
    trainer_class(config)(config, run).run()
    identity = (run / "run.json").read_text()
    second = trainer_class(config)(config, run)
    with pytest.raises(MbpoError, match=r"already holds a run with checkpoints; continue it with `python -m mbpo "
                                        r"resume"):
        second.run()
    assert (run / "run.json").read_text() == identity


@pytest.mark.parametrize("trainer", ["sync", "async"])
def test_the_final_row_is_written_before_the_final_checkpoint_also_by_a_run_started_in_an_except_block(
        tmp_path: Path, trainer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill between them then leaves a row that the resume from the checkpoint before writes again; the other
    way round (the async trainer's order) it left a final checkpoint whose row, the run's last evaluation, no
    resume ever wrote. A caller's handled exception is not the run's failure (the async trainer read
    sys.exc_info(): no final row, and run() raised UnboundLocalError).
    """
    from mbpo.config import load_config
    from mbpo.run.metrics import MetricsLogger
    from mbpo.trainers import trainer_class
    from mbpo.trainers.base import Trainer

    events: list[tuple[str, int]] = []
    log, save = MetricsLogger.log, Trainer.save

    def logged(self: MetricsLogger, row: dict) -> None:
        events.append(("row", int(row["env_steps"])))
        log(self, row)

    def saved(self: Trainer, state: dict | None = None) -> Path:
        events.append(("checkpoint", self.env_steps))
        return save(self, state)

    monkeypatch.setattr(MetricsLogger, "log", logged)
    monkeypatch.setattr(Trainer, "save", saved)
    config = load_config("configs/cartpole_dqn.yaml", [*DQN[2:], "total_env_steps=500", f"trainer={trainer}",
                                                       f"run_dir={tmp_path / 'r'}"])
    try:
        raise FileNotFoundError("no run to resume: train one")
    except FileNotFoundError:
        row = trainer_class(config)(config, tmp_path / "r").run()
    assert events[-2:] == [("row", 500), ("checkpoint", 500)], events
    assert row["env_steps"] == 500 and int(read_metrics(tmp_path / "r" / "metrics.csv")[-1]["env_steps"]) == 500


def test_a_run_dir_under_home_given_from_python_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``~`` is the home directory from Python as on the command line (a ``./~`` dir was made, and a resume of
    '~/r' said it does not exist).
    """
    from mbpo.config import load_config
    from mbpo.trainers import make_trainer, resume_trainer

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    repo_config = str(Path(__file__).parents[2] / "configs" / "cartpole_dqn.yaml")  # the test runs elsewhere
    config = load_config(repo_config, [*DQN[2:], "total_env_steps=250", "trainer=sync"])
    make_trainer(config, "~/r").run()
    assert (tmp_path / "home" / "r" / "checkpoints").is_dir() and not (tmp_path / "~").exists()
    trainer = resume_trainer("~/r", ["total_env_steps=500"])
    assert trainer.run()["env_steps"] == 500


def test_a_shutdown_that_fails_after_the_last_step_leaves_the_final_row_to_the_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The final checkpoint said the run was done, so its resume had nothing to do and the row was never written."""
    from mbpo.config import load_config
    from mbpo.run.checkpoint import load_latest
    from mbpo.trainers import AsyncTrainer, resume_trainer

    shutdown = AsyncTrainer._shutdown

    def fails(self: AsyncTrainer) -> None:
        shutdown(self)
        raise RuntimeError("a worker's join failed")

    monkeypatch.setattr(AsyncTrainer, "_shutdown", fails)
    config = load_config("configs/cartpole_dqn.yaml", [*DQN[2:], "total_env_steps=500", "trainer=async",
                                                       f"run_dir={tmp_path / 'r'}"])
    with pytest.raises(RuntimeError, match="join failed"):
        AsyncTrainer(config, tmp_path / "r").run()
    monkeypatch.undo()
    path, state = load_latest(tmp_path / "r" / "checkpoints")
    assert path.name == "ckpt_000000000500.pt" and state["trainer"]["work_owed"]
    row = resume_trainer(tmp_path / "r").run()
    assert row["env_steps"] == 500 and row["eval_return"] is not None  # the final evaluation too
    last = read_metrics(tmp_path / "r" / "metrics.csv")[-1]
    assert int(last["env_steps"]) == 500 and last["eval_return"] != ""
