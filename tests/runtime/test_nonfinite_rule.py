"""``runtime.nonfinite`` means one thing on every trainer and backend (mbpo.runtime.nonfinite).

The same fault env (envs/faults.py's ``faulty`` factory, in the training envs only) runs through the sync
trainer and the async one on threads, processes and Ray, from the command line as a user runs it:

* ``raise``: one ``error:`` line naming the env index, the field and the env step, exit 2, and a final
  checkpoint of what came before, which ``resume ... runtime.nonfinite=drop`` continues;
* ``drop``: the run ends normally, ``nonfinite_dropped`` counts the env's one bad row, and nothing non-finite
  is in the replay buffer.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from mbpo import cli
from mbpo.data.replay import as_tensordict
from mbpo.data.transitions import NEXT_OBS, OBS, REWARD
from mbpo.run.checkpoint import list_checkpoints, load_checkpoint
from tests.conftest import TRAINER_RUNS

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(180)]

NUM_ENVS, AT_STEP = 2, 10
"""Two envs; env index 0 turns non-finite at its 10th step call: env step (10 - 1) * 2 = 18 of the run."""
TINY = ["device=cpu", "progress=false", "total_env_steps=64", "agent.learning_starts=32", "eval_every=64",
        "eval_episodes=3", "log_every=32", f"env.num_envs={NUM_ENVS}", "agent.batch_size=16",
        "agent.sac.hidden_sizes=[16,16]", "model.enabled=false", "runtime.num_collectors=1",
        "runtime.collection_batch_size=8", "checkpoint.every=1000"]
WHO = {"sync": "", "thread": "collector 0: ", "process": "collector 0: ", "ray": "collector 0: "}
"""A collector names itself; the rest of the line is the same everywhere."""


def fault_env(fault: str) -> list[str]:
    return ["env.id=Faulty-v0", "env.factory=envs.faults:faulty",
            f"env.kwargs={{env_id: Pendulum-v1, fault: {fault}, at_step: {AT_STEP}, only_num_envs: {NUM_ENVS}}}"]



def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


def test_raise_is_one_line_exit_2_and_a_checkpoint_that_resumes(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "r"
    code = cli.main(["train", *fault_env("nan_reward"), *TINY, *TRAINER_RUNS[trainer_run], f"run_dir={run_dir}"])
    err = capsys.readouterr().err
    step = (AT_STEP - 1) * NUM_ENVS
    assert (code, error_lines(err)) == (2, [
        f"error: {WHO[trainer_run]}env index 0 returned a non-finite reward ({{'reward': nan}}) at env step {step}; "
        "fix the env, or set runtime.nonfinite=drop to drop such rows and count them (nonfinite_dropped)"]), err[-3000:]
    assert "Traceback" not in err
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    assert checkpoints, "the final checkpoint of what came before"
    state = load_checkpoint(checkpoints[-1])
    assert 0 < state["trainer"]["env_steps"] <= step  # nothing of the bad step or after it
    if trainer_run == "sync":  # its env stepped past the checkpoint: the resumed run says it starts new episodes
        with pytest.warns(UserWarning, match="stopped on an env step it did not store"):
            assert cli.main(["resume", str(run_dir), "runtime.nonfinite=drop"]) == 0
    else:
        assert cli.main(["resume", str(run_dir), "runtime.nonfinite=drop"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == 64


def test_drop_counts_the_row_and_stores_nothing_non_finite(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A NaN observation (in ``obs`` and ``final_obs``): the harder case, as the env must then be reset (a NaN
    reward alone is tests/runtime/test_faults.py's on the async backends).
    """
    run_dir = tmp_path / "r"
    code = cli.main(["train", *fault_env("nan_obs"), *TINY, *TRAINER_RUNS[trainer_run], "runtime.nonfinite=drop",
                     f"run_dir={run_dir}"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    row = json.loads(out.strip().splitlines()[-1])
    # one bad row; after a NaN observation that env alone is reset, so nothing acts on NaN after it
    assert (row["env_steps"], row["nonfinite_dropped"], row["skipped_updates"]) == (64, 1, 0)
    with open(run_dir / "metrics.csv") as f:
        assert [r["nonfinite_dropped"] for r in csv.DictReader(f)][-1] == "1"
    data = as_tensordict(load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])["buffer"]["data"])
    assert data.shape[0] == 64 - 1  # every transition but the dropped one
    for key in (OBS, NEXT_OBS, REWARD):
        assert bool(torch.isfinite(data[key]).all()), key
