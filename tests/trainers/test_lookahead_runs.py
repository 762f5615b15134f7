"""model.lookahead on every trainer and backend: the behaviour actions are planned through the model.

The sync trainer plans over the learner's own ensemble and critics; collectors (threads, processes, Ray actors)
over replicas that the published snapshots fill, the ensemble under its ``model`` entry.
"""

from __future__ import annotations

import csv
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from mbpo import cli
from mbpo.agents.sac import SAC
from mbpo.config import ConfigError, LookaheadConfig, ModelConfig, SACConfig, load_config
from mbpo.model_based.planning_policy import MODEL_KEY, PlanningPolicy
from mbpo.models.ensemble import DynamicsEnsemble
from mbpo.models.rules import model_rules
from tests.conftest import TRAINER_RUNS

pytestmark = pytest.mark.timeout(180)

LEARNING_STARTS = 64
TINY = ["--config", "configs/pendulum_mbpo.yaml", "device=cpu", "progress=false", "total_env_steps=160",
        f"agent.learning_starts={LEARNING_STARTS}", "eval_every=1000", "eval_episodes=1", "log_every=32",
        "agent.batch_size=16", "agent.utd_ratio=1", "agent.sac.hidden_sizes=[16,16]", "model.hidden_sizes=[16,16]",
        "model.weight_decay=[0,0,0]", "model.train_freq=32", "model.max_epochs=2", "model.rollouts_per_real=4",
        "runtime.num_collectors=1", "runtime.collection_batch_size=16", "runtime.publish_every=4",
        "checkpoint.every=1000", "model.lookahead.enabled=true", "model.lookahead.sequences=16",
        "model.lookahead.iterations=2"]


def test_every_trainer_and_backend_plans_its_behaviour_actions(trainer_run: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    assert cli.main(["train", *TINY, *TRAINER_RUNS[trainer_run], f"run_dir={run_dir}"]) == 0
    with open(run_dir / "metrics.csv") as f:
        last = list(csv.DictReader(f))[-1]
    planned = int(last["planned_actions"])
    if trainer_run == "sync":  # the model is fitted at learning_starts, before the first policy action
        assert planned == 160 - LEARNING_STARTS
    else:  # a collector plans once a snapshot with a fitted model reaches it
        assert 0 < planned <= 160 - LEARNING_STARTS


def test_a_replica_filled_from_a_snapshot_plans_as_the_learners_own_objects() -> None:
    """Everything the plan depends on (weights, normaliser, elites; actor and critics) travels in the snapshot."""
    obs_space = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
    act_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    config = ModelConfig(enabled=True, hidden_sizes=[16, 16], weight_decay=[0, 0, 0], ensemble_size=3, num_elites=2,
                         lookahead=LookaheadConfig(enabled=True, sequences=8, iterations=2))
    agent = SAC(SACConfig(hidden_sizes=[16, 16]), obs_space, act_space, "cpu", seed=1)
    rules = model_rules(config, "Pendulum-v1")
    replica = PlanningPolicy.replica(SAC(SACConfig(hidden_sizes=[16, 16]), obs_space, act_space, "cpu", seed=9),
                                     config, "Pendulum-v1", obs_space, act_space, None, seed=5)
    ensemble = DynamicsEnsemble(config, 3, act_space, "cpu", seed=2, learn_termination=rules.termination is None,
                                precision=replica.ensemble.precision)  # what a collector's CPU computes natively
    with torch.no_grad():  # a "fitted" ensemble: other weights, a normaliser, elites, a version
        for p in ensemble.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        ensemble.normalizer.fit(torch.randn(64, 4, generator=torch.Generator().manual_seed(3)) * 3 + 1)
    ensemble.set_elites([0.3, 0.1, 0.2])
    ensemble.version = 4
    learner = PlanningPolicy(agent, ensemble, rules, config, act_space, seed=5)
    obs = torch.tensor([[0.5, -0.2, 1.0], [1.0, 0.0, -3.0]])
    replica.load_snapshot({**agent.snapshot(), MODEL_KEY: ensemble.acting_state()})
    assert replica.ensemble.elites == [1, 2] and replica.ensemble.version == 4
    assert torch.equal(replica.planner.plan(obs), learner.planner.plan(obs))
    assert replica.act(obs, explore=True).shape == (2, 1) and replica.planned


def test_a_replica_acts_with_the_actor_before_the_first_fit_and_when_evaluated() -> None:
    obs_space = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
    act_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    config = ModelConfig(enabled=True, hidden_sizes=[16, 16], weight_decay=[0, 0, 0],
                         lookahead=LookaheadConfig(enabled=True, sequences=8, iterations=1))
    agent = SAC(SACConfig(hidden_sizes=[16, 16]), obs_space, act_space, "cpu", seed=1)
    policy = PlanningPolicy.replica(agent, config, "Pendulum-v1", obs_space, act_space, None, seed=5)
    obs = torch.zeros(2, 3)
    policy.act(obs, explore=True)
    assert not policy.planned  # version 0: no fit has reached it
    assert torch.equal(policy.act(obs, explore=False), agent.act(obs, explore=False))


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.enabled=false"], "needs model.enabled=true"),
    (["agent.name=dqn", "env.id=CartPole-v1"], "use agent.name=sac"),
])
def test_lookahead_without_a_model_or_with_dqn_is_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["model.lookahead.enabled=true", "model.enabled=true", *overrides])
