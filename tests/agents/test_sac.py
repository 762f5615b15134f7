"""SAC: torchrl's SACLoss as the oracle for losses and gradients, plus the learner's bookkeeping."""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SACLoss, ValueEstimators

from mbpo.agents.base import Agent
from mbpo.agents.networks import BatchedMLP, squashed_gaussian_sample
from mbpo.agents.sac import METRIC_NAMES, SAC
from mbpo.config import SACConfig
from mbpo.data.transitions import transitions
from mbpo.device.precision import bf16_autocast_supported

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _one_intra_op_thread() -> Iterator[None]:
    """These networks are tiny: extra intra-op threads only add barrier waits, which stall for a
    whole scheduler slice per op when the machine is oversubscribed (seen: 2 ms -> 350 ms/update).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

OBS_DIM, ACT_DIM = 5, 3
LOW, HIGH = np.array([-2.0, 0.0, -1.0], np.float32), np.array([2.0, 1.0, 3.0], np.float32)  # asymmetric on purpose


def make_sac(seed: int = 0, **overrides: object) -> SAC:
    cfg = SACConfig(hidden_sizes=[32, 32], **overrides)  # type: ignore[arg-type]  # per-test SACConfig fields
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    return SAC(cfg, obs_space, gym.spaces.Box(LOW, HIGH, dtype=np.float32), "cpu", seed=seed)


def make_batch(batch_size: int = 64, seed: int = 0, reward_scale: float = 1.0) -> TensorDict:
    """Env-scale transitions with a mix of terminal and non-terminal rows."""
    g = torch.Generator().manual_seed(seed)
    low, high = torch.from_numpy(LOW), torch.from_numpy(HIGH)
    return transitions(
        torch.randn(batch_size, OBS_DIM, generator=g),
        low + (high - low) * torch.rand(batch_size, ACT_DIM, generator=g),
        reward_scale * torch.randn(batch_size, generator=g),
        torch.randn(batch_size, OBS_DIM, generator=g),
        torch.rand(batch_size, generator=g) < 0.3,
    )


def params_of(sac: SAC) -> dict[str, torch.Tensor]:
    out = {f"actor.{k}": v.clone() for k, v in sac.actor.state_dict().items()}
    out |= {f"critic.{k}": v.clone() for k, v in sac.critic.state_dict().items()}
    if sac.target_critic is not None:  # CrossQ has none
        out |= {f"target.{k}": v.clone() for k, v in sac.target_critic.state_dict().items()}
    out["log_alpha"] = sac.log_alpha.detach().clone()
    return out


# --- the oracle: torchrl's SACLoss on the same weights, batch and noise -------------------------------


class _LocScale(nn.Module):
    """Our actor exposed as TanhNormal's (loc, scale)."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs)
        return mean, log_std.exp()


class _QNet(nn.Module):
    def __init__(self, net: nn.Sequential) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat((obs, action), -1))


def member_as_sequential(critic: BatchedMLP, member: int) -> nn.Sequential:
    """One member of a BatchedMLP as an nn.Linear/ReLU stack with the same weights."""
    layers: list[nn.Module] = []
    for i, layer in enumerate(critic.layers):
        linear = nn.Linear(layer.in_features, layer.out_features)
        with torch.no_grad():
            linear.weight.copy_(layer.weight[member].T)
            linear.bias.copy_(layer.bias[member, 0])
        layers += [linear] if i == len(critic.layers) - 1 else [linear, nn.ReLU()]
    return nn.Sequential(*layers)


def linear_leaves(params: TensorDict) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The stacked [2, out, in] weights and [2, out] biases of torchrl's Q params, in layer order."""
    flat = dict(params.flatten_keys(".").items())
    weights = sorted((k for k in flat if k.endswith("weight")), key=lambda k: int(k.split(".")[-2]))
    return [flat[k] for k in weights], [flat[k[: -len("weight")] + "bias"] for k in weights]


@pytest.mark.filterwarnings("ignore:No target network updater")
def test_losses_and_gradients_match_torchrl_sac_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    sac = make_sac(seed=3, init_alpha=0.7, gamma=0.97, max_grad_norm=0.0)  # no clipping: compare raw grads
    with torch.no_grad():  # a target that differs from the online critics, so the target path is tested
        for p in sac.target_critic.parameters():
            p.add_(0.05 * torch.randn_like(p))
    batch = make_batch(64, seed=1)
    eps = torch.randn(2, 64, ACT_DIM, generator=torch.Generator().manual_seed(7))

    # torchrl side: copies of our weights; actions in the actor's [-1, 1] space (we unscale internally).
    actor = ProbabilisticActor(
        TensorDictModule(_LocScale(copy.deepcopy(sac.actor)), in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -1.0, "high": 1.0},
    )
    qnets = [
        ValueOperator(_QNet(member_as_sequential(sac.critic, m)), in_keys=["observation", "action"]) for m in range(2)
    ]
    loss = SACLoss(
        actor, qnets, num_qvalue_nets=2, loss_function="l2", alpha_init=0.7, target_entropy=sac.target_entropy
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.97)
    target_w, target_b = linear_leaves(loss.target_qvalue_network_params)
    with torch.no_grad():
        for ours, w, b in zip(sac.target_critic.layers, target_w, target_b, strict=True):
            w.copy_(ours.weight.transpose(1, 2))
            b.copy_(ours.bias[:, 0])
    b_sz = 64
    high, low = torch.from_numpy(HIGH), torch.from_numpy(LOW)
    scale, bias = (high - low) / 2, (high + low) / 2
    term = batch["terminated"].reshape(b_sz, 1)
    td = TensorDict(
        {
            "observation": batch["obs"],
            "action": (batch["action"] - bias) / scale,
            "next": {"observation": batch["next_obs"], "reward": batch["reward"].reshape(b_sz, 1),
                     "done": term, "terminated": term},  # fmt: skip
        },
        batch_size=[b_sz],
    )
    # SACLoss draws the next-state action (TD target) first, then the actor-loss action.
    draws = [eps[1], eps[0]]
    monkeypatch.setattr(torch.distributions.normal, "_standard_normal", lambda shape, dtype, device: draws.pop(0))
    out = loss(td)
    assert not draws, "SACLoss drew a different number of samples than expected"
    (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()

    monkeypatch.setattr(sac, "_noise", lambda batch_size: eps)
    metrics = sac.update(batch)

    tol = {"rtol": 1e-5, "atol": 1e-5}
    approx = {"rel": 1e-5, "abs": 1e-5}
    # sum over critics, mean over batch
    assert metrics["loss_critic"] == pytest.approx(out["loss_qvalue"].item(), **approx)
    assert metrics["loss_actor"] == pytest.approx(out["loss_actor"].item(), **approx)
    assert metrics["loss_alpha"] == pytest.approx(out["loss_alpha"].item(), **approx)
    assert metrics["alpha"] == pytest.approx(out["alpha"].item(), **approx)
    assert metrics["entropy"] == pytest.approx(out["entropy"].item(), **approx)

    # Gradients: our grads are still in .grad (max_grad_norm=0: the update did not clip them).
    theirs = dict(loss.actor_network_params.flatten_keys(".").items())
    for name, p in sac.actor.named_parameters():
        (key,) = [k for k in theirs if k.endswith(name)]
        torch.testing.assert_close(p.grad, theirs[key].grad, **tol)
    q_w, q_b = linear_leaves(loss.qvalue_network_params)
    for ours, w, b in zip(sac.critic.layers, q_w, q_b, strict=True):
        torch.testing.assert_close(ours.weight.grad, w.grad.transpose(1, 2), **tol)
        torch.testing.assert_close(ours.bias.grad, b.grad.unsqueeze(1), **tol)
    torch.testing.assert_close(sac.log_alpha.grad, loss.log_alpha.grad, **tol)


def test_log_prob_matches_torch_tanh_transformed_normal() -> None:
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(16, 4, generator=g)
    log_std = torch.randn(16, 4, generator=g) - 1
    eps = torch.randn(16, 4, generator=g)
    action, log_prob = squashed_gaussian_sample(mean, log_std, eps)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1),
        [torch.distributions.TanhTransform()],
    )
    u = mean + log_std.exp() * eps
    expected = dist.base_dist.log_prob(u) - torch.distributions.TanhTransform().log_abs_det_jacobian(u, action).sum(-1)
    torch.testing.assert_close(action, torch.tanh(u))
    torch.testing.assert_close(log_prob, expected, rtol=1e-5, atol=1e-5)
    # Stable where tanh saturates: finite, unlike log(1 - tanh(u)^2).
    _, lp = squashed_gaussian_sample(torch.full((1, 1), 30.0), torch.zeros(1, 1), torch.zeros(1, 1))
    assert torch.isfinite(lp).all()


def test_batched_twin_critic_equals_two_linear_stacks() -> None:
    torch.manual_seed(0)
    critic = BatchedMLP(2, 7, [16, 16], 1)
    x = torch.randn(10, 7)
    out = critic(x)
    assert out.shape == (2, 10, 1)
    for m in range(2):
        seq = member_as_sequential(critic, m)
        torch.testing.assert_close(out[m], seq(x), rtol=1e-6, atol=1e-6)
        # Per-member inputs [members, B, in] give the same as the shared [B, in].
        torch.testing.assert_close(critic(x.expand(2, -1, -1))[m], seq(x), rtol=1e-6, atol=1e-6)
        # Gradients too: member m's grads are exactly its own stack's.
        critic.zero_grad()
        critic(x)[m].sum().backward()
        seq(x).sum().backward()
        for layer, linear in zip(critic.layers, [mod for mod in seq if isinstance(mod, nn.Linear)], strict=True):
            torch.testing.assert_close(layer.weight.grad[m], linear.weight.grad.T, rtol=1e-5, atol=1e-6)
            assert torch.count_nonzero(layer.weight.grad[1 - m]) == 0
    # detach_params: gradient reaches the input but no parameter.
    critic.zero_grad(set_to_none=True)
    xi = x.clone().requires_grad_(True)
    critic(xi, detach_params=True).sum().backward()
    assert xi.grad is not None and all(p.grad is None for p in critic.parameters())


def test_learns_one_step_bandit() -> None:
    """Reward -(a - 0.5)^2, every step terminal: the greedy action must approach 0.5."""
    cfg = SACConfig(hidden_sizes=[32, 32], actor_lr=3e-3, critic_lr=3e-3, alpha_lr=3e-3)
    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    sac = SAC(cfg, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), box, "cpu", seed=0)
    g = torch.Generator().manual_seed(0)
    n = 2048
    obs = torch.rand(n, 2, generator=g) * 2 - 1
    action = torch.rand(n, 1, generator=g) * 2 - 1
    data = transitions(obs, action, -(action[:, 0] - 0.5) ** 2, obs, torch.ones(n, dtype=torch.bool))
    for _ in range(400):
        sac.update(data[torch.randint(n, (128,), generator=g)])
    greedy = sac.act(obs[:256], explore=False)
    assert sac.num_updates == 400 and sac.num_skipped_updates == 0
    assert (greedy - 0.5).abs().mean().item() < 0.1, greedy.mean()


@pytest.mark.parametrize("poison", ["reward", "obs", "next_obs"])
@pytest.mark.parametrize("crossq", [False, True], ids=["sac", "crossq"])
def test_non_finite_loss_is_skipped_and_counted(crossq: bool, poison: str) -> None:
    """A skipped update leaves everything as it was: weights, optimizer state, targets and CrossQ's batch-renorm
    statistics, which its forward pass had already folded the batch into (NaN there, every later update was NaN
    and skipped, and the policy acted NaN).
    """
    sac = make_sac(crossq=crossq)
    sac.update(make_batch(seed=0))
    before = params_of(sac)
    optim_steps = [s["step"].clone() for s in sac.critic_optim.state.values()]
    bad = make_batch(seed=1)
    bad[poison][3] = float("nan")
    metrics = sac.update(bad)
    assert metrics["skipped"] == 1.0 and math.isnan(metrics["loss_critic"])
    assert (sac.num_updates, sac.num_skipped_updates) == (1, 1)
    for name, value in params_of(sac).items():
        assert torch.equal(value, before[name]), f"{name} changed on a skipped update"
    assert all(torch.equal(a, s["step"]) for a, s in zip(optim_steps, sac.critic_optim.state.values(), strict=True))
    sac.update(make_batch(seed=2))
    assert (sac.num_updates, sac.num_skipped_updates) == (2, 1)
    assert torch.isfinite(sac.act(torch.randn(4, OBS_DIM), explore=False)).all()
    averages = sac.pop_metrics()  # skipped updates do not poison the averages
    assert averages["updates"] == 2 and averages["skipped"] == 1
    assert all(math.isfinite(averages[name]) for name in METRIC_NAMES)


def test_target_critic_is_polyak_averaged_with_tau() -> None:
    sac = make_sac(tau=0.1)
    target_before = [p.clone() for p in sac.target_critic.parameters()]
    sac.update(make_batch())
    for old, new, online in zip(target_before, sac.target_critic.parameters(), sac.critic.parameters(), strict=True):
        torch.testing.assert_close(new, old + 0.1 * (online.detach() - old))
        assert not torch.equal(new, old)


def test_the_polyak_step_leaves_the_target_critic_outside_autograd() -> None:
    """The lerp from the online critic (which requires grad) must not be recorded: a recorded one chains one
    LerpBackward per parameter per update onto the target, memory that grows for the whole run.
    """
    sac = make_sac()
    for seed in range(3):
        sac.update(make_batch(seed=seed))
    for p in sac.target_critic.parameters():
        assert p.is_leaf and not p.requires_grad and p.grad_fn is None


def _all_tensors(obj: object) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _all_tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _all_tensors(v)]
    return []


def test_snapshot_is_cpu_only_complete_and_a_copy() -> None:
    sac = make_sac()
    sac.update(make_batch())
    snap = sac.snapshot()
    assert set(snap) == {"actor", "critic", "target_critic", "log_alpha", "num_updates"}
    assert snap["num_updates"] == 1
    assert snap["target_critic"].keys() == sac.critic.state_dict().keys()
    for t in _all_tensors(snap):
        assert t.device.type == "cpu"
    assert not any(isinstance(v, torch.device) for v in snap.values())
    snap["actor"]["net.0.weight"].add_(1.0)  # a deep copy: the learner is untouched
    assert not torch.equal(snap["actor"]["net.0.weight"], sac.actor.state_dict()["net.0.weight"])


def test_load_snapshot_loads_weights_and_resets_optimizers() -> None:
    source, sink = make_sac(seed=0), make_sac(seed=1)
    for s in range(3):
        source.update(make_batch(seed=s))
        sink.update(make_batch(seed=s))
    assert len(sink.actor_optim.state) > 0
    sink.load_snapshot(source.snapshot())
    for name, value in params_of(sink).items():
        assert torch.equal(value, params_of(source)[name]), name
    assert sink.num_updates == 3
    for optim in (sink.actor_optim, sink.critic_optim, sink.alpha_optim):
        assert len(optim.state) == 0, "optimizer state must be fresh after load_snapshot"
    obs = torch.randn(5, OBS_DIM)
    torch.testing.assert_close(sink.act(obs, explore=False), source.act(obs, explore=False))
    with pytest.raises(KeyError, match="target_critic"):
        sink.load_snapshot({k: v for k, v in source.snapshot().items() if k != "target_critic"})


def test_state_dict_round_trip_gives_bit_identical_updates() -> None:
    a = make_sac(seed=0)
    for s in range(3):
        a.update(make_batch(seed=s))
        a.act(torch.randn(2, OBS_DIM), explore=True)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make_sac(seed=123)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert (b.num_updates, b.num_skipped_updates) == (3, 0)
    obs = torch.randn(4, OBS_DIM)
    for s in range(3, 6):
        ma, mb = a.update(make_batch(seed=s)), b.update(make_batch(seed=s))
        assert dict(ma) == dict(mb)
        assert torch.equal(a.act(obs, explore=True), b.act(obs, explore=True))
    pa, pb = params_of(a), params_of(b)
    for name in pa:
        assert torch.equal(pa[name], pb[name]), name
    assert a.pop_metrics() == b.pop_metrics()


def test_act_shapes_dtypes_bounds_on_a_cpu_replica() -> None:
    sac = make_sac()
    assert isinstance(sac, Agent)
    obs = 10 * torch.randn(500, OBS_DIM, dtype=torch.float64)  # any float dtype in, float32 out
    for explore in (True, False):
        actions = sac.act(obs, explore=explore)
        assert actions.shape == (500, ACT_DIM) and actions.dtype == torch.float32 and actions.device.type == "cpu"
        assert (actions >= torch.from_numpy(LOW)).all() and (actions <= torch.from_numpy(HIGH)).all()
    assert not torch.equal(sac.act(obs, explore=True), sac.act(obs, explore=True))  # exploration noise
    assert torch.equal(sac.act(obs, explore=False), sac.act(obs, explore=False))
    assert all(p.device.type == "cpu" for p in sac._replica.parameters()) and not sac._replica.training
    assert sac.actor.training and sac.critic.training
    with pytest.raises(ValueError, match=rf"\(N, {OBS_DIM}\)"):
        sac.act(torch.zeros(OBS_DIM), explore=False)


def test_act_replica_follows_the_learner_after_updates() -> None:
    sac = make_sac()
    obs = torch.randn(8, OBS_DIM)
    before = sac.act(obs, explore=False)
    sac.update(make_batch())
    after = sac.act(obs, explore=False)
    assert not torch.equal(before, after)
    with torch.no_grad():
        mean, _ = sac.actor(obs)
    scale = (torch.from_numpy(HIGH) - torch.from_numpy(LOW)) / 2
    torch.testing.assert_close(after, (torch.from_numpy(HIGH) + torch.from_numpy(LOW)) / 2 + scale * torch.tanh(mean))


def test_grad_clipping_bounds_every_optimizers_norm() -> None:
    sac = make_sac(max_grad_norm=1.0)
    metrics = sac.update(make_batch(reward_scale=1e4))
    assert metrics["grad_norm_critic"] > 1.0, "test needs gradients large enough to clip"
    for params in (sac.critic.parameters(), sac.actor.parameters(), [sac.log_alpha]):
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
        assert norm <= 1.0 + 1e-4


def test_bf16_runs_where_supported_else_names_the_device() -> None:
    if bf16_autocast_supported("cpu"):
        sac = make_sac(precision="bf16")
        metrics = sac.update(make_batch())
        assert metrics["skipped"] == 0.0 and all(math.isfinite(metrics[k]) for k in METRIC_NAMES)
        ref = make_sac(precision="fp32").update(make_batch())
        assert metrics["loss_critic"] == pytest.approx(ref["loss_critic"], rel=0.05)
        assert sac.actor.net[0].weight.dtype == torch.float32  # autocast: master weights stay fp32
    else:
        with pytest.raises(ValueError, match="cpu"):
            make_sac(precision="bf16")


def test_bf16_unsupported_error_names_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mbpo.device.precision.native_bf16",
                        lambda device: (False, "CPU has neither AVX512_BF16 nor AMX"))
    with pytest.raises(ValueError, match=r"agent.sac.precision=bf16.*cpu.*AVX512_BF16.*precision=fp32 or auto"):
        make_sac(precision="bf16")
    assert make_sac(precision="auto").precision == "fp32"


def test_auto_precision_is_bf16_exactly_where_the_cpu_has_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    import mbpo.device.precision as precision

    for avx512_bf16, amx, expected in ((True, False, "bf16"), (False, True, "bf16"), (False, False, "fp32")):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v)
        resolved, why = precision.resolve_precision("auto", "cpu", "agent.sac.precision")
        assert resolved == expected and why.startswith("auto: CPU has"), why
    assert precision.resolve_precision("fp32", "cpu", "model.precision") == ("fp32", "as configured")
    with pytest.raises(ValueError, match="model.precision='fp16' is not allowed; expected one of auto, fp32, bf16"):
        precision.resolve_precision("fp16", "cpu", "model.precision")


def test_rejects_wrong_spaces_and_batches() -> None:
    obs_space = gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
    with pytest.raises(TypeError, match="dqn"):
        SAC(SACConfig(), obs_space, gym.spaces.Discrete(3), "cpu")
    with pytest.raises(ValueError, match="finite"):
        SAC(SACConfig(), obs_space, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), "cpu")
    sac = make_sac()
    batch = make_batch()
    batch["reward"] = batch["reward"].unsqueeze(-1)
    with pytest.raises(ValueError, match=r"reward.*expected \(64,\)"):
        sac.update(batch)
    assert sac.target_entropy == -ACT_DIM


@pytest.mark.gpu
def test_cuda_update_matches_cpu_and_publishes_cpu_state(cuda_device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu, gpu = make_sac(seed=0), SAC(make_sac().config, gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
                                     gym.spaces.Box(LOW, HIGH, dtype=np.float32), cuda_device, seed=0)  # fmt: skip
    eps = torch.randn(2, 64, ACT_DIM, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(cpu, "_noise", lambda batch_size: eps)
    monkeypatch.setattr(gpu, "_noise", lambda batch_size: eps.to(cuda_device))
    batch = make_batch()
    m_cpu, m_gpu = cpu.update(batch), gpu.update(batch.to(cuda_device))
    for name in METRIC_NAMES:
        assert m_gpu[name] == pytest.approx(m_cpu[name], rel=1e-3, abs=1e-4), name
    assert gpu.num_updates == 1 and str(gpu.device) == cuda_device
    assert all(t.device.type == "cpu" for t in _all_tensors(gpu.snapshot()) + _all_tensors(gpu.state_dict()))
    actions = gpu.act(torch.randn(3, OBS_DIM), explore=True)
    assert actions.device.type == "cpu" and all(p.device.type == "cpu" for p in gpu._replica.parameters())
    with pytest.raises(ValueError, match="learner is on cuda"):
        gpu.update(batch)  # a CPU batch for a CUDA learner is a clear error, not a device-side assert


def test_an_n_step_rows_discount_replaces_gamma_in_the_target() -> None:
    """``discount`` (gamma**m of an m-step row) is the bootstrap's discount: gamma itself gives the 1-step
    update bit for bit, 0 gives the update of the same rows marked terminal.
    """
    from mbpo.data.transitions import DISCOUNT

    batch = make_batch()
    one_step, with_gamma = make_sac(), make_sac()
    one_step.update(batch)
    with_gamma.update(batch.clone().set(DISCOUNT, torch.full((64,), one_step.config.gamma)))
    a, b = params_of(one_step), params_of(with_gamma)
    assert all(torch.equal(a[k], b[k]) for k in a)
    terminal, zero = make_sac(), make_sac()
    terminal.update(batch.clone().set("terminated", torch.ones(64, dtype=torch.bool)))
    zero.update(batch.clone().set(DISCOUNT, torch.zeros(64)))
    a, b = params_of(terminal), params_of(zero)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], params_of(one_step)[k]) for k in a)


def test_layer_norm_critic_equals_per_member_layer_norm_stacks() -> None:
    torch.manual_seed(0)
    critic = BatchedMLP(2, 5, [16, 8], 1, layer_norm=True)
    with torch.no_grad():
        for scale, shift in zip(critic.norm_scale, critic.norm_shift, strict=True):
            scale.uniform_(0.5, 1.5)
            shift.uniform_(-0.5, 0.5)
    x = torch.randn(7, 5)
    out = critic(x)
    for m in range(2):
        layers: list[nn.Module] = []
        for i, layer in enumerate(critic.layers):
            linear = nn.Linear(layer.weight.shape[1], layer.weight.shape[2])
            linear.weight.data, linear.bias.data = layer.weight[m].T.clone(), layer.bias[m].reshape(-1).clone()
            layers.append(linear)
            if i < len(critic.layers) - 1:
                norm = nn.LayerNorm(linear.out_features)
                norm.weight.data = critic.norm_scale[i][m].reshape(-1).clone()
                norm.bias.data = critic.norm_shift[i][m].reshape(-1).clone()
                layers += [norm, nn.ReLU()]
        assert torch.allclose(out[m], nn.Sequential(*layers)(x), atol=1e-6)


def test_a_wide_layer_norm_critic_trains_and_round_trips() -> None:
    sac = make_sac(critic_hidden_sizes=[64, 64], layer_norm=True)
    assert sac.critic.layers[0].weight.shape == (2, OBS_DIM + ACT_DIM, 64) and len(sac.critic.norm_scale) == 2
    assert [m.out_features for m in sac.actor.modules() if isinstance(m, nn.Linear)][:2] == [32, 32]  # actor as is
    before = sac.critic.norm_scale[0].detach().clone()
    for _ in range(3):
        sac.update(make_batch())
    assert not torch.equal(before, sac.critic.norm_scale[0])  # the LayerNorm scale is learned
    twin = make_sac(critic_hidden_sizes=[64, 64], layer_norm=True, seed=1)
    twin.load_state_dict(sac.state_dict())
    a, b = params_of(sac), params_of(twin)
    assert all(torch.equal(a[k], b[k]) for k in a)
