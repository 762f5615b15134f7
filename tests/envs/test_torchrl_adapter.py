"""torchrl adapters: our VecEnvs as torchrl envs and batched torchrl envs as VecEnvs."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, Composite, MultiOneHot, OneHot, Unbounded
from torchrl.envs import EnvBase, GymEnv, SerialEnv
from torchrl.envs.utils import check_env_specs

import envs
from envs.base import ActionError, VecEnv
from mbpo.data.transitions import real_transitions
from tests.envs.factories import FinishedRowsOnly

pytestmark = pytest.mark.timeout(60)


def _actions(env: VecEnv, steps: int, seed: int) -> list[torch.Tensor]:
    """A fixed, seeded action sequence so two envs can be driven identically."""
    g = torch.Generator().manual_seed(seed)
    if env.is_discrete:
        return [torch.randint(0, env.act_dim, (env.num_envs,), generator=g) for _ in range(steps)]
    high = torch.as_tensor(env.action_space.high)
    return [(torch.rand(env.num_envs, env.act_dim, generator=g) * 2 - 1) * high for _ in range(steps)]


def _trace(env: VecEnv, actions: list[torch.Tensor], seed: int | None = None) -> list[tuple]:
    out = [(env.reset(seed=seed),)]
    for a in actions:
        obs, rew, term, trunc, info = env.step(a)
        out.append((obs, rew, term, trunc, info["final_obs"], env.episode_steps.clone()))
    return out


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_to_torchrl_passes_check_env_specs(env_id: str) -> None:
    env = envs.to_torchrl(envs.make(env_id, 4, seed=0))
    assert env.batch_size == torch.Size([4]) and isinstance(env.vec_env, VecEnv)
    check_env_specs(env, seed=0, break_when_any_done="both")
    if env_id == "CartPole-v1":
        assert isinstance(env.action_spec, Categorical) and env.action_spec.shape == (4,)
        assert env.action_spec.dtype == torch.int64
    else:
        assert env.action_spec.shape == (4, 1) and env.action_spec.dtype == torch.float32
    assert env.reward_spec.shape == (4, 1) and env.done_spec["truncated"].shape == (4, 1)
    env.close()


@pytest.mark.parametrize(("env_id", "steps"), [("CartPole-v1", 60), ("Pendulum-v1", 205)])
def test_rollout_across_episode_boundary_reports_true_final_obs(env_id: str, steps: int) -> None:
    env = envs.to_torchrl(envs.make(env_id, 4, seed=0))
    torch.manual_seed(0)
    td = env.rollout(max_steps=steps, break_when_any_done=False)
    assert td.shape == (4, steps) and bool(td["next", "done"].any())
    ref = envs.make(env_id, 4, seed=0)
    obs = ref.reset()
    for t in range(steps):
        assert torch.equal(td["observation"][:, t], obs)
        obs, rew, term, trunc, info = ref.step(td["action"][:, t])
        assert torch.equal(td["next", "observation"][:, t], info["final_obs"])
        assert torch.equal(td["next", "reward"][:, t, 0], rew)
        assert torch.equal(td["next", "terminated"][:, t, 0], term)
        assert torch.equal(td["next", "truncated"][:, t, 0], trunc)
        done = term | trunc
        if done.any():  # the stashed first obs of the next episode comes back after the reset
            assert not torch.equal(info["final_obs"][done], obs[done])


def test_to_torchrl_next_observation_of_a_running_env_is_its_obs_not_its_final_obs_row() -> None:
    td = envs.to_torchrl(FinishedRowsOnly()).rollout(4, break_when_any_done=False)
    # (step + 1, env): every env's next observation counts up to its last, 4, and its next episode starts at 2
    expected = torch.tensor([[2.0, 3.0, 4.0, 2.0], [3.0, 4.0, 2.0, 3.0], [4.0, 2.0, 3.0, 4.0]])
    assert torch.equal(td["next", "observation"][..., 0], expected)
    assert torch.equal(td["next", "truncated"][..., 0], expected == 4.0)
    assert torch.equal(td["next", "observation"][..., 1], torch.arange(3.0)[:, None].expand(3, 4))


def test_to_torchrl_warns_once_when_the_env_lost_a_final_observation() -> None:
    env = envs.to_torchrl(FinishedRowsOnly(lost=True))
    with pytest.warns(UserWarning, match=r"lost the true last observation.*final_obs_valid") as caught:
        env.rollout(4, break_when_any_done=False)
    assert len([w for w in caught if "lost the true last" in str(w.message)]) == 1


def test_partial_reset_of_a_running_env_starts_a_new_episode() -> None:
    """A ``"_reset"`` mask on an env that did not just finish goes to the VecEnv's reset(env_ids=...)."""
    env, twin = envs.to_torchrl(envs.make("Pendulum-v1", 2, seed=0)), envs.make("Pendulum-v1", 2, seed=0)
    td = env.reset()
    twin.reset()
    td["action"] = torch.zeros(2, 1)
    current = env.step(td)["next", "observation"]
    twin.step(torch.zeros(2, 1))
    mask = torch.tensor([[True], [False]])
    out = env.reset(TensorDict({"observation": current.clone(), "_reset": mask}, batch_size=[2]))
    expected = twin.reset(env_ids=torch.tensor([0]))
    assert torch.equal(out["observation"], expected) and not out["done"].any()
    assert torch.equal(out["observation"][1], current[1]) and not torch.equal(out["observation"][0], current[0])
    assert env.vec_env.episode_steps.tolist() == [0, 1]
    out["action"] = torch.ones(2, 1)
    assert torch.equal(env.step(out)["next", "observation"], twin.step(torch.ones(2, 1))[0])


def test_partial_reset_of_a_finished_env_hands_back_its_new_episode_without_resetting_again() -> None:
    env = envs.to_torchrl(envs.make("CartPole-v1", 2, seed=0))
    td = env.reset()
    env.vec_env.state = torch.tensor([[0.0, 0.0, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0]])  # env 0 falls next step
    td["action"] = torch.ones(2, dtype=torch.int64)
    nxt = env.step(td)["next"]
    assert nxt["terminated"].reshape(-1).tolist() == [True, False]
    state = env.vec_env.state.clone()
    out = env.reset(TensorDict({"observation": nxt["observation"].clone(), "_reset": nxt["done"].clone(),
                                "done": nxt["done"].clone()}, batch_size=[2]))
    assert torch.equal(env.vec_env.state, state)  # no second reset: env 0 already started its new episode
    assert torch.equal(out["observation"], env.vec_env.task.observe(state))
    assert env.vec_env.episode_steps.tolist() == [0, 1]


def test_set_seed_is_applied_at_next_full_reset() -> None:
    env = envs.to_torchrl(envs.make("Pendulum-v1", 3))
    env.set_seed(7)
    first = env.reset()["observation"]
    env.set_seed(7)
    assert torch.equal(env.reset()["observation"], first)
    assert torch.equal(first, envs.make("Pendulum-v1", 3, seed=7).reset())


@pytest.mark.parametrize(("env_id", "steps"), [("Pendulum-v1", 230), ("CartPole-v1", 230)])
def test_round_trip_matches_native_env_exactly(env_id: str, steps: int) -> None:
    native = envs.make(env_id, 4, seed=0)
    wrapped = envs.from_torchrl(envs.to_torchrl(envs.make(env_id, 4, seed=0)))
    assert wrapped.num_envs == 4 and wrapped.device == native.device
    if env_id == "Pendulum-v1":  # finite bounds survive; CartPole's partly infinite Box becomes Unbounded
        assert wrapped.observation_space == native.observation_space
    assert wrapped.observation_space.shape == native.observation_space.shape
    assert wrapped.action_space == native.action_space
    assert wrapped.max_episode_steps == native.max_episode_steps
    actions = _actions(native, steps, seed=1)
    a, b = _trace(native, actions), _trace(wrapped, actions)
    for ra, rb in zip(a, b, strict=True):
        for x, y in zip(ra, rb, strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y)
    terms, truncs = torch.stack([row[2] for row in a[1:]]), torch.stack([row[3] for row in a[1:]])
    if env_id == "Pendulum-v1":
        assert bool(truncs[199].all())  # the time limit is crossed with identical data
    else:
        assert int(terms.sum()) > 4  # random CartPole falls several times in 230 steps
    wrapped.close()
    wrapped.close()  # idempotent


def _pendulum_step(obs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """gymnasium's Pendulum dynamics, to check a final obs really follows from the last one."""
    th, thdot = torch.atan2(obs[:, 1], obs[:, 0]), obs[:, 2]
    u = u.clamp(-2.0, 2.0)
    thdot = (thdot + (3 * 10.0 / 2 * torch.sin(th) + 3.0 * u) * 0.05).clamp(-8.0, 8.0)
    th = th + thdot * 0.05
    return torch.stack([torch.cos(th), torch.sin(th), thdot], dim=-1)


@pytest.mark.parametrize("batched", ["gymenv_num_envs", "serial_env"])
def test_from_torchrl_gym_pendulum_truncates(batched: str) -> None:
    if batched == "gymenv_num_envs":
        tenv = GymEnv("Pendulum-v1", num_envs=3)
    else:
        tenv = SerialEnv(3, lambda: GymEnv("Pendulum-v1"))
    env = envs.from_torchrl(tenv)
    try:
        assert env.num_envs == 3 and env.device == torch.device("cpu") and not env.is_discrete
        assert isinstance(env.observation_space, gym.spaces.Box) and env.observation_space.shape == (3,)
        assert env.action_space.shape == (1,) and env.max_episode_steps is None
        obs = env.reset(seed=0)
        assert torch.equal(env.reset(seed=0), obs)  # seeded resets repeat
        assert obs.shape == (3, 3) and obs.dtype == torch.float32
        for t, a in enumerate(_actions(env, 202, seed=0)):
            prev = obs
            obs, rew, term, trunc, info = env.step(a)
            assert rew.shape == (3,) and rew.dtype == torch.float32
            assert term.dtype == trunc.dtype == torch.bool and term.shape == trunc.shape == (3,)
            assert not term.any()
            # torchrl's GymEnv(num_envs) over gymnasium 1.x loses the terminal obs (module docstring): those rows
            # are marked, so no transition stores the placeholder as a next observation
            lost = batched == "gymenv_num_envs"
            if lost:
                assert torch.equal(info["final_obs_valid"], ~trunc)
                stored = real_transitions(prev, a, rew, obs, term, trunc, info)
                torch.testing.assert_close(stored["next_obs"][trunc], prev[trunc])  # its own state, not zeros
            else:
                assert "final_obs_valid" not in info
            if t != 199 or not lost:
                expected = _pendulum_step(prev, a[:, 0])
                torch.testing.assert_close(info["final_obs"], expected, atol=1e-4, rtol=0)
            if t == 199:
                assert trunc.all()
                assert not torch.allclose(obs, info["final_obs"])  # obs is the new episode's first
            else:
                assert not trunc.any() and torch.equal(info["final_obs"], obs)
            assert env.episode_steps.tolist() == [(t + 1) % 200] * 3
    finally:
        env.close()


def test_from_torchrl_onehot_actions() -> None:
    tenv = GymEnv("CartPole-v1", num_envs=2)
    assert isinstance(tenv.action_spec, OneHot)
    env = envs.from_torchrl(tenv)
    try:
        assert isinstance(env.action_space, gym.spaces.Discrete) and env.action_space.n == 2
        env.reset(seed=0)
        finished = torch.zeros(2, dtype=torch.bool)
        for a in _actions(env, 60, seed=0):
            obs, rew, term, trunc, info = env.step(a)
            assert obs.shape == (2, 4) and rew.shape == (2,)
            finished |= term
        assert finished.any()  # random CartPole falls within 60 steps
        with pytest.raises(ActionError, match="int64"):
            env.step(torch.zeros(2, dtype=torch.int32))
    finally:
        env.close()


class _Counter(EnvBase):
    """Two envs counting steps (observation 100 + t), batched: env 0 reaches a time limit at t = 3, env 1 a terminal
    state at t = 2. Only the done keys named in ``flags`` are reported (many hand-written torchrl envs have only
    "done" and "terminated"), each as torchrl defines it (done = terminated | truncated).
    """

    def __init__(self, flags: tuple[str, ...]) -> None:
        super().__init__(batch_size=torch.Size([2]))
        self.flags = flags
        self.observation_spec = Composite(observation=Unbounded((2, 1)), shape=(2,))
        self.action_spec = Bounded(-1.0, 1.0, (2, 1))
        self.reward_spec = Unbounded((2, 1))
        self.done_spec = Composite({k: Categorical(2, (2, 1), dtype=torch.bool) for k in flags}, shape=(2,))
        self.t = torch.zeros(2, 1)

    def _flags(self, terminated: torch.Tensor, truncated: torch.Tensor) -> dict[str, torch.Tensor]:
        every = {"done": terminated | truncated, "terminated": terminated, "truncated": truncated}
        return {k: every[k] for k in self.flags}

    def _reset(self, tensordict: TensorDict | None = None, **kwargs: object) -> TensorDict:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        self.t = torch.zeros_like(self.t) if mask is None else torch.where(mask, 0.0, self.t)
        no = torch.zeros(2, 1, dtype=torch.bool)
        return TensorDict({"observation": self.t + 100, **self._flags(no, no)}, self.batch_size)

    def _step(self, tensordict: TensorDict) -> TensorDict:
        self.t = self.t + 1
        terminated = (self.t >= 2) & torch.tensor([[False], [True]])
        truncated = (self.t >= 3) & ~terminated
        return TensorDict({"observation": self.t + 100, "reward": torch.ones_like(self.t),
                           **self._flags(terminated, truncated)}, self.batch_size)

    def _set_seed(self, seed: int | None) -> None:
        pass


@pytest.mark.parametrize(("flags", "time_limit_is"), [
    (("done", "terminated"), "truncated"),  # the time limit is the done that is not terminal
    (("done", "terminated", "truncated"), "truncated"),
    (("done",), "terminated"),  # nothing tells a time limit apart: a finish is terminal
])
def test_from_torchrl_reads_a_missing_done_flag_from_the_others(flags: tuple[str, ...], time_limit_is: str) -> None:
    env = envs.from_torchrl(_Counter(flags))
    obs = env.reset()
    ends: dict[int, tuple[bool, bool, float]] = {}
    for _ in range(3):
        next_obs, reward, term, trunc, info = env.step(torch.zeros(2, 1))
        row = real_transitions(obs, torch.zeros(2, 1), reward, next_obs, term, trunc, info)
        for i in range(2):
            if bool(term[i] | trunc[i]) and i not in ends:
                ends[i] = (bool(term[i]), bool(trunc[i]), float(row["next_obs"][i, 0]))
        obs = next_obs
    # env 1's terminal state at t = 2 and env 0's time limit at t = 3, each with its true last observation
    assert ends[1] == (True, False, 102.0)
    assert ends[0] == (time_limit_is == "terminated", time_limit_is == "truncated", 103.0)


def test_from_torchrl_close_is_idempotent_on_unstarted_env() -> None:
    env = envs.from_torchrl(SerialEnv(2, lambda: GymEnv("Pendulum-v1")))
    env.close()
    env.close()


def test_from_torchrl_rejects_unbatched_env() -> None:
    single = GymEnv("Pendulum-v1")
    with pytest.raises(ValueError, match=r"batch_size \[N\].*SerialEnv"):
        envs.from_torchrl(single)
    single.close()


def test_from_torchrl_missing_obs_key_lists_available_keys() -> None:
    with pytest.raises(KeyError, match=r"'pixels'.*available: \['observation'\]"):
        envs.from_torchrl(envs.to_torchrl(envs.make("Pendulum-v1", 2, seed=0)), obs_key="pixels")


def test_from_torchrl_unsupported_action_spec_names_it() -> None:
    tenv = envs.to_torchrl(envs.make("CartPole-v1", 2, seed=0))
    tenv.action_spec = MultiOneHot([2, 3], shape=(2, 5))
    with pytest.raises(TypeError, match="MultiOneHot.*supported: Bounded/Unbounded"):
        envs.from_torchrl(tenv)


def test_from_torchrl_rejects_a_discrete_observation_spec() -> None:
    tenv = envs.to_torchrl(envs.make("CartPole-v1", 2, seed=0))
    tenv.observation_spec = Composite(observation=Categorical(3, shape=(2,)), shape=(2,))
    with pytest.raises(TypeError, match="Bounded/Unbounded observation spec at 'observation'.*got Categorical"):
        envs.from_torchrl(tenv)


def test_from_torchrl_checks_actions() -> None:
    env = envs.from_torchrl(envs.to_torchrl(envs.make("Pendulum-v1", 2, seed=0)))
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(2, 1))
    env.reset()
    with pytest.raises(ActionError, match="shape"):
        env.step(torch.zeros(2, 3))
    with pytest.raises(ActionError, match="not finite"):
        env.step(torch.full((2, 1), math.nan))


@pytest.mark.parametrize("ids", [torch.tensor([1, 2]), torch.tensor([False, True, True, False])],
                         ids=["indices", "mask"])
def test_from_torchrl_partial_reset_matches_the_native_partial_reset(ids: torch.Tensor) -> None:
    native = envs.make("Pendulum-v1", 4, seed=0)
    wrapped = envs.from_torchrl(envs.to_torchrl(envs.make("Pendulum-v1", 4, seed=0)))
    actions = _actions(native, 6, seed=1)
    for env in (native, wrapped):
        env.reset()
        for a in actions[:3]:
            env.step(a)
    before = wrapped._obs(wrapped._td)
    obs = wrapped.reset(env_ids=ids)
    assert torch.equal(obs, native.reset(env_ids=torch.tensor([1, 2])))
    assert torch.equal(obs[[0, 3]], before[[0, 3]]) and not torch.equal(obs[[1, 2]], before[[1, 2]])
    assert wrapped.episode_steps.tolist() == native.episode_steps.tolist() == [3, 0, 0, 3]
    for a in actions[3:]:
        for x, y in zip(wrapped.step(a)[:4], native.step(a)[:4], strict=True):
            assert torch.equal(x, y)


def test_from_torchrl_serial_env_partial_reset_leaves_the_other_envs_alone() -> None:
    env = envs.from_torchrl(SerialEnv(3, lambda: GymEnv("Pendulum-v1")))
    twin = envs.from_torchrl(SerialEnv(3, lambda: GymEnv("Pendulum-v1")))
    try:
        actions = _actions(env, 4, seed=0)
        for e in (env, twin):
            e.reset(seed=0)
            for a in actions[:2]:
                before = e.step(a)[0]
        obs = env.reset(env_ids=torch.tensor([1]))
        assert torch.equal(obs[[0, 2]], before[[0, 2]]) and not torch.equal(obs[1], before[1])
        assert env.episode_steps.tolist() == [2, 0, 2]
        for a in actions[2:]:
            for x, y in zip(env.step(a)[:4], twin.step(a)[:4], strict=True):
                assert torch.equal(x[[0, 2]], y[[0, 2]])
    finally:
        env.close()
        twin.close()


def test_from_torchrl_partial_reset_errors() -> None:
    env = envs.from_torchrl(envs.to_torchrl(envs.make("Pendulum-v1", 2, seed=0)))
    with pytest.raises(RuntimeError, match=r"call reset\(\) before reset\(env_ids=\.\.\.\)"):
        env.reset(env_ids=torch.tensor([0]))
    obs = env.reset()
    assert torch.equal(env.reset(env_ids=torch.zeros(2, dtype=torch.bool)), obs)
    with pytest.raises(ValueError, match="seeding applies to full resets only"):
        env.reset(seed=0, env_ids=torch.tensor([0]))
    with pytest.raises(ValueError, match=r"env_ids must be int64 env indices in \[0, 1\] or a bool mask"):
        env.reset(env_ids=torch.tensor([0.0]))
