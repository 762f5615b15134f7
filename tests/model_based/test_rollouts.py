"""Branched rollouts in chunks (model.rollout_batch_size): the same results for any chunk size, bounded memory."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
import torch

from mbpo.agents import make_agent
from mbpo.config import load_config
from mbpo.model_based.rollouts import branched_rollouts, obs_limit_from
from mbpo.models import DynamicsEnsemble
from mbpo.run.metrics import read_metrics
from mbpo.trainers import SyncTrainer
from tests.conftest import only_learner
from tests.trainers.test_sync_trainer import params, tiny, untimed

pytestmark = pytest.mark.timeout(120)

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, (3,))
SPACES = {"sac": gym.spaces.Box(-2.0, 2.0, (1,)), "dqn": gym.spaces.Discrete(3)}
# None = all branches at once; the rest do not divide the 1,001 starts, and 1 and 7 are below an elite tile.
BATCH_SIZES = (1001, 1000, 333, 100, 17, 7, 1)


def fitted(agent_name: str, learn_reward: bool = True) -> tuple[object, DynamicsEnsemble, torch.Tensor]:
    """An agent and an ensemble (learned termination head) fitted a little on random data, and its obs."""
    cfg = load_config(None, only_learner([
        f"agent.name={agent_name}", "agent.sac.hidden_sizes=[32,32]", "agent.dqn.hidden_sizes=[32,32]",
        "agent.dqn.epsilon_start=0.3", "model.enabled=true", "model.hidden_sizes=[32,32]", "model.weight_decay=[0,0,0]",
        "model.max_epochs=3"]))
    space = SPACES[agent_name]
    agent = make_agent(cfg.agent, OBS_SPACE, space, torch.device("cpu"), 0)
    ens = DynamicsEnsemble(cfg.model, 3, space, "cpu", seed=0, learn_termination=True, learn_reward=learn_reward)
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(500, 3, generator=g)
    action = agent.rollout_act(obs, agent.rollout_noise(500, g))
    ens.fit(obs, action, torch.randn(500, generator=g), obs + 0.1 * torch.randn(500, 3, generator=g),
            torch.rand(500, generator=g) < 0.2)
    return agent, ens, obs


def reward_rule(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    return -(next_obs - obs).square().sum(-1) - action.float().reshape(obs.shape[0], -1).square().sum(-1)


@pytest.mark.parametrize("agent_name", ["sac", "dqn"])
@pytest.mark.parametrize("given_reward", [False, True])
def test_rollouts_are_the_same_for_any_batch_size(agent_name: str, given_reward: bool) -> None:
    """Each step draws its noise for every live branch before any chunk runs, and every forward runs whole
    row tiles: a chunk size (dividing the starts or not) changes no bit of the result or of the counts.
    """
    agent, ens, obs = fitted(agent_name, learn_reward=not given_reward)
    start = torch.randn(1001, 3, generator=torch.Generator().manual_seed(1))
    reward = reward_rule if given_reward else None

    def run(batch_size: int | None) -> tuple[dict[str, torch.Tensor], object]:
        generator = torch.Generator().manual_seed(3)
        batch, stats = branched_rollouts(start, 5, agent, ens, None, obs_limit_from(obs), generator, reward=reward,
                                         batch_size=batch_size)
        return {k: batch[k] for k in batch.keys()} | {"generator": generator.get_state()}, stats

    whole, whole_stats = run(None)
    assert whole_stats.terminated > 0 and whole_stats.stored > 1001  # branches end early, others go on
    for batch_size in BATCH_SIZES:
        chunked, stats = run(batch_size)
        assert stats == whole_stats, batch_size
        assert chunked.keys() == whole.keys()
        assert all(torch.equal(chunked[k], whole[k]) for k in whole), batch_size


def test_a_sink_gets_every_step_as_it_is_made() -> None:
    """With a sink (the model buffer) each step's transitions leave at once; together they are the batch."""
    agent, ens, obs = fitted("sac")
    start = torch.randn(300, 3, generator=torch.Generator().manual_seed(1))
    batch, stats = branched_rollouts(start, 4, agent, ens, None, obs_limit_from(obs), torch.Generator().manual_seed(3))
    steps: list = []
    empty, sunk_stats = branched_rollouts(start, 4, agent, ens, None, obs_limit_from(obs),
                                          torch.Generator().manual_seed(3), batch_size=64, sink=steps.append)
    assert empty.shape == (0,) and sunk_stats == stats and len(steps) == 4
    assert [s.shape[0] for s in steps][0] == 300 and sum(s.shape[0] for s in steps) == stats.stored
    sunk = torch.cat(steps)
    assert all(torch.equal(sunk[k], batch[k]) for k in batch.keys())


def test_a_whole_run_is_the_same_for_any_rollout_batch_size(tmp_path: Path) -> None:
    """Same seed, rollouts in chunks of 7 or all at once: the same metrics and parameters."""
    mbpo = ("env.id=PointMass-v0", "model.enabled=true", "model.hidden_sizes=[16,16]", "model.weight_decay=[0,0,0]",
            "model.max_epochs=5", "model.train_freq=100", "model.rollouts_per_real=20", "model.epoch_length=100",
            "model.rollout_schedule=[0,3,1,3]")
    runs = {}
    for batch_size in (100_000, 7):
        trainer = SyncTrainer(tiny(tmp_path / str(batch_size), *mbpo, f"model.rollout_batch_size={batch_size}"),
                              tmp_path / str(batch_size))
        trainer.run()
        assert trainer.model is not None and trainer.model.rollouts_started == 20 * 400
        runs[batch_size] = trainer
    a, b = runs.values()
    assert untimed(read_metrics(tmp_path / "100000/metrics.csv")) == untimed(read_metrics(tmp_path / "7/metrics.csv"))
    pa, pb = params(a), params(b)
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    assert a.model is not None and b.model is not None
    ma, mb = (m.model_buffer.newest(len(m.model_buffer)) for m in (a.model, b.model))
    assert ma.shape[0] > 0 and all(torch.equal(ma[k], mb[k]) for k in ma.keys())


@pytest.mark.parametrize("deterministic", [False, True])
def test_deterministic_rollouts_reach_every_model_step(tmp_path: Path, deterministic: bool) -> None:
    """``model.deterministic_rollouts`` decides how every rollout step of a run samples the ensemble."""
    trainer = SyncTrainer(tiny(tmp_path, "env.id=PointMass-v0", "model.enabled=true", "model.hidden_sizes=[16,16]",
                               "model.weight_decay=[0,0,0]", "model.max_epochs=2", "model.train_freq=100",
                               "model.rollouts_per_real=5",
                               "total_env_steps=300", f"model.deterministic_rollouts={deterministic}"), tmp_path)
    assert trainer.model is not None
    ens, seen = trainer.model.ensemble, []
    sample = ens.sample
    ens.sample = lambda *a, **k: seen.append(a[4] if len(a) > 4 else k["deterministic"]) or sample(*a, **k)  # type: ignore[method-assign]
    trainer.run()
    assert len(seen) >= 2 and set(seen) == {deterministic}
