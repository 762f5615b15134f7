"""The task's rules for model rollouts: named in the config or carried by the env, checked on real data at
start-up; a given termination replaces the learned head, a given reward the ensemble's reward.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import envs
from envs.contract import probe
from mbpo.config import ConfigError, load_config
from mbpo.config.callables import load_callable
from mbpo.data.transitions import real_transitions
from mbpo.errors import MbpoError
from mbpo.model_based.learner import ModelBased
from mbpo.models.rules import Rule, check_rules, env_rule, model_rules, probe_transitions
from mbpo.smoke import POINT_MASS_MBPO
from mbpo.trainers import AsyncTrainer, SyncTrainer
from tests.model_based.test_learner import UniformPolicy

pytestmark = pytest.mark.timeout(120)
HERE = "tests.models.test_rules"


def pendulum_reward(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """gymnasium pendulum.py: -(th^2 + 0.1 thdot^2 + 0.001 u^2) of the state before the step, u clipped to +-2."""
    th = torch.atan2(obs[:, 1], obs[:, 0])
    u = action[:, 0].clamp(-2.0, 2.0)
    return -(th.square() + 0.1 * obs[:, 2].square() + 0.001 * u.square())


def never(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    return torch.zeros(next_obs.shape[0], dtype=torch.bool, device=next_obs.device)


NOT_CALLABLE = 3


class RuledPendulum(envs.VecEnv):
    """A user's own env that carries its task's rules (the native Pendulum underneath for the dynamics)."""

    def __init__(self, num_envs: int = 1, seed: int = 0) -> None:
        self.inner = envs.make("Pendulum-v1", num_envs, device="cpu", seed=seed)
        self.num_envs, self.device = num_envs, self.inner.device
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space
        self.max_episode_steps = self.inner.max_episode_steps

    @property
    def episode_steps(self) -> torch.Tensor:  # type: ignore[override]
        return self.inner.episode_steps

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.inner.reset(seed=seed, env_ids=env_ids)

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        return self.inner.step(actions)

    def termination_fn(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        return never(obs, action, next_obs)

    def reward_fn(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        return pendulum_reward(obs, action, next_obs)


def model_config(*overrides: str) -> Any:
    return load_config(None, ["model.enabled=true", "model.hidden_sizes=[16,16]", "model.weight_decay=[0,0,0]",
                              "model.max_epochs=3", "model.rollouts_per_real=4", "model.train_freq=50",
                              *overrides]).model


def pendulum_model(*overrides: str, env: object | None = None) -> ModelBased:
    space = envs.make("Pendulum-v1", 1)
    return ModelBased(model_config(*overrides), "Pendulum-v1", space.observation_space, space.action_space,
                      torch.device("cpu"), seed=0, env=env)


def pendulum_data(steps: int, num_envs: int = 4) -> Any:
    """Real Pendulum transitions, random actions, across a time-limit auto-reset."""
    from mbpo.data.replay import make_replay_buffer

    env = envs.make("Pendulum-v1", num_envs, device="cpu", seed=0)
    real = make_replay_buffer(10_000, "cpu", torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    obs = env.reset()
    for _ in range(steps):
        action = envs.random_actions(env, g)
        nxt, reward, term, trunc, info = env.step(action)
        real.extend(real_transitions(obs, action, reward, nxt, term, trunc, info))
        obs = nxt
    return real


def test_a_given_reward_equals_the_envs_reward_on_real_transitions() -> None:
    data = pendulum_data(210)[:840]  # 4 envs x 210 steps: every env's first time-out included
    rule = Rule("reward", load_callable(f"{HERE}:pendulum_reward", "model.reward"), "model.reward")
    torch.testing.assert_close(rule(data["obs"], data["action"], data["next_obs"]), data["reward"],
                               rtol=1e-5, atol=1e-5)


def test_with_a_given_reward_the_ensemble_learns_none_and_rollouts_use_the_rule() -> None:
    model = pendulum_model(f"model.reward={HERE}:pendulum_reward")
    assert model.reward is not None and not model.ensemble.learn_reward
    assert model.ensemble.target_dim == 3 and model.ensemble.net.layers[-1].out_features == 2 * 3  # no reward column
    real = pendulum_data(60, num_envs=1)
    assert model.check_rules(real[: len(real)]) == []  # agrees with the env
    assert model.after_collect(0, 60, real, UniformPolicy(-2.0, 2.0))
    stored = model.model_buffer.newest(len(model.model_buffer))
    assert stored.shape[0] == 4 * 60
    assert torch.equal(stored["reward"], pendulum_reward(stored["obs"], stored["action"], stored["next_obs"]))


def test_a_run_with_a_given_termination_never_uses_a_learned_head(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """PointMass has no known rule, so without one the ensemble learns a termination head (see
    test_tiny_mbpo_run_measurably_improves_point_mass); with model.termination it has none and every
    rollout step asks the given rule.
    """
    calls: list[int] = []
    original = never

    def counting_never(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        calls.append(next_obs.shape[0])
        return original(obs, action, next_obs)

    monkeypatch.setattr(sys.modules[__name__], "never", counting_never)
    cfg = load_config(None, [*POINT_MASS_MBPO, "device=cpu", f"run_dir={tmp_path}", "total_env_steps=200",
                             "agent.utd_ratio=1", "eval_episodes=1",  # the rules are the question, not the returns
                             f"model.termination={HERE}:never"])
    trainer = SyncTrainer(cfg, tmp_path)
    model = trainer.model
    assert model is not None and model.termination is not None and not model.ensemble.learn_termination
    assert model.ensemble.net.layers[-1].out_features == 2 * model.ensemble.target_dim  # no termination logit
    import mbpo.models.ensemble as ensemble_module

    termination_targets: list[object] = []
    real_fit = ensemble_module.fit_ensemble

    def spy_fit(ensemble: Any, x: Any, target: Any, terminated: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        termination_targets.append(terminated)
        return real_fit(ensemble, x, target, terminated, *args, **kwargs)

    monkeypatch.setattr(ensemble_module, "fit_ensemble", spy_fit)
    calls.clear()  # the start-up check on real transitions called it once
    trainer.run()
    assert model.trainings == 4 and termination_targets == [None] * 4  # no fit trains a termination head
    assert sum(calls) >= model.rollouts_started > 0  # every rollout step of every branch asked the rule


def test_the_env_carries_its_rules_through_adapters() -> None:
    """A user's env wrapped by our torchrl adapters both ways still hands over its termination_fn and reward_fn."""
    wrapped = envs.from_torchrl(envs.to_torchrl(RuledPendulum()))
    found = env_rule(wrapped, "reward_fn")
    assert found is not None and "RuledPendulum" in found[1]
    model = pendulum_model(env=wrapped)
    assert model.rules.describe() == ("termination from the env's termination_fn (RuledPendulum); reward from the "
                                      "env's reward_fn (RuledPendulum)")
    assert not model.ensemble.learn_reward and not model.ensemble.learn_termination
    # The config wins over the env; learned_termination skips the env's rule as it skips a known one.
    model = pendulum_model(f"model.reward={HERE}:pendulum_reward", "model.learned_termination=true", env=wrapped)
    assert model.reward is not None and model.reward.source.startswith("model.reward=")
    assert model.termination is None and model.ensemble.learn_termination
    assert env_rule(envs.make("Pendulum-v1", 1), "reward_fn") is None
    broken = RuledPendulum()
    broken.reward_fn = NOT_CALLABLE  # type: ignore[assignment,method-assign]
    with pytest.raises(MbpoError, match=r"the env's reward_fn \(RuledPendulum.reward_fn\) is a int, not a callable"):
        env_rule(broken, "reward_fn")


def test_an_async_trainer_reads_the_rules_of_the_env_it_was_given(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(None, ["device=cpu", f"run_dir={tmp_path}", "progress=false", "model.enabled=true",
                             "model.hidden_sizes=[16,16]", "model.weight_decay=[0,0,0]", "eval_episodes=2"])
    trainer = AsyncTrainer(cfg, tmp_path, env_factory=lambda collector, incarnation, seed: RuledPendulum(seed=seed))
    try:
        assert trainer.model is not None and "RuledPendulum" in trainer.model.rules.describe()
    finally:
        trainer.close()
    err = capsys.readouterr().err
    assert "rollouts of 100,000 branches, 100,000 at a time (model.rollout_batch_size): about" in err  # 400 x 250
    assert "[mbpo] model rules: termination from the env's termination_fn (RuledPendulum)" in err
    assert "warning" not in err


def wrong(kind: str, value: Any) -> Rule:
    return Rule(kind, lambda obs, action, next_obs: value(next_obs.shape[0]), f"model.{kind}='pkg:fn'")


@pytest.mark.parametrize(("rule", "message"), [
    (wrong("termination", lambda n: torch.zeros(n)), r"returned torch.float32 \(5,\) on cpu; expected a tensor of "
                                                     r"torch.bool, shape \(5,\), on cpu"),
    (wrong("termination", lambda n: torch.zeros(n, 2, dtype=torch.bool)), r"returned torch.bool \(5, 2\)"),
    (wrong("reward", lambda n: [0.0] * n), r"returned a list; expected a tensor of a float dtype"),
    (wrong("reward", lambda n: torch.zeros(n, dtype=torch.int64)), r"expected a tensor of a float dtype"),
    (wrong("reward", lambda n: torch.zeros(n, device="meta")), r"on meta; expected .* on cpu"),
    (wrong("reward", lambda n: torch.full((n,), float("nan"))), r"returned non-finite rewards on real transitions"),
    (wrong("reward", lambda n: 1 / 0), r"model.reward='pkg:fn' raised ZeroDivisionError: division by zero, on real "
                                       r"transitions \(obs float32 \(5, 3\) on cpu, action float32 \(5, 1\)"),
])
def test_a_broken_rule_is_one_clear_error_at_start_up(rule: Rule, message: str) -> None:
    from mbpo.models.rules import ModelRules

    batch = probe_transitions(probe(envs.make("Pendulum-v1", 5, device="cpu"), seed=0))
    rules = ModelRules(rule, None) if rule.kind == "termination" else ModelRules(None, rule)
    with pytest.raises(MbpoError, match=message):
        check_rules(rules, batch)


def test_a_rule_that_disagrees_with_the_env_is_a_warning_and_mbrl_lib_shapes_are_taken() -> None:
    from mbpo.models.rules import ModelRules

    batch = probe_transitions(probe(envs.make("Pendulum-v1", 5, device="cpu"), seed=0))
    column = Rule("reward", lambda o, a, n: pendulum_reward(o, a, n).unsqueeze(-1).double(), "model.reward='a:b'")
    assert check_rules(ModelRules(None, column), batch) == []  # (B, 1) float64 is taken as (B,) float32
    off = Rule("reward", lambda o, a, n: pendulum_reward(o, a, n) + 1.0, "model.reward='a:b'")
    always = Rule("termination", lambda o, a, n: torch.ones(n.shape[0], dtype=torch.bool), "model.termination='a:c'")
    assert check_rules(ModelRules(always, off), batch) == [
        "model.termination='a:c' disagrees with the env's termination on 5 of 5 real transitions; model rollouts "
        "would then end or be rewarded unlike the real ones",
        "model.reward='a:b' disagrees with the env's reward on 5 of 5 real transitions; model rollouts would then "
        "end or be rewarded unlike the real ones"]


def test_load_callable_names_what_is_wrong() -> None:
    assert load_callable(f"{HERE}:pendulum_reward", "model.reward") is pendulum_reward
    assert load_callable(f"{HERE}:RuledPendulum.reward_fn", "model.reward") is RuledPendulum.reward_fn
    cases = {
        "no_colon": r"model.reward='no_colon' is not a callable's path; expected 'package.module:callable'",
        "nowhere_such_module:fn": r"importing 'nowhere_such_module' failed with ModuleNotFoundError: No module",
        f"{HERE}:missing": rf"model.reward='{HERE}:missing': '{HERE}' has no attribute 'missing'",
        f"{HERE}:RuledPendulum.nope": rf"'{HERE}:RuledPendulum' has no attribute 'nope'",
        f"{HERE}:NOT_CALLABLE": rf"model.reward='{HERE}:NOT_CALLABLE' is a int, not a callable",
    }
    for path, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_callable(path, "model.reward")


def test_config_checks_the_rule_keys() -> None:
    with pytest.raises(ConfigError, match=r"model.termination='a.b' is not a callable's path"):
        load_config(None, ["model.termination=a.b"])
    with pytest.raises(ConfigError, match=r"ask for both a given and a learned termination"):
        load_config(None, ["model.termination=a:b", "model.learned_termination=true"])
    with pytest.raises(ConfigError, match=r"model.rollout_batch_size=0 is out of range"):
        load_config(None, ["model.rollout_batch_size=0"])
    with pytest.raises(ConfigError, match=r"model.reward='tests.models.test_rules:nope'.* has no attribute 'nope'"):
        model_rules(model_config(f"model.reward={HERE}:nope"), "Pendulum-v1")


def test_a_checkpoint_with_other_heads_is_refused() -> None:
    learned = pendulum_model()
    given = pendulum_model(f"model.reward={HERE}:pendulum_reward")
    with pytest.raises(MbpoError, match=r"built with reward learned and termination given, but this run has "
                                        r"termination from the known rule for Pendulum-v1; reward from "):
        given.load_state_dict(learned.state_dict())
    same = pendulum_model(f"model.reward={HERE}:pendulum_reward")
    same.load_state_dict(given.state_dict())


def test_discrete_actions_reach_a_rule_as_int64() -> None:
    from mbpo.models.rules import ModelRules

    seen: list[torch.dtype] = []
    rule = Rule("termination", lambda o, a, n: seen.append(a.dtype) or n[:, 0].abs() > 2.4, "cartpole")
    batch = probe_transitions(probe(envs.make("CartPole-v1", 3, device="cpu"), seed=0))
    assert check_rules(ModelRules(rule, None), batch) == [] and seen == [torch.int64]
