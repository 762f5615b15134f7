"""One model step of a dynamics ensemble for a batch of rollout branches, each through a random elite.

Written against what it needs of the ensemble (:class:`SamplingModel`), so this module does not import the
ensemble's: :meth:`mbpo.models.ensemble.DynamicsEnsemble.sample` calls it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import torch

from mbpo.device.plan import same_device
from mbpo.models.normalizer import Normalizer

__all__ = ["sample_step", "sample_step_scored", "one_vs_rest_kl", "pairwise_gjs", "ScoreFn", "SamplingModel",
           "ROW_QUANTUM"]

ScoreFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""A model step's uncertainty per row: ``(mean, logvar [E, B, d] of every elite, chosen elite (B,)) -> (B,)``."""

ROW_QUANTUM = 32
"""Sampling runs every matmul and activation on a multiple of this many rows per member. On CPU a row in a
partial matmul tile rounds differently, and so do the last elements of an elementwise op (exp, SiLU) past the
vector loop's 32 floats; with whole tiles a row's result does not depend on how many rows share its forward,
so model.rollout_batch_size changes no result. (On CUDA, cuBLAS picks its kernels by size: equal up to rounding.)"""


class SamplingModel(Protocol):
    """What :func:`sample_step` uses of a dynamics ensemble."""

    device: torch.device
    num_elites: int
    target_dim: int
    in_dim: int
    obs_dim: int
    learn_reward: bool
    learn_termination: bool
    normalizer: Normalizer
    elite_index: torch.Tensor

    def inputs(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor: ...

    def inference_params(self, members: torch.Tensor | None = None) -> tuple[list[torch.Tensor], int]: ...

    def raw(self, x: torch.Tensor, params: list[torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]: ...


@torch.no_grad()
def sample_step(
    model: SamplingModel, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator,
    batch_size: int | None = None, deterministic: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:  # fmt: skip
    """One model step for ``B`` start states, each through a uniformly random elite, in one batched forward.

    The batch is randomly permuted and dealt round-robin to the ``E`` elites
    (``[E, ceil(B/E), in]``, chunk sizes differ by at most one); only the
    elites' weights run, in row blocks of at most ``batch_size`` rows in all
    (and of ``_CPU_ROW_BLOCK`` per elite on CPU). Returns ``next_obs (B, obs_dim)``,
    ``reward (B,)`` (None without ``learn_reward``) and the termination logit ``(B,)``
    (None without a head), with Gaussian noise from ``generator`` (``deterministic``: the
    elite's mean; the elite deal is still random). The draws do not depend on ``batch_size``,
    and on CPU no result does (``ROW_QUANTUM``).
    """
    b, e, d = obs.shape[0], model.num_elites, model.target_dim
    x, perm, eps = _inputs_and_draws(model, obs, action, generator)
    rows = -(-b // (e * ROW_QUANTUM)) * ROW_QUANTUM  # per elite, whole tiles
    pad = rows * e - b  # slots past the last row: they compute row 0 again and are dropped
    # Elite j gets permuted rows j, j + E, j + 2E, ...: gathered straight into an [E, rows] layout, so
    # each block is contiguous and the Gaussian draw happens while the block's outputs are in cache.
    deal = torch.cat((perm, perm.new_zeros(pad))).view(rows, e).t().reshape(-1)
    xp = x.index_select(0, deal).view(e, rows, model.in_dim)
    eps = torch.cat((eps, eps.new_zeros(pad, d))).view(rows, e, d).transpose(0, 1)
    draw = torch.empty(e, rows, d, device=model.device)
    logit = torch.empty(e, rows, device=model.device) if model.learn_termination else None
    params, block = model.inference_params(model.elite_index)
    step = _block_rows(block, rows, batch_size, e)
    for s in range(0, rows, step):
        at = slice(s, s + step)
        mean, logvar, block_logit = model.raw(xp[:, at], params)
        if deterministic:
            draw[:, at] = mean
        else:
            torch.add(mean, (0.5 * logvar).exp() * eps[:, at], out=draw[:, at])  # not addcmul: same rounding
        if logit is not None:
            assert block_logit is not None  # learn_termination: every block has its logit
            logit[:, at] = block_logit
    # Back to input order: row i was dealt to permuted position k = inv[i], i.e. elite k % E, slot k // E.
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(b, device=model.device)
    order = inv % e * rows + inv // e
    out_logit = None if logit is None else logit.view(-1).index_select(0, order)
    return *_step_outputs(model, obs, draw.view(-1, d).index_select(0, order)), out_logit



@torch.no_grad()
def sample_step_scored(
    model: SamplingModel, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator,
    batch_size: int | None = None, deterministic: bool = False, measure: ScoreFn | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:  # fmt: skip
    """:func:`sample_step`, plus each row's uncertainty (``measure``: None or :func:`one_vs_rest_kl`, M2AC's;
    :func:`pairwise_gjs`, MACURA's), for which every elite predicts every row (``E`` times the forward FLOPs).
    The same random draws as :func:`sample_step` (the
    elite deal, then the Gaussian noise): a row goes through the elite it would there with the same noise,
    equal up to rounding (the forwards are shaped differently). Rows run in whole ``ROW_QUANTUM`` tiles, at
    most ``batch_size`` rows in all per block, and each block keeps only its rows' chosen prediction and
    score, so the working memory stays that of :func:`sample_step` plus one block of every elite's outputs.
    """
    b, e, d = obs.shape[0], model.num_elites, model.target_dim
    measure = one_vs_rest_kl if measure is None else measure
    x, perm, eps = _inputs_and_draws(model, obs, action, generator)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(b, device=model.device)
    chosen, eps = inv % e, eps.index_select(0, inv)  # row i: permuted position inv[i], elite inv[i] % E
    params, block = model.inference_params(model.elite_index)
    step = _block_rows(block, b, batch_size, e)
    pad = -b % ROW_QUANTUM  # the last block: whole tiles, not a whole step
    xp = torch.cat((x, x[:1].expand(pad, -1))) if pad else x
    draw = torch.empty(b, d, device=model.device)
    score = torch.empty(b, device=model.device)
    logit = torch.empty(b, device=model.device) if model.learn_termination else None
    for s in range(0, b, step):
        n = min(step, b - s)
        mean, logvar, block_logit = model.raw(xp[s : s + step], params)  # [E, rows, d]: every elite, every row
        mean, logvar = mean[:, :n].float(), logvar[:, :n].float()
        pick, rows = chosen[s : s + n], torch.arange(n, device=model.device)
        draw[s : s + n] = mean[pick, rows] if deterministic else \
            mean[pick, rows] + (0.5 * logvar[pick, rows]).exp() * eps[s : s + n]
        score[s : s + n] = measure(mean, logvar, pick)
        if logit is not None:
            assert block_logit is not None  # learn_termination: every block has its logit
            logit[s : s + n] = block_logit[:, :n][pick, rows]
    return *_step_outputs(model, obs, draw), logit, score


def _inputs_and_draws(
    model: SamplingModel, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The normalized inputs, the elite deal's permutation, then the Gaussian noise: one place for the order
    of the draws, so that scored and plain sampling send a row through the same elite with the same noise.
    """
    if not same_device(generator.device, model.device):
        raise ValueError(f"sample() got a generator on {generator.device}; expected one on {model.device}")
    b = obs.shape[0]
    x = model.normalizer.normalize(model.inputs(obs, action))
    perm = torch.randperm(b, generator=generator, device=model.device)
    eps = torch.randn((b, model.target_dim), generator=generator, device=model.device)
    return x, perm, eps


def _block_rows(block: int, rows: int, batch_size: int | None, e: int) -> int:
    """Rows per elite in one forward: the model's CPU block, at most ``batch_size`` rows over all ``e``
    elites, in whole ``ROW_QUANTUM`` tiles (at least one).
    """
    step = min(block or rows, rows if batch_size is None else batch_size // e)
    return max(step // ROW_QUANTUM, 1) * ROW_QUANTUM


def _step_outputs(
    model: SamplingModel, obs: torch.Tensor, draw: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """``next_obs`` (the drawn delta added to ``obs``) and the reward (the last target, None without one)."""
    reward = draw[:, -1] if model.learn_reward else None
    return obs + draw[:, : model.obs_dim].to(obs.dtype), reward


def one_vs_rest_kl(mean: torch.Tensor, logvar: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """M2AC's uncertainty of a model step (Pan et al. 2020, "Trust the Model When It Is Confident"): the KL
    divergence from the chosen elite's Gaussian to the Gaussian that moment-matches the other elites' mixture,
    summed over the predicted dimensions. ``mean``/``logvar`` ``[E, B, d]`` (E >= 2), ``chosen`` ``(B,)``.
    Large where the elites disagree (the mixture's mean is far, in its own spread) or where the chosen elite
    is far more or less certain than the rest.
    """
    e = mean.shape[0]
    pick = torch.nn.functional.one_hot(chosen, e).t().unsqueeze(-1).to(mean.dtype)  # [E, B, 1]
    var = logvar.exp()
    mu_c, var_c = (mean * pick).sum(0), (var * pick).sum(0)
    rest = (1 - pick) / (e - 1)
    mu_r = (mean * rest).sum(0)
    var_r = ((var + (mean - mu_r) ** 2) * rest).sum(0)  # the mixture's variance: mean variance + spread of means
    return 0.5 * (var_r.log() - var_c.log() - 1 + var_c / var_r + (mu_r - mu_c) ** 2 / var_r).sum(-1)


def pairwise_gjs(mean: torch.Tensor, logvar: torch.Tensor, chosen: torch.Tensor | None = None) -> torch.Tensor:
    """MACURA's uncertainty of a model step (Frauenknecht et al. 2024, "Trust the Model Where It Trusts Itself"):
    the geometric Jensen-Shannon divergence of skew 1/2 (Nielsen 2019) between the Gaussians of each pair of
    elites, summed over the predicted dimensions and averaged over the ``E(E-1)/2`` pairs, as the authors' code
    (``mbrl/util/distance_measures.py``: ``calc_pairwise_symmetric_uncertainty_for_measure_function`` with
    ``calc_uncertainty_score_genShen``). Per pair and dimension it is
    ``(dmu^2 / (2 (v_i + v_j)) + ln((v_i + v_j) / (2 sqrt(v_i v_j)))) / 2``: their closed form, rearranged so
    that no large terms cancel. ``mean``/``logvar`` ``[E, B, d]`` (E >= 2). Symmetric, zero where the elites
    agree, the same whichever elite a row goes through (``chosen`` is unused) and under any per-dimension
    rescaling of the targets.
    """
    e = mean.shape[0]
    i, j = torch.triu_indices(e, e, 1, device=mean.device)
    mean_i, mean_j, logvar_i, logvar_j = mean[i], mean[j], logvar[i], logvar[j]  # [pairs, B, d]
    spread = (mean_i - mean_j).square() / (2 * (logvar_i.exp() + logvar_j.exp()))
    log_ratio = torch.logaddexp(logvar_i, logvar_j) - math.log(2.0) - 0.5 * (logvar_i + logvar_j)  # ln(AM / GM)
    return 0.5 * (spread + log_ratio).sum(-1).mean(0)
