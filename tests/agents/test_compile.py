"""agent.compile: the compiled SAC update computes what the eager one does."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from mbpo.agents import make_agent
from mbpo.agents.sac import SAC
from mbpo.agents.sac_loss import sac_loss_terms
from mbpo.config import AgentConfig, ConfigError, load_config
from tests.agents.test_sac import HIGH, LOW, OBS_DIM, make_batch

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def pair(device: str, obs_norm: bool = False, **sac: object) -> tuple[SAC, SAC]:
    """An eager and a compiled learner with the same seed; the compiled one gets the eager one's noise."""
    cfg = AgentConfig(obs_norm=obs_norm)
    cfg.sac.hidden_sizes = [32, 32]
    for key, value in sac.items():
        setattr(cfg.sac, key, value)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act_space = gym.spaces.Box(LOW, HIGH, dtype=np.float32)
    eager = make_agent(cfg, obs_space, act_space, device, seed=0)
    cfg.compile = True
    compiled = make_agent(cfg, obs_space, act_space, device, seed=0)
    assert isinstance(eager, SAC) and isinstance(compiled, SAC)
    return eager, compiled


def assert_same_updates(eager: SAC, compiled: SAC, device: str, updates: int, tol: float) -> None:
    if eager.obs_norm is not None and compiled.obs_norm is not None:
        obs = 5 + 3 * torch.randn(256, OBS_DIM, generator=torch.Generator().manual_seed(1))
        eager.observe(obs)
        compiled.observe(obs)
    for i in range(updates):
        batch = make_batch(64, seed=i).to(device)
        got, want = dict(compiled.update(batch)), dict(eager.update(batch))
        assert got == pytest.approx(want, rel=tol, abs=tol), i
    for name, module in eager.networks.items():
        for (key, a), b in zip(module.state_dict().items(), compiled.networks[name].state_dict().values(),
                               strict=True):
            torch.testing.assert_close(b, a, rtol=tol, atol=tol, msg=f"{name}.{key}")
    assert compiled.num_updates == eager.num_updates == updates


@pytest.mark.parametrize("obs_norm", [False, True])
def test_compiled_update_equals_eager_on_cpu(obs_norm: bool) -> None:
    eager, compiled = pair("cpu", obs_norm)
    assert compiled._losses is not sac_loss_terms  # the compiled path really runs
    assert_same_updates(eager, compiled, "cpu", updates=5, tol=1e-5)


@pytest.mark.parametrize("sac", [
    {"num_critics": 5, "num_min": 2, "actor_q": "mean", "dropout": 0.1, "layer_norm": True, "policy_delay": 2},
    {"crossq": True, "dropout": 0.1, "num_critics": 3, "num_min": 2, "policy_delay": 2, "renorm_warmup": 2},
], ids=["redq-droq", "crossq"])
def test_compiled_critic_options_equal_eager(sac: dict[str, object]) -> None:
    """Every critic option through the compiled loss: the target subset, dropout masks, renorm statistics and
    the delayed steps' critic-only graph.
    """
    eager, compiled = pair("cpu", **sac)
    assert_same_updates(eager, compiled, "cpu", updates=4, tol=1e-4)  # fused renorm reductions reorder sums


def test_a_compiled_learner_resets_as_the_eager_one_does() -> None:
    """agent.sac.reset_every with agent.compile: a reset overwrites the weights in place (and drops Adam state,
    which the compiled losses never see), so the compiled update goes on with the same numbers as eager.
    """
    eager, compiled = pair("cpu", reset_every=2)
    assert_same_updates(eager, compiled, "cpu", updates=5, tol=1e-5)
    assert compiled.num_resets == eager.num_resets == 2


def test_many_compiled_agents_in_one_process_share_one_graph() -> None:
    """More agents than dynamo's recompile limit (8): each must reuse the graph, not recompile per agent
    (with fullgraph=True a ninth recompile is a hard error).
    """
    agents = [pair("cpu")[1] for _ in range(12)]
    for agent in agents:
        assert dict(agent.update(make_batch(64, seed=0)))["skipped"] == 0.0
    assert len({id(a._losses) for a in agents}) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("reset_every", [0, 2], ids=["no-resets", "resets"])
def test_compiled_update_with_cuda_graphs_equals_eager(cuda_device: str, reset_every: int) -> None:
    """With resets too: CUDA graphs read the weights at fixed addresses, which a reset overwrites in place."""
    eager, compiled = pair(cuda_device, reset_every=reset_every)
    assert_same_updates(eager, compiled, cuda_device, updates=5, tol=1e-4)  # TF32 / kernel order on a GPU


def test_compile_is_refused_for_dqn() -> None:
    with pytest.raises(ConfigError, match=r"^agent\.compile=true is for agent\.name=sac"):
        load_config(None, ["agent.name=dqn", "agent.compile=true"])
