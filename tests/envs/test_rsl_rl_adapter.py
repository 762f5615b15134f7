"""from_rsl_rl: rsl_rl VecEnvs (Isaac Lab, mjlab) under our contract; mjlab's real cartpole through envs.make.

The mjlab tests run the real ``Mjlab-Cartpole-Balance`` on CPU (Warp's CPU
backend) and skip, with the reason, where mjlab is not installed. The first
env built on a machine compiles Warp's kernels (about 30 s, cached in
``~/.cache/warp``); later ones take about a second. ``_Contract`` is a tiny
hand-written rsl_rl VecEnv: a test double of the rsl_rl contract, not of mjlab.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import envs
from envs.adapters.rsl_rl import RslRlVecEnv
from envs.base import ActionError, VecEnv

pytestmark = pytest.mark.timeout(60)
MJLAB_TIMEOUT = pytest.mark.timeout(300)  # a cold Warp kernel cache compiles for ~30 s (more on a busy machine)
TASK = "Mjlab-Cartpole-Balance"
SHORT = {"episode_length_s": 0.25}  # 5 steps of 0.05 s: a time-out within the test


class _Contract:
    """Three envs whose observations encode a per-env step clock.

    Env 0 times out when its clock reaches 4, env 1 terminates at 2, env 2 runs
    on. Rewards live in one buffer overwritten in place, as Isaac Lab and mjlab do;
    ``final_obs=True`` puts the pre-reset groups in ``extras["final_obs"]``.
    """

    num_envs, num_actions, device, max_episode_length = 3, 2, "cpu", 4

    def __init__(self, final_obs: bool = False) -> None:
        self.final_obs = final_obs
        self.clock = torch.zeros(3)
        self.rewards = torch.zeros(3)
        self.seeds: list[int] = []

    def _groups(self) -> TensorDict:
        actor = self.clock.unsqueeze(-1).repeat(1, 4)
        return TensorDict({"actor": actor, "critic": -actor.repeat(1, 2)}, batch_size=[3])

    def get_observations(self) -> TensorDict:
        return self._groups()

    def seed(self, seed: int = -1) -> int:
        self.seeds.append(seed)
        return seed

    def reset(self) -> tuple[TensorDict, dict]:
        self.clock.zero_()
        return self._groups(), {}

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        self.clock += 1
        self.rewards[:] = self.clock
        time_outs = self.clock == torch.tensor([4.0, 99.0, 99.0])
        dones = time_outs | (self.clock == torch.tensor([99.0, 2.0, 99.0]))
        extras: dict = {"time_outs": time_outs, "log": {}}
        if self.final_obs:
            extras["final_obs"] = dict(self._groups().items())  # Isaac Lab hands over a dict of groups
        self.clock[dones] = 0
        return self._groups(), self.rewards, dones.long(), extras


class _Unwrapped:
    """The simulator under a wrapper: Isaac Lab's / mjlab's ``reset(*, seed, env_ids, options)``."""

    def __init__(self, outer: _Contract) -> None:
        self.outer = outer
        self.calls: list[torch.Tensor] = []

    def reset(self, *, seed: int | None = None, env_ids: torch.Tensor | None = None,
              options: dict | None = None) -> tuple[dict, dict]:
        assert env_ids is not None and env_ids.dtype == torch.int64  # Isaac Lab's convention
        self.calls.append(env_ids.clone())
        self.outer.clock[env_ids] = 0
        self.outer.noise += 1  # recomputed observations differ: only the reset rows may be read
        return dict(self.outer._groups().items()), {}


class _PartialContract(_Contract):
    """``_Contract`` with a partial reset, as an Isaac Lab / mjlab wrapper (``unwrapped``) or on the env itself."""

    def __init__(self, where: str = "unwrapped") -> None:
        super().__init__()
        self.noise = 0
        self.sim = _Unwrapped(self)
        if where == "unwrapped":
            self.unwrapped = self.sim
        else:
            self.reset = self._reset_maybe_ids  # type: ignore[method-assign]  # reset(env_ids) on the wrapper

    def _groups(self) -> TensorDict:
        groups = super()._groups()
        groups["actor"] = groups["actor"] + 1000.0 * self.noise
        return groups

    def _reset_maybe_ids(self, env_ids: torch.Tensor | None = None) -> tuple[TensorDict, dict]:
        if env_ids is None:
            return _Contract.reset(self)
        return self.sim.reset(env_ids=env_ids)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        self.noise = 0
        return super().step(actions)


def _zeros(env: VecEnv) -> torch.Tensor:
    return torch.zeros(env.num_envs, env.act_dim, device=env.device)


# ---- the adapter, on a contract double -------------------------------------------------


def test_shapes_dtypes_spaces_and_action_checks() -> None:
    env = envs.from_rsl_rl(_Contract())
    assert isinstance(env, RslRlVecEnv) and env.num_envs == 3 and env.device == torch.device("cpu")
    assert env.obs_dim == 4 and env.observation_space.dtype == np.float32
    assert env.act_dim == 2 and not env.is_discrete and env.max_episode_steps == 4
    assert env.action_space.low.tolist() == [-1.0, -1.0] and env.action_space.high.tolist() == [1.0, 1.0]
    obs = env.reset()
    assert obs.shape == (3, 4) and obs.dtype == torch.float32
    obs, rew, term, trunc, info = env.step(_zeros(env))
    assert obs.shape == info["final_obs"].shape == (3, 4) and rew.shape == (3,) and rew.dtype == torch.float32
    assert term.dtype == trunc.dtype == info["final_obs_valid"].dtype == torch.bool
    assert env.episode_steps.dtype == torch.int64 and env.episode_steps.tolist() == [1, 1, 1]
    with pytest.raises(ActionError, match=r"shape \(3, 2\)"):
        env.step(torch.zeros(3, 1))


@pytest.mark.parametrize("provided", [False, True], ids=["no-final-obs", "env-final-obs"])
def test_terminated_truncated_and_both_final_obs_paths(provided: bool) -> None:
    env = envs.from_rsl_rl(_Contract(final_obs=provided))
    env.reset()
    rewards = []
    for t in range(1, 5):
        obs, rew, term, trunc, info = env.step(_zeros(env))
        rewards.append(rew)
        done = term | trunc
        assert term.tolist() == [False, t in (2, 4), False]  # env 1 ends at clock 2, twice
        assert trunc.tolist() == [t == 4, False, False]  # env 0's time limit
        if provided:  # the true last clock, and obs on unfinished rows
            assert info["final_obs_valid"].all()
            expected = torch.where(done, torch.tensor([4.0, 2.0, float(t)]), obs[:, 0])
            assert torch.equal(info["final_obs"][:, 0], expected)
        else:  # a placeholder, marked invalid exactly where an env finished
            assert torch.equal(info["final_obs_valid"], ~done)
            assert torch.equal(info["final_obs"], obs)
        assert torch.equal(obs[done], torch.zeros(int(done.sum()), 4))  # next episode's first obs
    assert env.episode_steps.tolist() == [0, 0, 4]
    assert [r.tolist() for r in rewards] == [[1, 1, 1], [2, 2, 2], [3, 1, 3], [4, 2, 4]]  # copies, not the buffer


def test_missing_obs_group_names_the_available_ones() -> None:
    with pytest.raises(KeyError, match=r"'policy'.*available groups: \['actor', 'critic'\]"):
        envs.from_rsl_rl(_Contract(), obs_group="policy")
    assert envs.from_rsl_rl(_Contract(), obs_group="critic").obs_dim == 8  # other groups are ignored


class _Renamed(_Contract):
    """_Contract with its actor group under another name (Isaac Lab's ``policy``, or a user's own)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def _groups(self) -> TensorDict:
        groups = super()._groups()
        return TensorDict({self.name: groups["actor"], "critic": groups["critic"]}, batch_size=[3])


def test_the_default_group_is_actor_else_isaac_labs_policy_and_neither_names_the_groups() -> None:
    """Without ``obs_group``: rsl_rl's and mjlab's ``actor``, else Isaac Lab's ``policy`` (so an Isaac Lab env, and
    ``to_rsl_rl``'s export, come in as they are); with neither, the error names the groups there are.
    """
    assert envs.from_rsl_rl(_Contract()).obs_group == "actor"
    isaac = envs.from_rsl_rl(_Renamed("policy"))
    assert isaac.obs_group == "policy" and isaac.obs_dim == 4
    with pytest.raises(KeyError, match=r"neither 'actor' .* nor 'policy' .* available groups: \['proprio', "
                                       r"'critic'\]\. Pick one with from_rsl_rl\(env, obs_group=\.\.\.\)"):
        envs.from_rsl_rl(_Renamed("proprio"))
    assert envs.from_rsl_rl(_Renamed("proprio"), obs_group="proprio").obs_dim == 4


def test_objects_outside_the_contract_are_rejected_clearly() -> None:
    with pytest.raises(TypeError, match="lacks num_envs, num_actions, device, get_observations, step"):
        envs.from_rsl_rl(object())
    broken = _Contract()
    broken.num_actions = 0
    with pytest.raises(ValueError, match="num_actions must be an int >= 1, got 0"):
        envs.from_rsl_rl(broken)
    env = envs.from_rsl_rl(_Contract())
    env.env.step = lambda actions: (env.env.get_observations(), torch.zeros(3), torch.zeros(3))
    with pytest.raises(TypeError, match=r"must return \(obs, rewards, dones, extras\), got tuple of length 3"):
        env.step(_zeros(env))
    terms = _Contract()
    terms.get_observations = lambda: {"actor": {"pos": torch.zeros(3, 2)}}
    with pytest.raises(TypeError, match="'actor' is a dict of terms"):
        envs.from_rsl_rl(terms)


def test_older_rsl_rl_tuple_observations_and_seeding() -> None:
    old = _Contract()
    old.get_observations = lambda: (old._groups()["actor"], {"observations": {}})  # rsl_rl < 3
    env = envs.from_rsl_rl(old, seed=7)
    assert env.reset().shape == (3, 4) and old.seeds == [7]  # the constructor's seed, at the first reset
    env.reset()
    env.reset(seed=3)
    assert old.seeds == [7, 3]
    unseedable = _Contract()
    unseedable.seed = None  # an env that cannot be seeded says so
    with pytest.warns(RuntimeWarning, match=r"no seed\(\) method; seed 1 is ignored"):
        envs.from_rsl_rl(unseedable).reset(seed=1)


def test_an_env_without_reset_is_said_to_go_on_with_its_running_episodes() -> None:
    """rsl_rl's contract has no reset(): the adapter's reset() then only re-reads the observations, so an evaluation
    after the first would score episodes already under way; the adapter says so once, when it is built.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        envs.from_rsl_rl(_Contract())  # with reset(): silent
    running = _Contract()
    running.reset = None  # type: ignore[assignment,method-assign]
    with pytest.warns(RuntimeWarning, match=r"_Contract has no reset\(\) method: reset\(\) cannot start new episodes"):
        env = envs.from_rsl_rl(running)
    env.reset()
    env.step(torch.zeros(3, 2))
    assert env.reset()[0, 0] == 1.0  # the clock went on: no new episode


@pytest.mark.parametrize("where", ["unwrapped", "env"])
@pytest.mark.parametrize("ids", [torch.tensor([2]), torch.tensor([False, False, True])], ids=["indices", "mask"])
def test_partial_reset_goes_to_the_envs_reset_with_env_ids(where: str, ids: torch.Tensor) -> None:
    env, twin = envs.from_rsl_rl(_PartialContract(where)), envs.from_rsl_rl(_Contract())
    for e in (env, twin):
        e.reset()
        before = e.step(_zeros(e))[0]
    obs = env.reset(env_ids=ids)
    assert [c.tolist() for c in env.env.sim.calls] == [[2]]
    assert env.episode_steps.tolist() == [1, 1, 0]
    assert torch.equal(obs[:2], before[:2])  # the obs we handed out, not a recomputed one
    assert torch.equal(obs[2], torch.full((4,), 1000.0))  # the fresh row, read after the reset
    for t in range(3):  # envs 0 and 1 go on (env 1 terminates at clock 2) exactly as without the reset
        out, ref = env.step(_zeros(env)), twin.step(_zeros(twin))
        for x, y in zip(out[:4], ref[:4], strict=True):
            assert torch.equal(x[:2], y[:2])
        assert out[0][2, 0] == t + 1  # env 2's clock restarted
    assert env.episode_steps.tolist() == [0, 0, 3]  # env 0 timed out at 4, env 1 ended twice


def test_partial_reset_errors() -> None:
    env = envs.from_rsl_rl(_PartialContract())
    with pytest.raises(RuntimeError, match=r"call reset\(\) before reset\(env_ids=\.\.\.\)"):
        env.reset(env_ids=torch.tensor([0]))
    obs = env.reset()
    assert torch.equal(env.reset(env_ids=torch.tensor([], dtype=torch.int64)), obs) and not env.env.sim.calls
    with pytest.raises(ValueError, match="seeding applies to full resets only"):
        env.reset(seed=0, env_ids=torch.tensor([0]))
    with pytest.raises(ValueError, match=r"env_ids \[3\] out of range: expected int64 env indices in \[0, 2\]"):
        env.reset(env_ids=torch.tensor([3]))
    plain = envs.from_rsl_rl(_Contract())  # rsl_rl's contract alone: reset() without env_ids
    plain.reset()
    with pytest.raises(NotImplementedError, match=r"_Contract offers no partial reset: neither env.unwrapped.reset "
                                                  r"nor env.reset takes env_ids"):
        plain.reset(env_ids=torch.tensor([0]))


def test_make_mjlab_without_mjlab_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mjlab", None)  # `import mjlab` now fails as if not installed
    with pytest.raises(ImportError, match=r'needs mjlab.*pip install -e "\.\[mjlab\]"'):
        envs.make(TASK, 2)


# ---- mjlab's real cartpole on CPU ------------------------------------------------------


def _mjlab(**kwargs: object) -> Iterator[VecEnv]:
    pytest.importorskip("mjlab", reason="mjlab is not installed (pip install -e '.[mjlab]')")
    env = envs.make(TASK, 4, device="cpu", seed=0, **kwargs)
    yield env
    env.close()


@pytest.fixture(scope="module")
def cartpole() -> Iterator[VecEnv]:
    """True final observations (our reset after mjlab's ``auto_reset=False`` step), 5-step episodes."""
    yield from _mjlab(**SHORT)


@pytest.fixture(scope="module")
def cartpole_auto() -> Iterator[VecEnv]:
    """mjlab's own same-step auto-reset: final observations lost."""
    yield from _mjlab(final_obs=False, **SHORT)


def _trace(env: VecEnv, steps: int) -> list[tuple]:
    """Seeded reset and actions. mjlab seeds process-global generators: trace one env at a time."""
    g = torch.Generator().manual_seed(0)
    out = [(env.reset(seed=0),)]
    for _ in range(steps):
        obs, rew, term, trunc, info = env.step(torch.rand(env.num_envs, 1, generator=g) * 2 - 1)
        out.append((obs, rew, term, trunc, info["final_obs"], info["final_obs_valid"], env.episode_steps.clone()))
    return out


@MJLAB_TIMEOUT
def test_mjlab_cartpole_shapes_dtypes_devices(cartpole: VecEnv) -> None:
    assert isinstance(cartpole, RslRlVecEnv) and cartpole.device == torch.device("cpu")
    assert cartpole.obs_dim == 5 and cartpole.act_dim == 1 and cartpole.max_episode_steps == 5
    assert cartpole.action_space.low.tolist() == [-1.0] and cartpole.action_space.high.tolist() == [1.0]
    obs = cartpole.reset(seed=0)
    assert obs.shape == (4, 5) and obs.dtype == torch.float32 and obs.device == cartpole.device
    obs, rew, term, trunc, info = cartpole.step(torch.full((4, 1), 0.5))
    for x, dtype in ((obs, torch.float32), (rew, torch.float32), (term, torch.bool), (trunc, torch.bool),
                     (info["final_obs"], torch.float32), (info["final_obs_valid"], torch.bool)):
        assert x.dtype == dtype and x.device == cartpole.device and x.shape[0] == 4
    assert torch.all((rew > 0) & (rew <= 0.05))  # dm_control's smooth reward in [0, 1], times dt = 0.05 s
    assert torch.allclose(obs[:, 1] ** 2 + obs[:, 2] ** 2, torch.ones(4))  # cos, sin of the pole angle


@MJLAB_TIMEOUT
def test_mjlab_time_out_is_truncation_with_the_true_final_obs(cartpole: VecEnv) -> None:
    trace = _trace(cartpole, 6)
    for t, (_obs, _rew, term, trunc, _final, valid, steps) in enumerate(trace[1:], start=1):
        assert not term.any() and bool(trunc.all()) == (t == 5) and bool(trunc.any()) == (t == 5)
        assert valid.all() and steps.tolist() == [t % 5] * 4
    with envs.make(TASK, 4, seed=0) as reference:  # 1000-step episodes: no reset at step 5
        assert torch.equal(trace[5][4], _trace(reference, 5)[5][0])  # final_obs is the state reached
    assert not torch.equal(trace[5][4], trace[5][0])  # and obs already starts the next episode


@MJLAB_TIMEOUT
def test_mjlab_auto_reset_marks_lost_final_obs_and_matches_otherwise(
    cartpole: VecEnv, cartpole_auto: VecEnv
) -> None:
    captured, auto = _trace(cartpole, 6), _trace(cartpole_auto, 6)
    obs, rew, term, trunc, final, valid, steps = auto[5]
    assert trunc.all() and not term.any()
    assert not valid.any() and torch.equal(final, obs)  # placeholder, marked invalid
    assert auto[4][5].all() and auto[6][5].all()
    for a, c in zip(auto, captured, strict=True):  # our reset after the step is mjlab's auto-reset, bit for bit
        for x, y in zip(a[:4], c[:4], strict=True):  # obs, reward, terminated, truncated
            assert torch.equal(x, y)


@MJLAB_TIMEOUT
def test_mjlab_partial_reset_restarts_only_the_chosen_envs(cartpole: VecEnv) -> None:
    """mjlab's ``reset(env_ids=...)``: the other envs' physics is untouched and steps on bit for bit."""
    g = torch.Generator().manual_seed(1)
    actions = [torch.rand(4, 1, generator=g) * 2 - 1 for _ in range(4)]

    def run(env_ids: torch.Tensor | None) -> list[tuple]:
        out = [(cartpole.reset(seed=0),)]
        for a in actions[:2]:
            out.append(cartpole.step(a)[:4])
        if env_ids is not None:
            out.append((cartpole.reset(env_ids=env_ids), cartpole.episode_steps.clone()))
        for a in actions[2:]:
            out.append(cartpole.step(a)[:4])
        return out

    plain, by_ids, by_mask = run(None), run(torch.tensor([1, 3])), run(torch.tensor([False, True, False, True]))
    before, (obs, steps) = by_ids[2][0], by_ids[3]
    assert steps.tolist() == [2, 0, 2, 0]
    assert torch.equal(obs[[0, 2]], before[[0, 2]]) and not torch.equal(obs[[1, 3]], before[[1, 3]])
    for x, y in zip(by_ids, by_mask, strict=True):  # indices and mask: the same reset
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)
    for x, y in zip(plain[3:], by_ids[4:], strict=True):  # envs 0 and 2 step on as if nothing happened
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u[[0, 2]], v[[0, 2]])
    assert cartpole.episode_steps.tolist() == [4, 2, 4, 2]


@MJLAB_TIMEOUT
def test_mjlab_groups_and_make_errors(cartpole_auto: VecEnv) -> None:
    rsl_env = cartpole_auto.env  # mjlab's RslRlVecEnvWrapper
    with pytest.raises(KeyError, match=r"available groups: \['actor', 'critic'\]"):
        envs.from_rsl_rl(rsl_env, obs_group="policy")  # Isaac Lab's name for the actor group
    assert envs.from_rsl_rl(rsl_env, obs_group="critic").obs_dim == 5
    with pytest.raises(envs.UnknownEnvError, match="Did you mean: Mjlab-Cartpole-Balance"):
        envs.make("Mjlab-Cartpole-Balanse", 2)
    with pytest.raises(TypeError, match="unknown option 'episode_len'"):
        envs.make(TASK, 2, episode_len=1.0)


@MJLAB_TIMEOUT
def test_mjlab_time_outs_without_a_final_obs_never_become_next_state_targets(
    cartpole_auto: VecEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainers' own path: real_transitions marks them, ModelBased.train hands the fit that mask (the
    rows still train reward and termination; the ensemble's own test covers the masked fit).
    """
    from mbpo.config import load_config
    from mbpo.data.transitions import NEXT_OBS_VALID, real_transitions
    from mbpo.model_based.learner import ModelBased

    env = cartpole_auto
    obs, steps = env.reset(seed=0), []
    for _ in range(6):  # 5-step episodes: one time-out in every env
        action = torch.zeros(env.num_envs, 1)
        nxt, rew, term, trunc, info = env.step(action)
        steps.append(real_transitions(obs, action, rew, nxt, term, trunc, info))
        obs = nxt
    data = torch.cat(steps)
    timed_out = torch.cat([s[NEXT_OBS_VALID].logical_not() for s in steps])
    assert int(timed_out.sum()) == env.num_envs  # exactly the time-out rows are marked
    model = ModelBased(load_config(None, ["model.enabled=true"]).model, TASK, env.observation_space,
                       env.action_space, torch.device("cpu"), seed=0)
    fitted: dict[str, torch.Tensor] = {}

    def spy_fit(obs: torch.Tensor, *args: object, next_obs_valid: torch.Tensor, **kwargs: object) -> dict:
        fitted["obs"], fitted["next_obs_valid"] = obs, next_obs_valid
        return {}

    monkeypatch.setattr(model.ensemble, "fit", spy_fit)
    model.train(data, env_steps=data.shape[0])
    assert torch.equal(fitted["obs"], data["obs"])
    assert torch.equal(fitted["next_obs_valid"], ~timed_out)
