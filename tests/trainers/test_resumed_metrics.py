"""The first metrics row after a resume averages only the updates made since the resume, on every trainer and
backend: a checkpoint written before its env step's row (the async trainer's final one) holds the update metrics
that row already logged.
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
    assert cli.main(["train", *DQN, *TRAINER_RUNS[trainer_run], f"run_dir={run}"]) == 0
    assert cli.main(["resume", str(run), "total_env_steps=1500"]) == 0, capsys.readouterr().err[-3000:]
    rows = read_metrics(run / "metrics.csv")
    at_end = next(i for i, row in enumerate(rows) if int(row["env_steps"]) == 1000)
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
