"""DQN learner: the (double) TD target, target-net cadence, epsilon bookkeeping, snapshots and resume."""

from __future__ import annotations

import copy
import dataclasses
import io
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from gymnasium.spaces import Box, Discrete
from tensordict import TensorDict

from mbpo.agents.base import Agent
from mbpo.agents.dqn import DQN
from mbpo.config import DQNConfig
from mbpo.data.transitions import transitions
from mbpo.device.plan import device_of

pytestmark = pytest.mark.timeout(120)

OBS_DIM, N_ACT = 3, 4


def make_agent(seed: int = 0, device: str = "cpu", n_act: int = N_ACT, obs_dim: int = OBS_DIM, **overrides: Any) -> DQN:
    base = DQNConfig(
        hidden_sizes=[16], lr=1e-2, gamma=0.9, double=True, target_update_interval=1000,
        epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_updates=10, max_grad_norm=10.0,
    )  # fmt: skip
    config = dataclasses.replace(base, **overrides)
    return DQN(config, Box(-1.0, 1.0, (obs_dim,)), Discrete(n_act), device, seed=seed)


def make_batch(gen: torch.Generator, b: int = 32, terminated: bool | None = None, device: str = "cpu") -> TensorDict:
    term = torch.rand(b, generator=gen) < 0.3 if terminated is None else torch.full((b,), terminated)
    return transitions(
        torch.randn(b, OBS_DIM, generator=gen),
        torch.randint(N_ACT, (b,), generator=gen),
        torch.randn(b, generator=gen),
        torch.randn(b, OBS_DIM, generator=gen),
        term,
    ).to(device)


def perturb_target(agent: DQN, seed: int = 123) -> None:
    """Make the target net clearly different from the online net, so double and vanilla targets differ."""
    gen = torch.Generator().manual_seed(seed)
    snap = agent.snapshot()
    snap["target_q_net"] = {k: v + torch.randn(v.shape, generator=gen) for k, v in snap["target_q_net"].items()}
    agent.load_snapshot(snap)


@torch.no_grad()
def hand_loss(agent: DQN, batch: TensorDict, double: bool) -> float:
    """Huber(Q(s,a), r + gamma * (1 - terminated) * Q_target(s', a*)) computed with plain torch."""
    snap = agent.snapshot()
    online, target = copy.deepcopy(agent.q_net).cpu(), copy.deepcopy(agent.q_net).cpu()
    online.load_state_dict(snap["q_net"])
    target.load_state_dict(snap["target_q_net"])
    obs, act, rew, nobs, term = (batch[k].cpu() for k in ("obs", "action", "reward", "next_obs", "terminated"))
    q = online(obs).gather(1, act[:, None]).squeeze(1)
    if double:
        next_q = target(nobs).gather(1, online(nobs).argmax(1, keepdim=True)).squeeze(1)
    else:
        next_q = target(nobs).max(1).values
    y = rew + agent.config.gamma * (1.0 - term.float()) * next_q
    return F.smooth_l1_loss(q, y).item()


def flat_tensors(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flat_tensors(v, f"{prefix}/{k}"))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flat_tensors(v, f"{prefix}/{i}"))
    return out


def assert_all_cpu(obj: Any) -> None:
    """No CUDA tensor and no torch.device object anywhere (snapshots cross process boundaries)."""
    if isinstance(obj, torch.device):
        raise AssertionError(f"torch.device object in a snapshot: {obj}")
    if isinstance(obj, torch.Tensor):
        assert obj.device.type == "cpu", obj.device
    elif isinstance(obj, dict):
        for v in obj.values():
            assert_all_cpu(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            assert_all_cpu(v)


def assert_states_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    ta, tb = flat_tensors(a), flat_tensors(b)
    assert ta.keys() == tb.keys()
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k


def test_implements_agent_protocol_and_starts_at_zero() -> None:
    agent = make_agent()
    assert isinstance(agent, Agent)
    assert (agent.num_updates, agent.num_skipped_updates, agent.epsilon) == (0, 0, 1.0)
    assert agent.device == torch.device("cpu")


def test_box_action_space_is_rejected_with_a_pointer_to_sac() -> None:
    with pytest.raises(TypeError, match=r"Discrete.*agent\.name=sac"):
        DQN(DQNConfig(), Box(-1.0, 1.0, (3,)), Box(-1.0, 1.0, (1,)), "cpu")  # type: ignore[arg-type]  # on purpose


def test_float_actions_in_batch_are_rejected() -> None:
    agent, gen = make_agent(), torch.Generator().manual_seed(0)
    batch = make_batch(gen)
    batch["action"] = batch["action"].float()
    with pytest.raises(TypeError, match="integer action"):
        agent.update(batch)


@pytest.mark.parametrize("double", [True, False])
def test_loss_matches_hand_computed_target(double: bool) -> None:
    agent, gen = make_agent(double=double), torch.Generator().manual_seed(1)
    perturb_target(agent)
    for _ in range(3):  # move the online net away from its init too
        agent.update(make_batch(gen))
    batch = make_batch(gen)
    expected, other = hand_loss(agent, batch, double), hand_loss(agent, batch, not double)
    assert abs(expected - other) > 1e-3, "test setup: double and vanilla targets should differ"
    assert agent.update(batch)["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_truncation_is_not_terminal() -> None:
    """terminated=False (a time-limit truncation looks like this in the buffer) bootstraps; True does not."""
    gen = torch.Generator().manual_seed(2)
    batch_open, batch_term = make_batch(gen, terminated=False), None
    batch_term = batch_open.clone()
    batch_term["terminated"] = torch.ones_like(batch_open["terminated"])
    losses = {}
    for name, batch in (("open", batch_open), ("term", batch_term)):
        agent = make_agent()
        perturb_target(agent)
        expected = hand_loss(agent, batch, double=True)
        losses[name] = agent.update(batch)["loss"]
        assert losses[name] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert abs(losses["open"] - losses["term"]) > 1e-3


def test_target_net_changes_only_every_interval() -> None:
    agent, gen = make_agent(target_update_interval=3), torch.Generator().manual_seed(3)
    snap = agent.snapshot()
    assert_states_equal(snap["target_q_net"], snap["q_net"])
    prev = snap["target_q_net"]
    for k in range(1, 10):
        agent.update(make_batch(gen))
        snap = agent.snapshot()
        changed = any(not torch.equal(prev[n], snap["target_q_net"][n]) for n in prev)
        assert changed == (k % 3 == 0), k
        if changed:
            assert_states_equal(snap["target_q_net"], snap["q_net"])
        prev = snap["target_q_net"]


def test_epsilon_schedule_is_linear_then_flat() -> None:
    agent, gen = make_agent(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_updates=10), torch.Generator()
    assert agent.epsilon == 1.0 and agent.snapshot()["epsilon"] == 1.0
    seen = {k: agent.update(make_batch(gen, b=8))["epsilon"] for k in range(1, 16)}
    assert seen[5] == pytest.approx(0.55)
    assert seen[10] == pytest.approx(0.1)
    assert seen[15] == pytest.approx(0.1)
    assert agent.epsilon == pytest.approx(0.1) and agent.num_updates == 15


def test_act_explores_at_the_published_epsilon() -> None:
    learner, gen = make_agent(epsilon_start=0.6, epsilon_end=0.2, epsilon_decay_updates=4), torch.Generator()
    learner.update(make_batch(gen))
    learner.update(make_batch(gen))
    snap = learner.snapshot()
    assert snap["epsilon"] == pytest.approx(0.4)
    # A collector with a different schedule of its own still explores as the learner says.
    collector = make_agent(seed=7, epsilon_start=1.0, epsilon_end=1.0)
    collector.load_snapshot(snap)
    assert collector.epsilon == pytest.approx(0.4)
    obs = torch.randn(20_000, OBS_DIM, generator=torch.Generator().manual_seed(4))
    greedy = collector.act(obs, explore=False)
    assert greedy.dtype == torch.int64 and greedy.shape == (20_000,) and greedy.device.type == "cpu"
    assert torch.equal(greedy, learner.act(obs, explore=False))
    explored = collector.act(obs, explore=True)
    frac = (explored != greedy).float().mean().item()
    assert frac == pytest.approx(0.4 * (N_ACT - 1) / N_ACT, abs=0.02)  # ~6 sigma
    assert ((explored >= 0) & (explored < N_ACT)).all()


@pytest.mark.parametrize("poison", ["reward", "obs"])
def test_non_finite_loss_skips_the_step(poison: str) -> None:
    agent, gen = make_agent(target_update_interval=2), torch.Generator().manual_seed(5)
    agent.update(make_batch(gen))
    before = agent.state_dict()
    bad = make_batch(gen)
    bad[poison][0] = float("nan") if poison == "reward" else float("inf")
    metrics = agent.update(bad)
    assert not torch.isfinite(torch.tensor(metrics["loss"]))
    assert (agent.num_updates, agent.num_skipped_updates) == (1, 1)
    assert_states_equal(agent.state_dict(), before)
    assert all(p.grad is None for p in agent.q_net.parameters())
    agent.update(make_batch(gen))
    assert agent.num_updates == 2
    assert_states_equal(agent.snapshot()["target_q_net"], agent.snapshot()["q_net"])  # counter stayed in step


def test_snapshot_is_cpu_only_deep_and_includes_target() -> None:
    agent, gen = make_agent(), torch.Generator().manual_seed(6)
    perturb_target(agent)
    agent.update(make_batch(gen))
    snap = agent.snapshot()
    assert set(snap) == {"q_net", "target_q_net", "epsilon", "num_updates"}
    assert snap["target_q_net"].keys() == snap["q_net"].keys()
    assert_all_cpu(snap)
    assert_all_cpu(agent.state_dict())
    frozen = copy.deepcopy(snap)
    agent.update(make_batch(gen))
    assert_states_equal(snap, frozen)  # no aliasing with the live weights
    for v in snap["q_net"].values():
        v.zero_()
    assert any(p.abs().sum() > 0 for p in agent.q_net.parameters())


def test_load_snapshot_gives_fresh_optimizer_and_consistent_target_counter() -> None:
    source, gen = make_agent(target_update_interval=4), torch.Generator().manual_seed(7)
    for _ in range(3):
        source.update(make_batch(gen))
    snap = source.snapshot()
    loaded = make_agent(seed=1, target_update_interval=4)
    loaded.update(make_batch(gen))
    loaded.update(make_batch(gen))
    assert len(loaded.optimizer.state) > 0
    loaded.load_snapshot(snap)
    assert len(loaded.optimizer.state) == 0
    assert (loaded.num_updates, loaded.epsilon) == (3, snap["epsilon"])
    assert_states_equal(loaded.snapshot(), snap)
    fresh = make_agent(seed=2, target_update_interval=4)
    fresh.load_snapshot(snap)
    batch = make_batch(gen)
    assert loaded.update(batch) == fresh.update(batch)
    assert_states_equal(loaded.state_dict()["optimizer"], fresh.state_dict()["optimizer"])
    after = loaded.snapshot()  # update 4 of 4: the target copy is due now
    assert_states_equal(after["target_q_net"], after["q_net"])


def test_state_dict_round_trip_resumes_bit_exactly() -> None:
    a, gen = make_agent(target_update_interval=3, max_grad_norm=0.5), torch.Generator().manual_seed(8)
    obs = torch.randn(64, OBS_DIM, generator=gen)
    for _ in range(5):
        a.update(make_batch(gen))
        a.act(obs, explore=True)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make_agent(seed=99, target_update_interval=3, max_grad_norm=0.5)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert (b.num_updates, b.num_skipped_updates, b.target_updater.counter) == (5, 0, a.target_updater.counter)
    for _ in range(7):
        batch = make_batch(gen)
        assert a.update(batch) == b.update(batch)
        assert torch.equal(a.act(obs, explore=True), b.act(obs, explore=True))
    assert_states_equal(a.state_dict(), b.state_dict())


def test_learns_a_contextual_bandit() -> None:
    """Reward 1 iff action == (obs[0] > 0); one-step episodes. Greedy accuracy > 90% in 300 updates."""
    agent = make_agent(n_act=2, obs_dim=2, hidden_sizes=[32], lr=3e-3, target_update_interval=10)
    gen = torch.Generator().manual_seed(9)

    def bandit_batch(b: int = 64) -> TensorDict:
        obs = torch.randn(b, 2, generator=gen)
        action = torch.randint(2, (b,), generator=gen)
        reward = (action == (obs[:, 0] > 0).long()).float()
        return transitions(obs, action, reward, torch.randn(b, 2, generator=gen), torch.ones(b, dtype=torch.bool))

    for _ in range(300):
        agent.update(bandit_batch())
    test_obs = torch.randn(2000, 2, generator=gen)
    accuracy = (agent.act(test_obs, explore=False) == (test_obs[:, 0] > 0).long()).float().mean().item()
    assert accuracy > 0.9


def test_every_tensor_of_the_loss_is_on_the_agent_device_whatever_the_default_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torchrl's value estimator puts gamma on torch.get_default_device() unless told: a cuda run had the
    loss on cpu and cuda and stopped at the device plan. "meta" stands in for the other device here.
    """
    monkeypatch.setattr(torch, "get_default_device", lambda: torch.device("meta"))
    agent = make_agent()
    assert {t.device.type for t in (*agent.loss.parameters(), *agent.loss.buffers())} == {"cpu"}


@pytest.mark.gpu
def test_cuda_learner_publishes_cpu_state(cuda_device: str) -> None:
    agent, gen = make_agent(device=cuda_device), torch.Generator().manual_seed(10)
    assert next(agent.q_net.parameters()).device.type == "cuda"
    assert device_of(agent.loss) == torch.device(cuda_device)  # the device plan's start-up check passes
    for _ in range(3):
        agent.update(make_batch(gen, device=cuda_device))
    assert_all_cpu(agent.snapshot())
    assert_all_cpu(agent.state_dict())
    actions = agent.act(torch.randn(8, OBS_DIM), explore=True)
    assert actions.device.type == "cpu" and actions.dtype == torch.int64
    cpu_agent = make_agent(seed=3)
    cpu_agent.load_state_dict(agent.state_dict())
    obs = torch.randn(256, OBS_DIM)
    assert torch.equal(cpu_agent.act(obs, explore=False), agent.act(obs, explore=False))
