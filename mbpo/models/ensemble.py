"""MBPO's probabilistic dynamics ensemble: batched Gaussian MLPs, their loss, rollout sampling.

Each of ``ensemble_size`` members maps the normalised ``(obs, action)`` to a
diagonal Gaussian over ``[next_obs - obs, reward]`` (raw units: targets are not
standardised, as in MBPO, so holdout MSE is in the env's units; without
``learn_reward``, when the task's reward is given, over ``next_obs - obs`` only) and,
with ``learn_termination``, one Bernoulli logit for ``terminated``. All members run as
one :class:`~mbpo.agents.networks.BatchedMLP` (weights ``[members, in, out]``,
one baddbmm per layer): no Python loop over members anywhere.

The loss is MBPO's (Janner et al. 2019): Gaussian NLL + learned log-variance
bound penalty + per-layer L2. :meth:`DynamicsEnsemble.fit` checks and normalises
real data and hands the epochs (holdout, bootstrap, early stopping, elites) to
:mod:`mbpo.models.training`. Deviation from MBPO: the log-variance bounds are
per member (``[M, 1, D]``) rather than shared, so members train fully independently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from envs.device import restore_generator
from mbpo.agents.networks import BatchedLinear, BatchedMLP
from mbpo.config import ModelConfig
from mbpo.device.precision import resolve_precision
from mbpo.device.state import cpu_copy
from mbpo.models.losses import WeightDecay, mean_per_member
from mbpo.models.normalizer import Normalizer
from mbpo.models.sampling import ROW_QUANTUM, ScoreFn, sample_step, sample_step_scored
from mbpo.models.training import fit_data, fit_ensemble, select_elites

__all__ = ["DynamicsEnsemble", "Prediction", "ROW_QUANTUM"]

_CPU_ROW_BLOCK = {"fp32": 512, "bf16": 1024}
"""Rows per member per no-grad forward on CPU (the same bytes of activations; measured with
benchmarks/ensemble_throughput.py). One pass on CUDA."""
_ACTIVATIONS: dict[str, type[nn.Module]] = {"swish": nn.SiLU, "relu": nn.ReLU}
_STATE_KEYS = ("model", "optimizer", "elites", "version", "generator")


class Prediction(NamedTuple):
    """Per-member outputs; the last dim of ``mean``/``var`` is ``[delta_obs..., reward]`` (no reward without
    ``learn_reward``).
    """

    mean: torch.Tensor  # [M, B, target_dim]
    var: torch.Tensor  # [M, B, target_dim]
    terminated_logit: torch.Tensor | None  # [M, B], None without a termination head


class DynamicsEnsemble(nn.Module):
    """Probabilistic dynamics ensemble; ``fit`` on real transitions, ``sample`` one model step.

    Everything (weights, normaliser, optimizer state, the training generator
    seeded with ``seed``) lives on ``device``. ``precision="bf16"`` runs the
    matmuls under bf16 autocast (training and sampling); the Gaussian maths and
    losses stay fp32. Not thread-safe: the caller must not ``sample`` while ``fit`` runs.
    """

    def __init__(
        self,
        config: ModelConfig,
        obs_dim: int,
        action_space: gym.spaces.Space,
        device: torch.device | str,
        seed: int = 0,
        learn_termination: bool = False,
        precision: str = "fp32",
        learn_reward: bool = True,
    ) -> None:
        super().__init__()
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if isinstance(action_space, gym.spaces.Discrete):
            self.discrete, act_dim, self._action_start = True, int(action_space.n), int(action_space.start)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            self.discrete, act_dim, self._action_start = False, int(action_space.shape[0]), 0
        else:
            raise TypeError(f"DynamicsEnsemble needs a Discrete or flat Box action space, got {action_space}")
        if obs_dim < 1:
            raise ValueError(f"obs_dim must be >= 1, got {obs_dim}")
        if len(config.weight_decay) != len(config.hidden_sizes) + 1:
            raise ValueError(f"model.weight_decay has {len(config.weight_decay)} values; expected "
                             f"{len(config.hidden_sizes) + 1} (one per hidden layer plus the output layer)")
        if not 1 <= config.num_elites <= config.ensemble_size:
            raise ValueError(f"model.num_elites={config.num_elites} must be in "
                             f"[1, ensemble_size={config.ensemble_size}]")
        if config.activation not in _ACTIVATIONS:
            raise ValueError(f"model.activation={config.activation!r} is not allowed; expected swish or relu")
        precision, _ = resolve_precision(precision, self.device, "model.precision")
        self.config = config
        self.precision = precision
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.in_dim, self.target_dim = obs_dim + act_dim, obs_dim + int(learn_reward)
        self.ensemble_size, self.num_elites = config.ensemble_size, config.num_elites
        self.learn_termination = learn_termination
        self.learn_reward = learn_reward
        """False where the task's reward is given (mbpo.models.rules): no reward output, no reward loss."""
        m, d = config.ensemble_size, self.target_dim
        # Seed the init locally (CPU generator only) so building a model never moves any global RNG.
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            self.net = BatchedMLP(m, self.in_dim, config.hidden_sizes, 2 * d + int(learn_termination),
                                  _ACTIVATIONS[config.activation])
        # MBPO's initial soft bounds on the log-variance; learned, one set per member.
        self.max_logvar = nn.Parameter(torch.full((m, 1, d), 0.5))
        self.min_logvar = nn.Parameter(torch.full((m, 1, d), -10.0))
        self.normalizer = Normalizer(self.in_dim)
        self.to(self.device)
        # L2 lives in the loss (MBPO's per-layer decay), not in Adam: plain Adam, fused where available.
        self.optimizer = torch.optim.Adam(self.parameters(), lr=config.lr, fused=self.device.type in ("cpu", "cuda"))
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.elites: list[int] = list(range(self.num_elites))
        self.elite_index = torch.arange(self.num_elites, device=self.device)
        self.version = 0  # bumped by every fit(); rollouts tag their transitions with it

    # --- inputs ---------------------------------------------------------------------------------
    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def check_device(self, **tensors: torch.Tensor) -> None:
        for name, t in tensors.items():
            if t.device != self.device:
                raise ValueError(f"{name} is on {t.device} but the dynamics ensemble is on {self.device}; "
                                 "keep model inputs on the learner's device")

    def inputs(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Raw ``concat(obs, action)`` ``(..., in_dim)``; a Discrete action enters one-hot."""
        self.check_device(obs=obs, action=action)
        if obs.shape[-1:] != (self.obs_dim,):
            raise ValueError(f"obs has shape {tuple(obs.shape)}; expected (..., {self.obs_dim})")
        lead = obs.shape[:-1]
        if self.discrete:
            if action.dtype.is_floating_point:
                raise TypeError(f"a Discrete action must be an integer tensor, got {action.dtype}")
            if action.shape == (*lead, 1):
                action = action.squeeze(-1)
            if action.shape != lead:
                raise ValueError(f"Discrete action has shape {tuple(action.shape)}; expected {tuple(lead)}")
            # Comparison, not F.one_hot: an out-of-range action gives zeros instead of a device-side assert.
            classes = torch.arange(self._action_start, self._action_start + self.act_dim, device=self.device)
            action = (action.unsqueeze(-1) == classes).float()
        elif action.shape != (*lead, self.act_dim):
            raise ValueError(f"Box action has shape {tuple(action.shape)}; expected {(*lead, self.act_dim)}")
        return torch.cat((obs.float(), action.float()), -1)

    def targets(self, obs: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """``[next_obs - obs, reward]`` ``(..., target_dim)``; ``next_obs - obs`` alone without ``learn_reward``."""
        self.check_device(next_obs=next_obs, reward=reward)
        if next_obs.shape != obs.shape or reward.shape != obs.shape[:-1]:
            raise ValueError(f"next_obs {tuple(next_obs.shape)} / reward {tuple(reward.shape)} do not match obs "
                             f"{tuple(obs.shape)}; expected next_obs {tuple(obs.shape)} and reward "
                             f"{tuple(obs.shape[:-1])}")
        delta = next_obs.float() - obs.float()
        return torch.cat((delta, reward.float().unsqueeze(-1)), -1) if self.learn_reward else delta

    # --- network --------------------------------------------------------------------------------
    def _params(self, members: torch.Tensor | None = None) -> list[torch.Tensor]:
        """``[W_0, b_0, ..., W_L, b_L, max_logvar, min_logvar]``, all members or only ``members``.

        Indexing the ``[M, in, out]`` weights runs K chosen members in one forward,
        whatever their indices: no loop over members.
        """
        layers = cast("Iterable[BatchedLinear]", self.net.layers)  # BatchedMLP's ModuleList holds BatchedLinears
        params: list[torch.Tensor] = [p for layer in layers for p in (layer.weight, layer.bias)]
        params += [self.max_logvar, self.min_logvar]
        return params if members is None else [p.index_select(0, members) for p in params]

    def raw(
        self, x: torch.Tensor, params: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Normalised ``x`` ``[K, B, in]`` (or ``[B, in]``, shared) -> fp32 mean, soft-bounded logvar, logit."""
        *layers, max_lv, min_lv = params
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(max_lv.shape[0], -1, -1)
        n = len(layers) // 2
        with self._autocast():
            for i in range(n):
                x = torch.baddbmm(layers[2 * i + 1], x, layers[2 * i])
                if i < n - 1:
                    x = self.net.activation(x)
        out, d = x.float(), self.target_dim
        logvar = max_lv - F.softplus(max_lv - out[..., d : 2 * d])
        logvar = min_lv + F.softplus(logvar - min_lv)
        return out[..., :d], logvar, (out[..., 2 * d] if self.learn_termination else None)

    def inference_params(self, members: torch.Tensor | None = None) -> tuple[list[torch.Tensor], int]:
        """:meth:`_params` for a no-grad pass over many rows (bf16 weights cast once, not once per
        block) and the rows per member per block (see ``_CPU_ROW_BLOCK``; 0 = one pass).
        """
        params = self._params(members)
        if self.precision == "bf16":
            params = [p.to(torch.bfloat16) for p in params[:-2]] + params[-2:]
        return params, (_CPU_ROW_BLOCK[self.precision] if self.device.type == "cpu" else 0)

    @torch.no_grad()
    def raw_rows(
        self, x: torch.Tensor, members: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """:meth:`raw` without grad for many rows, in blocks on CPU.

        Same FLOPs as one pass, but the activations stay in cache instead of
        page-faulting fresh 80 MB buffers for 100k rows.
        """
        params, block = self.inference_params(members)
        if not block or x.shape[-2] <= block:
            return self.raw(x, params)
        parts = [self.raw(x[..., s : s + block, :], params) for s in range(0, x.shape[-2], block)]
        mean, logvar, logit = zip(*parts, strict=True)
        return torch.cat(mean, -2), torch.cat(logvar, -2), (None if logit[0] is None else torch.cat(logit, -1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Normalised inputs ``[M, B, in]`` or ``[B, in]`` -> ``(mean, logvar, logit)`` of every member."""
        return self.raw(x, self._params())

    @torch.no_grad()
    def predict(self, obs: torch.Tensor, action: torch.Tensor) -> Prediction:
        """Every member's Gaussian over ``[delta_obs, reward]`` (and logit) for ``(B, ...)`` inputs."""
        mean, logvar, logit = self.raw_rows(self.normalizer.normalize(self.inputs(obs, action)))
        return Prediction(mean, logvar.exp(), logit)

    # --- loss -----------------------------------------------------------------------------------
    def weight_decay_loss(self) -> torch.Tensor:
        """MBPO's per-layer L2: ``sum_i weight_decay[i] * ||W_i||^2 / 2`` over all members' weights."""
        return WeightDecay.apply(tuple(self.config.weight_decay), *(layer.weight for layer in self.net.layers))

    def _loss(
        self, x: torch.Tensor, target: torch.Tensor, terminated: torch.Tensor | None,
        weight: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """Total loss for normalised ``x`` ``[M, B, in]``; NLL per member summed over members (beta-NLL with
        ``model.nll_beta``). ``weight`` (``target``'s shape, 0 or 1) leaves out target values that are
        unknown: NLL over the rest.
        """
        mean, logvar, logit = self.raw(x, self._params())
        nll = (mean - target).square() * torch.exp(-logvar) + logvar
        if self.config.nll_beta:
            nll = nll * torch.exp(self.config.nll_beta * logvar.detach())  # variance ** beta, a constant weight
        nll = mean_per_member(nll, weight)  # [M]
        bounds = self.config.logvar_bound_penalty * (self.max_logvar.sum() - self.min_logvar.sum())
        loss = nll.sum() + bounds + self.weight_decay_loss()
        if logit is not None:
            if terminated is None:
                raise ValueError("the ensemble has a termination head: pass `terminated`")
            loss = loss + F.binary_cross_entropy_with_logits(logit, terminated.float(), reduction="none").mean(1).sum()
        return loss

    def loss(
        self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor,
        terminated: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """Training loss on raw ``[M, B, ...]`` per-member batches (or ``[B, ...]`` shared by all members)."""
        x = self.normalizer.normalize(self.inputs(obs, action))
        target = self.targets(obs, reward, next_obs)
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.ensemble_size, -1, -1)
            target = target.unsqueeze(0).expand(self.ensemble_size, -1, -1)
            terminated = None if terminated is None else terminated.unsqueeze(0).expand(self.ensemble_size, -1)
        return self._loss(x, target, terminated)

    def train_step(
        self, x: torch.Tensor, target: torch.Tensor, terminated: torch.Tensor | None,
        weight: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """One Adam step on normalised per-member batches ``[M, b, ...]``; returns the detached loss (no sync)."""
        loss = self._loss(x, target, terminated, weight)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    @torch.no_grad()
    def prediction_mse(self, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """Per-member MSE of the mean ``[M]`` on normalised ``x`` ``(N, in)`` (MBPO's elite criterion);
        ``weight`` ``(N, D)`` as in :meth:`_loss`.
        """
        return mean_per_member((self.raw_rows(x)[0] - target).square(), weight)

    def evaluate(
        self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor:
        """Per-member MSE ``[M]`` of the predicted mean on ``(N, ...)`` transitions, current normaliser;
        every ``next_obs`` must be the true one (``fit``'s ``next_obs_valid`` rows are its business).
        """
        x = self.normalizer.normalize(self.inputs(obs, action))
        return self.prediction_mse(x, self.targets(obs, reward, next_obs))

    def set_elites(self, holdout_mse: torch.Tensor | Sequence[float]) -> list[int]:
        """Make the ``num_elites`` members with the lowest ``holdout_mse`` the rollout members."""
        self.elites = select_elites(holdout_mse, self.num_elites)
        self.elite_index = torch.tensor(self.elites, device=self.device)
        return self.elites

    # --- training -------------------------------------------------------------------------------
    def fit(
        self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor,
        terminated: torch.Tensor | None = None, should_stop: Callable[[], bool] | None = None,
        next_obs_valid: torch.Tensor | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Train on ``N`` real transitions until early stopping, ``max_epochs``, ``max_grad_steps`` or
        ``should_stop()`` (checked every step), keep each member's best epoch, pick elites (the loop:
        :func:`~mbpo.models.training.fit_ensemble`, which also refits the normaliser; here the checks and targets).

        ``next_obs_valid`` (bool ``(N,)``, default all True): False where the env did not give the
        true next observation (an auto-reset that lost it; ``next_obs`` is then a placeholder). Such
        rows still train reward and termination, which are known, but not the next-state head.
        Host syncs: one per epoch plus a few per call.
        """
        x, target, term, weight = fit_data(self, obs, action, reward, next_obs, terminated, next_obs_valid)
        metrics = fit_ensemble(self, x, target, term, weight, should_stop)
        self.version += 1
        return {**metrics, "version": self.version}

    # --- sampling -------------------------------------------------------------------------------
    def sample(
        self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator, batch_size: int | None = None,
        deterministic: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """One model step for ``B`` start states through random elites: :func:`mbpo.models.sampling.sample_step`."""
        return sample_step(self, obs, action, generator, batch_size, deterministic)

    def sample_scored(
        self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator, batch_size: int | None = None,
        deterministic: bool = False, measure: ScoreFn | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
        """:meth:`sample` and each row's uncertainty: :func:`mbpo.models.sampling.sample_step_scored`."""
        return sample_step_scored(self, obs, action, generator, batch_size, deterministic, measure)

    # --- state ----------------------------------------------------------------------------------
    def state_dict(  # type: ignore[override]  # no arguments: the resume state, not nn.Module's tensor dict
        self, *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """Exact-resume state on CPU: weights + normaliser, Adam state, elites, version, generator.

        Called with arguments (a parent module collecting its children), it is the
        plain ``nn.Module`` tensor dict instead.
        """
        if args or kwargs:
            return super().state_dict(*args, **kwargs)
        return {"model": cpu_copy(super().state_dict()), "optimizer": cpu_copy(self.optimizer.state_dict()),
                "elites": list(self.elites), "version": self.version, "generator": self.generator.get_state()}

    def acting_state(self) -> dict[str, Any]:
        """What a copy that only predicts needs, on CPU (a planner's replica): weights with the normaliser, the
        elites, the version. Same structure every call (collector processes mirror it in shared memory).
        """
        return {"weights": cpu_copy(nn.Module.state_dict(self)), "elites": torch.tensor(self.elites),
                "version": self.version}

    def load_acting_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`acting_state` (the optimizer and the generator are left alone)."""
        nn.Module.load_state_dict(self, state["weights"])
        self.elites = [int(i) for i in torch.as_tensor(state["elites"]).tolist()]
        self.elite_index = torch.tensor(self.elites, device=self.device)
        self.version = int(state["version"])

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Inverse of :meth:`state_dict`; a plain module tensor dict loads only the tensors."""
        if not all(k in state for k in _STATE_KEYS):
            return super().load_state_dict(state, strict=strict, assign=assign)
        result = super().load_state_dict(state["model"], strict=strict)
        self.optimizer.load_state_dict(state["optimizer"])
        self.elites = [int(i) for i in state["elites"]]
        self.elite_index = torch.tensor(self.elites, device=self.device)
        self.version = int(state["version"])
        restore_generator(self.generator, state["generator"])
        return result
