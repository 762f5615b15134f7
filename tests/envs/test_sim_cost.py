"""envs.sim_cost: a simulator's cost added inside ``step``, and nothing else changed."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import envs
from envs import sim_cost
from envs.base import random_actions
from envs.contract import check_interface, probe
from envs.sim_cost import SPIN_S, SimCostEnv, slowed

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """What each ``step`` asks :func:`envs.sim_cost.wait` for, in seconds; nothing is waited."""
    asked: list[float] = []
    monkeypatch.setattr(sim_cost, "wait", asked.append)
    return asked


def test_each_step_asks_for_the_cost_times_num_envs_and_a_reset_for_nothing(waits: list[float]) -> None:
    env = SimCostEnv(envs.make("Pendulum-v1", 8, seed=0), cost_us=25.0)
    env.reset(seed=0)
    assert waits == []
    for _ in range(3):
        env.step(random_actions(env, torch.Generator().manual_seed(0)))
    assert waits == [pytest.approx(25.0 * 8 / 1e6)] * 3


def test_what_the_env_returns_passes_through_unchanged(waits: list[float]) -> None:
    """Same seed, same actions, past an episode's end (Pendulum's 200-step limit, so ``final_obs`` differs from
    ``obs``): every field equal to the unwrapped env's.
    """
    plain, slow = envs.make("Pendulum-v1", 4, seed=3), SimCostEnv(envs.make("Pendulum-v1", 4, seed=3), 10.0)
    assert torch.equal(plain.reset(seed=3), slow.reset(seed=3))
    generator = torch.Generator().manual_seed(3)
    truncations = 0
    for _ in range(205):
        actions = random_actions(plain, generator)
        expected, got = plain.step(actions), slow.step(actions.clone())
        for want, have in zip(expected[:4], got[:4], strict=True):
            assert torch.equal(want, have)
        assert expected[4].keys() == got[4].keys()
        assert all(torch.equal(expected[4][k], got[4][k]) for k in expected[4])
        truncations += int(got[3].sum())
    assert truncations == 4 and torch.equal(slow.episode_steps, plain.episode_steps)
    assert len(waits) == 205


def test_it_keeps_the_vec_env_contract_and_reads_through_to_the_env(waits: list[float]) -> None:
    inner = envs.make("Pendulum-v1", 3, seed=0)
    env = SimCostEnv(inner, 5.0)
    check_interface(env)
    probe(env, seed=1)  # a checked reset and step
    assert (env.num_envs, env.device, env.spec_id, env.max_episode_steps) == (3, inner.device, "Pendulum-v1", 200)
    assert env.observation_space == inner.observation_space and env.action_space == inner.action_space
    assert env.state is inner.state  # type: ignore[attr-defined]  # a native env's state tensor, read through
    env.episode_steps = torch.full((3,), 7)  # what rsl_rl's runners do through episode_length_buf
    assert inner.episode_steps.tolist() == [7, 7, 7]


def test_rsl_rl_steps_it_through_the_export(waits: list[float]) -> None:
    """PPO in benchmarks/vs_ppo.py steps the slowed env through envs.to_rsl_rl."""
    exported = envs.to_rsl_rl(SimCostEnv(envs.make("Pendulum-v1", 2, seed=0), 50.0))
    exported.step(torch.zeros(2, 1))
    assert waits == [pytest.approx(50.0 * 2 / 1e6)]


def test_the_factory_builds_it_by_name_and_leaves_envs_of_another_size_as_they_are(waits: list[float]) -> None:
    training = envs.make_from_factory("envs.sim_cost:slowed", 4, seed=0, env_id="Pendulum-v1", cost_us=100,
                                      only_num_envs=4)
    evaluation = envs.make_from_factory("envs.sim_cost:slowed", 5, seed=0, env_id="Pendulum-v1", cost_us=100,
                                        only_num_envs=4)
    assert isinstance(training, SimCostEnv) and training.step_cost_s == pytest.approx(4e-4)
    assert not isinstance(evaluation, SimCostEnv) and evaluation.spec_id == "Pendulum-v1"
    native = slowed(2, seed=0, env_id="CartPole-v1", cost_us=1, source="gymnasium")
    assert type(native.env).__name__ == "GymnasiumVecEnv"  # type: ignore[attr-defined]
    native.close()


@pytest.mark.parametrize("cost", [-1, -0.5, float("nan"), float("inf"), "100", True, None])
def test_a_bad_cost_is_refused_saying_what_is_expected(cost: Any) -> None:
    with pytest.raises(ValueError, match=r"is not allowed; expected a finite number >= 0 of microseconds"):
        SimCostEnv(envs.make("Pendulum-v1", 1), cost)
    with pytest.raises(envs.EnvFactoryError, match=r"cannot take env.kwargs.cost_us=.*; expected a finite number"):
        slowed(1, env_id="Pendulum-v1", cost_us=cost)


class FakeClock:
    """A clock that moves only when slept on, or by ``poll_s`` each time it is read (a spin)."""

    def __init__(self, poll_s: float) -> None:
        self.now, self.poll_s, self.reads = 100.0, poll_s, 0
        self.slept: list[float] = []

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.poll_s
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("seconds", [1e-1, 1e-2, 1e-3, 1e-4, 5e-6, 0.0])
def test_wait_sleeps_all_but_the_last_spin_s_then_spins_to_the_deadline(seconds: float) -> None:
    """On a clock that a read moves by 1 µs: the sleep is asked for all but SPIN_S, the spin covers the rest (one
    read per µs), and the wait ends at the first read at or past the deadline.
    """
    clock = FakeClock(poll_s=1e-6)
    deadline = clock.now + 1e-6 + seconds  # the wait's first read is 1 µs on
    sim_cost.wait(seconds, clock=clock, sleep=clock.sleep)
    assert clock.slept == ([pytest.approx(seconds - SPIN_S)] if seconds > SPIN_S else [])
    assert deadline <= clock.now <= deadline + 1.5e-6  # the first read at or past it (one read is 1 µs)
    assert clock.reads - 1 in range(math.floor(min(seconds, SPIN_S) * 1e6), math.ceil(min(seconds, SPIN_S) * 1e6) + 2)


def test_wait_returns_at_once_when_the_sleep_overshoots_past_the_deadline() -> None:
    clock = FakeClock(poll_s=0.0)
    overshoot = clock.sleep

    def late(seconds: float) -> None:
        overshoot(seconds + 2 * SPIN_S)  # a wake-up later than the spin margin

    sim_cost.wait(1e-2, clock=clock, sleep=late)
    assert clock.reads == 2  # the deadline, then one read that finds it passed
