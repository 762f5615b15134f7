"""One model step of a dynamics ensemble for a batch of rollout branches, each through a random elite.

Written against what it needs of the ensemble (:class:`SamplingModel`), so this module does not import the
ensemble's: :meth:`mbpo.models.ensemble.DynamicsEnsemble.sample` calls it.
"""

from __future__ import annotations

from typing import Protocol

import torch

from mbpo.device.plan import same_device
from mbpo.models.normalizer import Normalizer

__all__ = ["sample_step", "SamplingModel", "ROW_QUANTUM"]

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
    if not same_device(generator.device, model.device):
        raise ValueError(f"sample() got a generator on {generator.device}; expected one on {model.device}")
    b, e, d = obs.shape[0], model.num_elites, model.target_dim
    x = model.normalizer.normalize(model.inputs(obs, action))
    rows = -(-b // (e * ROW_QUANTUM)) * ROW_QUANTUM  # per elite, whole tiles
    pad = rows * e - b  # slots past the last row: they compute row 0 again and are dropped
    perm = torch.randperm(b, generator=generator, device=model.device)
    eps = torch.randn((b, d), generator=generator, device=model.device)
    # Elite j gets permuted rows j, j + E, j + 2E, ...: gathered straight into an [E, rows] layout, so
    # each block is contiguous and the Gaussian draw happens while the block's outputs are in cache.
    deal = torch.cat((perm, perm.new_zeros(pad))).view(rows, e).t().reshape(-1)
    xp = x.index_select(0, deal).view(e, rows, model.in_dim)
    eps = torch.cat((eps, eps.new_zeros(pad, d))).view(rows, e, d).transpose(0, 1)
    draw = torch.empty(e, rows, d, device=model.device)
    logit = torch.empty(e, rows, device=model.device) if model.learn_termination else None
    params, block = model.inference_params(model.elite_index)
    step = min(block or rows, rows if batch_size is None else batch_size // e)
    step = max(step // ROW_QUANTUM, 1) * ROW_QUANTUM
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
    draw = draw.view(-1, d).index_select(0, order)
    out_logit = None if logit is None else logit.view(-1).index_select(0, order)
    reward = draw[:, -1] if model.learn_reward else None
    return obs + draw[:, : model.obs_dim].to(obs.dtype), reward, out_logit

