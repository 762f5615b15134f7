"""envs.contract: an env's first reset and step held to the VecEnv contract, field by field.

The broken envs are tests/envs/factories.py's ``BreaksContract`` (Pendulum-v1 with one field broken); the
same cases through the trainer and the CLI, on every backend, are in tests/runtime/test_env_contract.py.
"""

from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box
from torchrl.envs import GymEnv

import envs
from envs.base import ActionError, check_actions
from envs.contract import ContractError, Float32Env, as_float32, probe, seed_ignored
from tests.envs.factories import BreaksContract, Groups, breaks_contract

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(60)]
F = "tests.envs.factories"


@pytest.mark.parametrize("env_id", envs.list_envs(include_toy=True))
def test_every_native_env_fits_the_contract_as_it_is(env_id: str) -> None:
    checked = probe(envs.make(env_id, 3, seed=0), seed=1)
    assert checked.float32_fields == {} and checked.obs.shape[0] == 3 and checked.reward.dtype == torch.float32
    assert checked.unseeded == ""  # reset(seed=...) seeds it


@pytest.mark.parametrize("factory, kwargs", [("ours", {}), ("torchrl_env", {}), ("gymnasium_vector", {}),
                                             ("rsl_rl_env", {})])
def test_what_the_adapters_hand_on_fits_the_contract(factory: str, kwargs: dict[str, Any]) -> None:
    env = envs.make_from_factory(f"{F}:{factory}", 2, device="cpu", seed=0, **kwargs)
    checked = probe(env, seed=0)
    assert checked.float32_fields == {} and checked.unseeded == ""
    env.close()


@pytest.mark.parametrize("breaks, says", [
    ("int64_obs", r"^reset returned obs as int64; expected float32 of shape \(num_envs, obs_dim\) = \(2, 3\) on cpu "
                  r"\(the VecEnv contract, envs/base.py\): return obs.float\(\); a discrete observation"),
    ("obs_shape", r"^reset returned obs of shape \(2, 2\); expected float32 of shape \(num_envs, obs_dim\) = \(2, 3\) "
                  r"on cpu .*: return one row per env, flattened to obs_dim=3 values \(from observation_space.shape="
                  r"\(3,\); fix observation_space if the rows are right\)$"),
    ("float_terminated", r"^step returned terminated as float32; expected bool of shape \(num_envs,\) = \(2,\) on cpu "
                         r".*: return a bool tensor: the comparison that decides it, or terminated > 0.5 for 0/1"),
    ("reward_column", r"^step returned reward of shape \(2, 1\); expected float32 of shape \(num_envs,\) = \(2,\) on "
                      r"cpu .*: return reward.squeeze\(-1\) \(one value per env, no trailing dimension\)$"),
    ("reset_with_info", r"^reset returned a tuple \(obs, info\), as gymnasium's reset does; expected the "
                        r"observations alone, a torch.Tensor of shape \(num_envs, obs_dim\) = \(2, 3\) .*: return "
                        r"obs only \(a gymnasium VectorEnv needs no change of its own"),
    ("no_final_obs", r"^step returned info without 'final_obs' \(keys: \[\]\); expected info\['final_obs'\] on every "
                     r"step: float32 of shape \(num_envs, obs_dim\) = \(2, 3\) on cpu, each finished env's last "
                     r"observation .*: add it \(rows of envs that did not finish are not read"),
])
def test_a_field_that_does_not_fit_is_named_with_what_was_expected_and_the_fix(breaks: str, says: str) -> None:
    with pytest.raises(ContractError, match=says) as info:
        probe(breaks_contract(2, "cpu", 0, breaks), seed=0)
    assert "\n" not in str(info.value)


def test_a_float64_obs_is_cast_to_float32_on_every_reset_and_step_and_the_rest_reads_through() -> None:
    env = breaks_contract(2, "cpu", 0, "float64_obs")
    checked = probe(env, seed=0)
    assert checked.float32_fields == {"obs": torch.float64, "final_obs": torch.float64}
    assert checked.obs.dtype == checked.next_obs.dtype == checked.info["final_obs"].dtype == torch.float32
    cast = as_float32(env, tuple(checked.float32_fields))
    assert isinstance(cast, Float32Env) and cast.num_envs == 2 and cast.breaks == "float64_obs"
    obs = cast.reset(seed=3)
    assert obs.dtype == torch.float32 and torch.equal(obs, env.reset(seed=3).float())
    next_obs, *_, info = cast.step(torch.zeros(2, 1))
    assert next_obs.dtype == info["final_obs"].dtype == torch.float32
    assert cast.episode_steps is env.pendulum.episode_steps and int(cast.episode_steps[0]) == 1
    assert as_float32(env, ()) is env  # nothing to cast: the env as it is
    assert probe(cast, seed=0).float32_fields == {}


@pytest.mark.parametrize("breaks, says", [
    ("reset_ignores_seed", "reset(seed=7) returned other observations the second time"),
    ("step_ignores_seed", "the same actions after reset(seed=7) led to other observations the second time")])
def test_an_env_that_reset_seed_does_not_seed_is_found_and_still_probed(breaks: str, says: str) -> None:
    checked = probe(breaks_contract(2, "cpu", 0, breaks), seed=7)
    assert checked.unseeded == says and checked.float32_fields == {} and checked.next_obs.shape == (2, 3)


def test_an_env_whose_first_states_draw_nothing_needs_no_seed() -> None:
    """A deterministic start (every episode from one state) is reproducible without a seed: no warning."""

    class FixedStart(BreaksContract):
        def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
            obs = self.pendulum.reset(seed=0, env_ids=env_ids)  # one state, whatever the seed
            return obs

    assert probe(FixedStart(2, "cpu", 0, None), seed=7).unseeded == ""


@pytest.mark.parametrize("device, noise, found", [("cpu", 1e-4, True), ("cuda:0", 1e-6, False),
                                                  ("cuda:0", 1e-2, True)])
def test_off_the_cpu_a_simulators_float_noise_is_not_taken_for_an_unseeded_env(
        device: str, noise: float, found: bool) -> None:
    """A GPU simulator's physics may differ in the last digits between two runs of one seed; a CPU env's not."""

    class Noisy(BreaksContract):
        def step(self, actions: torch.Tensor) -> envs.base.StepResult:
            obs, *rest = super().step(actions)
            return (obs * (1 + noise * torch.randn(obs.shape, generator=self.unseeded)), *rest)  # type: ignore[return-value]

    env = Noisy(2, "cpu", 0, None)
    obs = env.reset(seed=3)
    actions = torch.zeros(2, 1)
    next_obs = env.step(actions)[0]
    env.device = device  # where it says it runs: the tolerance follows it
    assert bool(seed_ignored(env, 3, obs, actions, next_obs)) == found


def test_the_probe_step_changes_nothing_after_a_seeded_reset() -> None:
    """The trainers probe the evaluation env, which every evaluation reseeds: what it returns then is unchanged."""
    probed, fresh = envs.make("Pendulum-v1", 3, seed=0), envs.make("Pendulum-v1", 3, seed=0)
    probe(probed, seed=11)
    assert torch.equal(probed.reset(seed=5), fresh.reset(seed=5))
    actions = torch.full((3, 1), 0.5)
    assert all(torch.equal(a, b) for a, b in zip(probed.step(actions)[:4], fresh.step(actions)[:4], strict=True))


class Returns(BreaksContract):
    """Pendulum-v1 whose step (or reset) returns ``replace(result)`` instead."""

    def __init__(self, replace: Any, at: str = "step") -> None:
        super().__init__(2, "cpu", 0, None)
        self.replace, self.at = replace, at

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        obs = self.pendulum.reset(seed=seed, env_ids=env_ids)
        return self.replace(obs) if self.at == "reset" else obs

    def step(self, actions: torch.Tensor) -> envs.base.StepResult:
        return self.replace(self.pendulum.step(actions))


@pytest.mark.parametrize("env, says", [
    (Returns(lambda s: s[:4]), r"^step returned a tuple of 4; expected a tuple \(obs, reward, terminated, truncated, "
                               r"info\) .*: return all five, as gymnasium >= 0.26 does"),
    (Returns(lambda obs: obs.numpy(), at="reset"),
     r"^reset returned obs as a numpy.ndarray; expected a torch.Tensor, float32 of shape .* return torch.as_tensor"),
    (Returns(lambda s: (*s[:4], [s[4]["final_obs"]])), r"^step returned info as a list; expected a dict"),
    (Returns(lambda s: (s[0], s[1], s[2], s[3].long(), s[4])), r"^step returned truncated as int64; expected bool"),
    (Returns(lambda s: (*s[:4], {**s[4], "final_obs_valid": torch.ones(2)})),
     r"^step returned info\['final_obs_valid'\] as float32; expected bool .* or info\['final_obs_valid'\] > 0.5"),
    (Returns(lambda s: (s[0], s[1].to("meta"), *s[2:])),
     r"^step returned reward on meta; expected float32 of shape \(num_envs,\) = \(2,\) on cpu .*: return it on "
     r"env.device \(.to\('cpu'\)\)"),
    (Returns(lambda s: (s[0], s[1].int(), *s[2:])), r"^step returned reward as int32; expected float32 .*: return "
                                                     r"reward.float\(\)$"),
])
def test_the_shape_of_the_call_itself_is_checked_too(env: Returns, says: str) -> None:
    with pytest.raises(ContractError, match=says):
        probe(env, seed=0)


def test_the_error_survives_pickling_with_its_message() -> None:
    """A collector process or a Ray actor may send it back to the trainer."""
    error = ContractError("step", "reward", "of shape (2, 1)", "(2,)", "squeeze it")
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.field == "reward"


def test_a_numpy_num_envs_is_told_to_be_a_python_int() -> None:
    """The adapters take a numpy count, the contract wants a Python int: the fix says how to give one."""
    import numpy as np

    env = BreaksContract(2, "cpu", 0, None)
    env.num_envs = np.int64(2)  # type: ignore[assignment]
    with pytest.raises(ContractError, match=r"env.num_envs = np.int64\(2\); expected a positive Python int: .*: set "
                                            r"env.num_envs = int\(\.\.\.\) in the env's __init__"):
        probe(env, 0)


@pytest.mark.parametrize("adapter", ["rsl_rl", "torchrl"])
def test_an_adapted_env_on_cpu_0_takes_the_actions_its_own_device_makes(adapter: str) -> None:
    """'cpu:0' is the CPU: the adapters report the device as their tensors do, and the actions a caller moves to
    ``env.device`` are taken (they were refused: 'actions are on cpu but the env is on cpu:0').
    """
    if adapter == "rsl_rl":
        raw = Groups(2, ("policy",))
        raw.device = "cpu:0"
        env = envs.from_rsl_rl(raw)
    else:
        env = envs.from_torchrl(GymEnv("Pendulum-v1", num_envs=2, device="cpu:0"))
    try:
        assert env.device == torch.device("cpu")
        assert probe(env, seed=0).obs.device == env.device
        env.reset(seed=0)
        obs, *_ = env.step(torch.zeros(2, env.act_dim).to(env.device))
        assert obs.shape[0] == 2
    finally:
        env.close()


def test_check_actions_takes_one_device_in_either_spelling() -> None:
    box = Box(-1.0, 1.0, (1,))
    check_actions(torch.zeros(2, 1), box, 2, torch.device("cpu:0"))  # a VecEnv of the user's own on 'cpu:0'
    check_actions(torch.zeros(2, 1), box, 2, "cpu")  # or naming its device (the contract allows it)
    with pytest.raises(ActionError, match="actions are on cpu but the env is on meta"):
        check_actions(torch.zeros(2, 1), box, 2, torch.device("meta"))


def test_random_actions_within_bounds_near_float32s_limits_are_finite() -> None:
    """Their width overflows float32: the probe's and the warm-up's random actions were inf, and the env refused
    them as 'the policy produced NaN or inf'.
    """
    env = BreaksContract(3, "cpu", 0, "huge_actions")
    actions = envs.random_actions(env, torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(actions).all()) and actions.dtype == torch.float32
    assert actions.max() > 1e38 and actions.min() < -1e38  # spread over the bounds
    probe(env, seed=0)


def test_random_actions_in_an_unbounded_box_are_finite_and_keep_to_its_finite_side() -> None:
    """An unbounded side gave NaN (inf - inf): ``rollout`` and the warm-up then stopped on 'the policy produced
    NaN'. As gymnasium's Box.sample: a normal where both sides are unbounded, an exponential off a finite one.
    """
    env = BreaksContract(512, "cpu", 0, "unbounded_actions")
    env.action_space = gym.spaces.Box(np.array([-np.inf, 0.5, -np.inf], np.float32),
                                      np.array([np.inf, np.inf, -2.0], np.float32))
    actions = envs.random_actions(env, torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(actions).all()) and actions.dtype == torch.float32
    assert actions[:, 0].min() < 0 < actions[:, 0].max()
    assert actions[:, 1].min() >= 0.5 and actions[:, 2].max() <= -2.0
