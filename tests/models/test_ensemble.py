"""DynamicsEnsemble: batched == per-member maths, learning, elites, sampling, bounds, resume, early stopping."""

from __future__ import annotations

import io
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from mbpo.config import ModelConfig
from mbpo.device.precision import bf16_autocast_supported
from mbpo.models import DynamicsEnsemble, Normalizer, select_elites
from mbpo.models.training import fit_data

pytestmark = pytest.mark.timeout(120)

OBS, ACT = 3, 2
BOX = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)


def small_config(**overrides: object) -> ModelConfig:
    kw: dict = dict(ensemble_size=4, num_elites=2, hidden_sizes=[32, 32], weight_decay=[1e-5, 2e-5, 3e-5],
                    batch_size=64, lr=3e-3, max_epochs=30, patience=5)  # fmt: skip
    kw.update(overrides)
    return ModelConfig(**kw)


def linear_system(n: int, seed: int = 0, noise: float = 0.01) -> tuple[torch.Tensor, ...]:
    """next = A s + B a + noise, reward = c . s; returns obs, action, reward, next_obs, terminated."""
    g = torch.Generator().manual_seed(1234)  # the same system for every seed
    a_mat = torch.eye(OBS) + 0.1 * torch.randn(OBS, OBS, generator=g)
    b_mat = 0.5 * torch.randn(ACT, OBS, generator=g)
    c = torch.randn(OBS, generator=g)
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, OBS, generator=g)
    action = torch.rand(n, ACT, generator=g) * 2 - 1
    next_obs = obs @ a_mat.T + action @ b_mat + noise * torch.randn(n, OBS, generator=g)
    return obs, action, obs @ c, next_obs, torch.zeros(n, dtype=torch.bool)


def reference_stacks(ens: DynamicsEnsemble) -> list[nn.Sequential]:
    """One ordinary nn.Linear stack per member, holding that member's weights."""
    stacks = []
    for m in range(ens.ensemble_size):
        layers: list[nn.Module] = []
        for i, layer in enumerate(ens.net.layers):
            lin = nn.Linear(layer.in_features, layer.out_features)
            with torch.no_grad():
                lin.weight.copy_(layer.weight[m].T)
                lin.bias.copy_(layer.bias[m, 0])
            layers += [lin] + ([nn.SiLU()] if i < len(ens.net.layers) - 1 else [])
        stacks.append(nn.Sequential(*layers))
    return stacks


def test_batched_ensemble_equals_per_member_loop() -> None:
    ens = DynamicsEnsemble(small_config(hidden_sizes=[16, 8]), OBS, BOX, "cpu", seed=3)
    m, b = ens.ensemble_size, 40
    obs, action, reward, next_obs, _ = linear_system(m * b, seed=1)
    ens.normalizer.fit(torch.cat((obs, action), -1) * 3 + 1)  # a non-trivial normaliser
    with torch.no_grad():  # distinct learned bounds per member
        ens.max_logvar.add_(torch.linspace(0, 1, m).view(m, 1, 1))
        ens.min_logvar.sub_(torch.linspace(0, 2, m).view(m, 1, 1))
    obs, action, reward, next_obs = (t.reshape(m, b, *t.shape[1:]) for t in (obs, action, reward, next_obs))
    stacks = reference_stacks(ens)
    c, d = ens.config, ens.target_dim

    loss = ens.loss(obs, action, reward, next_obs)
    loss.backward()
    ref_total = torch.zeros(())
    x = ens.normalizer.normalize(torch.cat((obs, action), -1)).detach()
    mean_b, logvar_b, _ = ens(x)
    for k, stack in enumerate(stacks):
        out = stack(x[k])
        max_lv, min_lv = ens.max_logvar[k, 0].detach(), ens.min_logvar[k, 0].detach()
        lv = max_lv - F.softplus(max_lv - out[:, d:])
        lv = min_lv + F.softplus(lv - min_lv)
        torch.testing.assert_close(mean_b[k], out[:, :d], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(logvar_b[k], lv, rtol=1e-5, atol=1e-5)
        target = torch.cat((next_obs[k] - obs[k], reward[k].unsqueeze(-1)), -1)
        nll = ((out[:, :d] - target).square() * torch.exp(-lv) + lv).mean()
        decay = sum(wd * lin.weight.square().sum() / 2 for wd, lin in zip(c.weight_decay, stack[::2], strict=True))
        member_loss = nll + c.logvar_bound_penalty * (max_lv.sum() - min_lv.sum()) + decay
        member_loss.backward()
        ref_total = ref_total + member_loss.detach()
        # Members are independent: the batched total's gradient for member k is member k's own loss gradient.
        for layer, lin in zip(ens.net.layers, stack[::2], strict=True):
            torch.testing.assert_close(layer.weight.grad[k], lin.weight.grad.T, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(loss.detach(), ref_total, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_beta_nll_weights_each_targets_nll_by_its_variance_to_the_beta_held_constant(beta: float) -> None:
    """beta-NLL (Seitzer et al. 2022, eq. 6): the mean over targets of ``stopgrad(var ** beta) * NLL``; at
    beta = 1 the mean's gradient is the MSE's, 2 (mean - target) / n, whatever the variance.
    """
    ens = DynamicsEnsemble(small_config(nll_beta=beta), OBS, BOX, "cpu", seed=3)
    m, b, d = ens.ensemble_size, 2, ens.target_dim
    g = torch.Generator().manual_seed(5)
    mean = torch.randn(m, b, d, generator=g).requires_grad_()
    logvar = (torch.rand(m, b, d, generator=g) * 4 - 2).requires_grad_()  # variances e^-2 .. e^2
    target = torch.randn(m, b, d, generator=g)
    ens.raw = lambda x, params: (mean, logvar, None)  # type: ignore[method-assign]  # the outputs, as leaves
    c = ens.config
    rest = c.logvar_bound_penalty * (ens.max_logvar.sum() - ens.min_logvar.sum()) + ens.weight_decay_loss()
    loss = ens._loss(torch.zeros(m, b, ens.in_dim), target, None) - rest.detach()
    var = logvar.detach().exp()
    by_hand = (var**beta * ((mean.detach() - target) ** 2 / var + logvar.detach())).mean((1, 2)).sum()
    torch.testing.assert_close(loss.detach(), by_hand)
    loss.backward()
    n = b * d
    torch.testing.assert_close(logvar.grad, var**beta * (1 - (mean.detach() - target) ** 2 / var) / n)
    if beta == 1.0:
        torch.testing.assert_close(mean.grad, 2 * (mean.detach() - target) / n)


def test_nll_beta_outside_0_to_1_is_refused_by_name() -> None:
    from mbpo.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="model.nll_beta"):
        load_config(None, ["model.nll_beta=1.5"])


def test_weight_decay_term_is_the_hand_computed_sum() -> None:
    ens = DynamicsEnsemble(small_config(), OBS, BOX, "cpu")
    by_hand = 0.0
    for wd, layer in zip(ens.config.weight_decay, ens.net.layers, strict=True):
        for m in range(ens.ensemble_size):
            by_hand += wd * float((layer.weight[m].detach().double() ** 2).sum()) / 2
    assert math.isclose(ens.weight_decay_loss().item(), by_hand, rel_tol=1e-5)
    assert by_hand > 0


def test_learns_a_linear_system() -> None:
    ens = DynamicsEnsemble(small_config(), OBS, BOX, "cpu", seed=0)
    obs, action, reward, next_obs, term = linear_system(2000)
    metrics = ens.fit(obs, action, reward, next_obs, term)
    target_var = torch.cat((next_obs - obs, reward.unsqueeze(-1)), -1).var(0).mean().item()
    assert metrics["holdout_loss"] < 0.05 * target_var, (metrics, target_var)
    assert metrics["epochs"] == 30 and ens.version == 1 and len(metrics["holdout_mse"]) == 4
    # Fresh data, through sample(): close to the true next state and reward.
    obs2, action2, reward2, next2, _ = linear_system(500, seed=7)
    pred_next, pred_reward, logit = ens.sample(obs2, action2, torch.Generator().manual_seed(0))
    assert logit is None
    assert (pred_next - next2).square().mean() < 0.05 * (next2 - obs2).var(0).mean()
    assert (pred_reward - reward2).square().mean() < 0.05 * reward2.var()


def test_elite_selection() -> None:
    assert select_elites([0.3, 0.1, 0.5, 0.2, 0.1], 3) == [1, 4, 3]
    assert select_elites(torch.tensor([float("nan"), 2.0, 1.0]), 2) == [2, 1]
    with pytest.raises(ValueError, match="num_elites"):
        select_elites([1.0, 2.0], 3)

    ens = DynamicsEnsemble(small_config(ensemble_size=5, num_elites=3, max_epochs=5), OBS, BOX, "cpu")
    data = linear_system(1000)
    metrics = ens.fit(*data)
    mse = metrics["holdout_mse"]
    assert metrics["elites"] == ens.elites == sorted(range(5), key=lambda i: mse[i])[:3]
    assert math.isclose(metrics["holdout_loss"], sum(mse[i] for i in ens.elites) / 3, rel_tol=1e-6)
    # Corrupt two current elites: a re-evaluation must drop exactly them.
    bad = ens.elites[:2]
    with torch.no_grad():
        ens.net.layers[-1].bias[bad] += 5.0
    losses = ens.evaluate(*data[:4])
    new = ens.set_elites(losses)
    assert not set(bad) & set(new) and new == torch.argsort(losses)[:3].tolist()


def test_discrete_action_enters_one_hot() -> None:
    space = gym.spaces.Discrete(2)
    ens = DynamicsEnsemble(small_config(max_epochs=20), 4, space, "cpu")
    assert ens.net.layers[0].in_features == 4 + 2
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(1000, 4, generator=g)
    action = torch.randint(0, 2, (1000,), generator=g)
    next_obs = obs + 0.1 * (2 * action - 1).float().unsqueeze(-1)  # action 1 pushes +0.1, action 0 -0.1
    ens.fit(obs, action, torch.zeros(1000), next_obs)
    probe = torch.zeros(2, 4)
    mean = ens.predict(probe, torch.tensor([0, 1])).mean[ens.elites].mean(0)  # [2, 5]
    assert (mean[0, :4] < -0.05).all() and (mean[1, :4] > 0.05).all(), mean
    with pytest.raises(TypeError, match="integer"):
        ens.predict(probe, torch.zeros(2))


def _constant_members(ens: DynamicsEnsemble) -> None:
    """Member m predicts reward exactly m (near-zero variance), whatever the input."""
    d = ens.target_dim
    with torch.no_grad():
        last = ens.net.layers[-1]
        last.weight.zero_()
        last.bias.zero_()
        last.bias[:, 0, d - 1] = torch.arange(ens.ensemble_size, dtype=torch.float32)
        last.bias[:, 0, d:] = -40.0
        ens.max_logvar.fill_(-20.0)
        ens.min_logvar.fill_(-30.0)


def test_sample_uses_elites_equally_and_never_a_non_elite() -> None:
    ens = DynamicsEnsemble(small_config(ensemble_size=6, num_elites=3), OBS, BOX, "cpu")
    _constant_members(ens)
    ens.set_elites([0.5, 0.1, 0.9, 0.3, 0.2, 0.8])  # elites 1, 4, 3
    assert ens.elites == [1, 4, 3]
    non_elites = [0, 2, 5]
    with torch.no_grad():  # a non-elite member that ran would put NaN into the output
        for layer in ens.net.layers:
            layer.weight[non_elites] = float("nan")
    for b in (3000, 1001, 2, 0):
        obs, action = torch.randn(b, OBS), torch.rand(b, ACT)
        next_obs, reward, _ = ens.sample(obs, action, torch.Generator().manual_seed(b))
        assert next_obs.shape == (b, OBS) and reward.shape == (b,)
        assert torch.isfinite(next_obs).all() and torch.isfinite(reward).all()
        torch.testing.assert_close(next_obs, obs, atol=1e-4, rtol=0)  # delta is zero for every member
        used = reward.round().long()
        counts = torch.bincount(used, minlength=6)
        assert counts[non_elites].sum() == 0
        assert counts[ens.elites].max() - counts[ens.elites].min() <= 1, counts  # near-equal chunks
    # The assignment of rows to elites is random (depends on the generator), not positional.
    obs, action = torch.randn(300, OBS), torch.rand(300, ACT)
    r1 = ens.sample(obs, action, torch.Generator().manual_seed(1))[1]
    r2 = ens.sample(obs, action, torch.Generator().manual_seed(2))[1]
    assert (r1.round() != r2.round()).float().mean() > 0.4



@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(
    not bf16_autocast_supported("cpu"), reason="no native bf16 on this CPU"))])
def test_sample_returns_each_start_states_own_prediction(precision: str) -> None:
    """Rows are dealt to elites, run in blocks and put back: row i must get row i's prediction from one elite."""
    ens = DynamicsEnsemble(small_config(ensemble_size=6, num_elites=3), OBS, BOX, "cpu", seed=4, precision=precision)
    ens.set_elites([0.5, 0.1, 0.9, 0.3, 0.2, 0.8])
    with torch.no_grad():  # near-zero noise: the draw is the chosen elite's mean
        ens.max_logvar.fill_(-40.0)
        ens.min_logvar.fill_(-50.0)
    g = torch.Generator().manual_seed(0)
    b = 5001  # 1,667 rows per elite: several CPU blocks and a ragged last one
    obs, action = torch.randn(b, OBS, generator=g) * 2, torch.rand(b, ACT, generator=g) * 2 - 1
    next_obs, reward, _ = ens.sample(obs, action, torch.Generator().manual_seed(1))
    drawn = torch.cat((next_obs - obs, reward.unsqueeze(-1)), -1)  # (b, obs_dim + 1)
    means = ens.predict(obs, action).mean[ens.elites]  # (elites, b, obs_dim + 1)
    error = (means - drawn).abs().amax(-1)  # each row against each elite's prediction for that row
    assert error.min(0).values.max() < 1e-5
    chosen = error.argmin(0)
    assert torch.bincount(chosen, minlength=3).tolist() == [1667, 1667, 1667]
    assert (means.std(0).amax(-1) > 1e-2).float().mean() > 0.99  # the elites disagree, so the match is informative

def test_a_deterministic_sample_is_its_elites_mean_and_a_random_one_is_not() -> None:
    """``deterministic=True`` (model.deterministic_rollouts) drops the Gaussian draw but keeps the random elite."""
    ens = DynamicsEnsemble(small_config(ensemble_size=6, num_elites=3), OBS, BOX, "cpu", seed=4)
    ens.set_elites([0.5, 0.1, 0.9, 0.3, 0.2, 0.8])
    with torch.no_grad():  # a standard deviation of about 1: a draw is far from the mean
        ens.max_logvar.fill_(0.0)
        ens.min_logvar.fill_(-0.5)
    g = torch.Generator().manual_seed(0)
    obs, action = torch.randn(300, OBS, generator=g), torch.rand(300, ACT, generator=g) * 2 - 1
    means = ens.predict(obs, action).mean[ens.elites]  # (elites, b, obs_dim + 1)
    for deterministic, within in ((True, True), (False, False)):
        next_obs, reward, _ = ens.sample(obs, action, torch.Generator().manual_seed(1), deterministic=deterministic)
        step = torch.cat((next_obs - obs, reward.unsqueeze(-1)), -1)
        error = (means - step).abs().amax(-1).min(0).values  # to the nearest elite's mean, per row
        assert bool((error < 1e-5).all()) is within, error.max()
    chosen = [(means - torch.cat((n - obs, r.unsqueeze(-1)), -1)).abs().amax(-1).argmin(0)
              for n, r, _ in (ens.sample(obs, action, torch.Generator().manual_seed(k), deterministic=True)
                              for k in (1, 2))]
    assert (chosen[0] != chosen[1]).float().mean() > 0.4  # the elite is still drawn


def test_logvar_stays_within_learned_bounds() -> None:
    ens = DynamicsEnsemble(small_config(max_epochs=3), OBS, BOX, "cpu")
    ens.fit(*linear_system(500))
    with torch.no_grad():
        ens.max_logvar.copy_(torch.linspace(-1.0, 1.0, ens.ensemble_size).view(-1, 1, 1).expand_as(ens.max_logvar))
        ens.min_logvar.fill_(-5.0)
    obs = torch.cat((torch.randn(200, OBS) * 1e3, torch.randn(200, OBS)))  # wild and ordinary inputs
    action = torch.cat((torch.randn(200, ACT) * 1e3, torch.rand(200, ACT)))
    logvar = ens.predict(obs, action).var.log()
    hi, lo = ens.max_logvar.detach(), ens.min_logvar.detach()
    slack = F.softplus(lo - hi)  # the double soft bound can exceed max by softplus(min - max) at most
    assert (logvar >= lo - 1e-5).all() and (logvar <= hi + slack + 1e-5).all()
    assert logvar.max() > 0.5 and logvar.min() < -4.0  # the wild inputs do reach both bounds


def test_learned_termination_head() -> None:
    ens = DynamicsEnsemble(small_config(max_epochs=40), OBS, BOX, "cpu", learn_termination=True)
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(3000, OBS, generator=g) * 2 - 1
    action = torch.rand(3000, ACT, generator=g) * 2 - 1
    terminated = obs[:, 0] > 0.5
    ens.fit(obs, action, torch.zeros(3000), obs, terminated)
    test_obs = torch.rand(2000, OBS, generator=g) * 2 - 1
    test_act = torch.rand(2000, ACT, generator=g) * 2 - 1
    logit = ens.sample(test_obs, test_act, torch.Generator().manual_seed(0))[2]
    accuracy = ((logit > 0) == (test_obs[:, 0] > 0.5)).float().mean().item()
    assert accuracy > 0.95, accuracy
    with pytest.raises(ValueError, match="terminated"):
        ens.fit(obs, action, torch.zeros(3000), obs)


def test_rows_without_a_true_next_obs_train_reward_and_termination_but_not_the_next_state() -> None:
    """The rsl_rl adapter's case: an env that auto-resets without the final obs loses the next obs of
    every finished episode. Those rows hold the terminations (and, in locomotion, the fall penalties),
    so they must still train the reward and termination heads, while their placeholder next obs
    (here 50, or even NaN) must never become a next-state target.
    """
    ens = DynamicsEnsemble(small_config(max_epochs=40), OBS, BOX, "cpu", seed=0, learn_termination=True)
    obs, action, _, next_obs, _ = linear_system(3000)
    terminated = obs[:, 0] > 0.5
    reward = torch.where(terminated, -10.0, obs[:, 1])  # a penalty only the lost rows show
    placeholder = next_obs.clone()
    placeholder[terminated] = 50.0
    placeholder[terminated.nonzero()[::2, 0]] = float("nan")
    ens.fit(obs, action, reward, placeholder, terminated, next_obs_valid=~terminated)

    obs2, action2, _, next2, _ = linear_system(1000, seed=7)
    term2 = obs2[:, 0] > 0.5
    pred_next, pred_reward, logit = ens.sample(obs2, action2, torch.Generator().manual_seed(0))
    assert logit is not None
    assert ((logit > 0) == term2).float().mean().item() > 0.95
    deep = obs2[:, 0] > 0.7  # away from the step at 0.5, which a smooth model blurs
    assert pred_reward[deep].mean() < -8.0, pred_reward[deep].mean()  # the penalty is learned
    # The next state is learned from the known rows only, and the terminal region is extrapolated from
    # them (a model trained to "stay put" there, or towards the placeholder 50, is far off).
    delta_var = (next2 - obs2).var(0).mean()
    assert (pred_next - next2)[~term2].square().mean() < 0.05 * delta_var
    assert (pred_next - next2)[term2].square().mean() < 0.5 * delta_var
    with pytest.raises(ValueError, match="next_obs_valid"):
        ens.fit(obs, action, reward, next_obs, terminated, next_obs_valid=(~terminated).float())


def test_holdout_mse_leaves_out_unknown_next_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """Early stopping and the elites rank members on the holdout: an unknown next state (its target
    zeroed) must not count there either, or a member that predicts the true motion looks worse.
    """
    ens = DynamicsEnsemble(small_config(max_epochs=2), OBS, BOX, "cpu", seed=0)
    obs, action, reward, next_obs, _ = linear_system(600)
    valid = torch.arange(600) % 3 != 0
    scored: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    prediction_mse = ens.prediction_mse

    def spy(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        scored.append((target, weight))
        return prediction_mse(x, target, weight)

    monkeypatch.setattr(ens, "prediction_mse", spy)
    ens.fit(obs, action, reward, next_obs + 100.0 * ~valid.unsqueeze(-1), next_obs_valid=valid)
    assert len(scored) == 3  # before training, then after each of the 2 epochs
    for target, weight in scored:
        assert weight is not None
        unknown = (target[:, :-1] == 0).all(-1)  # the zeroed targets of the rows without a next obs
        assert 0 < int(unknown.sum()) < target.shape[0]
        assert torch.equal(weight[:, :-1], (~unknown).float().unsqueeze(-1).expand(-1, OBS))
        assert bool((weight[:, -1] == 1).all())  # every reward is known


def test_state_dict_round_trip_resumes_exactly() -> None:
    cfg = small_config(max_epochs=3)
    a = DynamicsEnsemble(cfg, OBS, BOX, "cpu", seed=0)
    a.fit(*linear_system(600, seed=1))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = DynamicsEnsemble(cfg, OBS, BOX, "cpu", seed=99)
    b.load_state_dict(torch.load(buf))
    assert b.elites == a.elites and b.version == a.version == 1
    obs, action = torch.randn(50, OBS), torch.rand(50, ACT)
    for x, y in zip(a.predict(obs, action)[:2], b.predict(obs, action)[:2], strict=True):
        assert torch.equal(x, y)
    sa = a.sample(obs, action, torch.Generator().manual_seed(5))
    sb = b.sample(obs, action, torch.Generator().manual_seed(5))
    assert torch.equal(sa[0], sb[0]) and torch.equal(sa[1], sb[1])
    data = linear_system(600, seed=2)
    ma, mb = a.fit(*data), b.fit(*data)
    assert ma == mb
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("fit_baseline", ["new_fit", "pre_fit"])
def test_early_stopping_stops_and_keeps_best_weights(fit_baseline: str) -> None:
    ens = DynamicsEnsemble(small_config(max_epochs=500, patience=2, fit_baseline=fit_baseline), OBS, BOX, "cpu")
    data = linear_system(500, noise=0.1)
    metrics = ens.fit(*data)
    assert 2 < metrics["epochs"] < 500 and metrics["stopped_by"] == "patience" and not metrics["capped"]
    assert metrics["members_below_pre_fit"] == 0 and metrics["members_discarded"] == 0  # from scratch: all improve
    # A training that only makes things worse (huge lr): with pre_fit every member keeps its old weights
    # (mbrl-lib); with new_fit (the paper's code) each keeps the best epoch of this training, worse or not.
    before = [p.detach().clone() for p in ens.parameters()]
    for group in ens.optimizer.param_groups:
        group["lr"] = 10.0
    again = ens.fit(*data)
    assert again["members_below_pre_fit"] == 4
    unchanged = all(torch.equal(p, q) for p, q in zip(ens.parameters(), before, strict=True))
    if fit_baseline == "pre_fit":
        assert again["epochs"] == 2 and unchanged and again["members_discarded"] == 4  # patience epochs
        assert again["holdout_mse"] == again["pre_fit_mse"]
    else:
        assert again["epochs"] == 3 and not unchanged and again["members_discarded"] == 0  # epoch 1, then patience
        assert all(new > old for new, old in zip(again["holdout_mse"], again["pre_fit_mse"], strict=True))


def test_a_fit_stopped_before_its_first_step_reports_the_kept_pre_fit_weights() -> None:
    """new_fit starts each member's best at inf; a member no epoch improved keeps its pre-fit weights, so its
    figure (and the elites) must be the pre-fit ones, not inf and members 0..num_elites-1.
    """
    ens = DynamicsEnsemble(small_config(), OBS, BOX, "cpu")
    data = linear_system(500)
    ens.fit(*data)
    with torch.no_grad():  # members 0 and 1 now predict badly: they must not be the elites
        for p in ens.net.parameters():
            p[:2].add_(torch.randn(p[:2].shape, generator=torch.Generator().manual_seed(0)))
    metrics = ens.fit(*data, should_stop=lambda: True)
    assert metrics["epochs"] == 0 and metrics["holdout_mse"] == metrics["pre_fit_mse"]
    assert math.isfinite(metrics["holdout_loss"])
    assert ens.elites == select_elites(metrics["pre_fit_mse"], 2) and not set(ens.elites) & {0, 1}
    assert metrics["members_below_pre_fit"] == 4  # all kept their pre-fit weights

def test_max_grad_steps_caps_a_training_part_way_through_an_epoch() -> None:
    data = linear_system(500)  # 100 held out, 400 to train on: 7 steps of 64 per epoch
    capped = DynamicsEnsemble(small_config(max_epochs=30, patience=30, max_grad_steps=10), OBS, BOX, "cpu")
    metrics = capped.fit(*data)
    assert (metrics["epochs"], metrics["grad_steps"], metrics["stopped_by"]) == (2, 10, "max_grad_steps")
    assert metrics["capped"]
    assert all(int(state["step"]) == 10 for state in capped.optimizer.state.values())
    # Before the cap binds, nothing changes: a cap of one epoch is exactly max_epochs=1.
    one_epoch = DynamicsEnsemble(small_config(max_epochs=1), OBS, BOX, "cpu").fit(*data)
    cap_of_seven = DynamicsEnsemble(small_config(max_epochs=30, patience=30, max_grad_steps=7), OBS, BOX, "cpu")
    by_steps, by_epochs = cap_of_seven.fit(*data), dict(one_epoch)
    assert (by_steps.pop("stopped_by"), by_epochs.pop("stopped_by")) == ("max_grad_steps", "max_epochs")
    assert by_steps == by_epochs and one_epoch["grad_steps"] == 7


@pytest.mark.parametrize("asks_before_stop", [1, 6, 9, 10])
def test_a_stop_request_ends_a_fit_within_one_gradient_step(asks_before_stop: int) -> None:
    """A shutdown must not wait out an epoch: on a big buffer one takes minutes."""
    data = linear_system(500)  # 7 steps of 64 per epoch
    answers = iter([False] * asks_before_stop + [True] * 1000)
    ens = DynamicsEnsemble(small_config(max_epochs=30, patience=30), OBS, BOX, "cpu")
    before = [p.detach().clone() for p in ens.parameters()]
    metrics = ens.fit(*data, should_stop=lambda: next(answers))
    # One ask before each epoch, then one before each step: 6 asks = 5 steps, 9 = one whole epoch,
    # 10 = one epoch and one step.
    expected = {1: (0, 0), 6: (1, 5), 9: (1, 7), 10: (2, 8)}[asks_before_stop]
    assert (metrics["epochs"], metrics["grad_steps"], metrics["stopped_by"]) == (*expected, "stop")
    assert all(int(state["step"]) == expected[1] for state in ens.optimizer.state.values())
    if expected[1] == 0:
        assert all(torch.equal(p, q) for p, q in zip(ens.parameters(), before, strict=True))
    assert ens.version == 1 and len(ens.elites) == 2


def test_normalizer() -> None:
    norm = Normalizer(3)
    x = torch.tensor([[1.0, 5.0, 2.0], [3.0, 5.0, 4.0]])
    norm.fit(x)
    torch.testing.assert_close(norm.mean, torch.tensor([2.0, 5.0, 3.0]))
    torch.testing.assert_close(norm.std, torch.tensor([1.0, 1.0, 1.0]))  # constant column -> 1.0
    torch.testing.assert_close(norm.denormalize(norm.normalize(x)), x)
    other = Normalizer(3)
    other.load_state_dict(norm.state_dict())
    assert torch.equal(other.normalize(x), norm.normalize(x))


def test_the_normaliser_is_fitted_on_the_training_rows_only() -> None:
    """MBPO's ``BNN.train`` splits off the holdout, then fits its scaler on the training rows: statistics of
    the holdout would leak into the inputs the models are scored on. The rows the normaliser saw and the holdout
    rows the first score read are disjoint and together every row.
    """
    ens = DynamicsEnsemble(small_config(max_epochs=1, holdout_ratio=0.25), OBS, BOX, "cpu", seed=0)
    obs, action, reward, next_obs, _ = linear_system(40)
    obs[::7] *= 100.0  # outliers: rows whose presence moves the statistics
    seen: dict[str, torch.Tensor] = {}
    fit_normaliser, score = ens.normalizer.fit, ens.prediction_mse

    def spy_fit(x: torch.Tensor) -> None:
        seen["fit"] = x.clone()
        fit_normaliser(x)

    def spy_score(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        seen.setdefault("holdout", ens.normalizer.denormalize(x))  # the pre-fit score: the holdout rows
        return score(x, *args, **kwargs)

    ens.normalizer.fit, ens.prediction_mse = spy_fit, spy_score  # type: ignore[method-assign]
    metrics = ens.fit(obs, action, reward, next_obs)
    assert seen["fit"].shape[0] == metrics["num_train"] == 30 and seen["holdout"].shape[0] == 10
    torch.testing.assert_close(ens.normalizer.mean, seen["fit"].mean(0))
    rows = torch.cat((seen["fit"], seen["holdout"]))
    every = ens.inputs(obs, action)
    assert torch.cdist(seen["holdout"], seen["fit"]).min() > 1e-3  # no holdout row among those fitted on
    torch.testing.assert_close(rows[rows[:, 0].argsort()], every[every[:, 0].argsort()], atol=1e-4, rtol=1e-4)


def test_bad_inputs_are_explained() -> None:
    ens = DynamicsEnsemble(small_config(), OBS, BOX, "cpu")
    with pytest.raises(ValueError, match=r"expected \(\.\.\., 3\)"):
        ens.predict(torch.zeros(4, 5), torch.zeros(4, ACT))
    with pytest.raises(ValueError, match="Box action"):
        ens.predict(torch.zeros(4, OBS), torch.zeros(4, ACT + 1))
    with pytest.raises(ValueError, match="non-finite"):
        obs, action, reward, next_obs, term = linear_system(10)
        ens.fit(obs, action, reward * float("nan"), next_obs, term)
    with pytest.raises(ValueError, match="weight_decay"):
        DynamicsEnsemble(small_config(weight_decay=[1e-5]), OBS, BOX, "cpu")


@pytest.mark.skipif(not bf16_autocast_supported("cpu"), reason="no native bf16 on this CPU")
def test_bf16_trains_and_samples() -> None:
    ens = DynamicsEnsemble(small_config(max_epochs=15), OBS, BOX, "cpu", precision="bf16")
    obs, action, reward, next_obs, term = linear_system(1000)
    metrics = ens.fit(obs, action, reward, next_obs, term)
    assert metrics["holdout_loss"] < 0.1 * (next_obs - obs).var(0).mean()
    next_pred, reward_pred, _ = ens.sample(obs, action, torch.Generator().manual_seed(0))
    assert next_pred.dtype == torch.float32 and torch.isfinite(next_pred).all() and torch.isfinite(reward_pred).all()


@pytest.mark.skipif(not bf16_autocast_supported("cpu"), reason="no native bf16 on this CPU")
def test_bf16_predictions_and_gradients_are_close_to_fp32() -> None:
    """Same weights: bf16 means/variances and the fp32 master gradients match fp32 to bf16 accuracy."""
    cfg = small_config(hidden_sizes=[64, 64, 64], weight_decay=[1e-5, 2e-5, 2e-5, 3e-5])
    fp32 = DynamicsEnsemble(cfg, OBS, BOX, "cpu", seed=3)
    bf16 = DynamicsEnsemble(cfg, OBS, BOX, "cpu", seed=3, precision="bf16")
    obs, action, reward, next_obs, _ = linear_system(256)
    for ens in (fp32, bf16):
        ens.normalizer.fit(ens.inputs(obs, action))
    p32, p16 = fp32.predict(obs, action), bf16.predict(obs, action)
    scale = p32.mean.abs().max()
    assert (p16.mean - p32.mean).abs().max() < 0.02 * scale
    assert torch.allclose(p16.var, p32.var, rtol=0.01)
    grads = []
    for ens in (fp32, bf16):
        ens.zero_grad(set_to_none=True)
        ens.loss(obs, action, reward, next_obs).backward()
        grads.append([p.grad for p in ens._params()])
    for g32, g16 in zip(*grads, strict=True):
        assert g16.dtype == torch.float32
        assert (g16 - g32).norm() < 0.02 * g32.norm()


def test_without_learn_reward_there_is_no_reward_head_and_unknown_states_leave_nothing_to_fit() -> None:
    """A given reward (mbpo.models.rules): the ensemble predicts the next state only; rows whose next state is
    unknown then have no target at all, and a batch of only those costs nothing instead of 0/0.
    """
    ens = DynamicsEnsemble(small_config(max_epochs=20), OBS, BOX, "cpu", seed=0, learn_reward=False)
    assert ens.target_dim == OBS and ens.net.layers[-1].out_features == 2 * OBS
    obs, action, reward, next_obs, _ = linear_system(600)
    before = ens.evaluate(obs, action, reward, next_obs)
    fit = ens.fit(obs, action, torch.full((600,), float("nan")), next_obs)  # the reward is never looked at...
    assert fit["holdout_loss"] < 0.1 * float(before.mean())  # ...and the next state is learned
    next_pred, reward_pred, _ = ens.sample(obs[:10], action[:10], torch.Generator().manual_seed(0))
    assert reward_pred is None and next_pred.shape == (10, OBS)
    x, target, _, weight = fit_data(ens, obs[:8], action[:8], reward[:8], next_obs[:8], None,
                                         torch.zeros(8, dtype=torch.bool))
    assert weight is not None and not weight.any()
    loss = ens._loss(x.unsqueeze(0).expand(ens.ensemble_size, -1, -1), target.expand(ens.ensemble_size, -1, -1),
                     None, weight)
    assert torch.isfinite(loss)


@pytest.mark.gpu
def test_sample_takes_a_generator_made_for_cuda_without_an_index(cuda_device: str) -> None:
    """``torch.Generator(device="cuda").device`` is ``cuda``, the model's ``cuda:0``: the same device."""
    ens = DynamicsEnsemble(small_config(), OBS, BOX, cuda_device, seed=0)
    obs, action = torch.randn(64, OBS, device=cuda_device), torch.rand(64, ACT, device=cuda_device)
    next_obs, _, _ = ens.sample(obs, action, torch.Generator(device="cuda").manual_seed(0))
    assert next_obs.shape == (64, OBS) and next_obs.device == torch.device(cuda_device)
