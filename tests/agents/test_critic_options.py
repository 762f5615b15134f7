"""SAC's critic options against their reference definitions: torchrl's REDQLoss and CrossQLoss (losses and
gradients on the same weights, batch and noise), torchrl's BatchRenorm1d, DroQ's layer order, and the
policy delay's count; then the learner's bookkeeping (resume, snapshots, bf16) for every option.
"""

from __future__ import annotations

import copy
import io
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import BatchRenorm1d, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import CrossQLoss, REDQLoss, ValueEstimators

from mbpo.agents import sac_loss
from mbpo.agents.batch_renorm import BatchRenorm
from mbpo.agents.networks import BatchedMLP
from mbpo.agents.sac import SAC
from mbpo.agents.sac_loss import Draws
from mbpo.config import ConfigError, SACConfig, load_config
from mbpo.device.precision import bf16_autocast_supported
from tests.agents.test_sac import ACT_DIM, HIGH, LOW, OBS_DIM, _LocScale, _QNet, make_batch, make_sac, params_of

pytestmark = pytest.mark.timeout(120)

OPTIONS = {
    "redq": {"num_critics": 5, "num_min": 2, "actor_q": "mean", "policy_delay": 2},
    "droq": {"dropout": 0.1, "layer_norm": True},
    "crossq": {"crossq": True, "policy_delay": 3, "adam_beta1": 0.5, "renorm_warmup": 2},
}
"""One config per critic option (small sizes; renorm past its warm-up within a few updates)."""
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(autouse=True)
def _one_intra_op_thread(one_intra_op_thread: None) -> None:
    """Every test of this file on one intra-op thread (tests/agents/conftest.py)."""


def _td(batch: TensorDict) -> TensorDict:
    """Our env-scale batch as torchrl's TensorDict, actions in the actor's [-1, 1]."""
    b = batch["obs"].shape[0]
    high, low = torch.from_numpy(HIGH), torch.from_numpy(LOW)
    term = batch["terminated"].reshape(b, 1)
    return TensorDict({
        "observation": batch["obs"], "action": (batch["action"] - (high + low) / 2) / ((high - low) / 2),
        "next": {"observation": batch["next_obs"], "reward": batch["reward"].reshape(b, 1), "done": term,
                 "terminated": term},
    }, batch_size=[b])  # fmt: skip


def _torchrl_actor(sac: SAC) -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(_LocScale(copy.deepcopy(sac.actor)), in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"], distribution_class=TanhNormal, distribution_kwargs={"low": -1.0, "high": 1.0})


def _member(critic: BatchedMLP, m: int, renorm_eps: float = 1e-3) -> nn.Sequential:
    """Member ``m`` of our critic as plain torch layers (BatchRenorm1d where ours renormalises)."""
    layers: list[nn.Module] = []

    def renorm(i: int) -> None:
        ours = critic.renorms[i]
        theirs = BatchRenorm1d(ours.weight.shape[-1], momentum=ours.momentum, eps=renorm_eps, warmup_steps=ours.warmup)
        with torch.no_grad():
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(theirs, name).copy_(getattr(ours, name)[m].reshape(-1))
            theirs.num_batches_tracked.copy_(ours.num_batches_tracked)
        layers.append(theirs)

    if len(critic.renorms):
        renorm(0)
    for i, layer in enumerate(critic.layers):
        linear = nn.Linear(layer.in_features, layer.out_features)
        with torch.no_grad():
            linear.weight.copy_(layer.weight[m].T)
            linear.bias.copy_(layer.bias[m, 0])
        layers.append(linear)
        if i < len(critic.layers) - 1:
            layers.append(nn.ReLU())
            if len(critic.renorms):
                renorm(i + 1)
    return nn.Sequential(*layers)


def _grads_match(sac: SAC, actor_params: TensorDict, q_params: TensorDict, critic_scale: float = 1.0) -> None:
    """Our .grad against torchrl's, actor and critics (``critic_scale``: ours over theirs)."""
    tol = {"rtol": 1e-4, "atol": 1e-5}
    theirs = dict(actor_params.flatten_keys(".").items())
    for name, p in sac.actor.named_parameters():
        (key,) = [k for k in theirs if k.endswith(name)]
        torch.testing.assert_close(p.grad, theirs[key].grad, **tol)
    flat = dict(q_params.flatten_keys(".").items())
    linears = sorted((k for k in flat if k.endswith("weight") and flat[k].dim() == 3),
                     key=lambda k: int(k.split(".")[-2]))
    for ours, key in zip(sac.critic.layers, linears, strict=True):
        torch.testing.assert_close(ours.weight.grad, critic_scale * flat[key].grad.transpose(1, 2), **tol)
        bias = flat[key[: -len("weight")] + "bias"]
        torch.testing.assert_close(ours.bias.grad, critic_scale * bias.grad.unsqueeze(1), **tol)


@pytest.mark.filterwarnings("ignore:No target network updater")
def test_redq_matches_torchrl_redq_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """N = 5 critics, the target's min over a random M = 2 of the target critics, the actor against the mean of
    all N. torchrl averages the critic loss over critics (the REDQ authors' code sums: ``mse * num_Q``), and its
    alpha loss departs from the authors' (``alpha`` over both draws, not ``log_alpha`` over the actor's):
    ours keeps SAC's, checked by formula.
    """
    n, m = 5, 2
    sac = make_sac(seed=3, num_critics=n, num_min=m, actor_q="mean", init_alpha=0.7, gamma=0.97, max_grad_norm=0.0)
    assert sac.target_critic is not None
    with torch.no_grad():
        for p in sac.target_critic.parameters():
            p.add_(0.05 * torch.randn_like(p))
    batch = make_batch(64, seed=1)
    eps = torch.randn(2, 64, ACT_DIM, generator=torch.Generator().manual_seed(7))

    qnets = [ValueOperator(_QNet(_member(sac.critic, k)), in_keys=["observation", "action"]) for k in range(n)]
    loss = REDQLoss(_torchrl_actor(sac), qnets, num_qvalue_nets=n, sub_sample_len=m, loss_function="l2",
                    alpha_init=0.7, target_entropy=sac.target_entropy)
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.97)
    target = dict(loss.target_qvalue_network_params.flatten_keys(".").items())
    with torch.no_grad():
        for k in range(n):
            for key, value in _member(sac.target_critic, k).state_dict().items():
                target[f"module.net.{key}"][k].copy_(value)
    torch.manual_seed(11)
    subset = torch.randperm(n)[:m].sort().values  # what REDQLoss will draw after the same seed
    draws = [eps]
    monkeypatch.setattr(torch.distributions.normal, "_standard_normal", lambda shape, dtype, device: draws.pop(0))
    torch.manual_seed(11)
    out = loss(_td(batch))
    assert not draws
    (out["loss_actor"] + out["loss_qvalue"]).backward()

    monkeypatch.setattr(sac, "_draws", lambda batch_size, update_actor: Draws(eps, subset))
    metrics = sac.update(batch)
    approx = {"rel": 1e-5, "abs": 1e-5}
    assert metrics["loss_critic"] == pytest.approx(n * out["loss_qvalue"].item(), **approx)
    assert metrics["loss_actor"] == pytest.approx(out["loss_actor"].item(), **approx)
    log_prob = -out["action_log_prob_actor"]
    assert metrics["entropy"] == pytest.approx(log_prob.mean().item(), **approx)
    assert metrics["loss_alpha"] == pytest.approx(
        -(torch.log(torch.tensor(0.7)) * (-log_prob + sac.target_entropy)).mean().item(), **approx)
    _grads_match(sac, loss.actor_network_params, loss.qvalue_network_params, critic_scale=n)


@pytest.mark.filterwarnings("ignore:No target network updater")
@pytest.mark.parametrize("warmup", [0, 10**6], ids=["renorm", "batch-norm-warm-up"])
def test_crossq_matches_torchrl_crossq_loss(monkeypatch: pytest.MonkeyPatch, warmup: int) -> None:
    """No target critics; (s, a) and (s', a') through the critics' batch renorm in one pass; the actor's loss
    against the critics' running statistics as that pass left them. Our actor here has no renorm of its own
    (torchrl's runs it in train mode where sbx does not), which the next test covers.
    """
    sac = make_sac(seed=5, crossq=True, renorm_warmup=warmup, init_alpha=0.7, gamma=0.97, max_grad_norm=0.0)
    assert sac.target_critic is None
    sac.actor.renorms = nn.ModuleList()  # a plain actor: torchrl and sbx differ on the actor's renorm mode
    with torch.no_grad():  # running statistics away from (0, 1), so the renorm's r and d are not trivial
        for renorm in sac.critic.renorms:
            renorm.running_mean.normal_(0.0, 0.3)
            renorm.running_var.uniform_(0.5, 2.0)
    batch = make_batch(64, seed=2)
    eps = torch.randn(2, 64, ACT_DIM, generator=torch.Generator().manual_seed(8))
    qnets = [ValueOperator(_QNet(_member(sac.critic, k)), in_keys=["observation", "action"]) for k in range(2)]
    loss = CrossQLoss(_torchrl_actor(sac), qnets, num_qvalue_nets=2, loss_function="l2", alpha_init=0.7,
                      target_entropy=sac.target_entropy)
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.97)
    draws = [eps[1], eps[0]]  # the next action first (the critic loss), then the actor's
    monkeypatch.setattr(torch.distributions.normal, "_standard_normal", lambda shape, dtype, device: draws.pop(0))
    # CrossQLoss's next action is a sample(), which draws with torch.normal: route it through the same noise
    monkeypatch.setattr(torch.distributions.Normal, "sample",
                        lambda self, sample_shape=(): self.rsample(torch.Size(sample_shape)).detach())
    out = loss(_td(batch))
    assert not draws
    (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()

    monkeypatch.setattr(sac, "_noise", lambda batch_size: eps)
    metrics = sac.update(batch)
    approx = {"rel": 1e-5, "abs": 1e-5}
    for ours, theirs in (("loss_critic", "loss_qvalue"), ("loss_actor", "loss_actor"), ("loss_alpha", "loss_alpha"),
                         ("entropy", "entropy")):
        assert metrics[ours] == pytest.approx(out[theirs].item(), **approx), ours
    _grads_match(sac, loss.actor_network_params, loss.qvalue_network_params)
    flat = dict(loss.qvalue_network_params.flatten_keys(".").items())
    stats = sorted(k for k in flat if k.endswith("running_mean"))
    assert len(stats) == len(sac.critic.renorms) == 3
    for renorm, key in zip(sac.critic.renorms, stats, strict=True):  # the one pass moved the statistics alike
        torch.testing.assert_close(renorm.running_mean.squeeze(1), flat[key], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(renorm.running_var.squeeze(1), flat[key[: -len("mean")] + "var"],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("warmup", [0, 3, 10**6])
def test_batch_renorm_matches_torchrl_batch_renorm_per_member(warmup: int) -> None:
    """Per member, training passes and an eval pass equal torchrl's BatchRenorm1d with the same statistics
    (three passes: within torchrl's warm-up handling, which grows past 1 after two warm-ups).
    """
    g = torch.Generator().manual_seed(0)
    ours = BatchRenorm(6, (3,), warmup=warmup)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5, generator=g)
        ours.bias.uniform_(-0.5, 0.5, generator=g)
    theirs = [BatchRenorm1d(6, momentum=0.01, eps=1e-3, warmup_steps=warmup) for _ in range(3)]
    for k, t in enumerate(theirs):
        with torch.no_grad():
            t.weight.copy_(ours.weight[k, 0])
            t.bias.copy_(ours.bias[k, 0])
    for step in range(3):
        x = 2.0 + 3.0 * torch.randn(3, 32, 6, generator=g)
        y = ours(x, batch_stats=True)
        for k, t in enumerate(theirs):
            torch.testing.assert_close(y[k], t.train()(x[k]), rtol=1e-5, atol=1e-5, msg=f"step {step}, member {k}")
    x = torch.randn(3, 8, 6, generator=g)
    for k, t in enumerate(theirs):
        torch.testing.assert_close(ours(x)[k], t.eval()(x[k]), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours.running_var[k, 0], t.running_var)


def test_batch_renorm_moves_its_statistics_only_in_the_update() -> None:
    """Acting, model rollouts and value() see the running statistics and never move them, whatever the mode."""
    sac = make_sac(**OPTIONS["crossq"])
    state = copy.deepcopy(sac.actor.state_dict())
    obs = torch.randn(16, OBS_DIM)
    sac.actor.train()
    sac.value(obs)
    sac.rollout_act(obs, sac.rollout_noise(16, torch.Generator().manual_seed(0)))
    sac.act(obs, explore=True)
    after = sac.actor.state_dict()
    assert all(torch.equal(state[k], after[k]) for k in state)
    for s in range(3):  # policy_delay 3: the third update is the block's actor update
        sac.update(make_batch(seed=s))
        if s < 2:  # the critic-only updates sample the next action with the running statistics
            assert torch.equal(state["renorms.0.running_mean"], sac.actor.state_dict()["renorms.0.running_mean"])
    moved = sac.actor.state_dict()
    assert not torch.equal(state["renorms.0.running_mean"], moved["renorms.0.running_mean"])
    assert int(moved["renorms.1.num_batches_tracked"]) == 1
    assert int(sac.critic.renorms[0].num_batches_tracked) == 3  # one joint pass per update

@pytest.mark.parametrize("shared_input", [False, True])
def test_a_subset_of_batch_renorm_critics_is_those_members_of_the_whole(shared_input: bool) -> None:
    """A planner scoring with the first critic alone (lookahead ``value: first``) runs that member only, with its
    own running statistics, scale and shift: the same Q as that member of the whole ensemble. The update's pass
    (batch statistics) refuses a subset, which would move only some members' statistics.
    """
    g = torch.Generator().manual_seed(0)
    net = BatchedMLP(4, 5, [16, 8], 1, batch_renorm={"warmup": 2})
    with torch.no_grad():
        for renorm in net.renorms:
            renorm.weight.uniform_(0.5, 1.5, generator=g)
            renorm.bias.uniform_(-0.5, 0.5, generator=g)
    for _ in range(3):  # the members' statistics part ways (each member's layers differ), past the warm-up
        net(1.0 + 2.0 * torch.randn(4, 32, 5, generator=g), batch_stats=True)
    assert not torch.allclose(net.renorms[1].running_mean[0], net.renorms[1].running_mean[2])
    x = torch.randn(*(() if shared_input else (4,)), 9, 5, generator=g)
    members = torch.tensor([2, 0])
    whole = net(x)
    part = net(x if shared_input else x[members], members=members)
    torch.testing.assert_close(part, whole[members], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="running statistics only"):
        net(x, members=members, batch_stats=True)



def test_dropout_layer_norm_critic_is_linear_dropout_layernorm_relu_per_member() -> None:
    """DroQ's hidden layer (Linear -> Dropout -> LayerNorm -> ReLU), with the masks we pass in."""
    torch.manual_seed(0)
    critic = BatchedMLP(2, 5, [16, 8], 1, layer_norm=True)
    x = torch.randn(7, 5)
    g = torch.Generator().manual_seed(1)
    masks = tuple((torch.rand(2, 7, w, generator=g) > 0.3).float() / 0.7 for w in (16, 8))
    out = critic(x, dropout=masks)
    for m in range(2):
        h = x
        for i, layer in enumerate(critic.layers):
            h = h @ layer.weight[m] + layer.bias[m]
            if i < 2:
                h = nn.functional.layer_norm(h * masks[i][m], (h.shape[-1],)) * critic.norm_scale[i][m] \
                    + critic.norm_shift[i][m]
                h = torch.relu(h)
        torch.testing.assert_close(out[m], h)


def test_dropout_masks_come_from_the_learners_generator_at_the_rate() -> None:
    sac = make_sac(seed=0, **OPTIONS["droq"])
    draws = sac._draws(256, update_actor=True)
    assert draws.dropout_q is not None and draws.dropout_target is not None and draws.dropout_pi is not None
    masks = torch.cat([m.flatten() for m in (*draws.dropout_q, *draws.dropout_target, *draws.dropout_pi)])
    assert masks.unique().tolist() == pytest.approx([0.0, 1 / 0.9])
    assert (masks == 0).float().mean().item() == pytest.approx(0.1, abs=0.01)
    global_state = torch.random.get_rng_state()
    again = make_sac(seed=0, **OPTIONS["droq"])._draws(256, update_actor=True)
    assert torch.equal(torch.random.get_rng_state(), global_state)  # torch's global RNG untouched
    assert torch.equal(draws.dropout_q[0], again.dropout_q[0])
    assert sac._draws(256, update_actor=False).dropout_pi is None  # a delayed step draws no actor pass


def test_plain_sac_draws_only_its_noise() -> None:
    """Options that are off draw nothing: a plain SAC's random stream is what it always was."""
    sac = make_sac(seed=4)
    draws = sac._draws(32, update_actor=True)
    assert draws.subset is None and draws.dropout_q is None and draws.dropout_target is None
    assert torch.equal(draws.eps, torch.randn((2, 32, ACT_DIM), generator=torch.Generator().manual_seed(
        make_sac(seed=4).generator.initial_seed())))


def test_redq_subset_is_m_distinct_critics_drawn_anew() -> None:
    sac = make_sac(**OPTIONS["redq"])
    subsets = [tuple(sorted(sac._draws(8, True).subset.tolist())) for _ in range(50)]  # type: ignore[union-attr]
    assert all(len(set(s)) == 2 and all(0 <= i < 5 for i in s) for s in subsets)
    assert len(set(subsets)) > 5


def test_policy_delay_steps_the_actor_and_alpha_on_the_last_update_of_each_block() -> None:
    """REDQ's redq_sac.py (watchernyu/REDQ, lines 214 and 244: ``(i_update + 1) % policy_update_delay == 0``) and
    sbx's CrossQ (``(n_updates + 1 + i) % policy_delay == 0``): the policy steps after its block's critic updates,
    so with a delay of 3 on updates 2 and 5 (from 0) of 7, never on the first.
    """
    sac = make_sac(policy_delay=3)
    actor_before = copy.deepcopy(sac.actor.state_dict())
    alphas, log_alpha0 = [], sac.log_alpha.item()
    for s in range(7):
        sac.update(make_batch(seed=s))
        alphas.append(sac.log_alpha.item())
        moved = not torch.equal(actor_before["net.0.weight"], sac.actor.state_dict()["net.0.weight"])
        assert moved == (s >= 2), s
    assert [int(st["step"]) for st in sac.actor_optim.state.values()][0] == 2
    assert [int(st["step"]) for st in sac.critic_optim.state.values()][0] == 7
    assert log_alpha0 == alphas[0] == alphas[1] != alphas[2] == alphas[3] == alphas[4] != alphas[5] == alphas[6]
    metrics = sac.pop_metrics()
    assert metrics["updates"] == 7 and metrics["loss_actor"] != 0  # the actor's means are over its 2 updates


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_state_dict_round_trip_gives_bit_identical_updates(option: str) -> None:
    """Mid-delay, with renorm statistics and a subset drawn: a resumed learner continues exactly."""
    a = make_sac(seed=0, **OPTIONS[option])
    for s in range(4):
        a.update(make_batch(seed=s))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make_sac(seed=9, **OPTIONS[option])
    b.load_state_dict(torch.load(buf, weights_only=True))
    obs = torch.randn(4, OBS_DIM)
    for s in range(4, 9):
        assert dict(a.update(make_batch(seed=s))) == dict(b.update(make_batch(seed=s)))
        assert torch.equal(a.act(obs, explore=True), b.act(obs, explore=True))
    pa, pb = params_of_any(a), params_of_any(b)
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    assert a.pop_metrics() == pytest.approx(b.pop_metrics(), nan_ok=True)


def params_of_any(sac: SAC) -> dict[str, torch.Tensor]:
    """Every tensor of the learner's state (buffers too), target critic or not."""
    if sac.target_critic is not None:
        return params_of(sac)
    out = {f"actor.{k}": v.clone() for k, v in sac.actor.state_dict().items()}
    out |= {f"critic.{k}": v.clone() for k, v in sac.critic.state_dict().items()}
    return out | {"log_alpha": sac.log_alpha.detach().clone()}


def test_crossq_snapshot_has_no_target_critic_and_loads() -> None:
    source = make_sac(**OPTIONS["crossq"])
    source.update(make_batch())
    snap = source.snapshot()
    assert "target_critic" not in snap and "critic" in snap
    assert set(source.networks) == {"actor", "critic"}
    sink = make_sac(seed=2, **OPTIONS["crossq"])
    sink.load_snapshot(snap)
    obs = torch.randn(5, OBS_DIM)
    assert torch.equal(sink.act(obs, explore=False), source.act(obs, explore=False))
    with pytest.raises(KeyError, match="target_critic"):
        make_sac().load_snapshot(snap)  # a plain SAC needs one


@pytest.mark.skipif(not bf16_autocast_supported(torch.device("cpu")), reason="this CPU has no native bf16")
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_bf16_update_of_each_option_is_close_to_fp32(option: str) -> None:
    fp32, bf16 = make_sac(seed=1, **OPTIONS[option]), make_sac(seed=1, precision="bf16", **OPTIONS[option])
    for s in range(3):
        a, b = fp32.update(make_batch(seed=s)), bf16.update(make_batch(seed=s))
        assert b["skipped"] == 0.0
        assert b["loss_critic"] == pytest.approx(a["loss_critic"], rel=0.1, abs=0.05)


@pytest.mark.parametrize(("overrides", "message"), [
    (["agent.sac.num_critics=2", "agent.sac.num_min=3"], "agent.sac.num_min=3 is out of range.*at most "
                                                         "agent.sac.num_critics=2"),
    (["agent.sac.crossq=true", "agent.sac.tau=0.01"], "agent.sac.tau=0.01 with agent.sac.crossq=true"),
    (["agent.sac.dropout=1.0"], r"agent.sac.dropout=1.0 is out of range; expected a value in \[0, 1\)"),
    (["agent.sac.actor_q=max"], "agent.sac.actor_q='max' is not allowed; expected one of min, mean"),
    (["agent.sac.policy_delay=0"], "agent.sac.policy_delay=0 is out of range"),
])
def test_a_bad_critic_combination_is_one_config_error(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


# --- the peers' constants against their authors' code -----------------------------------------------------------

REDQ_INIT = {"weight_init": "xavier"}  # watchernyu/REDQ redq/algos/core.py 20-22, 98, 198: xavier_uniform_, zero bias
DROQ = {"actor_q": "mean", "weight_init": "xavier", "num_critics": 2, "dropout": 0.01, "layer_norm": True}
"""TakuyaHiraoka/Dropout-Q-Functions-for-Doubly-Efficient-Reinforcement-Learning: KUCodebase/code/agent.py 337-338
(the actor against ``0.5 * (q1 + q2)`` when target_drop_rate > 0; OriginalREDQCodebase/redq/algos/redq_sac.py 231,
the mean over its critics), model.py 16 and rltorch's builder.py (``xavier_uniform_``, zero bias)."""
CROSSQ = {"weight_init": "lecun", "target_entropy": None, "alpha_lr": 1e-3, "alpha_adam_beta1": 0.9,
          "adam_beta1": 0.5, "actor_lr": 1e-3, "critic_lr": 1e-3, "policy_delay": 3}
"""araffin/sbx sbx/crossq/crossq.py 162-170 (alpha's ``optax.adam(learning_rate)``: lr 1e-3, Adam's b1 0.9; target
entropy -act_dim), policies.py 293-298 (b1 0.5 for the actor and critics), flax ``nn.Dense``'s default lecun_normal
kernel and zero bias; adityab/CrossQ train.py 126-135 and sbx/sac/sac.py 166-175 agree."""
PEERS = {
    "hopper_redq.yaml": {**REDQ_INIT, "actor_q": "mean", "num_critics": 10, "num_min": 2, "policy_delay": 20},
    "walker2d_redq.yaml": {**REDQ_INIT, "actor_q": "mean", "num_critics": 10, "num_min": 2, "policy_delay": 20},
    "hopper_mbpo_redq.yaml": {**REDQ_INIT, "actor_q": "mean", "num_critics": 10, "num_min": 2},
    "walker2d_mbpo_redq.yaml": {**REDQ_INIT, "actor_q": "mean", "num_critics": 10, "num_min": 2},
    "hopper_mbpo_redq_masked.yaml": {**REDQ_INIT, "actor_q": "mean"},
    "walker2d_mbpo_redq_masked.yaml": {**REDQ_INIT, "actor_q": "mean"},
    "hopper_droq.yaml": {**DROQ, "policy_delay": 20},
    "walker2d_droq.yaml": {**DROQ, "policy_delay": 20},
    "hopper_mbpo_droq.yaml": DROQ,
    "walker2d_mbpo_droq.yaml": DROQ,
    "hopper_crossq.yaml": CROSSQ,
    "walker2d_crossq.yaml": CROSSQ,
}


@pytest.mark.parametrize("name", sorted(PEERS))
def test_peer_configs_hold_their_authors_constants(name: str) -> None:
    sac = load_config(CONFIGS / name).agent.sac
    assert {key: getattr(sac, key) for key in PEERS[name]} == PEERS[name]


@pytest.mark.parametrize("name", ["hopper_crossq.yaml", "walker2d_crossq.yaml"])
def test_crossq_learner_has_sbxs_entropy_target_and_alpha_optimizer(name: str) -> None:
    """sbx: target entropy -act_dim (crossq.py 168-170), alpha on optax.adam at the learning rate with Adam's
    default b1 0.9 (162-164) while the actor and critics use b1 0.5 (policies.py 293-298).
    """
    config = load_config(CONFIGS / name).agent.sac
    config.critic_hidden_sizes = [64, 64]  # the constants under test do not depend on the width
    act_dim = 3 if name.startswith("hopper") else 6
    space = gym.spaces.Box(-np.inf, np.inf, (11,), np.float32)
    sac = SAC(config, space, gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32), "cpu")
    assert sac.target_entropy == -act_dim
    (alpha,), (actor,), (critic,) = (o.param_groups for o in (sac.alpha_optim, sac.actor_optim, sac.critic_optim))
    assert (alpha["lr"], alpha["betas"]) == (1e-3, (0.9, 0.999))
    assert (actor["lr"], actor["betas"]) == (critic["lr"], critic["betas"]) == (1e-3, (0.5, 0.999))


def test_alpha_optimizer_shares_adam_beta1_unless_set() -> None:
    (group,) = make_sac(adam_beta1=0.5).alpha_optim.param_groups
    assert group["betas"] == (0.5, 0.999)  # today's behaviour is the default
    (group,) = make_sac(adam_beta1=0.5, alpha_adam_beta1=0.8).alpha_optim.param_groups
    assert group["betas"] == (0.8, 0.999)


@pytest.mark.parametrize(("override", "message"), [
    ("agent.sac.weight_init=kaiming", "agent.sac.weight_init='kaiming' is not allowed; expected one of default, "
                                      "xavier, lecun"),
    ("agent.sac.alpha_adam_beta1=1.0", r"agent.sac.alpha_adam_beta1=1.0 is out of range; expected a value in "
                                       r"\[0, 1\): Adam with beta1 = 1 never moves its first moment"),
])
def test_a_bad_init_or_alpha_beta1_is_one_config_error(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_droq_actor_loss_is_the_mean_of_its_two_critics() -> None:
    """KUCodebase/code/agent.py 331-343 with target_drop_rate > 0: ``q = 0.5 * (q1 + q2)``, ``policy_loss =
    mean(-q - alpha * entropy)``, the critics in train mode (dropout on).
    """
    sac = make_sac(seed=2, dropout=0.1, layer_norm=True, actor_q="mean", init_alpha=0.7)
    batch = make_batch(64, seed=3)
    draws = sac._draws(64, update_actor=True)
    sac._draws = lambda batch_size, update_actor: draws  # type: ignore[method-assign]
    with torch.no_grad():
        action, log_prob = sac.actor.sample(batch["obs"], draws.eps[0])
        q1, q2 = sac.critic(torch.cat((batch["obs"], action), -1), dropout=draws.dropout_pi).squeeze(-1)
        entropy = -log_prob
        want = (-0.5 * (q1 + q2) - 0.7 * entropy).mean().item()
        with_min = (-torch.min(q1, q2) - 0.7 * entropy).mean().item()
    got = sac.update(batch)["loss_actor"]
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert got != pytest.approx(with_min, rel=1e-3)  # the test tells the two apart


def _layers(sac: SAC) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(name, weight [fan_in, fan_out], bias)`` of every affine map: the actor's (its output layer as the mean and
    log-std heads), then each critic member's.
    """
    linears = [m for m in sac.actor.net if isinstance(m, nn.Linear)]
    out = [(f"actor.{i}", m.weight.T, m.bias) for i, m in enumerate(linears[:-1])]
    a = sac.act_dim
    out += [(f"actor.{head}", linears[-1].weight[rows].T, linears[-1].bias[rows])
            for head, rows in (("mean", slice(0, a)), ("log_std", slice(a, 2 * a)))]
    return out + [(f"critic.{i}[{m}]", layer.weight[m], layer.bias[m, 0])
                  for i, layer in enumerate(sac.critic.layers) for m in range(layer.members)]


@pytest.mark.parametrize("scheme", ["default", "xavier", "lecun"])
def test_weight_init_follows_its_reference_definition(scheme: str) -> None:
    """default: nn.Linear's U(+-1/sqrt(fan_in)) weights and biases. xavier: torch's xavier_uniform_ (gain 1), the
    REDQ and DroQ codes' init, U(+-sqrt(6 / (fan_in + fan_out))) with zero biases. lecun: jax's lecun_normal (flax
    nn.Dense's default, CrossQ's), N(0, 1 / fan_in) truncated at two of its (pre-rescaling) standard deviations and
    rescaled by 1 / 0.8796 to keep the variance 1 / fan_in, zero biases. The target critics start equal.
    """
    config = SACConfig(hidden_sizes=[256, 256], weight_init=scheme)
    sac = SAC(config, gym.spaces.Box(-np.inf, np.inf, (17,), np.float32), gym.spaces.Box(-1.0, 1.0, (6,), np.float32),
              "cpu", seed=4)
    for name, weight, bias in _layers(sac):
        fan_in, fan_out = weight.shape
        w = weight.detach().flatten().double()
        big = w.numel() >= 1_000  # enough draws for a 5% check of the spread
        if scheme == "default":
            bound = 1 / math.sqrt(fan_in)
            assert w.abs().max() <= bound and bias.abs().max() <= bound and bias.abs().max() > 0, name
            assert not big or w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05), name
            continue
        assert torch.count_nonzero(bias) == 0, name
        if scheme == "xavier":
            bound = math.sqrt(6 / (fan_in + fan_out))
            assert w.abs().max() <= bound and (not big or w.abs().max() > 0.99 * bound), name
            assert not big or w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05), name
        else:
            std = 1 / math.sqrt(fan_in)
            assert w.abs().max() <= 2 * std / 0.87962566103423978, name
            assert not big or w.std().item() == pytest.approx(std, rel=0.05), name
    assert sac.target_critic is not None
    assert all(torch.equal(a, b) for a, b in zip(sac.critic.state_dict().values(),
                                                  sac.target_critic.state_dict().values(), strict=True))


def test_weight_init_default_is_todays_init() -> None:
    """The key's default moves no draw: the same seed gives the same weights as a config without it."""
    a, b = make_sac(seed=6), make_sac(seed=6, weight_init="default")
    pa, pb = params_of(a), params_of(b)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not torch.equal(pa["critic.layers.0.weight"], params_of(make_sac(seed=6, weight_init="xavier"))[
        "critic.layers.0.weight"])


@pytest.mark.parametrize("shared_input", [False, True])
def test_a_one_output_layer_is_the_affine_map_forward_and_backward(shared_input: bool) -> None:
    """The critics' output layer runs as a multiply-and-sum outside autocast (faster than a batched matrix-vector
    product on a CPU): the same values and gradients as baddbmm, for a subset of members and with the weights
    detached (the actor loss) too.
    """
    from mbpo.agents.networks import BatchedLinear

    g = torch.Generator().manual_seed(0)
    layer = BatchedLinear(5, 16, 1)
    x = torch.randn(*(() if shared_input else (3,)), 7, 16, generator=g, requires_grad=True)
    members = torch.tensor([4, 0, 2])
    for detach in (False, True):
        layer.zero_grad()
        x.grad = None
        out = layer(x, detach_params=detach, members=members)
        assert out.grad_fn is not None and "Baddbmm" not in out.grad_fn.name()  # the multiply-and-sum ran
        grad_out = torch.randn(out.shape, generator=g)
        out.backward(grad_out)
        got = (out.detach(), x.grad.clone(), None if detach else layer.weight.grad.clone())
        layer.zero_grad()
        x.grad = None
        w, b = layer.weight[members], layer.bias[members]
        w, b = (w.detach(), b.detach()) if detach else (w, b)
        want = torch.baddbmm(b, x if x.dim() == 3 else x.expand(3, -1, -1), w)
        want.backward(grad_out)
        torch.testing.assert_close(got[0], want.detach(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got[1], x.grad, rtol=1e-6, atol=1e-6)
        with pytest.raises(ValueError, match="input for 3 members, weights of 2"):
            layer(x if x.dim() == 3 else x.expand(3, -1, -1), members=members[:2])
        if detach:
            assert layer.weight.grad is None or not layer.weight.grad.any()
        else:
            torch.testing.assert_close(got[2], layer.weight.grad, rtol=1e-6, atol=1e-6)


# --- bf16: matmuls only; Q values, the TD target and the losses keep fp32 resolution ----------------------------

needs_bf16 = pytest.mark.skipif(not bf16_autocast_supported(torch.device("cpu")), reason="this CPU has no native bf16")


@needs_bf16
def test_bf16_critic_output_has_fp32_resolution() -> None:
    """Near Q = 300 bf16's spacing is 2: two values 0.8 apart must not collapse to one under bf16 autocast."""
    torch.manual_seed(0)
    net = BatchedMLP(2, 8, [64, 64], 1, fp32_output=True)
    with torch.no_grad():
        net.layers[-1].weight.mul_(4.0)
        net.layers[-1].bias.fill_(300.0)
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    fp32 = net(x).squeeze(-1)[1]
    assert 0.2 < (fp32[0] - fp32[1]).abs() < 2.0 and (fp32 - 300).abs().max() < 1.0  # one bf16 value: 300
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x).squeeze(-1)[1]
        net.fp32_output = False
        quantised = net(x).squeeze(-1)[1]
    assert out.dtype == torch.float32 and out[0] != out[1]
    torch.testing.assert_close(out, fp32, rtol=0, atol=0.01)  # the hidden layers' bf16 moves Q by hundredths
    assert quantised[0] == quantised[1] == 300  # what a bf16 output layer gives


@needs_bf16
@pytest.mark.parametrize("option", ["sac", *sorted(OPTIONS)])
def test_bf16_td_target_and_critic_loss_keep_fp32_resolution(option: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Critics near Q = 300, rewards near 300 * (1 - gamma) = 3: the TD errors are a fraction of bf16's spacing
    there. The target critics' values reach the TD target unquantised, the target is fp32, and the bf16 update's
    critic loss is within 1% of fp32's (a bf16 output layer put it 11-29% off).
    """
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    td_target = sac_loss.td_target

    def spy(*args: torch.Tensor) -> torch.Tensor:
        target = td_target(*args)
        seen.append((args[3], target))
        return target

    monkeypatch.setattr(sac_loss, "td_target", spy)
    extra = {} if option == "sac" else OPTIONS[option]
    learners = [make_sac(seed=1, precision=p, init_alpha=1e-3, **extra) for p in ("fp32", "bf16")]  # type: ignore[arg-type]
    for sac in learners:
        for net in (sac.critic, sac.target_critic):
            if net is not None:
                with torch.no_grad():
                    net.layers[-1].weight.mul_(4.0)
                    net.layers[-1].bias.fill_(300.0)
    for s in range(3):
        batch = make_batch(64, seed=s)
        batch["reward"] = 3.0 + 0.5 * torch.randn(64, generator=torch.Generator().manual_seed(100 + s))
        batch["terminated"] = torch.zeros(64, dtype=torch.bool)
        want = learners[0].update(batch)["loss_critic"]
        got = learners[1].update(batch)["loss_critic"]
        next_q, target = seen[-1]
        assert next_q.dtype == target.dtype == torch.float32
        assert bool((next_q != next_q.bfloat16().float()).any()), "the target critics' values were bf16"
        assert got == pytest.approx(want, rel=0.01), s
