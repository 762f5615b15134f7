"""envs.to_rsl_rl: our VecEnv as an rsl_rl VecEnv; the round trip from_rsl_rl(to_rsl_rl(env)) is the env itself,
and rsl_rl's own OnPolicyRunner trains PPO on it.
"""

from __future__ import annotations

import pytest
import torch

import envs
from tests.envs.factories import FinishedRowsOnly

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "MountainCarContinuous-v0", "PointMass-v0"])
def test_round_trip_steps_identically(env_id: str) -> None:
    direct = envs.make(env_id, 8, device="cpu", seed=3)
    exported = envs.to_rsl_rl(envs.make(env_id, 8, device="cpu", seed=3))
    back = envs.from_rsl_rl(exported)  # its group is policy, as Isaac Lab's: found without naming it
    assert back.action_space == direct.action_space and back.observation_space.shape == direct.observation_space.shape
    assert back.max_episode_steps == direct.max_episode_steps and exported.num_actions == direct.act_dim
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(back.reset(seed=5), direct.reset(seed=5))
    finished = 0
    for _ in range(2 * direct.max_episode_steps + 3):  # through time-outs (and MountainCar's terminations)
        actions = envs.random_actions(direct, gen)
        a, b = direct.step(actions), back.step(actions.clone())
        for x, y in zip(a[:4], b[:4], strict=True):
            assert torch.equal(x, y)
        done = a[2] | a[3]
        assert torch.equal(a[4]["final_obs"][done], b[4]["final_obs"][done])
        assert bool(b[4]["final_obs_valid"].all())  # the export hands the true last observation over
        assert torch.equal(back.episode_steps, direct.episode_steps)
        finished += int(done.sum())
    assert finished >= 8


def _to_the_goal_on_the_last_step(env: envs.VecEnv) -> envs.VecEnv:
    """MountainCarContinuous's env 0 one push from the goal (x >= 0.45) on the last step of its time limit."""
    env.load_state_dict({**env.state_dict(), "state": torch.tensor([[0.44, 0.05], [-0.5, 0.0]]),
                         "episode_steps": torch.tensor([env.max_episode_steps - 1, 10])})
    return env


def test_a_terminal_step_at_the_time_limit_is_terminal_not_a_time_out() -> None:
    push = torch.tensor([[1.0], [0.0]])
    native = _to_the_goal_on_the_last_step(envs.make("MountainCarContinuous-v0", 2, device="cpu", seed=0))
    _, _, terminated, truncated, _ = native.step(push)
    assert terminated.tolist() == [True, False] and truncated.tolist() == [True, False]  # both, natively
    inner = envs.make("MountainCarContinuous-v0", 2, device="cpu", seed=0)
    exported = envs.to_rsl_rl(inner)
    _to_the_goal_on_the_last_step(inner)  # after the export's reset
    _, _, dones, extras = exported.step(push)
    assert dones.tolist() == [True, False] and extras["time_outs"].tolist() == [False, False]  # none bootstrapped
    back = envs.from_rsl_rl(exported)
    back.reset()
    _to_the_goal_on_the_last_step(inner)
    _, _, terminated, truncated, info = back.step(push)
    assert terminated.tolist() == [True, False] and truncated.tolist() == [False, False]
    assert bool(info["final_obs_valid"].all())


@pytest.mark.parametrize("lost", [False, True])
def test_the_export_hands_over_only_the_final_observations_the_env_has(lost: bool) -> None:
    """Rows of envs that did not finish are obs itself; rows the env lost come back as lost (final_obs_valid)."""
    back = envs.from_rsl_rl(envs.to_rsl_rl(FinishedRowsOnly(lost=lost)))
    back.reset()
    for _ in range(3):
        obs, _, _, truncated, info = back.step(torch.zeros(3, 1))
        assert torch.equal(info["final_obs"][~truncated], obs[~truncated])
        assert torch.equal(info["final_obs_valid"], ~truncated if lost else torch.ones(3, dtype=torch.bool))


def test_rsl_rl_contract_attributes_and_action_clipping() -> None:
    env = envs.to_rsl_rl(envs.make("Pendulum-v1", 4, device="cpu", seed=0))
    assert (env.num_envs, env.num_actions, env.max_episode_length, env.clip_actions) == (4, 1, 200, 2.0)
    obs = env.get_observations()
    assert list(obs.keys()) == ["policy"] and obs["policy"].shape == (4, 3)
    env.episode_length_buf = torch.tensor([0, 10, 199, 5])  # rsl_rl's init_at_random_ep_len writes it
    _, rewards, dones, extras = env.step(torch.full((4, 1), 50.0))  # unbounded Gaussian actions are clipped
    assert dones.tolist() == [False, False, True, False] and extras["time_outs"].tolist() == dones.tolist()
    assert rewards.shape == (4,) and extras["final_obs"]["policy"].shape == (4, 3)
    with pytest.raises(TypeError, match="continuous"):
        envs.to_rsl_rl(envs.make("CartPole-v1", 2))


def test_rsl_rl_ppo_trains_on_a_native_env() -> None:
    """rsl_rl's OnPolicyRunner (PPO) runs on the export: a few iterations raise the rollout reward."""
    rsl_rl = pytest.importorskip("rsl_rl", reason="rsl_rl comes with the mjlab extra")  # noqa: F841
    from rsl_rl.runners import OnPolicyRunner

    from envs.adapters.rsl_rl_export import ppo_train_cfg

    torch.manual_seed(0)
    env = envs.to_rsl_rl(envs.make("PointMass-v0", 64, device="cpu", seed=0))
    runner = OnPolicyRunner(env, ppo_train_cfg(num_steps_per_env=16), log_dir=None, device="cpu")
    runner.learn(2)
    assert runner.current_learning_iteration == 1
