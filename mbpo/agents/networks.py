"""Network building blocks shared by the learners and the dynamics ensemble.

* :func:`mlp` — a plain ``nn.Linear`` stack (the actor's trunk).
* :class:`BatchedLinear` / :class:`BatchedMLP` — ``members`` independent
  networks whose weights are shaped ``[members, in, out]`` and run as ONE
  ``torch.baddbmm`` per layer (mbrl-lib's ``EnsembleLinearLayer`` idea): the
  twin critics (members=2) and the dynamics ensemble (mbpo.models.ensemble; by
  default 7 members, 4x200 SiLU) cost one kernel per layer instead of one per member
  (a one-output fp32 layer on a CPU: one multiply-and-sum, see :class:`BatchedLinear`).
* :class:`TanhGaussianActor` — the SAC policy: a Gaussian squashed by tanh,
  returning action and log-prob from the same pre-tanh draw in one pass.
* :class:`RunningObsNorm` — running observation mean/variance kept as module
  buffers, so they travel with the actor's weights wherever those go.
* :func:`init_affine_` — the reference codes' weight initialisations (``agent.sac.weight_init``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from mbpo.agents.batch_renorm import BatchRenorm

__all__ = [
    "mlp",
    "BatchedLinear",
    "BatchedMLP",
    "TanhGaussianActor",
    "RunningObsNorm",
    "squashed_gaussian_sample",
    "init_affine_",
    "WEIGHT_INITS",
    "LOG_STD_MIN",
    "LOG_STD_MAX",
]

# Hard clamp of the actor's log-std, as in the SAC authors' softlearning code (which MBPO
# builds on) and Stable-Baselines3. torchrl's TanhNormal takes the resulting scale as is,
# so its SACLoss is an exact oracle for this parametrisation.
LOG_STD_MIN = -20.0
LOG_STD_MAX = 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)

WEIGHT_INITS = ("default", "xavier", "lecun")
"""Weight initialisations of the actor and critics (agent.sac.weight_init): ``default`` is torch's ``nn.Linear``
init, ``xavier`` REDQ's and DroQ's code (``xavier_uniform_``, gain 1), ``lecun`` flax's ``nn.Dense`` default
(CrossQ's code: ``lecun_normal``, a truncated normal); both zero the biases."""
_TRUNCATED_STD = 0.87962566103423978
"""Standard deviation of a standard normal truncated to [-2, 2]: jax's ``variance_scaling`` divides by it so the
truncated draw has the variance asked for."""


@torch.no_grad()
def init_affine_(weight: torch.Tensor, bias: torch.Tensor, scheme: str) -> None:
    """Re-draw an affine map's ``weight`` (viewed as ``[..., fan_in, fan_out]``, any leading dims being independent
    maps) and zero its ``bias`` as ``scheme`` (one of :data:`WEIGHT_INITS`) does; ``default`` leaves both alone.

    xavier: ``U(-b, b)``, ``b = sqrt(6 / (fan_in + fan_out))`` (torch's ``xavier_uniform_``, which the REDQ and
    DroQ codes apply to every ``nn.Linear``). lecun: ``N(0, 1 / fan_in)`` truncated at two standard deviations
    and rescaled to keep that variance (jax's ``lecun_normal``, flax ``nn.Dense``'s default in sbx's CrossQ).
    Both take the fans of one map, so ``weight`` may be a BatchedLinear's ``[members, in, out]`` or an
    ``nn.Linear``'s ``weight.T``.
    """
    if scheme == "default":
        return
    fan_in, fan_out = weight.shape[-2], weight.shape[-1]
    if scheme == "xavier":
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        weight.uniform_(-bound, bound)
    elif scheme == "lecun":
        std = math.sqrt(1.0 / fan_in) / _TRUNCATED_STD
        nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std)
    else:
        raise ValueError(f"weight init {scheme!r} is not one of {', '.join(WEIGHT_INITS)}")
    bias.zero_()


def mlp(
    in_dim: int, hidden_sizes: list[int] | tuple[int, ...], out_dim: int, activation: type[nn.Module] = nn.ReLU
) -> nn.Sequential:
    """``Linear -> activation`` for each hidden size, then a linear output layer."""
    layers: list[nn.Module] = []
    for width in hidden_sizes:
        layers += [nn.Linear(in_dim, width), activation()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class BatchedLinear(nn.Module):
    """``members`` independent affine maps, ``y[m] = x[m] @ weight[m] + bias[m]``, in one baddbmm (one output
    in fp32 on a CPU: one multiply-and-sum, which CPU bmm kernels, slow at matrix-vector shapes, lose to).

    ``weight`` is ``[members, in, out]`` (note: the transpose of ``nn.Linear``'s
    ``[out, in]``, so the matmul needs no transpose) and ``bias`` is
    ``[members, 1, out]``. Each member is initialised like ``nn.Linear``.
    """

    def __init__(self, members: int, in_features: int, out_features: int) -> None:
        super().__init__()
        if members < 1 or in_features < 1 or out_features < 1:
            raise ValueError(
                f"BatchedLinear needs positive sizes, got members={members}, "
                f"in_features={in_features}, out_features={out_features}"
            )
        self.members = members
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(members, 1, out_features))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """nn.Linear's default: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)), per member."""
        bound = 1.0 / math.sqrt(self.in_features)
        self.weight.uniform_(-bound, bound)
        self.bias.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor, detach_params: bool = False, members: torch.Tensor | None = None
                ) -> torch.Tensor:
        """``x`` is ``[members, B, in]`` (one batch per member) or ``[B, in]`` (shared by all).

        ``detach_params=True`` uses the weights as constants: gradients still flow to
        ``x`` but not to the parameters (SAC's actor loss through the critics). ``members``
        (indices) runs only those members (REDQ's target over a random subset of the critics).
        """
        weight, bias = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        if members is not None:
            weight, bias = weight[members], bias[members]
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(weight.shape[0], -1, -1)
        if (weight.shape[-1] == 1 and x.device.type == "cpu" and x.dtype == weight.dtype
                and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling()):
            # One fp32 output (the critics' Q): CPU bmm kernels run a batched matrix-vector product several times
            # slower than this multiply-and-sum, forward and backward (the same sum in another order). GPUs keep
            # the bmm (not measured there), and so does a compiled update (agent.compile), whose fused sum would
            # no longer match eager's to the compile tests' tolerance.
            if x.shape[0] != weight.shape[0]:  # what baddbmm refuses, broadcasting would hide
                raise ValueError(f"BatchedLinear: input for {x.shape[0]} members, weights of {weight.shape[0]}")
            return (x * weight.transpose(-1, -2)).sum(-1, keepdim=True) + bias
        return torch.baddbmm(bias, x, weight)

    def extra_repr(self) -> str:
        return f"members={self.members}, in_features={self.in_features}, out_features={self.out_features}"


class BatchedMLP(nn.Module):
    """``members`` independent MLPs of the same shape evaluated together; output ``[members, B, out]``.

    Every hidden layer is ``Linear -> dropout -> LayerNorm -> activation -> batch renorm`` (the order of the
    critics of DroQ and CrossQ in their reference code, araffin/sbx), each part optional:

    * ``layer_norm``: normalise with a learned scale and shift per member (``nn.LayerNorm`` in each member);
    * dropout: a forward pass given ``dropout`` masks (one per hidden layer, ``[members, B, width]`` holding 0
      or ``1 / (1 - p)``) multiplies them in; the caller draws them from its own generator, so a run's random
      streams stay its own (``torch.nn.Dropout`` would draw from torch's global one);
    * ``batch_renorm``: :class:`~mbpo.agents.batch_renorm.BatchRenorm` on the input and after every hidden
      activation, with ``batch_renorm`` as its keyword arguments (``{}`` for CrossQ's defaults);
    * ``fp32_output``: the output layer runs in fp32 even under bf16 autocast (the critics: near Q = 300 bf16's
      spacing is 2, about one step's reward, so a bf16 Q would quantise the TD error at the scale of what it
      must learn; the usual mixed-precision rule keeps the hidden matmuls in bf16 and the last layer in fp32);
    * ``weight_init``: one of :data:`WEIGHT_INITS`, per member (:func:`init_affine_`).
    """

    def __init__(
        self,
        members: int,
        in_dim: int,
        hidden_sizes: list[int] | tuple[int, ...],
        out_dim: int,
        activation: type[nn.Module] = nn.ReLU,
        layer_norm: bool = False,
        batch_renorm: dict[str, Any] | None = None,
        fp32_output: bool = False,
        weight_init: str = "default",
    ) -> None:
        super().__init__()
        sizes = [in_dim, *hidden_sizes, out_dim]
        self.members = members
        self.fp32_output = fp32_output
        layers = [BatchedLinear(members, i, o) for i, o in itertools.pairwise(sizes)]
        for layer in layers:
            init_affine_(layer.weight, layer.bias, weight_init)
        self.layers = nn.ModuleList(layers)
        self.activation = activation()
        self.norm_scale = nn.ParameterList(
            nn.Parameter(torch.ones(members, 1, h)) for h in (hidden_sizes if layer_norm else ()))
        self.norm_shift = nn.ParameterList(
            nn.Parameter(torch.zeros(members, 1, h)) for h in (hidden_sizes if layer_norm else ()))
        renorm_widths = [] if batch_renorm is None else [in_dim, *hidden_sizes]
        self.renorms = nn.ModuleList(BatchRenorm(h, (members,), **(batch_renorm or {})) for h in renorm_widths)

    def forward(self, x: torch.Tensor, detach_params: bool = False, members: torch.Tensor | None = None,
                dropout: Sequence[torch.Tensor] | None = None, batch_stats: bool = False) -> torch.Tensor:
        """``x``: ``[members, B, in]`` or ``[B, in]`` (shared); see :meth:`BatchedLinear.forward`.

        ``members``: indices of the members to run (``x`` then has that many rows if it is per member);
        ``dropout``: the masks of this forward pass; ``batch_stats``: batch renorm from this batch's
        statistics (the update's critic loss) rather than the running ones.
        """
        renorms = list(self.renorms)
        if renorms:
            if members is not None and batch_stats:
                raise ValueError("BatchedMLP: a subset of members runs with batch renorm's running statistics "
                                 "only (batch_stats=False)")
            if x.dim() == 2:
                x = x.unsqueeze(0).expand(self.members if members is None else members.numel(), -1, -1)
            x = renorms[0](x, batch_stats, detach_params, members)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            if i == last and self.fp32_output:
                with torch.autocast(x.device.type, enabled=False):  # a no-op outside autocast (fp32 already)
                    return layer(x.float(), detach_params, members)
            x = layer(x, detach_params, members)
            if i < last:
                if dropout is not None:
                    x = x * dropout[i].to(x.dtype)
                if len(self.norm_scale):
                    scale, shift = self.norm_scale[i], self.norm_shift[i]
                    if members is not None:
                        scale, shift = scale[members], shift[members]
                    if detach_params:
                        scale, shift = scale.detach(), shift.detach()
                    x = F.layer_norm(x, x.shape[-1:]) * scale + shift
                x = self.activation(x)
                if renorms:
                    x = renorms[i + 1](x, batch_stats, detach_params, members)
        return x


def squashed_gaussian_sample(
    mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised tanh-Gaussian draw ``tanh(mean + std * eps)`` and its log-prob, ``(..., A)`` -> ``(..., )``.

    The log-prob is scored on the pre-tanh value (never via atanh of the action,
    which is wrong once tanh saturates), with the tanh Jacobian in the stable form
    ``log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u))`` (torch's TanhTransform).
    ``log N(u; mean, std) = -eps^2/2 - log_std - log(2 pi)/2`` since ``u - mean = std * eps``.
    """
    u = mean + log_std.exp() * eps
    log_prob = -0.5 * eps.square() - log_std - _HALF_LOG_2PI - 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))
    return torch.tanh(u), log_prob.sum(-1)


class RunningObsNorm(nn.Module):
    """``clamp((obs - mean) / sqrt(var + 1e-8), -10, 10)`` with mean and variance of every observation seen.

    The statistics are buffers, not parameters: no optimizer touches them, but
    ``state_dict`` carries them, so a module holding this one publishes, checkpoints
    and restores them with its weights. Before the first :meth:`update` it is the
    identity (mean 0, var 1). Epsilon and clip are Stable-Baselines3's VecNormalize
    defaults. :meth:`update` merges a batch with Chan et al.'s parallel formula
    (exact for any split of the data) and ignores rows that are not finite, so one
    NaN observation cannot poison the statistics.
    """

    EPS = 1e-8
    CLIP = 10.0

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.mean: torch.Tensor
        self.var: torch.Tensor
        self.count: torch.Tensor
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs - self.mean) * torch.rsqrt(self.var + self.EPS)).clamp(-self.CLIP, self.CLIP)

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        """Merge the finite rows of ``obs`` ``(B, dim)`` into the statistics (no host sync)."""
        x = obs.to(torch.float64)
        finite = torch.isfinite(x).all(-1, keepdim=True)
        x = torch.where(finite, x, 0.0)
        n_b = finite.sum().to(torch.float64)
        mean_b = x.sum(0) / n_b.clamp(min=1)
        var_b = torch.where(finite, (x - mean_b).square(), 0.0).sum(0) / n_b.clamp(min=1)
        n_a, mean_a, var_a = self.count, self.mean.double(), self.var.double()
        n = n_a + n_b
        delta = mean_b - mean_a
        mean = mean_a + delta * (n_b / n.clamp(min=1))
        var = (var_a * n_a + var_b * n_b + delta.square() * (n_a * n_b / n.clamp(min=1))) / n.clamp(min=1)
        self.mean.copy_(torch.where(n > 0, mean, mean_a))
        self.var.copy_(torch.where(n > 0, var, var_a))
        self.count.copy_(n)


class TanhGaussianActor(nn.Module):
    """SAC policy: an MLP giving mean and log-std of a Gaussian, squashed to ``[-1, 1]`` by tanh.

    Actions live in ``[-1, 1]``; mapping to the env's Box bounds is the agent's job
    (so the critics see normalised actions whatever the env's scale). With
    ``obs_norm`` the actor normalises its input with a :class:`RunningObsNorm`, so
    every copy of its weights (collectors, rollouts, checkpoints) normalises alike.
    With ``batch_renorm`` (CrossQ: keyword arguments of
    :class:`~mbpo.agents.batch_renorm.BatchRenorm`) the input and every hidden
    activation are batch-renormalised; only the update's actor loss uses batch
    statistics, every other forward pass the running ones. ``weight_init`` (one of
    :data:`WEIGHT_INITS`) treats the output layer as its two heads, mean and log-std,
    as REDQ's and sbx's actors hold them (``xavier``'s bound counts one head's width).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: list[int] | tuple[int, ...],
        activation: type[nn.Module] = nn.ReLU,
        obs_norm: bool = False,
        batch_renorm: dict[str, Any] | None = None,
        weight_init: str = "default",
    ) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self.obs_norm: nn.Module = RunningObsNorm(obs_dim) if obs_norm else nn.Identity()
        self.net = mlp(obs_dim, hidden_sizes, 2 * act_dim, activation)
        linears = [m for m in self.net if isinstance(m, nn.Linear)]
        for linear in linears[:-1]:
            init_affine_(linear.weight.T, linear.bias, weight_init)
        for head in (slice(0, act_dim), slice(act_dim, 2 * act_dim)):  # mean, log-std
            init_affine_(linears[-1].weight[head].T, linears[-1].bias[head], weight_init)
        renorm_widths = [] if batch_renorm is None else [obs_dim, *hidden_sizes]
        self.renorms = nn.ModuleList(BatchRenorm(h, **(batch_renorm or {})) for h in renorm_widths)

    def forward(self, obs: torch.Tensor, batch_stats: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)``, each ``(B, act_dim)``, float32 even under bf16 autocast.

        The distribution maths (exp, softplus, the log-prob sum) stays in fp32: bf16
        there would cost entropy-tuning accuracy and save nothing measurable.
        """
        x = self.obs_norm(obs)
        if len(self.renorms):
            x = self.renorms[0](x, batch_stats)
            for j, module in enumerate(self.net):  # Linear, activation, ..., Linear: renorm after each activation
                x = module(x)
                if j % 2 == 1:
                    x = self.renorms[j // 2 + 1](x, batch_stats)
        else:
            x = self.net(x)
        mean, log_std = x.float().chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor, eps: torch.Tensor, batch_stats: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Action in ``[-1, 1]`` ``(B, act_dim)`` and its log-prob ``(B,)`` for noise ``eps ~ N(0, I)``."""
        mean, log_std = self(obs, batch_stats)
        return squashed_gaussian_sample(mean, log_std, eps)
