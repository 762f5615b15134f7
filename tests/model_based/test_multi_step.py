"""mbpo.model_based.multi_step: model branches stored as n-step transitions, checked against hand-computed windows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from mbpo.config import ConfigError, load_config
from mbpo.data.transitions import DISCOUNT, MODEL_VERSION, NEXT_OBS, OBS, REWARD, TERMINATED, transitions
from mbpo.model_based.multi_step import BRANCH, NStepBranches
from mbpo.smoke import POINT_MASS_MBPO
from mbpo.trainers import AsyncTrainer, SyncTrainer

GAMMA = 0.5


def rows(branch: list[int], obs: list[float], reward: list[float], next_obs: list[float],
         terminated: list[bool]) -> TensorDict:
    """One rollout step's kept rows; a state is one number, the action is the state (so a window names its start)."""
    o = torch.tensor(obs, dtype=torch.float32).unsqueeze(1)
    nxt = torch.tensor(next_obs, dtype=torch.float32).unsqueeze(1)
    step = transitions(o, o.clone(), torch.tensor(reward), nxt, torch.tensor(terminated))
    step[BRANCH] = torch.tensor(branch)
    step[MODEL_VERSION] = torch.full((len(branch),), 7)
    return step


def windows(n: int, steps: list[TensorDict]) -> dict[float, tuple[float, float, float, bool]]:
    """{start state: (return, next state, discount, terminated)} of what the sink passes on."""
    out: list[TensorDict] = []
    sink = NStepBranches(n, GAMMA, branches=3, obs_dim=1, act_dim=1, sink=out.append, device=torch.device("cpu"),
                         action_dtype=torch.float32)
    for step in steps:
        sink.step(step)
    sink.close()
    got = torch.cat(out)
    assert (got[MODEL_VERSION] == 7).all() and BRANCH not in got.keys()
    result = {}
    for row in got.unbind(0):
        result[float(row[OBS])] = (float(row[REWARD]), float(row[NEXT_OBS]), float(row[DISCOUNT]),
                                   bool(row[TERMINATED]))
    assert len(result) == got.shape[0]  # each start state once
    return result


# three branches: 0 runs all three steps (states 0 -> 1 -> 2 -> 3), 1 terminates on its second step
# (10 -> 11 -> 12), 2 is dropped at its second step (20 -> 21, then no row: an absurd state)
STEPS = [
    rows([0, 1, 2], [0, 10, 20], [1.0, 10.0, 100.0], [1, 11, 21], [False, False, False]),
    rows([0, 1], [1, 11], [2.0, 20.0], [2, 12], [False, True]),
    rows([0], [2], [4.0], [3], [False]),
]


def test_two_step_windows_end_at_two_steps_a_termination_a_drop_or_the_rollouts_end() -> None:
    assert windows(2, STEPS) == {
        0: (1 + GAMMA * 2, 2, GAMMA ** 2, False),  # a full window: 2 steps, bootstrap from state 2
        1: (2 + GAMMA * 4, 3, GAMMA ** 2, False),
        2: (4, 3, GAMMA, False),  # cut by the rollout's end: 1 step, bootstrap from the last state
        10: (10 + GAMMA * 20, 12, GAMMA ** 2, True),  # a termination: no bootstrap
        11: (20, 12, GAMMA, True),
        20: (100, 21, GAMMA, False),  # the branch was dropped after it: bootstrap from the state it reached
    }


def test_one_step_windows_are_the_model_steps_themselves() -> None:
    got = windows(1, STEPS)
    assert got[0] == (1, 1, GAMMA, False) and got[11] == (20, 12, GAMMA, True) and got[20] == (100, 21, GAMMA, False)
    assert len(got) == 6


@pytest.mark.parametrize("n", [3, 5])
def test_windows_longer_than_a_branch_take_what_it_has(n: int) -> None:
    got = windows(n, STEPS)
    assert got[0] == (1 + GAMMA * 2 + GAMMA ** 2 * 4, 3, GAMMA ** 3, False)
    assert got[10] == (10 + GAMMA * 20, 12, GAMMA ** 2, True)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("trainer", ["sync", "async"])
def test_an_mbpo_run_with_n_step_model_rows_trains_on_them_with_their_discount(tmp_path: Path, trainer: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """model.rollout_n_step=3 on 3-step branches: the model buffer holds 1-, 2- and 3-step rows (the windows the
    rollouts' ends cut), each with gamma**m; the learner's batches give the real rows gamma; the run learns.
    """
    from mbpo.agents.sac import SAC

    cfg = load_config(None, [*POINT_MASS_MBPO, "device=cpu", f"run_dir={tmp_path}", f"trainer={trainer}",
                             "total_env_steps=300", "model.rollout_schedule=[0,1,3,3]", "model.rollout_n_step=3",
                             "agent.utd_ratio=1", "model.max_epochs=2"])  # the rows it trains on, not how well
    discounts: list[torch.Tensor] = []
    update = SAC.update

    def spy(self: SAC, batch: TensorDict) -> object:
        if DISCOUNT in batch.keys():
            discounts.append(batch[DISCOUNT].clone())
        return update(self, batch)

    monkeypatch.setattr(SAC, "update", spy)
    run = (SyncTrainer if trainer == "sync" else AsyncTrainer)(cfg, tmp_path)
    row = run.run()
    assert run.model is not None and row["skipped_updates"] == 0
    stored = run.model.model_buffer.newest(len(run.model.model_buffer))[DISCOUNT]
    gamma = cfg.agent.sac.gamma
    assert set(torch.unique(stored).tolist()) == pytest.approx(sorted({gamma, gamma ** 2, gamma ** 3}))
    seen = torch.cat(discounts)
    n_real = int(cfg.agent.batch_size * cfg.model.real_ratio)
    assert discounts and bool((torch.stack(discounts)[:, :n_real] == torch.tensor(gamma)).all())  # the real rows
    assert bool((seen < gamma - 1e-6).any())  # and model rows that look further


def test_n_step_model_rows_need_sac() -> None:
    with pytest.raises(ConfigError, match=r"model.rollout_n_step=3 with agent.name=dqn: n-step model transitions "
                                          r"need SAC"):
        load_config("configs/cartpole_mbpo.yaml", ["model.rollout_n_step=3"])
