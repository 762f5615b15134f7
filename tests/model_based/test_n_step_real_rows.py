"""MBPO with n-step real rows (agent.n_step > 1 with model.enabled): the learner reads each real row's n-step
return, the dynamics model the same row's first step, on every trainer and collector backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from mbpo.config import load_config
from mbpo.data.nstep import NStepBuilder
from mbpo.data.transitions import ACTION, DISCOUNT, FIRST_STEP, NEXT_OBS, OBS, REWARD, TERMINATED, first_step_view
from mbpo.models.ensemble import DynamicsEnsemble
from mbpo.smoke import POINT_MASS_MBPO
from mbpo.trainers import AsyncTrainer, SyncTrainer
from tests.conftest import TRAINER_RUNS
from tests.data.test_nstep import brute_force, stream

pytestmark = pytest.mark.timeout(180)



def test_each_n_step_row_keeps_its_first_step_and_the_view_gives_it_back() -> None:
    n, gamma, data = 3, 0.9, stream(num_envs=5, steps=40, seed=4)
    builder = NStepBuilder(n, gamma, keep_first_step=True)
    out = torch.cat([builder.push(step, truncated) for step, truncated in data])
    expected = brute_force(data, n, gamma)
    assert out.shape[0] == len(expected)
    for i in range(out.shape[0]):
        env, t = int(out[OBS][i, 0]), int(out[OBS][i, 1])
        first, _ = data[t]
        assert float(out[FIRST_STEP[REWARD]][i]) == float(first[REWARD][env])  # the start step's own reward
        assert float(out[FIRST_STEP[NEXT_OBS]][i, 1]) == t + 0.5
        assert bool(out[FIRST_STEP[TERMINATED]][i]) == bool(first[TERMINATED][env])
        ret, next_t, terminated, discount = expected[(env, t)]  # and the n-step fields are what they were
        assert float(out[REWARD][i]) == pytest.approx(ret, abs=1e-5) and float(out[NEXT_OBS][i, 1]) == next_t
    view = first_step_view(out)
    assert DISCOUNT not in view.keys() and not set(FIRST_STEP.values()) & set(view.keys())
    assert torch.equal(view[REWARD], out[FIRST_STEP[REWARD]]) and torch.equal(view[OBS], out[OBS])
    assert torch.equal(view[NEXT_OBS][:, 1], out[OBS][:, 1] + 0.5)  # every row one step long
    assert bool((out[DISCOUNT] < gamma - 1e-6).any())  # (the stream has full windows)


def test_rows_without_a_first_step_are_their_own_view() -> None:
    rows = TensorDict({OBS: torch.zeros(2, 1), REWARD: torch.ones(2)}, [2])
    assert first_step_view(rows) is rows



def test_the_model_fits_the_first_steps_and_the_learner_the_n_step_returns(
        trainer_run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PointMass MBPO with agent.n_step=3: every row the ensemble fits is a stored row's first step (the collectors
    of every backend ship it through their transport); the learner's real rows carry their n-step discounts.
    """
    from mbpo.agents.sac import SAC

    cfg = load_config(None, [*POINT_MASS_MBPO, "device=cpu", f"run_dir={tmp_path}", *TRAINER_RUNS[trainer_run],
                             "agent.n_step=3",
                             "total_env_steps=300", "env.num_envs=2", "runtime.collection_batch_size=16",
                             "runtime.num_collectors=1",
                             # what rows reach the fit and the updates, not learning: a few updates and epochs
                             "agent.utd_ratio=1", "model.max_epochs=2"])
    fitted: list[tuple[torch.Tensor, ...]] = []
    real_discounts: list[torch.Tensor] = []
    fit, update = DynamicsEnsemble.fit, SAC.update

    def fit_spy(self: DynamicsEnsemble, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                next_obs: torch.Tensor, *args: object, **kwargs: object) -> object:
        fitted.append((torch.cat((obs, action), -1), reward.clone(), next_obs.clone()))
        return fit(self, obs, action, reward, next_obs, *args, **kwargs)  # type: ignore[arg-type]

    n_real = int(cfg.agent.batch_size * cfg.model.real_ratio)

    def update_spy(self: SAC, batch: TensorDict) -> object:
        if DISCOUNT in batch.keys():
            real_discounts.append(batch[DISCOUNT][:n_real].clone())
        return update(self, batch)

    monkeypatch.setattr(DynamicsEnsemble, "fit", fit_spy)
    monkeypatch.setattr(SAC, "update", update_spy)
    trainer = (SyncTrainer if trainer_run == "sync" else AsyncTrainer)(cfg, tmp_path)
    row = trainer.run()
    assert row["skipped_updates"] == 0 and fitted
    stored = trainer.buffer[: len(trainer.buffer)]
    assert set(FIRST_STEP.values()) <= set(stored.keys())
    first = first_step_view(stored)
    assert not torch.equal(first[REWARD], stored[REWARD])  # the n-step sums are not what the model fits
    keys = torch.cat((first[OBS], first[ACTION]), -1)
    for obs_action, reward, next_obs in fitted:
        match = (obs_action[:, None, :] == keys[None, :, :]).all(-1)  # fitted row i is stored row j
        assert bool(match.any(1).all())
        j = match.float().argmax(1)
        assert torch.equal(reward, first[REWARD][j]) and torch.equal(next_obs, first[NEXT_OBS][j])
    gamma = cfg.agent.sac.gamma
    seen = torch.cat(real_discounts)
    assert bool((seen - gamma ** 3).abs().lt(1e-6).any())  # real rows that look three steps ahead
