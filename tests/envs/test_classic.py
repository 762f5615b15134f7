"""Native torch classic-control envs reproduce gymnasium, step by step."""

from __future__ import annotations

import math
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from envs.classic import TASKS, ClassicVecEnv

pytestmark = pytest.mark.timeout(60)

N = 64
# Random states wider than the reset distribution, in gymnasium's state layout.
STATE_RANGES = {
    "Pendulum-v1": [(-2 * math.pi, 2 * math.pi), (-8.0, 8.0)],
    "CartPole-v1": [(-2.4, 2.4), (-2.0, 2.0), (-0.2, 0.2), (-2.0, 2.0)],
    "MountainCarContinuous-v0": [(-1.2, 0.6), (-0.07, 0.07)],
    "Acrobot-v1": [(-math.pi, math.pi), (-math.pi, math.pi), (-4 * math.pi, 4 * math.pi), (-9 * math.pi, 9 * math.pi)],
}
TIME_LIMITS = {"Pendulum-v1": 200, "CartPole-v1": 500, "MountainCarContinuous-v0": 999, "Acrobot-v1": 500}


def random_states(env_id: str, n: int, g: torch.Generator) -> torch.Tensor:
    cols = [torch.rand(n, generator=g) * (hi - lo) + lo for lo, hi in STATE_RANGES[env_id]]
    return torch.stack(cols, dim=-1)


def random_actions(env: envs.VecEnv, g: torch.Generator) -> torch.Tensor:
    if env.is_discrete:
        return torch.randint(0, env.act_dim, (env.num_envs,), generator=g)
    high = float(env.action_space.high[0])
    return (torch.rand(env.num_envs, env.act_dim, generator=g) * 2 - 1) * 2 * high  # half out of range


def gym_step(gym_env: gym.Env, state: np.ndarray, action: np.ndarray | int) -> tuple:
    unwrapped = gym_env.unwrapped
    unwrapped.state = state.copy()
    if hasattr(unwrapped, "steps_beyond_terminated"):
        unwrapped.steps_beyond_terminated = None
    return unwrapped.step(action)


def check_against_gymnasium(env_id: str, **kwargs: object) -> None:
    """Random states and actions, one step each: obs, reward and termination as gymnasium's to 1e-5."""
    g = torch.Generator().manual_seed(0)
    env = envs.make(env_id, N, seed=0, **kwargs)
    env.reset()
    ref = gym.make(env_id)
    ref.reset(seed=0)
    rtol = atol = 1e-5
    for _ in range(20):
        env.state = random_states(env_id, N, g)
        states = env.state.double().numpy()
        actions = random_actions(env, g)
        _, reward, terminated, truncated, info = env.step(actions)
        for i in range(N):
            act = int(actions[i]) if env.is_discrete else actions[i].numpy()
            obs_ref, rew_ref, term_ref, _, _ = gym_step(ref, states[i], act)
            np.testing.assert_allclose(info["final_obs"][i].numpy(), obs_ref, rtol=rtol, atol=atol)
            assert reward[i].item() == pytest.approx(rew_ref, rel=rtol, abs=atol)
            assert bool(terminated[i]) == term_ref
        assert not truncated.any()


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_matches_gymnasium_step_by_step(env_id: str) -> None:
    check_against_gymnasium(env_id)


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_contract_shapes_dtypes_and_spaces(env_id: str) -> None:
    env = envs.make(env_id, 5, seed=1)
    ref = gym.make(env_id)
    assert env.observation_space == ref.observation_space
    assert env.action_space == ref.action_space
    assert env.max_episode_steps == ref.spec.max_episode_steps == TIME_LIMITS[env_id]
    obs = env.reset()
    assert obs.shape == (5, *ref.observation_space.shape) and obs.dtype == torch.float32
    assert env.state.shape == (5, len(STATE_RANGES[env_id]))
    actions = random_actions(env, torch.Generator().manual_seed(0))
    assert actions.dtype == (torch.int64 if env.is_discrete else torch.float32)
    obs, reward, terminated, truncated, info = env.step(actions)
    assert obs.shape == (5, env.obs_dim) and obs.dtype == torch.float32 and obs.device == env.device
    assert reward.shape == (5,) and reward.dtype == torch.float32
    assert terminated.shape == truncated.shape == (5,)
    assert terminated.dtype == truncated.dtype == torch.bool
    assert info["final_obs"].shape == obs.shape
    assert env.episode_steps.dtype == torch.int64 and env.episode_steps.tolist() == [1] * 5


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_time_limit_truncates_and_auto_resets_same_step(env_id: str) -> None:
    env = envs.make(env_id, 8, seed=2)
    env.reset()
    env.episode_steps.fill_(TIME_LIMITS[env_id] - 2)
    actions = random_actions(env, torch.Generator().manual_seed(1))
    _, _, terminated, truncated, _ = env.step(actions)
    assert not truncated.any()
    pre_state = env.state.clone()
    obs, _, terminated, truncated, info = env.step(actions)
    assert truncated.all()  # gymnasium's TimeLimit truncates even if the last step also terminated
    assert env.episode_steps.tolist() == [0] * 8
    # Same-step auto-reset: obs is the new episode's first observation, final_obs the true last one.
    expected_last, _, _ = env.task.dynamics(pre_state, actions)
    torch.testing.assert_close(info["final_obs"], env.task.observe(expected_last))
    torch.testing.assert_close(obs, env.task.observe(env.state))
    assert not torch.allclose(obs, info["final_obs"])


def test_pendulum_truncates_at_200_over_a_full_episode() -> None:
    env = envs.make("Pendulum-v1", 3, seed=0)
    env.reset()
    zero = torch.zeros(3, 1)
    truncated_at = [t for t in range(1, 401) if env.step(zero)[3].all()]
    assert truncated_at == [200, 400]


def test_termination_resets_only_finished_envs() -> None:
    env = envs.make("CartPole-v1", 4, seed=0)
    env.reset()
    state = torch.zeros(4, 4)
    state[1, 2] = 0.25  # beyond the 12 degree (0.2094 rad) limit: terminates
    env.state = state
    obs, reward, terminated, truncated, info = env.step(torch.ones(4, dtype=torch.int64))
    assert terminated.tolist() == [False, True, False, False] and not truncated.any()
    assert reward.tolist() == [1.0] * 4  # gymnasium pays 1 on the terminating step too
    assert env.episode_steps.tolist() == [1, 0, 1, 1]
    assert info["final_obs"][1, 2] == pytest.approx(0.25)  # the true last observation
    assert obs[1].abs().max() <= 0.05  # the new episode's first observation
    torch.testing.assert_close(obs[[0, 2, 3]], info["final_obs"][[0, 2, 3]])


def test_mountain_car_clips_force_but_charges_the_raw_action() -> None:
    env = envs.make("MountainCarContinuous-v0", 2, seed=0)
    env.reset()
    env.state = torch.tensor([[-0.5, 0.0], [-0.5, 0.0]])
    obs, reward, *_ = env.step(torch.tensor([[1.0], [3.0]]))
    torch.testing.assert_close(obs[0], obs[1])  # same force after clipping
    assert reward[1].item() == pytest.approx(-0.9) and reward[0].item() == pytest.approx(-0.1)


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_seeding(env_id: str) -> None:
    def trajectory(env: envs.VecEnv, seed: int | None = None) -> list[torch.Tensor]:
        out = [env.reset(seed=seed)]
        g = torch.Generator().manual_seed(7)
        for _ in range(30):
            obs, reward, *_ = env.step(random_actions(env, g))
            out += [obs, reward]
        return out

    a = trajectory(envs.make(env_id, 16, seed=3))
    b = trajectory(envs.make(env_id, 16, seed=3))
    c = trajectory(envs.make(env_id, 16, seed=4))
    reseeded = trajectory(envs.make(env_id, 16, seed=99), seed=3)
    for x, y, z in zip(a, b, reseeded, strict=True):
        assert torch.equal(x, y) and torch.equal(x, z)
    assert not torch.equal(a[0], c[0])
    assert torch.unique(a[0], dim=0).shape[0] == 16  # every env index starts elsewhere


def test_state_is_writable_and_validated() -> None:
    env = envs.make("Acrobot-v1", 3, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(3, dtype=torch.int64))
    env.reset()
    env.state = torch.zeros(3, 4, dtype=torch.float64)
    assert env.state.dtype == torch.float32 and env.state.abs().sum() == 0
    with pytest.raises(ValueError, match=r"shape \(3, 4\)"):
        env.state = torch.zeros(3, 2)


@pytest.mark.parametrize(
    ("env_id", "actions", "match"),
    [
        ("Pendulum-v1", torch.zeros(4), r"shape \(4, 1\)"),
        ("Pendulum-v1", torch.zeros(4, 1, dtype=torch.float64), "float32"),
        ("Pendulum-v1", torch.tensor([[0.0], [float("nan")], [0.0], [0.0]]), "env 1 is not finite"),
        ("Pendulum-v1", torch.zeros(4, 1, device="meta"), "actions are on meta but the env is on cpu"),
        ("Pendulum-v1", np.zeros((4, 1), dtype=np.float32), "torch.Tensor"),
        ("CartPole-v1", torch.zeros(4, 1, dtype=torch.int64), r"shape \(4,\)"),
        ("CartPole-v1", torch.zeros(4), "int64"),
        (
            "CartPole-v1", torch.tensor([0, 1, 2, 0]),
            r"action 2 at env 2 is out of range; expected an integer in \[0, 1\]",
        ),
    ],
)
def test_bad_actions_get_clear_errors(env_id: str, actions: object, match: str) -> None:
    env = envs.make(env_id, 4, seed=0)
    env.reset()
    with pytest.raises(envs.ActionError, match=match):
        env.step(actions)


def test_finite_actions_whose_sum_overflows_are_accepted() -> None:
    env = envs.make("Pendulum-v1", 4, seed=0)
    env.reset()
    huge = torch.full((4, 1), 3e38)  # finite, but their float32 sum is inf
    assert not torch.isfinite(huge.sum())
    env.step(huge)  # clipped to the torque limit like any out-of-range action
    with pytest.raises(envs.ActionError, match="env 2 is not finite"):
        env.step(torch.tensor([[3e38], [3e38], [float("inf")], [0.0]]))


def test_bad_construction_gets_clear_errors() -> None:
    with pytest.raises(ValueError, match="num_envs must be >= 1, got 0"):
        envs.make("Pendulum-v1", 0)
    with pytest.raises(TypeError, match="num_envs must be an int"):
        envs.make("Pendulum-v1", 2.5)
    with pytest.raises(envs.UnknownEnvError, match="Did you mean: Pendulum-v1"):
        envs.make("Pendulm-v1", 2)
    with pytest.raises(ValueError, match="not a device string"):
        envs.make("Pendulum-v1", 2, device="gpu0")


def test_missing_gpu_is_a_clear_error() -> None:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(envs.DeviceUnavailableError, match=f"cuda:{count}"):
        envs.make("Pendulum-v1", 2, device=f"cuda:{count}")


def test_list_envs() -> None:
    assert envs.list_envs() == ["Acrobot-v1", "CartPole-v1", "MountainCarContinuous-v0", "Pendulum-v1"]
    assert "HalfCheetah-v5" in envs.list_envs(include_gymnasium=True)


needs_compiler = pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "g++")),
                                    reason="torch.compile on CPU needs a C/C++ compiler; compile=True is optional")


@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_compiler
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_compiled_step_matches_eager(env_id: str) -> None:
    eager = envs.make(env_id, 32, seed=5)
    compiled = envs.make(env_id, 32, seed=5, compile=True)
    eager.reset()
    compiled.reset()
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    compiled.step(random_actions(compiled, g2))
    eager.step(random_actions(eager, g1))
    with torch._dynamo.config.patch(error_on_recompile=True):  # one compile per env, not one per step
        for _ in range(50):
            a, b = eager.step(random_actions(eager, g1)), compiled.step(random_actions(compiled, g2))
            for x, y in zip(a[:4], b[:4], strict=True):  # fused kernels may reorder float ops
                torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)
    assert b[2].dtype == torch.bool  # terminated leaves the CPU kernel as floats (see _compile)


@pytest.mark.slow
@pytest.mark.timeout(300)
@needs_compiler
@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_compiled_step_matches_gymnasium(env_id: str) -> None:
    check_against_gymnasium(env_id, compile=True)


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_step_leaves_the_tensors_it_returned_alone(env_id: str) -> None:
    """The step updates fresh tensors in place; nothing a caller holds (obs, final_obs, state) changes."""
    env = envs.make(env_id, 16, seed=0)
    env.reset()
    g = torch.Generator().manual_seed(0)
    held = []
    for _ in range(3):
        steps = env.episode_steps.clone()  # a new tensor: the held one stays as the step left it
        steps[:8] = env.max_episode_steps - 1  # half the envs restart on each step
        env.episode_steps = steps
        out = env.step(random_actions(env, g))
        tensors = [*out[:4], out[4]["final_obs"], env.state, env.episode_steps]
        held.append((tensors, [t.clone() for t in tensors]))
    assert held[-1][0][3][:8].all()  # the truncations (and resets) did happen
    for tensors, copies in held:
        for t, c in zip(tensors, copies, strict=True):
            assert torch.equal(t, c)


@pytest.mark.parametrize("sync_free", [False, True])
@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_an_observation_changed_in_place_leaves_the_simulation_alone(env_id: str, sync_free: bool) -> None:
    """CartPole and MountainCar handed out their state as the observation: a caller's in-place normalisation of
    ``obs`` (or of ``final_obs``) moved the simulation. Gymnasium hands out copies.
    """
    env = envs.make(env_id, 8, seed=0, sync_free=sync_free)
    g = torch.Generator().manual_seed(0)
    for out in (env.reset(), *env.step(random_actions(env, g))[:1], env.step(random_actions(env, g))[4]["final_obs"]):
        state = env.state.clone()
        out.mul_(0.0).add_(123.0)
        assert torch.equal(env.state, state)


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_observations_and_rewards_are_float32_whatever_torchs_default_dtype(env_id: str) -> None:
    env = envs.make(env_id, 4, seed=0)
    actions = random_actions(env, torch.Generator().manual_seed(0))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        obs = env.reset(seed=0)
        next_obs, reward, _, _, info = env.step(actions)
    finally:
        torch.set_default_dtype(previous)
    assert {obs.dtype, next_obs.dtype, reward.dtype, info["final_obs"].dtype, env.state.dtype} == {torch.float32}


@pytest.mark.gpu
@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_cuda_env_matches_cpu_and_never_syncs(env_id: str, cuda_device: str) -> None:
    cpu = envs.make(env_id, 256, seed=0)
    gpu = envs.make(env_id, 256, device=cuda_device, seed=0, validate_actions=False)
    cpu.reset()
    gpu.reset()
    gpu.state = cpu.state
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        actions = random_actions(cpu, g)
        on_gpu = actions.to(cuda_device)  # a copy from pageable host memory syncs: not the step's doing
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # any host sync inside step raises
        try:
            out_gpu = gpu.step(on_gpu)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        out_cpu = cpu.step(actions)
        assert out_gpu[0].device == torch.device(cuda_device)
        torch.testing.assert_close(out_gpu[4]["final_obs"].cpu(), out_cpu[4]["final_obs"], rtol=1e-4, atol=1e-4)
        gpu.state = cpu.state  # keep both on the same states despite different reset draws


# ---- partial reset: reset(env_ids=...) --------------------------------------------------


def _stepped(env_id: str, steps: int = 3) -> tuple[envs.VecEnv, torch.Tensor, list[torch.Tensor]]:
    """A seeded env after ``steps`` seeded steps (too few for any episode to end), its last obs and more actions."""
    env = envs.make(env_id, 6, seed=0)
    env.reset()
    g = torch.Generator().manual_seed(1)
    obs = None
    for _ in range(steps):
        obs = env.step(random_actions(env, g))[0]
    return env, obs, [random_actions(env, g) for _ in range(2)]


@pytest.mark.parametrize("env_id", sorted(TASKS))
def test_partial_reset_restarts_only_the_chosen_envs(env_id: str) -> None:
    env, before, actions = _stepped(env_id)
    twin, _, _ = _stepped(env_id)  # the same run without the partial reset
    ids, keep = torch.tensor([1, 4]), torch.tensor([True, False, True, True, False, True])
    state_before = env.state.clone()
    obs = env.reset(env_ids=ids)
    assert obs.shape == before.shape and obs.dtype == torch.float32
    assert env.episode_steps.tolist() == [3, 0, 3, 3, 0, 3]
    assert torch.equal(obs[keep], before[keep]) and torch.equal(env.state[keep], state_before[keep])
    assert not torch.equal(obs[~keep], before[~keep])  # fresh initial states
    torch.testing.assert_close(obs, env.task.observe(env.state))
    for a in actions:  # the untouched envs go on exactly as if nothing happened
        out, ref = env.step(a), twin.step(a)
        for x, y in zip(out[:4], ref[:4], strict=True):
            assert torch.equal(x[keep], y[keep])
    assert env.episode_steps.tolist() == [5, 2, 5, 5, 2, 5]


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_partial_reset_by_indices_and_by_mask_agree(env_id: str) -> None:
    by_ids, _, actions = _stepped(env_id)
    by_mask, _, _ = _stepped(env_id)
    by_dup, _, _ = _stepped(env_id)
    mask = torch.tensor([False, True, False, False, True, False])
    a = by_ids.reset(env_ids=torch.tensor([4, 1]))
    b = by_mask.reset(env_ids=mask)
    c = by_dup.reset(env_ids=torch.tensor([1, 4, 1]))  # duplicates name an env once
    assert torch.equal(a, b) and torch.equal(a, c)
    assert torch.equal(by_ids.episode_steps, by_mask.episode_steps)
    x, y = by_ids.step(actions[0]), by_mask.step(actions[0])
    for u, v in zip(x[:4], y[:4], strict=True):
        assert torch.equal(u, v)


def test_empty_partial_reset_changes_nothing() -> None:
    env, before, actions = _stepped("Pendulum-v1")
    twin, _, _ = _stepped("Pendulum-v1")
    for empty in (torch.tensor([], dtype=torch.int64), torch.zeros(6, dtype=torch.bool)):
        torch.testing.assert_close(env.reset(env_ids=empty), before)
    assert env.episode_steps.tolist() == [3] * 6
    assert torch.equal(env.step(actions[0])[0], twin.step(actions[0])[0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seed": 3, "env_ids": torch.tensor([0])}, r"seed=3, env_ids=.*seeding applies to full resets only"),
        ({"env_ids": torch.tensor([0, 6])}, r"env_ids \[6\] out of range: expected int64 env indices in \[0, 5\]"),
        ({"env_ids": torch.tensor([-1])}, r"env_ids \[-1\] out of range"),
        ({"env_ids": torch.tensor([0, 1], dtype=torch.int32)},
         r"int64 env indices .* or a bool mask .*got dtype torch.int32"),
        ({"env_ids": torch.tensor([0.0])}, "got dtype torch.float32"),
        ({"env_ids": torch.ones(4, dtype=torch.bool)}, r"bool mask must have shape \(6,\), got \(4,\)"),
        ({"env_ids": torch.tensor([[0, 1]])}, r"indices must be 1-D .*got shape \(1, 2\)"),
        ({"env_ids": [0, 1]}, "env_ids must be a torch.Tensor of int64 env indices.*got list"),
    ],
)
def test_bad_partial_resets_get_clear_errors(kwargs: dict, match: str) -> None:
    env, before, _ = _stepped("Pendulum-v1")
    state = env.state.clone()
    with pytest.raises(ValueError, match=match):
        env.reset(**kwargs)
    assert torch.equal(env.state, state) and env.episode_steps.tolist() == [3] * 6  # nothing happened
    fresh = envs.make("Pendulum-v1", 6, seed=0)
    with pytest.raises(RuntimeError, match=r"call reset\(\) before a partial reset"):
        fresh.reset(env_ids=torch.tensor([0]))


@pytest.mark.gpu
@pytest.mark.parametrize("sync_free", [True, False])
def test_cuda_partial_reset_takes_ids_from_any_device(cuda_device: str, sync_free: bool) -> None:
    env = envs.make("Pendulum-v1", 6, device=cuda_device, seed=0, sync_free=sync_free)
    before = env.reset()
    for ids in (torch.tensor([1, 4]), torch.tensor([1, 4], device=cuda_device),
                torch.tensor([False, True, False, False, True, False])):
        obs = env.reset(env_ids=ids)
        assert obs.device == torch.device(cuda_device) and env.episode_steps.device == obs.device
        keep = torch.tensor([True, False, True, True, False, True], device=cuda_device)
        assert torch.equal(obs[keep], before[keep]) and not torch.equal(obs[~keep], before[~keep])
        before = obs
    env.step(torch.zeros(6, 1, device=cuda_device))
    assert env.episode_steps.tolist() == [1] * 6


def test_source_picks_gymnasiums_implementation_of_an_id_that_also_has_a_native_one() -> None:
    from envs.adapters.gymnasium_vector import GymnasiumVecEnv

    assert isinstance(envs.make("CartPole-v1", 2, source="auto"), ClassicVecEnv)
    assert isinstance(envs.make("CartPole-v1", 2, source="native"), ClassicVecEnv)
    gym_env = envs.make("CartPole-v1", 2, source="gymnasium", seed=0)
    assert isinstance(gym_env, GymnasiumVecEnv) and gym_env.reset().shape == (2, 4)
    gym_env.close()
    with pytest.raises(envs.UnknownEnvError, match="no native torch implementation"):
        envs.make("HalfCheetah-v5", 1, source="native")
    with pytest.raises(envs.UnknownEnvError, match="not a registered gymnasium id"):
        envs.make("PointMass-v0", 1, source="gymnasium")
    with pytest.raises(ValueError, match="source='isaac' is not allowed"):
        envs.make("CartPole-v1", 1, source="isaac")


def test_pendulum_initial_states_are_gymnasiums_draws_scaled_without_a_host_tensor() -> None:
    """The same numbers as ``(U(0,1) * 2 - 1) * [pi, 1]`` (so seeded runs keep their draws), built without
    ``torch.tensor([...], device=...)``, which syncs on CUDA (caught by the gpu test above).
    """
    from envs.classic.pendulum import initial_state

    for n in (1, 7, 4096):
        expected = (torch.rand(n, 2, generator=torch.Generator().manual_seed(n)) * 2.0 - 1.0) \
            * torch.tensor([math.pi, 1.0])
        assert torch.equal(initial_state(n, torch.Generator().manual_seed(n), torch.device("cpu")), expected)


def test_a_generator_restores_its_own_kind_of_state_and_is_seeded_from_another_kind() -> None:
    """A checkpoint's generator state from a CUDA run (16 bytes) cannot be set on a CPU generator: it seeds it
    instead, the same way each time, so a run moved between devices resumes repeatably.
    """
    from envs.device import restore_generator

    def draws(generator: torch.Generator) -> torch.Tensor:
        return torch.randn(4, generator=generator)

    source = torch.Generator().manual_seed(3)
    draws(source)
    same = torch.Generator()
    assert restore_generator(same, source.get_state())
    assert torch.equal(draws(same), draws(source))
    cuda_state = torch.arange(16, dtype=torch.uint8)
    first, second = torch.Generator(), torch.Generator().manual_seed(99)
    assert not restore_generator(first, cuda_state) and not restore_generator(second, cuda_state)
    assert torch.equal(draws(first), draws(second))
