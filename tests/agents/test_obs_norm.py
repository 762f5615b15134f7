"""agent.obs_norm: running statistics that are exact, reach actor and critics, and travel with the weights."""

from __future__ import annotations

import io
import multiprocessing as mp

import gymnasium as gym
import numpy as np
import pytest
import torch

from mbpo.agents import make_agent
from mbpo.agents.networks import RunningObsNorm
from mbpo.agents.sac import SAC
from mbpo.config import AgentConfig, ConfigError, SACConfig, load_config
from mbpo.data.transitions import NEXT_OBS, OBS
from mbpo.runtime.shared_weights import SharedWeights
from tests.agents.test_sac import ACT_DIM, HIGH, LOW, OBS_DIM, make_batch

pytestmark = pytest.mark.timeout(60)

SCALE, SHIFT = torch.tensor([50.0, 0.01, 1.0, 3.0, 200.0]), torch.tensor([100.0, -2.0, 0.0, 7.0, -1e3])


def raw_obs(n: int, seed: int) -> torch.Tensor:
    """Observations far from zero mean and unit scale, as a locomotion env's are."""
    return SHIFT + SCALE * torch.randn(n, OBS_DIM, generator=torch.Generator().manual_seed(seed))


def make(obs_norm: bool, seed: int = 0) -> SAC:
    space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    return SAC(SACConfig(hidden_sizes=[32, 32]), space, gym.spaces.Box(LOW, HIGH, dtype=np.float32), "cpu",
               seed=seed, obs_norm=obs_norm)


def normalised(obs: torch.Tensor, norm: RunningObsNorm) -> torch.Tensor:
    return ((obs - norm.mean) / torch.sqrt(norm.var + 1e-8)).clamp(-10, 10)


def test_statistics_equal_numpy_over_any_split_and_skip_non_finite_rows() -> None:
    data = raw_obs(1000, seed=1)
    poisoned = data.clone()
    poisoned[[3, 500, 999], 1] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    norm = RunningObsNorm(OBS_DIM)
    probe = raw_obs(4, seed=2)
    assert torch.equal(norm(probe), probe.clamp(-10, 10))  # identity before the first update
    for lo, hi in ((0, 1), (1, 1), (1, 7), (7, 400), (400, 1000)):  # uneven chunks, one of one row, one empty
        norm.update(poisoned[lo:hi])
    finite = np.delete(data.numpy().astype(np.float64), [3, 500, 999], axis=0)
    assert norm.count.item() == len(finite) == 997
    np.testing.assert_allclose(norm.mean.numpy(), finite.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.var.numpy(), finite.var(0), rtol=1e-5)
    norm.update(torch.full((5, OBS_DIM), float("nan")))  # a batch with no finite row changes nothing
    assert norm.count.item() == 997 and torch.isfinite(norm.mean).all() and torch.isfinite(norm.var).all()


def test_actor_rollouts_and_critics_see_normalised_obs() -> None:
    """Same seed, same weights: the obs_norm learner on raw obs equals a plain learner on normalised obs."""
    with_norm, plain = make(True), make(False)
    with_norm.observe(raw_obs(512, seed=3))
    norm = with_norm.obs_norm
    assert norm is not None and norm.count.item() == 512
    obs = raw_obs(16, seed=4)
    for explore in (False, True):
        torch.testing.assert_close(with_norm.act(obs, explore), plain.act(normalised(obs, norm), explore))
    noise = with_norm.rollout_noise(16, torch.Generator().manual_seed(5))
    torch.testing.assert_close(with_norm.rollout_act(obs, noise), plain.rollout_act(normalised(obs, norm), noise))
    batch = make_batch(64, seed=6)
    batch[OBS], batch[NEXT_OBS] = raw_obs(64, seed=7), raw_obs(64, seed=8)
    plain_batch = batch.clone()
    plain_batch[OBS], plain_batch[NEXT_OBS] = normalised(batch[OBS], norm), normalised(batch[NEXT_OBS], norm)
    for _ in range(3):
        got, want = dict(with_norm.update(batch)), dict(plain.update(plain_batch))
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert torch.equal(norm.count, torch.tensor(512.0, dtype=torch.float64))  # updates never move the statistics


def test_a_plain_learners_snapshot_has_no_statistics() -> None:
    """obs_norm off changes nothing: the same actor keys as always, so older checkpoints still load."""
    assert set(make(False).snapshot()["actor"]) == {k for k in make(True).snapshot()["actor"] if "obs_norm" not in k}


def test_statistics_travel_with_snapshots_checkpoints_and_shared_memory() -> None:
    learner = make(True)
    learner.observe(raw_obs(300, seed=9))
    obs = raw_obs(8, seed=10)
    want = learner.act(obs, explore=False)

    collector = make(True, seed=123)  # a collector's policy: other init, no statistics of its own
    collector.load_snapshot(learner.snapshot())
    torch.testing.assert_close(collector.act(obs, explore=False), want)

    buf = io.BytesIO()
    torch.save(learner.state_dict(), buf)
    buf.seek(0)
    resumed = make(True, seed=7)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    assert resumed.obs_norm is not None and learner.obs_norm is not None
    for key in ("mean", "var", "count"):
        assert torch.equal(getattr(resumed.obs_norm, key), getattr(learner.obs_norm, key))
    torch.testing.assert_close(resumed.act(obs, explore=False), want)

    shared = SharedWeights(make(True).snapshot(), mp.get_context("spawn"))  # the process backend's channel
    shared.write(1, learner.snapshot())
    read = shared.read(0)
    assert read is not None
    child = make(True, seed=5)
    child.load_snapshot(read[1])
    torch.testing.assert_close(child.act(obs, explore=False), want)


def test_obs_norm_is_refused_for_dqn() -> None:
    with pytest.raises(ConfigError, match=r"^agent\.obs_norm=true is for agent\.name=sac"):
        load_config(None, ["agent.name=dqn", "agent.obs_norm=true"])
    assert make_agent(AgentConfig(obs_norm=True), gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (ACT_DIM,)),
                      "cpu", seed=0).obs_norm is not None  # type: ignore[attr-defined]
