"""agent.sac.reset_every: the learner's networks re-drawn periodically with the buffers kept (Nikishin et al. 2022;
D'Oro et al. 2023, SR-SAC): what is re-drawn, when, from which seed, and what is refused.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from mbpo.agents.sac import SAC
from mbpo.config import ConfigError, SACConfig, load_config
from mbpo.config.seeding import derive
from tests.agents.test_critic_options import params_of_any
from tests.agents.test_sac import HIGH, LOW, OBS_DIM, make_batch, make_sac

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

pytestmark = pytest.mark.timeout(60)

VARIANTS: dict[str, dict[str, Any]] = {
    "sac": {},
    "redq-droq-xavier": {"num_critics": 4, "num_min": 2, "actor_q": "mean", "dropout": 0.1, "layer_norm": True,
                         "policy_delay": 2, "weight_init": "xavier", "precision": "auto"},
    "crossq-lecun": {"crossq": True, "num_critics": 3, "policy_delay": 3, "renorm_warmup": 2, "weight_init": "lecun"},
}
"""The initialisations and the critic options a reset must redo as construction does them (bf16 where the CPU
computes it natively)."""


@pytest.fixture(autouse=True)
def _one_intra_op_thread(one_intra_op_thread: None) -> None:
    """Every test of this file on one intra-op thread (tests/agents/conftest.py)."""


def trained(reset_every: int = 0, updates: int = 4, seed: int = 0, **sac: object) -> SAC:
    agent = make_sac(seed=seed, reset_every=reset_every, **sac)
    for s in range(updates):
        agent.update(make_batch(seed=s))
    return agent


def adam_steps(optim: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> list[int | None]:
    """Each parameter's Adam step count; None where Adam holds no state for it (a new optimizer's)."""
    return [int(optim.state[p]["step"]) if p in optim.state else None for p in params]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_reset_redraws_every_network_as_a_new_agent_with_the_resets_seed_and_keeps_the_rest(variant: str) -> None:
    sac = VARIANTS[variant]
    agent = trained(reset_every=100, seed=7, **sac)
    before = params_of_any(agent)
    generator_state, calls = agent.generator.get_state(), agent._calls
    agent.reset_networks()
    after = params_of_any(agent)
    fresh = params_of_any(make_sac(seed=derive(7, "reset", 1), **sac))  # construction's init, the reset's seed
    assert after.keys() == fresh.keys() and [k for k in after if not torch.equal(after[k], fresh[k])] == []
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert [k for k in before if k.endswith("weight") and k not in moved] == []  # every layer re-drawn
    if agent.target_critic is not None:
        online, target = agent.critic.state_dict(), agent.target_critic.state_dict()
        assert all(torch.equal(online[k], target[k]) for k in online)
    assert agent.log_alpha.item() == pytest.approx(0.0)  # log(init_alpha = 1)
    for optim in (agent.actor_optim, agent.critic_optim, agent.alpha_optim):
        assert len(optim.state) == 0
    assert agent.num_resets == 1 and agent._calls == calls and agent.num_updates == 4
    assert torch.equal(agent.generator.get_state(), generator_state)  # the update's noise stream goes on
    agent.reset_networks()  # the next reset draws from its own seed, not the first one's again
    assert not torch.equal(params_of_any(agent)["critic.layers.0.weight"], after["critic.layers.0.weight"])


def test_a_reset_keeps_the_observation_statistics_and_the_acting_replica_follows_it() -> None:
    """The statistics describe the kept data (agent.obs_norm); the CPU replica that collectors act with must
    pick up the re-drawn actor, as after any update.
    """
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    agent = SAC(SACConfig(hidden_sizes=[32, 32], reset_every=100), obs_space,
                gym.spaces.Box(LOW, HIGH, dtype=np.float32), "cpu", seed=0, obs_norm=True)
    agent.observe(5 + 3 * torch.randn(256, OBS_DIM, generator=torch.Generator().manual_seed(1)))
    for s in range(3):
        agent.update(make_batch(seed=s))
    obs = torch.randn(4, OBS_DIM)
    trained_action = agent.act(obs, explore=False)
    stats = {k: v.clone() for k, v in agent.actor.state_dict().items() if k.startswith("obs_norm.")}
    agent.reset_networks()
    assert stats and all(torch.equal(agent.actor.state_dict()[k], v) for k, v in stats.items())
    replica = copy.deepcopy(agent.actor).eval()
    with torch.no_grad():
        want = torch.tanh(replica(obs)[0])
    acted = agent.act(obs, explore=False)
    assert not torch.equal(acted, trained_action)
    torch.testing.assert_close(acted, agent._bias_cpu + agent._scale_cpu * want)


def test_last_layers_redraws_only_the_output_layers_and_their_adam_state() -> None:
    agent = trained(reset_every=100, reset_layers="last", seed=3, updates=3)
    before = params_of_any(agent)
    agent.reset_networks()
    after = params_of_any(agent)
    fresh = params_of_any(make_sac(seed=derive(3, "reset", 1)))
    heads = {"actor.net.4.weight", "actor.net.4.bias", "critic.layers.2.weight", "critic.layers.2.bias",
             "target.layers.2.weight", "target.layers.2.bias", "log_alpha"}
    assert {k for k in before if not torch.equal(before[k], after[k])} == heads
    assert all(torch.equal(after[k], fresh[k]) for k in heads if k.startswith(("actor", "critic")))
    assert torch.equal(after["target.layers.2.weight"], after["critic.layers.2.weight"])
    actor_params, critic_params = list(agent.actor.parameters()), list(agent.critic.parameters())
    assert adam_steps(agent.actor_optim, actor_params) == [3, 3, 3, 3, None, None]
    assert adam_steps(agent.critic_optim, critic_params) == [3, 3, 3, 3, None, None]
    assert len(agent.alpha_optim.state) == 0


def test_no_reset_at_zero() -> None:
    agent = make_sac(seed=0)
    for s in range(6):
        agent.update(make_batch(seed=s))
    reference = trained(reset_every=0, updates=6)
    assert agent.num_resets == 0 and "resets" not in agent.pop_metrics()
    pa, pb = params_of_any(agent), params_of_any(reference)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_resets_come_after_every_reset_everyth_update_on_the_policy_delays_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With reset_every 4 and policy_delay 2 the actor steps on updates 2, 4, 6, 8 (from 1); the reset owed
    after update 4 comes just before update 5, so update 5 (a critic-only one) starts a new critic Adam and the
    actor's begins again at update 6: the policy delay's clock is not restarted by a reset.
    """
    agent = make_sac(seed=0, reset_every=4, policy_delay=2)
    at: list[int] = []
    reset = agent.reset_networks

    def spy() -> None:
        at.append(agent._calls)
        reset()

    monkeypatch.setattr(agent, "reset_networks", spy)
    actor_steps, critic_steps, resets = [], [], []
    for s in range(10):
        agent.update(make_batch(seed=s))
        actor_steps.append(adam_steps(agent.actor_optim, list(agent.actor.parameters()))[0])
        critic_steps.append(adam_steps(agent.critic_optim, list(agent.critic.parameters()))[0])
        resets.append(agent.num_resets)
    assert at == [4, 8]  # updates done when each reset ran
    assert resets == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert critic_steps == [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    assert actor_steps == [None, 1, 1, 2, None, 1, 1, 2, None, 1]
    assert agent.pop_metrics()["resets"] == 2


def test_an_update_after_a_reset_starts_from_the_reset_networks() -> None:
    """The reset inside update() is reset_networks(): with every learning rate 0 the weights after update 4
    (the first after the reset owed at 3) are exactly the re-drawn ones.
    """
    still = {"actor_lr": 1e-30, "critic_lr": 1e-30, "alpha_lr": 1e-30, "tau": 1e-30}
    agent = trained(reset_every=3, updates=4, seed=5, **still)
    fresh = params_of_any(make_sac(seed=derive(5, "reset", 1), **still))
    got = params_of_any(agent)
    assert agent.num_resets == 1
    assert [k for k in got if k != "log_alpha" and not torch.allclose(got[k], fresh[k], atol=1e-6)] == []


def test_a_resumed_learner_resets_when_and_as_an_unbroken_one_does() -> None:
    """Stopped on a multiple of reset_every, the reset still owed: the resumed learner owes it too."""
    a = trained(reset_every=3, updates=3)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make_sac(seed=0, reset_every=3)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert b.num_resets == a.num_resets == 0
    for s in range(3, 8):
        assert dict(a.update(make_batch(seed=s))) == dict(b.update(make_batch(seed=s)))
    assert a.num_resets == b.num_resets == 2
    pa, pb = params_of_any(a), params_of_any(b)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_a_snapshot_loaded_learner_owes_no_reset_at_once() -> None:
    source = trained(reset_every=3, updates=6)
    sink = make_sac(seed=1, reset_every=3)
    sink.load_snapshot(source.snapshot())
    before = params_of_any(sink)["critic.layers.0.weight"]
    sink.update(make_batch(seed=9))
    assert sink.num_resets == 2  # updates 3 and 6 passed: counted as done
    assert (params_of_any(sink)["critic.layers.0.weight"] - before).abs().max() < 1e-2  # one step, not a re-draw


@pytest.mark.parametrize(("override", "message"), [
    ("agent.sac.reset_every=-1", "agent.sac.reset_every=-1 is out of range; expected a value in [0, inf)"),
    ("agent.sac.reset_layers=first", "agent.sac.reset_layers='first' is not allowed; expected one of all, last"),
    ("agent.sac.reset_layers=last", "agent.sac.reset_layers=last with agent.sac.reset_every=0: no reset happens; "
                                    "set agent.sac.reset_every to the updates between resets, or drop reset_layers"),
])
def test_bad_reset_values_are_refused_in_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert str(info.value) == message


def test_resets_are_refused_for_dqn_and_a_bad_value_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mbpo import cli

    with pytest.raises(ConfigError, match=r"^agent\.sac\.reset_every=1000 is for agent\.name=sac, and this run's "
                                          r"agent\.name=dqn does not use it; drop it \(its default is 0\)"):
        load_config(CONFIGS / "cartpole_dqn.yaml", ["agent.sac.reset_every=1000"])
    assert cli.main(["train", f"run_dir={tmp_path / 'run'}", "device=cpu", "progress=false",
                     "agent.sac.reset_every=-5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: agent.sac.reset_every=-5 is out of range; expected a value in [0, inf)"]
