"""GymnasiumVecEnv: gymnasium 1.x vector envs under our same-step VecEnv contract."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import envs
from envs.adapters.gymnasium_vector import GymnasiumVecEnv
from envs.base import ActionError

pytestmark = pytest.mark.timeout(60)


def _random_actions(env: GymnasiumVecEnv, steps: int, seed: int, scale: float = 1.0) -> list[torch.Tensor]:
    """A fixed, seeded action sequence so two envs can be driven identically."""
    g = torch.Generator().manual_seed(seed)
    if env.is_discrete:
        return [torch.randint(0, env.act_dim, (env.num_envs,), generator=g) for _ in range(steps)]
    return [(torch.rand(env.num_envs, env.act_dim, generator=g) * 2 - 1) * scale for _ in range(steps)]


def _rollout(env: GymnasiumVecEnv, actions: list[torch.Tensor], seed: int | None = None) -> list[tuple]:
    out = [(env.reset(seed=seed),)]
    for a in actions:
        obs, rew, term, trunc, info = env.step(a)
        out.append((obs, rew, term, trunc, info["final_obs"], env.episode_steps.clone()))
    return out


def _assert_same(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        for x, y in zip(ra, rb, strict=True):
            assert torch.equal(x, y)


def test_discrete_classic_shapes_dtypes_device() -> None:
    with GymnasiumVecEnv.from_id("MountainCar-v0", 3, seed=0) as env:
        assert env.num_envs == 3 and env.device == torch.device("cpu")
        assert env.is_discrete and env.act_dim == 3 and env.obs_dim == 2
        assert env.observation_space.shape == (2,) and env.max_episode_steps == 200
        obs = env.reset()
        assert obs.shape == (3, 2) and obs.dtype == torch.float32 and obs.device == env.device
        obs, rew, term, trunc, info = env.step(torch.tensor([0, 1, 2]))
        assert obs.shape == (3, 2) and obs.dtype == torch.float32
        assert rew.shape == (3,) and rew.dtype == torch.float32 and torch.all(rew == -1.0)
        assert term.dtype == torch.bool and trunc.dtype == torch.bool and term.shape == trunc.shape == (3,)
        assert torch.equal(info["final_obs"], obs)  # nobody finished: every row equals obs
        assert env.episode_steps.dtype == torch.int64 and env.episode_steps.tolist() == [1, 1, 1]


@pytest.mark.parametrize(("env_id", "obs_dim", "act_dim"), [("HalfCheetah-v5", 17, 6), ("Hopper-v5", 11, 3)])
def test_mujoco_shapes_dtypes(env_id: str, obs_dim: int, act_dim: int) -> None:
    with GymnasiumVecEnv.from_id(env_id, 2, seed=0) as env:
        assert env.observation_space.dtype == np.float32  # gymnasium's is float64
        assert isinstance(env.action_space, gym.spaces.Box) and env.act_dim == act_dim
        assert env.max_episode_steps == 1000
        obs = env.reset()
        assert obs.shape == (2, obs_dim) and obs.dtype == torch.float32
        obs, rew, term, trunc, info = env.step(torch.zeros(2, act_dim))
        assert obs.shape == info["final_obs"].shape == (2, obs_dim) and obs.dtype == torch.float32
        assert rew.shape == (2,) and rew.dtype == torch.float32
        assert term.dtype == trunc.dtype == torch.bool


def test_a_time_limit_of_none_is_the_specs_own_as_gymnasium_applies_it() -> None:
    """``max_episode_steps=None`` reported no time limit while the sub-envs still stopped at the spec's 500."""
    with GymnasiumVecEnv.from_id("CartPole-v1", 1, seed=0, max_episode_steps=None) as env:
        assert env.max_episode_steps == 500
    with GymnasiumVecEnv.from_id("CartPole-v1", 1, seed=0, max_episode_steps=7) as env:
        assert env.max_episode_steps == 7


@pytest.mark.parametrize(("env_id", "scale"), [("MountainCar-v0", 1.0), ("Hopper-v5", 3.0)])
def test_same_step_autoreset_matches_single_env(env_id: str, scale: float) -> None:
    """final_obs is the true last obs, and obs the next episode's first, of a plain gym env."""
    seed, n, steps = 3, 2, 12
    with GymnasiumVecEnv.from_id(env_id, n, seed=seed, max_episode_steps=5) as env:
        actions = _random_actions(env, steps, seed=1, scale=scale)
        rows = _rollout(env, actions)
    finished = 0
    for i in range(n):
        single = gym.make(env_id, max_episode_steps=5)
        ref, _ = single.reset(seed=seed + i)  # vector reset(seed=s) seeds env i with s + i
        assert torch.equal(rows[0][0][i], torch.from_numpy(ref.astype(np.float32)))
        for t, a in enumerate(actions):
            act = a[i].numpy().astype(single.action_space.dtype)
            discrete = isinstance(single.action_space, gym.spaces.Discrete)
            last, rew, term, trunc, _ = single.step(int(act) if discrete else act)
            obs, r, te, tr, final_obs, _ = rows[t + 1]
            assert (bool(te[i]), bool(tr[i])) == (term, trunc)
            assert float(r[i]) == pytest.approx(rew, rel=1e-6)
            assert torch.equal(final_obs[i], torch.from_numpy(last.astype(np.float32)))
            if term or trunc:
                finished += 1
                assert not torch.equal(final_obs[i], obs[i])
                last, _ = single.reset()  # sub-env RNG continues, no re-seed
            assert torch.equal(obs[i], torch.from_numpy(last.astype(np.float32)))
        single.close()
    assert finished >= 2


def test_terminated_and_truncated_are_separate() -> None:
    """Hopper falling is terminated; the time limit is truncated; counters reset on both."""
    with GymnasiumVecEnv.from_id("Hopper-v5", 4, seed=0, max_episode_steps=15) as env:
        env.reset()
        kinds = set()
        for a in _random_actions(env, 40, seed=0, scale=3.0):
            prev = env.episode_steps.clone()
            _, _, term, trunc, _ = env.step(a)
            assert torch.all(prev[trunc] + 1 == 15)  # truncated exactly at the limit
            done = term | trunc
            assert torch.all(env.episode_steps[done] == 0) and torch.all(env.episode_steps[~done] == prev[~done] + 1)
            kinds |= {"terminated"} if bool((term & ~trunc).any()) else set()
            kinds |= {"truncated"} if bool((trunc & ~term).any()) else set()
        assert kinds == {"terminated", "truncated"}


def test_same_step_wrapping_equals_disabled_path() -> None:
    vec = gym.make_vec(
        "Hopper-v5", num_envs=3, vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, max_episode_steps=10
    )
    with (
        GymnasiumVecEnv(vec, seed=5) as wrapped,
        GymnasiumVecEnv.from_id("Hopper-v5", 3, seed=5, max_episode_steps=10) as built,
    ):
        assert wrapped.max_episode_steps == built.max_episode_steps == 10
        actions = _random_actions(built, 30, seed=2, scale=3.0)
        a, b = _rollout(wrapped, actions), _rollout(built, actions)
        assert any(bool((r[2] | r[3]).any()) for r in b[1:])
        _assert_same(a, b)


def test_next_step_autoreset_is_rejected_with_explanation() -> None:
    vec = gym.make_vec("MountainCar-v0", num_envs=2)  # gymnasium's default: NEXT_STEP
    try:
        with pytest.raises(ValueError, match=r"NEXT_STEP.*SAME_STEP"):
            GymnasiumVecEnv(vec)
    finally:
        vec.close()


def test_unsupported_spaces_raise_type_error() -> None:
    with pytest.raises(TypeError, match="1-D Box observation.*Discrete"):
        GymnasiumVecEnv.from_id("FrozenLake-v1", 2)

    class MultiAction(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.MultiDiscrete([2, 3])

    vec = gym.vector.SyncVectorEnv([MultiAction], autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(TypeError, match="Box .*or Discrete action.*MultiDiscrete"):
        GymnasiumVecEnv(vec)
    with pytest.raises(ValueError, match="vectorization_mode"):
        GymnasiumVecEnv.from_id("MountainCar-v0", 2, vectorization_mode="vector_entry_point")


def test_bad_actions_raise_action_error() -> None:
    with GymnasiumVecEnv.from_id("HalfCheetah-v5", 2, seed=0) as env:
        with pytest.raises(RuntimeError, match="reset"):
            env.step(torch.zeros(2, 6))
        env.reset()
        with pytest.raises(ActionError, match="shape"):
            env.step(torch.zeros(2, 5))
        with pytest.raises(ActionError, match="float32"):
            env.step(torch.zeros(2, 6, dtype=torch.float64))
        bad = torch.zeros(2, 6)
        bad[1, 3] = float("nan")
        with pytest.raises(ActionError, match="env 1"):
            env.step(bad)
    with GymnasiumVecEnv.from_id("MountainCar-v0", 2, seed=0) as env:
        env.reset()
        with pytest.raises(ActionError, match="int64"):
            env.step(torch.zeros(2))
        with pytest.raises(ActionError, match="out of range"):
            env.step(torch.tensor([0, 3]))


def test_registry_and_seeding() -> None:
    """envs.make routes here; make(seed=s).reset() == reset(seed=s); same seed -> same run."""
    env = envs.make("HalfCheetah-v5", 2, seed=0)
    assert isinstance(env, GymnasiumVecEnv)
    actions = _random_actions(env, 8, seed=0)
    first = _rollout(env, actions)
    _assert_same(first, _rollout(env, actions, seed=0))
    with envs.make("HalfCheetah-v5", 2, seed=0) as other:
        _assert_same(first, _rollout(other, actions))
    assert not torch.equal(env.reset(seed=1), first[0][0])
    env.close()
    env.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_async_matches_sync() -> None:
    with GymnasiumVecEnv.from_id("MountainCar-v0", 2, seed=4, max_episode_steps=3, vectorization_mode="async") as a:
        with GymnasiumVecEnv.from_id("MountainCar-v0", 2, seed=4, max_episode_steps=3) as s:
            actions = _random_actions(s, 7, seed=0)
            _assert_same(_rollout(a, actions), _rollout(s, actions))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tensors_live_on_requested_device() -> None:
    with GymnasiumVecEnv.from_id("Hopper-v5", 2, device="cuda", seed=0) as env:
        obs = env.reset()
        out = env.step(torch.zeros(2, 3, device=env.device))
        for t in (obs, *out[:4], out[4]["final_obs"], env.episode_steps):
            assert t.device == env.device
        with pytest.raises(ActionError, match="cuda"):
            env.step(torch.zeros(2, 3))


# ---- partial reset: reset(env_ids=...) --------------------------------------------------


def _pendulums(mode: str, autoreset: AutoresetMode, seed: int = 3) -> GymnasiumVecEnv:
    """Three Pendulums with 4-step episodes, so envs also time out around a partial reset."""
    if autoreset is AutoresetMode.DISABLED:
        return GymnasiumVecEnv.from_id("Pendulum-v1", 3, seed=seed, vectorization_mode=mode, max_episode_steps=4)
    vec = gym.make_vec("Pendulum-v1", num_envs=3, vectorization_mode=mode, max_episode_steps=4,
                       vector_kwargs={"autoreset_mode": autoreset})
    return GymnasiumVecEnv(vec, seed=seed)


@pytest.mark.parametrize("autoreset", [AutoresetMode.DISABLED, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_partial_reset_restarts_only_the_chosen_envs(mode: str, autoreset: AutoresetMode) -> None:
    with _pendulums(mode, autoreset) as env, _pendulums("sync", AutoresetMode.DISABLED) as twin:
        actions = _random_actions(env, 8, seed=0, scale=2.0)
        for e in (env, twin):
            e.reset()
            for a in actions[:2]:
                before = e.step(a)[0]
        obs = env.reset(env_ids=torch.tensor([1]))
        assert env.episode_steps.tolist() == [2, 0, 2]
        assert torch.equal(obs[[0, 2]], before[[0, 2]])
        assert not torch.equal(obs[1], before[1]) and obs[1, 2].abs() <= 1.0  # Pendulum's reset: |thetadot| <= 1
        for t, a in enumerate(actions[2:]):  # envs 0 and 2 run on (and time out) exactly as without the reset
            out, ref = env.step(a), twin.step(a)
            for x, y in zip((*out[:4], out[4]["final_obs"]), (*ref[:4], ref[4]["final_obs"]), strict=True):
                assert torch.equal(x[[0, 2]], y[[0, 2]])
            assert bool(out[3][1]) == (t == 3)  # env 1's own 4-step episode
        assert env.episode_steps.tolist() == [0, 2, 0] and twin.episode_steps.tolist() == [0, 0, 0]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_partial_reset_by_indices_and_by_mask_agree(mode: str) -> None:
    with _pendulums(mode, AutoresetMode.SAME_STEP) as by_ids, _pendulums(mode, AutoresetMode.SAME_STEP) as by_mask:
        action = _random_actions(by_ids, 1, seed=0)[0]
        for e in (by_ids, by_mask):
            e.reset()
            e.step(action)
        a = by_ids.reset(env_ids=torch.tensor([0, 2]))
        b = by_mask.reset(env_ids=torch.tensor([True, False, True]))
        assert torch.equal(a, b) and by_ids.episode_steps.tolist() == by_mask.episode_steps.tolist() == [0, 1, 0]
        for x, y in zip(by_ids.step(action)[:4], by_mask.step(action)[:4], strict=True):
            assert torch.equal(x, y)


def test_partial_reset_errors_and_empty_reset() -> None:
    with GymnasiumVecEnv.from_id("Pendulum-v1", 3, seed=0) as env:
        with pytest.raises(RuntimeError, match=r"call reset\(\) before reset\(env_ids=\.\.\.\)"):
            env.reset(env_ids=torch.tensor([0]))
        obs = env.reset()
        assert torch.equal(env.reset(env_ids=torch.zeros(3, dtype=torch.bool)), obs)  # no-op, no gym call
        assert torch.equal(env.reset(env_ids=torch.tensor([], dtype=torch.int64)), obs)
        with pytest.raises(ValueError, match="seeding applies to full resets only"):
            env.reset(seed=1, env_ids=torch.tensor([0]))
        with pytest.raises(ValueError, match=r"env_ids \[3\] out of range: expected int64 env indices in \[0, 2\]"):
            env.reset(env_ids=torch.tensor([3]))
        with pytest.raises(ValueError, match=r"bool mask must have shape \(3,\)"):
            env.reset(env_ids=torch.ones(2, dtype=torch.bool))
        assert torch.equal(env.reset(env_ids=torch.tensor([], dtype=torch.int64)), obs)


class OldGymApi(gym.vector.SyncVectorEnv):
    """A vector env of gym's old API: reset returns obs alone, step (obs, reward, done, info)."""

    def reset(self, **kwargs: object) -> object:  # type: ignore[override]
        return super().reset(**kwargs)[0]  # type: ignore[arg-type]

    def step(self, actions: object) -> object:  # type: ignore[override]
        obs, reward, terminated, truncated, info = super().step(actions)  # type: ignore[arg-type]
        return obs, reward, terminated | truncated, {**info, "TimeLimit.truncated": truncated}


@pytest.mark.parametrize("num_envs", [1, 2, 3])
def test_an_old_gym_api_is_one_contract_error_naming_what_it_returned(num_envs: int) -> None:
    """Unpacked unchecked: a ValueError traceback, or at num_envs=2 the obs rows taken for (obs, info)."""
    vec = OldGymApi([lambda: gym.make("Pendulum-v1")] * num_envs, autoreset_mode=AutoresetMode.DISABLED)
    env = GymnasiumVecEnv(vec)
    with pytest.raises(envs.ContractError, match=rf"^reset returned a ndarray of shape \({num_envs}, 3\); expected "
                                                 r"gymnasium's \(obs, info\).*gym's old reset returned obs alone"):
        env.reset(seed=0)
    vec.reset = lambda **kwargs: gym.vector.SyncVectorEnv.reset(vec, **kwargs)  # type: ignore[method-assign]
    env.reset(seed=0)
    with pytest.raises(envs.ContractError, match=r"^step returned 4 values; expected gymnasium's \(obs, reward, "
                                                 r"terminated, truncated, info\)"):
        env.step(torch.zeros(num_envs, 1))
    env.close()
