"""The model's health figures: exact for the true dynamics, large for a random model; the critic's bias."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from envs.base import StepResult, VecEnv
from envs.classic.cartpole import CARTPOLE
from mbpo.config import load_config
from mbpo.data.transitions import TERMINATED
from mbpo.model_based.health import one_step_errors, open_loop_errors, successors
from mbpo.model_based.learner import ModelBased
from mbpo.run.evaluation import critic_bias, evaluate_episodes

pytestmark = pytest.mark.timeout(60)


def cartpole_trajectories(steps: int, num_envs: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """Real CartPole transitions of random actions, env-major rows shuffled as interleaved collectors would."""
    env = envs.make("CartPole-v1", num_envs, device="cpu", seed=seed)
    g = torch.Generator().manual_seed(seed)
    obs = env.reset(seed=seed)
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "terminated")}
    for _ in range(steps):
        action = torch.randint(2, (num_envs,), generator=g)
        nxt, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        true_next = torch.where(done.unsqueeze(-1), info["final_obs"], nxt) if bool(done.any()) else nxt
        for key, value in zip(rows, (obs, action, reward, true_next, terminated), strict=True):
            rows[key].append(value)
        obs = nxt
    data = {k: torch.cat(v) for k, v in rows.items()}
    perm = torch.randperm(data["obs"].shape[0], generator=g)
    return {k: v[perm] for k, v in data.items()}


def true_step(obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return CARTPOLE.dynamics(obs.clone(), action.clone())  # CartPole's obs is its state


def random_step(obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    w = torch.randn(obs.shape[-1], obs.shape[-1], generator=g)
    nxt = obs @ w
    return nxt, nxt[:, 0], nxt[:, 1] > 0


def variances(d: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return (d["next_obs"] - d["obs"]).var(0), d["reward"].var()


def test_the_true_dynamics_score_zero_and_a_random_model_scores_far_above_one() -> None:
    d = cartpole_trajectories(60)
    delta_var, _ = variances(d)
    reward_var = torch.tensor(1.0)  # as if it varied: CartPole's reward is always 1
    args = (d["obs"], d["action"], d["reward"], d["next_obs"], d["terminated"], delta_var, reward_var)
    exact = one_step_errors(true_step, *args)
    assert exact == {"delta": 0.0, "reward": 0.0, "termination": 0.0}
    # Its true variance is 0: no error relative to it means anything.
    constant = one_step_errors(true_step, *args[:-1], d["reward"].var())
    assert math.isnan(constant["reward"]) and constant["delta"] == 0.0
    assert d["terminated"].any(), "the data must hold terminations for the termination error to mean anything"
    wrong = one_step_errors(random_step, *args)
    assert wrong["delta"] > 10 and wrong["reward"] > 0.5 and wrong["termination"] > 0.2
    horizons = open_loop_errors(true_step, d["obs"], d["action"], d["next_obs"], d["terminated"], delta_var)
    assert horizons == {1: 0.0, 5: 0.0}
    drift = open_loop_errors(random_step, d["obs"], d["action"], d["next_obs"], d["terminated"], delta_var)
    assert drift[1] > 10 and drift[5] > drift[1]


def test_open_loop_one_step_equals_the_one_step_delta_error_on_whole_windows() -> None:
    """Normalised the same way, so the 5-step figure reads directly as compounding over the 1-step one."""
    d = cartpole_trajectories(40)
    delta_var, _ = variances(d)

    def noisy(obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        nxt, r, t = true_step(obs, action)
        return nxt + 0.01, r, t

    succ = successors(d["obs"], d["next_obs"], d["terminated"])
    chain = [torch.arange(len(succ))]
    for _ in range(4):
        chain.append(torch.where(chain[-1] >= 0, succ[chain[-1].clamp(min=0)], chain[-1]))
    starts = chain[-1] >= 0
    one = one_step_errors(noisy, d["obs"][starts], d["action"][starts], d["reward"][starts], d["next_obs"][starts],
                          d["terminated"][starts], delta_var, torch.tensor(1.0))
    loop = open_loop_errors(noisy, d["obs"], d["action"], d["next_obs"], d["terminated"], delta_var)
    assert loop[1] == pytest.approx(one["delta"], rel=1e-6)
    assert loop[5] > loop[1]


def test_a_constant_state_dimension_is_left_out_of_the_state_errors() -> None:
    """A padding or fixed-command dim has variance 0: dividing by it would make any error astronomical."""
    d = cartpole_trajectories(40)
    pad = lambda t: torch.cat((t, torch.full((t.shape[0], 1), 3.0)), -1)  # noqa: E731 - a constant 5th dim
    obs, next_obs = pad(d["obs"]), pad(d["next_obs"])
    delta_var = (next_obs - obs).var(0)
    assert delta_var[-1] == 0

    def off_on_the_pad(o: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        nxt, r, t = true_step(o[:, :4], a)
        return torch.cat((nxt, torch.full((o.shape[0], 1), 3.5)), -1), r, t

    errors = one_step_errors(off_on_the_pad, obs, d["action"], d["reward"], next_obs, d["terminated"], delta_var,
                             torch.tensor(1.0))
    loop = open_loop_errors(off_on_the_pad, obs, d["action"], next_obs, d["terminated"], delta_var)
    assert errors["delta"] == 0.0 and loop == {1: 0.0, 5: 0.0}


def test_trajectories_are_found_whatever_the_interleaving() -> None:
    d = cartpole_trajectories(30, num_envs=3)
    succ = successors(d["obs"], d["next_obs"], d["terminated"])
    linked = succ >= 0
    assert torch.equal(d["obs"][succ[linked]], d["next_obs"][linked])
    # Every row but an episode's last (terminated, or cut by the data's end) has its successor among the rows.
    ends = d["terminated"] | ~(d["next_obs"].unsqueeze(1) == d["obs"].unsqueeze(0)).all(-1).any(1)
    assert torch.equal(~linked, ends)


class ConstantReward(VecEnv):
    """Reward 1 every step for ``horizon`` steps; the obs is the fraction of the episode left."""

    def __init__(self, num_envs: int, horizon: int) -> None:
        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.max_episode_steps = self.horizon = horizon
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.t = 0

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        self.t = 0
        return torch.ones(self.num_envs, 1)

    def step(self, actions: torch.Tensor) -> StepResult:
        self.t += 1
        done = torch.full((self.num_envs,), self.t >= self.horizon)
        obs = torch.full((self.num_envs, 1), 1 - self.t / self.horizon)
        return obs, torch.ones(self.num_envs), torch.zeros_like(done), done, {}


class KnownValue:
    """A stub learner whose critic is the true soft value (each step after the first adds ``bonus``, as SAC's
    alpha * H) plus ``offset``.
    """

    device = torch.device("cpu")

    def __init__(self, horizon: int, gamma: float, offset: float, bonus: float = 0.0) -> None:
        self.horizon, self.gamma, self.offset, self.bonus = horizon, gamma, offset, bonus

    def entropy_bonus(self) -> float:
        return self.bonus

    def act(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        return torch.zeros(obs.shape[0], 1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        left = torch.round(obs[:, 0] * self.horizon)
        soft = self.bonus * (self.gamma - self.gamma**left) / (1 - self.gamma)
        return (1 - self.gamma**left) / (1 - self.gamma) + soft + self.offset


@pytest.mark.parametrize("offset, bonus", [(0.0, 0.0), (3.5, 0.0), (-12.0, 0.0), (3.5, -0.2), (0.0, 0.5)])
def test_the_critic_bias_is_exact_on_a_task_with_a_known_value(offset: float, bonus: float) -> None:
    gamma, horizon = 0.97, 40
    env = ConstantReward(5, horizon)
    agent = KnownValue(horizon, gamma, offset, bonus)
    episodes = evaluate_episodes(agent, env, seed=0, gamma=gamma)  # type: ignore[arg-type]  # a stub agent
    assert episodes.returns == [40.0] * 5
    value = (1 - gamma**horizon) / (1 - gamma)
    assert episodes.discounted_returns == pytest.approx([value] * 5, abs=1e-12)
    bias = critic_bias(agent, episodes)  # type: ignore[arg-type]
    assert bias["mc_return_start"] == pytest.approx(value, abs=1e-12)
    soft = bonus * (gamma - gamma**horizon) / (1 - gamma)  # the entropy a soft critic's targets added
    assert bias["q_bias"] == pytest.approx(offset + soft, abs=1e-4)  # float32 critic against a float64 return
    assert bias["q_bias_reward"] == pytest.approx(offset, abs=1e-4)


@pytest.mark.parametrize("dropped_every", [0, 10])
def test_model_health_reaches_the_metrics_after_the_second_training(dropped_every: int) -> None:
    """The first training has nothing new to measure; from the second on, rows new to the ensemble do: the rows
    written since the last training, also where env steps wrote no row (a non-finite transition dropped).
    """
    cfg = load_config(None, ["model.enabled=true", "model.hidden_sizes=[32,32]", "model.weight_decay=[0,0,0]",
                             "model.train_freq=100", "model.max_epochs=5", "model.rollouts_per_real=2",
                             "model.ensemble_size=3", "model.num_elites=2"]).model
    env = envs.make("CartPole-v1", 1, device="cpu", seed=0)
    mb = ModelBased(cfg, "CartPole-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)
    from mbpo.data.replay import make_replay_buffer
    from mbpo.data.transitions import real_transitions

    real = make_replay_buffer(1000, "cpu", torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(0)
    obs = env.reset(seed=0)

    class RandomPolicy:  # a RolloutPolicy: uniform random CartPole actions
        def rollout_noise(self, n: int, gen: torch.Generator) -> torch.Tensor:
            return torch.rand(n, generator=gen)

        def rollout_act(self, o: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            return (noise < 0.5).long()

    policy = RandomPolicy()
    rows_seen, rows_at_training = [], []
    for step in range(1, 251):
        action = torch.randint(2, (1,), generator=g)
        nxt, reward, terminated, truncated, info = env.step(action)
        if not (dropped_every and step % dropped_every == 0):
            real.extend(real_transitions(obs, action, reward, nxt, terminated, truncated, info))
        obs = nxt
        if mb.after_collect(step - 1, step, real, policy):
            rows_seen.append(mb.health.get("model_health_rows"))
            rows_at_training.append(len(real))
    first, second = rows_at_training  # trainings at 100 and 200 env steps; the second measures the rows between
    assert rows_seen == [None, second - first] and second - first == (90 if dropped_every else 100)
    row = mb.metrics(250)
    assert math.isnan(row["model_err_reward"])  # CartPole's reward is always 1: no relative error
    for key in ("model_err_delta", "model_err_termination", "model_open_loop_err_1",
                "model_open_loop_err_5", "real_termination_rate", "rollout_mean_length", "rollout_terminated_frac",
                "rollout_nonfinite_frac", "rollout_termination_rate"):
        assert row[key] is not None and math.isfinite(row[key]), key
    assert row["model_trainings"] == 2 and row["model_fit_stopped_by"] in ("patience", "max_epochs")
    # The termination rule is CartPole's, applied to predicted states: right far more often than not.
    assert row["model_err_termination"] < 0.2
    data = real[: len(real)]
    assert row["real_termination_rate"] == pytest.approx(float(data[TERMINATED][first:second].float().mean()))


def test_with_a_given_reward_the_reward_error_is_that_rules_and_zero_for_the_envs_own(tmp_path: Path) -> None:
    """The ensemble has no reward output then: the health figures use the rule, as the rollouts do."""
    from mbpo.run.metrics import read_metrics
    from mbpo.trainers import SyncTrainer

    cfg = load_config(None, [
        "device=cpu", f"run_dir={tmp_path}", "progress=false", "total_env_steps=300", "eval_every=300",
        "eval_episodes=2", "log_every=100", "agent.batch_size=32", "agent.learning_starts=100",
        "agent.sac.hidden_sizes=[32,32]", "agent.utd_ratio=1", "model.enabled=true", "model.hidden_sizes=[16,16]",
        "model.weight_decay=[0,0,0]", "model.max_epochs=3", "model.rollouts_per_real=2", "model.train_freq=100",
        "model.reward=tests.models.test_rules:pendulum_reward"])
    trainer = SyncTrainer(cfg, tmp_path)
    assert trainer.model is not None and not trainer.model.ensemble.learn_reward
    trainer.run()
    last = read_metrics(tmp_path / "metrics.csv")[-1]
    assert float(last["model_err_delta"]) > 0 and float(last["model_err_reward"]) < 1e-9  # the env's own reward
