"""LOOP's ARC planner (mbpo.model_based.lookahead) against its definition in hari-sikchi/LOOP controllers/arc.py."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from mbpo.config import LookaheadConfig
from mbpo.model_based.lookahead import Lookahead

pytestmark = pytest.mark.timeout(60)

BOX = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


class Identity:
    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x


class LineModel:
    """A deterministic ensemble of three members on a 2-d state: ``s' = s + (a, 0)``; member m's reward is
    ``(m + 1) * a``; elites 0 and 2 (member 1 would add a different reward if it were used).
    """

    device = torch.device("cpu")
    obs_dim, act_dim, num_elites, learn_reward, learn_termination = 2, 1, 2, True, False
    normalizer = Identity()
    elite_index = torch.tensor([0, 2])

    def inputs(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return torch.cat((obs, action), -1)

    def inference_params(self, members: torch.Tensor) -> tuple[list[torch.Tensor], int]:
        return [members.float()], 0

    def raw(self, x: torch.Tensor, params: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, None]:
        scale = (params[0] + 1).view(-1, 1)
        a = x[..., 2]
        mean = torch.stack((a, torch.zeros_like(a), scale * a), -1)
        return mean, torch.full_like(mean, -200.0), None  # no noise to speak of

    def sample(self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        return obs + torch.cat((action, torch.zeros_like(action)), -1), action[:, 0], None


class Critic:
    """``Q(s, a) = 10 s_0 + a``; the actor always says ``actor_action``."""

    device = torch.device("cpu")

    def __init__(self, actor_action: float = 0.5, q=None) -> None:
        self.actor_action, self.q = actor_action, q

    def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return torch.full((obs.shape[0], 1), self.actor_action)

    def action_value(self, obs: torch.Tensor, action: torch.Tensor, first: bool = False) -> torch.Tensor:
        return self.q(obs, action) if self.q is not None else 10 * obs[:, 0] + action[:, 0]


def beyond(limit: float):
    return lambda obs, action, next_obs: next_obs[:, 0] > limit


def planner(config: LookaheadConfig, critic: Critic | None = None, termination=None) -> Lookahead:
    return Lookahead(config, critic or Critic(), LineModel(), termination or beyond(100.0), None, BOX, seed=0)


def arc_score(s0: float, seq: list[float], limit: float) -> float:
    """arc.py's score of one sequence on :class:`LineModel`, written out: rewards r_0 .. r_{H-2} (r_t counted
    while no state s_1 .. s_t terminated) plus Q(s_{H-1}, a_{H-1}) while none of s_1 .. s_{H-1} did, averaged
    over the elites (members 0 and 2: reward scales 1 and 3).
    """
    per_elite = []
    for scale in (1.0, 3.0):
        s, total, alive = s0, 0.0, True
        for a in seq[:-1]:
            total += scale * a if alive else 0.0
            s = s + a
            alive = alive and not s > limit
        total += (10 * s + seq[-1]) if alive else 0.0
        per_elite.append(total)
    return sum(per_elite) / 2


def test_scores_are_arcs_model_rewards_plus_the_critics_value_zeroed_after_a_termination() -> None:
    config = LookaheadConfig(horizon=3, particles=2)
    plan = planner(config, termination=beyond(0.5))
    seqs = [[0.1, 0.2, 0.3], [0.4, 0.3, -0.2], [0.6, 0.2, 0.9], [-0.5, 0.9, 0.1]]  # the 2nd ends at s_2, the 3rd at s_1
    obs = torch.tensor([[0.05, 0.0]])
    got = plan.scores(obs, torch.tensor(seqs).view(1, 4, 3, 1))
    want = [arc_score(0.05, seq, 0.5) for seq in seqs]
    assert got.shape == (1, 4)
    assert got[0].tolist() == pytest.approx(want, abs=1e-5)
    assert want[1] == pytest.approx((0.4 + 0.3 + 1.2 + 0.9) / 2)  # value zeroed: s_2 = 0.75 terminated
    assert want[2] == pytest.approx((0.6 + 1.8) / 2)  # r_1 and the value zeroed: s_1 = 0.65 terminated


def test_weights_are_mppis_and_a_non_finite_score_weighs_nothing() -> None:
    plan = planner(LookaheadConfig(kappa=0.5, sequences=3, actor_sequences=1))
    scores = torch.tensor([[1.0, 3.0, float("nan"), 2.0], [float("inf"), float("nan"), -float("inf"), float("nan")]])
    w = plan.weights(scores)
    e = [math.exp(0.5 * (1 - 3)), 1.0, 0.0, math.exp(0.5 * (2 - 3))]
    assert w[0].tolist() == pytest.approx([v / sum(e) for v in e])
    assert w[1].tolist() == [0.0, 0.0, 0.0, 1.0]  # nothing finite: the actor's sequence (index sequences)


@pytest.mark.parametrize("sample", [False, True])
def test_the_plan_finds_the_best_first_action_within_the_bounds(sample: bool) -> None:
    """Horizon 1 scores a sequence by the critic alone: Q = -(a - 0.3)^2 peaks inside the bounds, -(a - 1.5)^2
    outside them (the best action is then the upper bound).
    """
    for peak, want in ((0.3, 0.3), (1.5, 1.0)):
        critic = Critic(actor_action=-0.9, q=lambda obs, a, p=peak: -100 * (a[:, 0] - p) ** 2)
        plan = planner(LookaheadConfig(horizon=1, kappa=1.0), critic)
        action = plan.plan(torch.zeros(3, 2), sample=sample)
        assert action.shape == (3, 1)
        assert bool((action.abs() <= 1.0).all())
        assert action[:, 0].tolist() == pytest.approx([want] * 3, abs=0.08)


def test_the_actors_sequence_is_a_candidate_every_iteration() -> None:
    """A sharp peak at the actor's action: only the actor's own sequence hits it exactly, and wins."""
    critic = Critic(actor_action=0.123, q=lambda obs, a: -1e4 * (a[:, 0] - 0.123).abs())
    plan = planner(LookaheadConfig(horizon=2, kappa=1e3), critic)
    assert plan.plan(torch.zeros(2, 2))[:, 0].tolist() == pytest.approx([0.123, 0.123], abs=1e-6)


def test_the_warm_start_is_the_chosen_sequence_and_an_ended_episode_forgets_it() -> None:
    critic = Critic(actor_action=0.7, q=lambda obs, a: -1e4 * (a[:, 0] - 0.7).abs())
    plan = planner(LookaheadConfig(horizon=3, kappa=1e3), critic)
    plan.plan(torch.zeros(2, 2))
    assert plan.mean is not None
    assert plan.mean.flatten().tolist() == pytest.approx([0.7] * 6, abs=1e-6)
    plan.end_episodes(torch.tensor([True, False]))
    assert plan.mean[0].flatten().tolist() == [0.0] * 3  # the middle of the bounds, as arc.py's reset()
    assert plan.mean[1].flatten().tolist() == pytest.approx([0.7] * 3, abs=1e-6)


def test_a_plan_is_reproducible_from_its_seed() -> None:
    a = planner(LookaheadConfig()).plan(torch.zeros(2, 2))
    b = planner(LookaheadConfig()).plan(torch.zeros(2, 2))
    assert torch.equal(a, b)


def test_without_a_termination_rule_or_head_it_refuses() -> None:
    with pytest.raises(ValueError, match="termination rule or the ensemble's termination head"):
        Lookahead(LookaheadConfig(), Critic(), LineModel(), None, None, BOX, seed=0)


@pytest.mark.parametrize("crossq", [False, True])
def test_sacs_action_value_is_the_first_critic_or_the_actors_reduction(crossq: bool) -> None:
    """On env-unit actions (bounds [-2, 2]): the critics see them squashed to [-1, 1], as in the update."""
    from mbpo.agents.sac import SAC
    from mbpo.config import SACConfig

    box = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    obs_space = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
    agent = SAC(SACConfig(hidden_sizes=[16, 16], num_critics=4, actor_q="mean", crossq=crossq), obs_space, box,
                "cpu", seed=0)
    obs, action = torch.randn(5, 3, generator=torch.Generator().manual_seed(0)), torch.tensor([[-2.0], [-1.0], [0.0],
                                                                                              [1.0], [2.0]])
    with torch.no_grad():
        q = agent.critic(torch.cat((obs, action / 2), -1)).float().squeeze(-1)  # [4, 5]
    assert torch.allclose(agent.action_value(obs, action, first=True), q[0], atol=1e-5)
    assert torch.allclose(agent.action_value(obs, action), q.mean(0), atol=1e-5)


def test_an_actor_action_the_model_made_non_finite_never_reaches_the_plan() -> None:
    """The actor turns a predicted state into NaN actions: that sequence's score is non-finite and weighs
    nothing, and the plan, its warm start and the next plans stay finite (the sampled sequences carry on).
    """

    class NanActor(Critic):
        def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            return torch.where(obs[:, :1] == 0, 0.5, torch.nan)  # finite on the real state only

    plan = planner(LookaheadConfig(horizon=3), NanActor(q=lambda obs, a: -(a[:, 0] - 0.3) ** 2))
    for _ in range(3):
        action = plan.plan(torch.zeros(2, 2))
        assert bool(torch.isfinite(action).all())
        assert plan.mean is not None and bool(torch.isfinite(plan.mean).all())


def test_a_collectors_replica_plans_in_what_its_own_cpu_computes(monkeypatch: pytest.MonkeyPatch) -> None:
    """model.precision was resolved for the learner's device (bf16 on a GPU): a collector's CPU without native
    bf16 still builds its replica, in fp32.
    """
    from mbpo.agents.sac import SAC
    from mbpo.config import ModelConfig, SACConfig
    from mbpo.device import precision
    from mbpo.model_based.planning_policy import PlanningPolicy

    monkeypatch.setattr(precision, "native_bf16", lambda device: (False, "no bf16 here (test)"))
    obs_space = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
    config = ModelConfig(enabled=True, hidden_sizes=[16, 16], weight_decay=[0, 0, 0], precision="bf16",
                         lookahead=LookaheadConfig(enabled=True))
    agent = SAC(SACConfig(hidden_sizes=[16, 16], precision="fp32"), obs_space, BOX, "cpu", seed=0)
    policy = PlanningPolicy.replica(agent, config, "Pendulum-v1", obs_space, BOX, None, seed=0)
    assert policy.ensemble.precision == "fp32"


def test_a_collectors_replica_keeps_an_explicit_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    """model.precision=fp32 on a CPU with native bf16: the collector's replica planned in bf16 (its precision was
    'auto' whatever the config said), the sync trainer's in fp32.
    """
    from mbpo.agents.sac import SAC
    from mbpo.config import ModelConfig, SACConfig
    from mbpo.device import precision
    from mbpo.model_based.planning_policy import PlanningPolicy

    monkeypatch.setattr(precision, "native_bf16", lambda device: (True, "native bf16 here (test)"))
    obs_space = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
    agent = SAC(SACConfig(hidden_sizes=[16, 16], precision="fp32"), obs_space, BOX, "cpu", seed=0)
    for asked, planned in (("fp32", "fp32"), ("auto", "bf16")):
        config = ModelConfig(enabled=True, hidden_sizes=[16, 16], weight_decay=[0, 0, 0], precision=asked,
                             lookahead=LookaheadConfig(enabled=True))
        policy = PlanningPolicy.replica(agent, config, "Pendulum-v1", obs_space, BOX, None, seed=0)
        assert policy.ensemble.precision == planned, asked
