"""``known_termination`` must say ``terminated`` exactly when gymnasium does.

The oracle is gymnasium itself: real rollouts (random, scaled-up actions to provoke falls,
or an energy-pumping policy where random play never reaches the goal), plus crafted
states pushed through gymnasium's own ``is_healthy`` for the boundaries and NaN cases a
short rollout does not hit.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
import torch

from mbpo.models.termination import known_termination, supported_env_ids

pytestmark = [
    pytest.mark.timeout(60),
    # v4 MuJoCo ids are still supported (same layout) but gymnasium warns that they are old.
    pytest.mark.filterwarnings("ignore:.*is out of date.*:DeprecationWarning"),
]

Policy = Callable[[np.ndarray, gym.Env, np.random.Generator], object]


def _random_scaled(scale: float) -> Policy:
    """Uniform actions times ``scale``: MuJoCo clamps ctrl, so this saturates torques and falls fast."""

    def policy(obs: np.ndarray, env: gym.Env, rng: np.random.Generator) -> object:
        space = env.action_space
        if isinstance(space, gym.spaces.Discrete):
            return int(rng.integers(space.n))
        return (rng.uniform(space.low, space.high) * scale).astype(space.dtype)

    return policy


def _pump(action_for: Callable[[np.ndarray], object]) -> Policy:
    """Energy pumping with 20% random actions: reaches MountainCar/Acrobot goals in ~100 steps."""

    def policy(obs: np.ndarray, env: gym.Env, rng: np.random.Generator) -> object:
        if rng.random() < 0.2:
            return _random_scaled(1.0)(obs, env, rng)
        return action_for(obs)

    return policy


# env id -> (steps, policy, whether gymnasium can terminate it within the budget)
ROLLOUTS: dict[str, tuple[int, Policy, bool]] = {
    "Hopper-v5": (300, _random_scaled(3.0), True),
    "Walker2d-v5": (300, _random_scaled(3.0), True),
    "Ant-v5": (300, _random_scaled(3.0), True),
    "Humanoid-v5": (150, _random_scaled(3.0), True),
    "InvertedPendulum-v5": (200, _random_scaled(3.0), True),
    "Pendulum-v1": (200, _random_scaled(1.0), False),  # never terminates
    "CartPole-v1": (200, _random_scaled(1.0), True),
    "MountainCarContinuous-v0": (250, _pump(lambda o: np.array([1.0 if o[1] >= 0 else -1.0], np.float32)), True),
    "Acrobot-v1": (250, _pump(lambda o: 2 if o[5] > 0 else 0), True),
    # older/sibling versions with the identical rule and default layout
    "Hopper-v4": (150, _random_scaled(3.0), True),
    "Walker2d-v4": (150, _random_scaled(3.0), True),
    "Ant-v4": (300, _random_scaled(3.0), True),
    "Humanoid-v4": (100, _random_scaled(3.0), True),
    "InvertedPendulum-v4": (100, _random_scaled(3.0), True),
    "CartPole-v0": (100, _random_scaled(1.0), True),
    "MountainCar-v0": (250, _pump(lambda o: 2 if o[1] >= 0 else 0), True),
    # MuJoCo tasks that only the time limit ends ("never" rule)
    "HalfCheetah-v5": (100, _random_scaled(3.0), False),
    "Swimmer-v5": (100, _random_scaled(3.0), False),
    "Reacher-v5": (100, _random_scaled(3.0), False),
    "Pusher-v5": (100, _random_scaled(3.0), False),
    "HalfCheetah-v4": (100, _random_scaled(3.0), False),
}


def _rollout(env_id: str, steps: int, policy: Policy, seed: int = 0) -> tuple[np.ndarray, ...]:
    """(obs, action, next_obs, terminated) for ``steps`` transitions, resetting at episode ends."""
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows: list[tuple[np.ndarray, object, np.ndarray, bool]] = []
    for _ in range(steps):
        action = policy(obs, env, rng)
        next_obs, _, terminated, truncated, _ = env.step(action)
        rows.append((obs, action, next_obs, bool(terminated)))
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    o, a, n, t = zip(*rows, strict=True)
    return np.stack(o), np.stack([np.asarray(x) for x in a]), np.stack(n), np.array(t)


@pytest.mark.parametrize("env_id", list(ROLLOUTS))
def test_matches_gymnasium_on_real_rollouts(env_id: str) -> None:
    steps, policy, can_terminate = ROLLOUTS[env_id]
    obs, action, next_obs, terminated = _rollout(env_id, steps, policy)
    fn = known_termination(env_id)
    assert fn is not None
    act = torch.as_tensor(action)
    for dtype in (torch.float64, torch.float32):  # models usually predict float32
        pred = fn(torch.as_tensor(obs, dtype=dtype), act, torch.as_tensor(next_obs, dtype=dtype))
        assert pred.dtype == torch.bool and pred.shape == (steps,)
        wrong = np.flatnonzero(pred.numpy() != terminated)
        assert wrong.size == 0, f"{env_id} {dtype}: disagrees at steps {wrong[:10]} (gym says {terminated[wrong[:10]]})"
    if can_terminate:
        assert terminated.any() and not terminated.all(), f"{env_id}: need both classes, got {terminated.sum()}/{steps}"
    else:
        assert not terminated.any()


def _set(env: gym.Env, qpos: dict[int, float] | None = None, qvel: dict[int, float] | None = None) -> None:
    """Overwrite single qpos/qvel entries in place (no physics step) so ``is_healthy`` sees them."""
    data = env.unwrapped.data
    for i, v in (qpos or {}).items():
        data.qpos[i] = v
    for i, v in (qvel or {}).items():
        data.qvel[i] = v


nan, inf = float("nan"), float("inf")

# env id -> crafted (qpos edits, qvel edits) applied to the reset state; the expected answer
# comes from gymnasium's own ``is_healthy``, so boundaries (< vs <=) and NaN are checked exactly.
CRAFTED: dict[str, list[tuple[dict[int, float], dict[int, float]]]] = {
    # Hopper qpos = [x, z, angle, 3 joints]; z in (0.7, inf), angle in (-0.2, 0.2), rest in (-100, 100)
    "Hopper-v5": [
        ({}, {}), ({1: 0.7}, {}), ({1: 0.7000001}, {}), ({1: 0.3}, {}), ({1: inf}, {}), ({1: nan}, {}),
        ({2: 0.2}, {}), ({2: -0.2}, {}), ({2: 0.1999}, {}), ({2: nan}, {}), ({3: 100.0}, {}), ({3: 99.0}, {}),
        ({}, {3: nan}), ({}, {0: 5.0}),
    ],
    # Walker2d qpos = [x, z, angle, ...]; z in (0.8, 2), angle in (-1, 1), no finiteness check
    "Walker2d-v5": [
        ({}, {}), ({1: 0.8}, {}), ({1: 2.0}, {}), ({1: 1.999}, {}), ({1: nan}, {}),
        ({2: 1.0}, {}), ({2: -1.0}, {}), ({2: 0.999}, {}), ({2: nan}, {}), ({}, {2: nan}), ({4: nan}, {}),
    ],
    # Ant qpos = [x, y, z, quat, joints]; finite state and z in [0.2, 1]
    "Ant-v5": [
        ({}, {}), ({2: 0.2}, {}), ({2: 1.0}, {}), ({2: 0.1999}, {}), ({2: 1.0001}, {}), ({2: nan}, {}),
        ({5: inf}, {}), ({}, {7: nan}), ({}, {0: -inf}),
    ],
    # Humanoid qpos = [x, y, z, ...]; z in (1, 2), no finiteness check
    "Humanoid-v5": [
        ({}, {}), ({2: 1.0}, {}), ({2: 2.0}, {}), ({2: 1.0001}, {}), ({2: 0.5}, {}), ({2: nan}, {}),
        ({10: nan}, {}), ({}, {3: nan}),
    ],
}


@pytest.mark.parametrize("env_id", list(CRAFTED))
def test_crafted_states_match_gymnasium_is_healthy(env_id: str) -> None:
    fn = known_termination(env_id)
    assert fn is not None
    env = gym.make(env_id)
    next_obs, expected = [], []
    for qpos, qvel in CRAFTED[env_id]:
        env.reset(seed=0)
        _set(env, qpos, qvel)
        next_obs.append(env.unwrapped._get_obs())
        expected.append(not env.unwrapped.is_healthy)
    env.close()
    nxt = torch.as_tensor(np.stack(next_obs))
    pred = fn(nxt, torch.zeros(len(expected), 1), nxt)
    assert pred.tolist() == expected
    assert any(expected) and not all(expected)


def test_ant_contact_forces_are_not_part_of_the_finiteness_check() -> None:
    """Ant v5 obs appends cfrc_ext, but gymnasium's isfinite looks at state_vector only."""
    env = gym.make("Ant-v5")
    obs, _ = env.reset(seed=0)
    obs[-1] = nan  # a contact-force entry
    assert not known_termination("Ant-v5")(torch.zeros(1, 105), torch.zeros(1, 8), torch.as_tensor(obs)[None]).item()
    assert env.unwrapped.is_healthy
    env.close()


def test_hopper_velocity_beyond_clip_is_invisible() -> None:
    """Known, documented blind spot: obs clips qvel to +-10, gymnasium checks raw qvel against 100."""
    env = gym.make("Hopper-v5")
    env.reset(seed=0)
    _set(env, qvel={3: 150.0})
    obs = torch.as_tensor(env.unwrapped._get_obs())[None]
    assert not env.unwrapped.is_healthy
    assert not known_termination("Hopper-v5")(obs, torch.zeros(1, 3), obs).item()
    env.close()


def test_inverted_pendulum_crafted() -> None:
    """v5 step: terminated = not isfinite(obs).all() or |obs[1]| > 0.2."""
    rows = [
        ([0.0, 0.2, 0.0, 0.0], False),
        ([0.0, -0.2, 0.0, 0.0], False),
        ([0.0, 0.2000001, 0.0, 0.0], True),
        ([0.9, -0.3, 0.0, 0.0], True),
        ([nan, 0.0, 0.0, 0.0], True),
        ([0.0, 0.0, 0.0, inf], True),
        ([5.0, 0.1, -9.0, 9.0], False),
    ]
    nxt = torch.tensor([r[0] for r in rows], dtype=torch.float64)
    pred = known_termination("InvertedPendulum-v5")(nxt, torch.zeros(len(rows), 1), nxt)
    assert pred.tolist() == [r[1] for r in rows]


def test_classic_crafted() -> None:
    cart = torch.tensor(
        [[2.4, 0.0, 0.0, 0.0], [2.41, 0, 0, 0], [-2.41, 0, 0, 0], [0.0, 0, 0.21, 0], [0.0, 0, -0.2, 0],
         [0.0, 50, 0.0, -50]],
        dtype=torch.float64,
    )
    assert known_termination("CartPole-v1")(cart, torch.zeros(6, dtype=torch.int64), cart).tolist() == [
        False, True, True, True, False, False,
    ]
    mc = torch.tensor([[0.45, 0.0], [0.45, -1e-3], [0.449, 0.07], [0.6, 0.01], [-1.2, 0.0]])
    assert known_termination("MountainCarContinuous-v0")(mc, torch.zeros(5, 1), mc).tolist() == [
        True, False, False, True, False,
    ]
    assert known_termination("MountainCar-v0")(mc, torch.zeros(5, dtype=torch.int64), mc).tolist() == [
        False, False, False, True, False,
    ]
    pend = torch.tensor([[1.0, 0.0, 8.0], [-1.0, 0.0, -8.0], [nan, nan, nan]])
    assert not known_termination("Pendulum-v1")(pend, torch.zeros(3, 1), pend).any()


def test_acrobot_crafted_matches_gymnasium_terminal() -> None:
    """Angles set directly on gymnasium's state; its ``_terminal`` is the oracle for obs-based cos(t1 + t2)."""
    env = gym.make("Acrobot-v1")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    angles = np.concatenate([rng.uniform(-np.pi, np.pi, size=(200, 2)), [[np.pi, 0.0], [0.0, 0.0], [np.pi / 2, 0.0]]])
    next_obs, expected = [], []
    for t1, t2 in angles:
        env.unwrapped.state = np.array([t1, t2, 0.0, 0.0])
        next_obs.append(env.unwrapped._get_ob())
        expected.append(env.unwrapped._terminal())
    env.close()
    nxt = torch.as_tensor(np.stack(next_obs))
    pred = known_termination("Acrobot-v1")(nxt, torch.zeros(len(expected), dtype=torch.int64), nxt)
    assert pred.tolist() == expected
    assert any(expected) and not all(expected)


@pytest.mark.parametrize(
    "env_id",
    [
        "InvertedDoublePendulum-v5", "HumanoidStandup-v5", "HalfCheetah-v3",
        "Hopper-v3", "Hopper-v2", "Hopper", "HopperX-v5", "hopper-v5", "phys2d/CartPole-v1", "Pendulum-v0",
        "LunarLander-v3", "", "not an id",
    ],
)
def test_unknown_ids_return_none(env_id: str) -> None:
    assert known_termination(env_id) is None


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
def test_batched_bool_on_input_device(device: str) -> None:
    ids = supported_env_ids()
    assert set(ROLLOUTS) <= set(ids) and all(i in gym.registry for i in ids)
    gen = torch.Generator().manual_seed(0)
    for env_id in ids:
        env = gym.make(env_id)
        obs_dim = env.observation_space.shape[0]
        space = env.action_space
        env.close()
        batch = 7
        if isinstance(space, gym.spaces.Discrete):
            action = torch.randint(space.n, (batch,), generator=gen).to(device)
        else:
            action = torch.randn(batch, space.shape[0], generator=gen).to(device)
        obs = torch.randn(batch, obs_dim, generator=gen).to(device)
        next_obs = torch.randn(batch, obs_dim, generator=gen).to(device)
        out = known_termination(env_id)(obs, action, next_obs)
        assert out.dtype == torch.bool and out.shape == (batch,) and out.device.type == device, env_id
