"""Soft Actor-Critic with a fused, sync-free update: MBPO's hot path (~20 updates per env step).

Same objective as torchrl's ``SACLoss`` (v2: no value net, twin critics, ``l2``
critic loss summed over the two critics, automatic entropy tuning), which is
its test oracle (tests/agents/test_sac.py). The critic options (REDQ's N critics
and subset minimum, DroQ's dropout and LayerNorm, CrossQ's batch renorm without
target critics, a policy delay) are the loss's (:mod:`mbpo.agents.sac_loss`);
this file draws their random numbers. What this file adds is speed and learner
bookkeeping:

* **Fused update.** Every forward runs once: actor on ``obs`` (with grad) and
  on ``next_obs`` (no grad), the twin critics (one ``[2, in, out]`` batched
  network) on ``(obs, batch action)`` and on ``(obs, new action)``, the target
  critics on ``(next_obs, next action)``. The actor loss sees the critics
  through detached weights, so ONE backward of ``critic + actor + alpha`` loss
  gives each parameter exactly its own loss's gradient — the same gradients
  torchrl's summed loss gives — and the three Adam steps follow.
* **No host sync per update.** A non-finite loss or gradient must skip the
  step, but checking it on the host would stall a CUDA stream every update.
  Instead the finite flag stays on the device and is handed to the fused Adam
  kernels as ``found_inf`` (the mechanism ``GradScaler`` uses: the kernel
  leaves weights, moments and step count untouched), and the target lerp
  weight is ``tau * finite``. Counters and metrics accumulate on the device; the
  host reads them only when asked (``num_updates``, metric values, ``pop_metrics``).
* **Compiled losses** (``compile=True``): the loss maths is one pure function
  of the networks and tensors (:func:`~mbpo.agents.sac_loss.sac_loss_terms`, noise passed in), so
  ``torch.compile`` traces forward and backward whole; CUDA graphs on a GPU,
  where a small update is mostly launch overhead. On a CPU the update is
  GEMM-bound and compiling does not pay (docs/benchmarks.md).
* **Observation normalisation** (``obs_norm=True``): running statistics inside
  the actor (:class:`~mbpo.agents.networks.RunningObsNorm`), fed by
  :meth:`SAC.observe`; the critics see the same normalised observations.
* **Resets** (``reset_every``): the networks re-drawn every so many updates, the buffers kept (Nikishin et
  al. 2022; D'Oro et al. 2023): :meth:`SAC.reset_networks` says what is reset and why.
* Actions: the actor works in ``[-1, 1]``; ``act()`` maps to the env's Box
  bounds and ``update()`` maps the buffer's env-scale actions back.
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from envs.device import restore_generator
from mbpo.agents.base import AgentSpaceError
from mbpo.agents.batch_renorm import BatchRenorm
from mbpo.agents.critic import Critics
from mbpo.agents.networks import BatchedMLP, RunningObsNorm, TanhGaussianActor
from mbpo.agents.sac_loss import Draws, bf16_autocast, compiled_loss_terms, sac_loss_terms
from mbpo.agents.update_metrics import ACTOR_METRICS, METRIC_NAMES, UpdateMetrics
from mbpo.config import SACConfig
from mbpo.config.seeding import derive
from mbpo.data.transitions import ACTION, DISCOUNT, NEXT_OBS, OBS, REWARD, TERMINATED
from mbpo.device.precision import resolve_precision
from mbpo.device.state import cpu_copy

__all__ = ["SAC", "UpdateMetrics", "METRIC_NAMES"]

_SNAPSHOT_KEYS = ("actor", "critic", "target_critic", "log_alpha", "num_updates")
_INIT_LOCK = threading.Lock()
"""Held while an agent's networks are drawn from torch's (process-global) CPU generator: see SAC._build_networks."""
_ACTOR_SIDE = [name in ACTOR_METRICS for name in METRIC_NAMES]


class SAC:
    """Soft Actor-Critic learner implementing :class:`mbpo.agents.base.Agent`.

    ``update`` runs on ``device``; ``act`` runs on a CPU replica of the actor so
    collectors never touch the learner's device. Updates draw their
    reparameterisation noise from a ``torch.Generator`` on ``device``; ``act`` draws
    from a separate CPU generator (both streams derived from ``seed``), so acting
    never perturbs the learner's random stream.
    """

    def __init__(
        self,
        config: SACConfig,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        device: torch.device | str,
        seed: int = 0,
        obs_norm: bool = False,
        compile: bool = False,
    ) -> None:
        if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
            raise AgentSpaceError(
                f"SAC needs a flat Box action space, got {action_space}; use agent.name=dqn for Discrete actions"
            )
        with np.errstate(over="ignore"):  # bounds near float32's limits: their width is not finite in float32
            width = np.asarray(action_space.high, np.float32) - np.asarray(action_space.low, np.float32)
        if not np.all(np.isfinite(width)):
            raise AgentSpaceError(
                f"SAC squashes actions into the Box bounds, which must be finite and at most float32's largest "
                f"value apart; got low={action_space.low}, high={action_space.high} (wrap the env to rescale actions "
                f"to finite bounds)"
            )
        if not np.all(width > 0):
            fixed = np.flatnonzero(~(width > 0)).tolist()
            raise AgentSpaceError(
                f"SAC squashes actions into the Box bounds, which must have high > low in every dimension; "
                f"{f'dimensions {fixed} do' if len(fixed) > 1 else f'dimension {fixed[0]} does'} not (low="
                f"{action_space.low}, high={action_space.high}: a fixed action, whose zero width every update would "
                "divide by); drop it from the env's action space, or set it in a wrapper")
        if not np.issubdtype(action_space.dtype, np.floating):
            raise AgentSpaceError(
                f"SAC acts in a continuous Box, got one of {action_space.dtype} ({action_space}), in which the env "
                "would round every action it is given while the learner trains on the unrounded one; use a float "
                "Box, or a Discrete action space with agent.name=dqn")
        if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
            raise AgentSpaceError(f"SAC needs a flat Box observation space, got {observation_space}")
        self.config = config
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            # "cuda" -> "cuda:N" so device checks compare equal with the tensors' own devices.
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"SAC runs on cpu or cuda (fused Adam), got device {self.device}")
        self.precision, _ = resolve_precision(config.precision, self.device, "agent.sac.precision")
        """fp32 or bf16: config.precision with auto resolved for this device."""
        self.obs_dim = int(observation_space.shape[0])
        self.act_dim = int(action_space.shape[0])
        self.target_entropy = float(-self.act_dim if config.target_entropy is None else config.target_entropy)

        # env bounds <-> [-1, 1]: action = bias + scale * squashed.
        low = torch.tensor(np.asarray(action_space.low), dtype=torch.float32)  # a copy: the space's arrays
        high = torch.tensor(np.asarray(action_space.high), dtype=torch.float32)  # may be read-only (Ray)
        self._low_cpu, self._high_cpu = low, high
        self._scale_cpu, self._bias_cpu = (high - low) / 2, (high + low) / 2
        self._scale = self._scale_cpu.to(self.device)
        self._bias = self._bias_cpu.to(self.device)

        self._seed, self._obs_norm = seed, obs_norm
        actor, self.critics = self._build_networks(seed, self.device)
        self._replica = copy.deepcopy(actor).requires_grad_(False).eval()  # CPU acting copy
        self.actor = actor.to(self.device).train()
        self._snapshot_keys = tuple(k for k in _SNAPSHOT_KEYS if k != "target_critic" or not config.crossq)
        norm = self.actor.obs_norm
        self.obs_norm: RunningObsNorm | None = norm if isinstance(norm, RunningObsNorm) else None
        """Running observation statistics (agent.obs_norm); part of the actor, so they travel with its weights."""
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.init_alpha), device=self.device))
        self._actor_params: list[torch.Tensor] = list(self.actor.parameters())
        self._make_optimizers()
        self._bf16_on = self.device.type if self.precision == "bf16" else None
        """The device type the update autocasts to bf16 on; None for fp32."""
        self._losses = sac_loss_terms
        self._cuda_graphs = compile and self.device.type == "cuda"
        if compile:  # CUDA graphs on a GPU (launch overhead is what a small update is made of); fused kernels on CPU
            self._losses = compiled_loss_terms(self._cuda_graphs)

        self.generator = torch.Generator(self.device).manual_seed(derive(seed, "update"))
        self.act_generator = torch.Generator("cpu").manual_seed(derive(seed, "act"))
        # [applied, skipped] since construction, and metric sums + [applied, skipped, applied with the actor]
        # since pop_metrics() (the actor's metrics are means over its own updates: policy_delay).
        self._counts = torch.zeros(2, dtype=torch.int64, device=self.device)
        self._metric_acc = torch.zeros(len(METRIC_NAMES) + 3, device=self.device)
        self._counts_host: tuple[int, int] | None = (0, 0)
        self._calls = 0
        """update() calls so far (applied + skipped, known on the host): the policy delay's clock, and the resets'."""
        self._resets = 0
        """Resets of the networks so far (agent.sac.reset_every): :meth:`reset_networks`."""
        self._actor_side = torch.tensor(_ACTOR_SIDE, device=self.device)
        # Bumped by every update() / load; the replica refreshes when it differs (no sync needed).
        self._weights_version = 0
        self._replica_version = 0
        self._weights_lock = threading.Lock()  # learner weights mutate vs. the replica copies them
        self._act_lock = threading.Lock()  # act() callers share one replica

    # --- counters (device-side; reading them is the sync) ---------------------------------------
    def _host_counts(self) -> tuple[int, int]:
        if self._counts_host is None:
            applied, skipped = self._counts.tolist()
            self._counts_host = (int(applied), int(skipped))
        return self._counts_host

    @property
    def num_updates(self) -> int:
        """Applied gradient updates (skipped ones excluded); reading it waits for queued updates."""
        return self._host_counts()[0]

    @property
    def num_skipped_updates(self) -> int:
        """Updates whose loss or gradient was non-finite, so no optimizer or target step happened."""
        return self._host_counts()[1]

    def _set_counts(self, applied: int, skipped: int) -> None:
        self._counts.copy_(torch.tensor([applied, skipped], dtype=torch.int64))
        self._counts_host = (applied, skipped)
        self._calls = applied + skipped

    def _build_networks(self, seed: int, device: torch.device) -> tuple[TanhGaussianActor, Critics]:
        """The actor (on CPU) and the critics (on ``device``) as ``seed`` draws them: construction and every reset
        build them here, so a reset initialises exactly as construction does (weight_init, LayerNorm, batch
        renorm, num_critics, the fp32 output layer). The draw comes from torch's CPU generator, seeded and
        restored around it (so building never moves the global RNG), under a lock (agents built in other
        threads, a collector's, seed it too).
        """
        c = self.config
        renorm = {"warmup": c.renorm_warmup} if c.crossq else None
        with _INIT_LOCK, torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            actor = TanhGaussianActor(self.obs_dim, self.act_dim, c.hidden_sizes, obs_norm=self._obs_norm,
                                      batch_renorm=renorm, weight_init=c.weight_init)
            critics = Critics(c, self.obs_dim + self.act_dim, device, renorm)
        return actor, critics

    def _make_optimizers(self) -> None:
        """Fresh Adam states (fused kernels: fast, and they honour ``found_inf`` without a host sync)."""
        c = self.config
        betas = (c.adam_beta1, 0.999)
        self.actor_optim = torch.optim.Adam(self._actor_params, lr=c.actor_lr, betas=betas, fused=True)
        self.critic_optim = torch.optim.Adam(self.critics.params, lr=c.critic_lr, betas=betas, fused=True)
        alpha_betas = betas if c.alpha_adam_beta1 is None else (c.alpha_adam_beta1, 0.999)
        self.alpha_optim = torch.optim.Adam([self.log_alpha], lr=c.alpha_lr, betas=alpha_betas, fused=True)

    def _optimizers(self) -> tuple[tuple[torch.optim.Adam, list[torch.Tensor]], ...]:
        return (
            (self.critic_optim, self.critics.params),
            (self.actor_optim, self._actor_params),
            (self.alpha_optim, [self.log_alpha]),
        )

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        return bf16_autocast(self._bf16_on)

    @property
    def critic(self) -> BatchedMLP:
        """The N online critics, one batched network ``[N, B, 1]`` (``self.critics.net``)."""
        return self.critics.net

    @critic.setter
    def critic(self, net: BatchedMLP) -> None:
        self.critics.net = net

    @property
    def target_critic(self) -> BatchedMLP | None:
        """The Polyak-averaged target critics; None under CrossQ (``self.critics.target``)."""
        return self.critics.target

    @target_critic.setter
    def target_critic(self, net: BatchedMLP | None) -> None:
        self.critics.target = net

    # --- acting ---------------------------------------------------------------------------------
    @property
    def networks(self) -> dict[str, nn.Module]:
        """The learner's modules by name, for the device plan's start-up check."""
        nets: dict[str, nn.Module] = {"actor": self.actor, "critic": self.critic}
        return nets if self.target_critic is None else {**nets, "target critic": self.target_critic}

    @property
    def acting_replica(self) -> nn.Module:
        """The CPU copy of the policy that ``act`` runs (the device plan checks it is on CPU)."""
        return self._replica

    def act(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """Float32 ``(N, act_dim)`` CPU actions in the env's bounds; ``explore=False`` is ``tanh(mean)``."""
        if obs.device.type != "cpu" or obs.dim() != 2 or obs.shape[1] != self.obs_dim:
            raise ValueError(
                f"act() wants CPU obs of shape (N, {self.obs_dim}); got {tuple(obs.shape)} on {obs.device} "
                "(collectors act on CPU: pass obs.cpu())"
            )
        with self._act_lock, torch.no_grad():
            if self._replica_version != self._weights_version:
                with self._weights_lock:
                    version = self._weights_version
                    self._replica.load_state_dict(self.actor.state_dict())  # copies into the CPU tensors
                self._replica_version = version
            mean, log_std = self._replica(obs.float())
            if explore:
                eps = torch.randn(mean.shape, generator=self.act_generator)
                squashed = torch.tanh(mean + log_std.exp() * eps)
            else:
                squashed = torch.tanh(mean)
            return torch.clamp(self._bias_cpu + self._scale_cpu * squashed, self._low_cpu, self._high_cpu)

    def rollout_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The exploration noise of ``n`` model-rollout branches for one step: ``(n, act_dim)`` standard normal."""
        return torch.randn((n, self.act_dim), generator=generator, device=self.device)

    def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Exploring actions for model rollouts from their rows of :meth:`rollout_noise`: the learner's own
        actor on its device, env bounds, no grad.
        """
        with torch.no_grad(), self._autocast():
            squashed, _ = self.actor.sample(obs, noise)
        low, high = self._bias - self._scale, self._bias + self._scale
        return torch.clamp(self._bias + self._scale * squashed.float(), low, high)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``Q(s, tanh(mean(s)))`` in fp32, the critics reduced as the actor's loss reduces them (min, or mean
        with actor_q=mean): the critics' value of the evaluation policy at ``obs``.
        """
        with self._weights_lock:
            obs = obs.float()
            mean, _ = self.actor(obs)
            q = self.critic(torch.cat((self.actor.obs_norm(obs), torch.tanh(mean)), -1)).float().squeeze(-1)
        return self.critics.reduce(q)

    @torch.no_grad()
    def action_value(self, obs: torch.Tensor, action: torch.Tensor, first: bool = False) -> torch.Tensor:
        """``Q(s, a)`` ``(B,)`` in fp32 for actions in the env's bounds, on this learner's device and precision:
        what a planner scores a sequence's end with. The critics reduced as the actor's loss reduces them, or
        (``first``) the first critic alone.
        """
        members = torch.zeros(1, dtype=torch.long, device=self.device) if first else None
        with self._weights_lock, self._autocast():  # as the learner's own Q (fp32 output layer): faster here
            squashed = ((action.float() - self._bias) / self._scale).clamp(-1.0, 1.0)
            x = torch.cat((self.actor.obs_norm(obs.float()), squashed), -1)
            q = self.critic(x, members=members).float().squeeze(-1)
        return q[0] if first else self.critics.reduce(q)

    def entropy_bonus(self) -> float:
        """``alpha * H`` per step, H at ``target_entropy`` (where automatic alpha holds it): the soft part of Q."""
        with self._weights_lock:
            return float(self.log_alpha.detach().exp()) * self.target_entropy

    def observe(self, obs: torch.Tensor) -> None:
        """Merge real observations ``(B, obs_dim)`` into the running statistics (no-op without obs_norm).

        The learner calls this on ingest, so statistics come from real transitions
        only (never model rollouts); the change reaches collectors with the next
        published snapshot and the acting replica at its next refresh.
        """
        if self.obs_norm is None:
            return
        with self._weights_lock:
            self.obs_norm.update(obs.to(self.device))
            self._weights_version += 1

    # --- learning -------------------------------------------------------------------------------
    def _noise(self, batch_size: int) -> torch.Tensor:
        """Reparameterisation noise ``[2, B, act_dim]``: ``[0]`` for ``obs``, ``[1]`` for ``next_obs``."""
        return torch.randn((2, batch_size, self.act_dim), generator=self.generator, device=self.device)

    def _draws(self, batch_size: int, update_actor: bool) -> Draws:
        """This update's random numbers, all from the learner's generator (so a resume repeats them): the noise,
        then what the critic options need (:meth:`Critics.draws`).
        """
        return self.critics.draws(self._noise(batch_size), update_actor, self.generator)

    def _check_batch(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The five transition tensors; shapes and devices checked on the host (no sync)."""
        try:
            obs, action, reward, next_obs, terminated = (batch[k] for k in (OBS, ACTION, REWARD, NEXT_OBS, TERMINATED))
        except KeyError as exc:
            keys = (OBS, ACTION, REWARD, NEXT_OBS, TERMINATED)
            raise KeyError(f"SAC.update() needs batch keys {keys}; {exc}") from None
        b = obs.shape[0]
        expected = {OBS: (b, self.obs_dim), ACTION: (b, self.act_dim), REWARD: (b,), NEXT_OBS: (b, self.obs_dim),
                    TERMINATED: (b,)}  # fmt: skip
        for key, tensor in zip(expected, (obs, action, reward, next_obs, terminated), strict=True):
            if tuple(tensor.shape) != expected[key]:
                raise ValueError(f"batch[{key!r}] has shape {tuple(tensor.shape)}, expected {expected[key]}")
            if tensor.device != self.device:
                raise ValueError(
                    f"batch[{key!r}] is on {tensor.device} but the SAC learner is on {self.device}; "
                    "store the replay buffer on the learner's device"
                )
        return obs, action, reward, next_obs, terminated

    def update(self, batch: Mapping[str, torch.Tensor]) -> UpdateMetrics:
        """One fused SAC update from an env-scale batch on ``device`` (keys in mbpo.data.transitions).

        Returns :class:`UpdateMetrics` (a ``Mapping[str, float]`` that syncs only when
        read). A non-finite loss or gradient skips every optimizer and target step
        of this update and counts it in ``num_skipped_updates``.

        With ``policy_delay`` k the actor and alpha step on the LAST update of each block of k (updates
        k-1, 2k-1, ... counting from 0), after that block's critic updates, as the references do: REDQ's
        redq_sac.py (``(i_update + 1) % policy_update_delay == 0``), sbx's CrossQ
        (``(n_updates + 1 + i) % policy_delay == 0``), DroQ's agent.py (the policy after the critic loop of
        its env step). On the first of each block the actor would follow critics k - 1 updates staler, and
        at the start of a run critics that have not been trained at all.

        With ``reset_every`` R, the update after number k * R (the same clock) first resets the networks
        (:meth:`reset_networks`).
        """
        obs, action, reward, next_obs, terminated = self._check_batch(batch)
        discount = batch[DISCOUNT] if DISCOUNT in batch.keys() else self.config.gamma  # gamma**m for m-step rows
        if not (self.actor.training and self.critic.training):
            self.actor.train()
            self.critic.train()
        action = (action - self._bias) / self._scale  # env bounds -> [-1, 1], the actor's space
        if self.config.reset_every and self._calls // self.config.reset_every > self._resets:
            self.reset_networks()  # due since update number k * reset_every: now, before the next update
        update_actor = (self._calls + 1) % self.config.policy_delay == 0  # the last of its block: see above
        self._calls += 1
        draws = self._draws(obs.shape[0], update_actor)
        renorm = self._renorm_statistics() if self.config.crossq else []
        renorm_before = [b.clone() for b in renorm]  # the forward folds this batch in: a skipped update keeps them
        if self._cuda_graphs:  # the last update's graph outputs (its grads) are consumed: their memory may be reused
            torch.compiler.cudagraph_mark_step_begin()
        loss_critic, loss_actor, loss_alpha, q_mean, entropy = self._losses(
            self.actor, self.critic, self.target_critic, self.log_alpha, self.target_entropy, self._bf16_on,
            obs, action, reward, next_obs, terminated, discount, draws, self.config.actor_q, update_actor)
        alpha = self.log_alpha.detach().exp()
        optimizers = self._optimizers() if update_actor else self._optimizers()[:1]
        for optim, _ in optimizers:
            optim.zero_grad(set_to_none=True)
        (loss_critic + loss_actor + loss_alpha if update_actor else loss_critic).backward()
        zero = loss_critic.detach().new_zeros(())
        norms = [self._clip(params) for _, params in optimizers] + [zero] * (3 - len(optimizers))
        losses = torch.stack((loss_critic, loss_actor, loss_alpha)).detach()
        grad_norms = torch.stack(norms)
        finite = torch.isfinite(losses).all() & torch.isfinite(grad_norms).all()
        found_inf = (~finite).float()
        with self._weights_lock:
            for optim, _ in optimizers:
                # read by the fused Adam kernel: skip the whole step if 1
                optim.found_inf = found_inf  # type: ignore[attr-defined]  # torch's stubs do not declare it
                optim.step()
            self.critics.polyak(finite)  # a skipped update moves no target
            for now, before in zip(renorm, renorm_before, strict=True):  # nor CrossQ's statistics (NaN for good)
                now.copy_(torch.where(finite, now, before))
            self._weights_version += 1
        applied = torch.stack((finite, ~finite)).to(torch.int64)
        self._counts.add_(applied)
        self._counts_host = None
        with torch.no_grad():
            values = torch.cat((
                losses, alpha.reshape(1), q_mean.reshape(1), entropy.reshape(1), grad_norms
            ))  # fmt: skip
            kept = finite if update_actor else finite & ~self._actor_side
            actor_applied = (finite & update_actor).float().reshape(1)
            self._metric_acc.add_(torch.cat((torch.where(kept, values, 0.0), applied.float(), actor_applied)))
        return UpdateMetrics(torch.cat((values, found_inf.reshape(1))))

    def _renorm_statistics(self) -> list[torch.Tensor]:
        """The running statistics of every batch-renorm layer the update moves (CrossQ's actor and critics)."""
        return [b for net in (self.actor, self.critic) for m in net.modules() if isinstance(m, BatchRenorm)
                for b in (m.running_mean, m.running_var, m.num_batches_tracked)]

    @property
    def num_resets(self) -> int:
        """Resets of the networks so far (agent.sac.reset_every); saved in :meth:`state_dict`."""
        return self._resets

    @torch.no_grad()
    def reset_networks(self) -> None:
        """Re-draw the networks, keep everything else (buffers, counters, the update's generator, obs statistics):
        agent.sac.reset_every calls it from :meth:`update`.

        What the references reset, and so what this does:

        * Nikishin et al. 2022, "The Primacy Bias in Deep Reinforcement Learning" (ICML), code
          evgenii-nikishin/rl_with_resets: state-based SAC (``train_dense.py``, the ``--resets`` branch) builds a
          whole new ``SACLearner`` from seed ``seed + step``: actor, critics, target critics (a copy of the new
          critics), temperature and every optimizer state. Pixel DrQ (``train_pixels.py``) keeps the shared
          encoder and its optimizer statistics and renews the rest, temperature included; their SPR
          (``discrete_control/configs/SPR_with_resets.gin``) re-draws only the Q head ("the last layers").
        * D'Oro et al. 2023, "Sample-Efficient Reinforcement Learning by Breaking the Replay Ratio Barrier"
          (ICLR; SR-SAC), code proceduralia/high_replay_ratio_continuous_control: ``SACLearner.reset()`` re-runs
          the initialiser: actor, critics, target critics, temperature and their optimizer states, once more than
          ``reset_interval`` agent updates passed since the last (``train_parallel.py``), the replay buffer kept.

        So ``reset_layers=all`` re-draws every parameter (and batch-renorm statistic) of the actor and critics,
        ``last`` the output layer of the actor and of each critic (a partial reset, as SPR's head). Either way the
        target critics' reset part is copied from the new critics, ``log_alpha`` goes back to ``log(init_alpha)``
        (both references renew the temperature), and the Adam state (moments and step count) of every reset
        parameter and of alpha is dropped, so it starts as a new optimizer's. The draw is construction's
        (:meth:`_build_networks`) from ``derive(seed, "reset", k)`` for the k-th reset
        (Nikishin's new seed per reset; SR-SAC re-uses its initial seeds), so a resumed run re-draws exactly
        what an unbroken one does. The observation statistics (agent.obs_norm) describe the kept data and stay.
        Tensors are overwritten in place, so a compiled update (agent.compile) keeps its graphs.
        """
        self._resets += 1
        actor, critics = self._build_networks(derive(self._seed, "reset", self._resets), torch.device("cpu"))
        if self.config.reset_layers == "last":
            actor_keys = {f"net.{len(actor.net) - 1}.{p}" for p in ("weight", "bias")}
            critic_keys = {f"layers.{len(critics.net.layers) - 1}.{p}" for p in ("weight", "bias")}
        else:
            actor_keys = {k for k in actor.state_dict() if not k.startswith("obs_norm.")}
            critic_keys = set(critics.net.state_dict())
        new_actor = {k: v for k, v in actor.state_dict().items() if k in actor_keys}
        new_critic = {k: v for k, v in critics.net.state_dict().items() if k in critic_keys}
        with self._weights_lock:
            self.actor.load_state_dict(new_actor, strict=False)  # copies into the existing tensors
            self.critic.load_state_dict(new_critic, strict=False)
            if self.target_critic is not None:
                self.target_critic.load_state_dict(new_critic, strict=False)
            self.log_alpha.fill_(math.log(self.config.init_alpha))
            for optim, module, keys in ((self.actor_optim, self.actor, actor_keys),
                                        (self.critic_optim, self.critic, critic_keys)):
                for name, param in module.named_parameters():
                    if name in keys:
                        optim.state.pop(param, None)
            self.alpha_optim.state.pop(self.log_alpha, None)
            self._weights_version += 1

    def _clip(self, params: list[torch.Tensor]) -> torch.Tensor:
        """Total grad norm before clipping; clips in place to ``max_grad_norm`` unless it is 0 (no sync either way)."""
        if self.config.max_grad_norm > 0:
            return nn.utils.clip_grad_norm_(params, self.config.max_grad_norm, foreach=True)
        return nn.utils.get_total_norm([p.grad for p in params if p.grad is not None], foreach=True)

    def pop_metrics(self) -> dict[str, float]:
        """Means of the metrics over the updates applied since the last call, plus ``updates``/``skipped``
        counts (and ``resets``, the run's total, when agent.sac.reset_every is set); one host sync. Empty means
        (no applied update) are NaN.
        """
        acc = self._metric_acc.tolist()
        self._metric_acc.zero_()
        applied, skipped, actor_applied = acc[-3], acc[-2], acc[-1]
        means = {}
        for name, v in zip(METRIC_NAMES, acc, strict=False):
            n = actor_applied if name in ACTOR_METRICS else applied
            means[name] = v / n if n else float("nan")
        resets = {"resets": self._resets} if self.config.reset_every else {}  # the run's total, as skipped_updates
        return {**means, "updates": int(applied), "skipped": int(skipped), **resets}

    # --- state ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Publishable CPU state (deep copies): actor, critic, target critic (none under CrossQ), log_alpha,
        num_updates.
        """
        with self._weights_lock:
            return {"actor": cpu_copy(self.actor.state_dict()), **self.critics.state(),
                    "log_alpha": cpu_copy(self.log_alpha), "num_updates": self.num_updates}

    @torch.no_grad()
    def load_snapshot(self, snapshot: Mapping[str, Any]) -> None:
        """Load weights and ``num_updates``; the Adam states are re-created so they match the new weights."""
        missing = [k for k in self._snapshot_keys if k not in snapshot]
        if missing:
            raise KeyError(f"not a SAC snapshot of this config: missing {missing} (expected keys "
                           f"{list(self._snapshot_keys)})")
        with self._weights_lock:
            self.actor.load_state_dict(snapshot["actor"])
            self.critics.load(dict(snapshot))
            self.log_alpha.copy_(torch.as_tensor(snapshot["log_alpha"]))
            self._make_optimizers()
            self._set_counts(int(snapshot["num_updates"]), self.num_skipped_updates)
            # A snapshot carries no reset count: the resets its updates passed count as done (none owed at once).
            self._resets = self._calls // self.config.reset_every if self.config.reset_every else 0
            self._weights_version += 1
        self.actor.train()
        self.critic.train()

    def state_dict(self) -> dict[str, Any]:
        """Snapshot + optimizer states + generator states + counters: a bit-exact resume point (CPU only)."""
        return {
            **self.snapshot(),
            "num_skipped_updates": self.num_skipped_updates,
            "actor_optim": cpu_copy(self.actor_optim.state_dict()),
            "critic_optim": cpu_copy(self.critic_optim.state_dict()),
            "alpha_optim": cpu_copy(self.alpha_optim.state_dict()),
            "generator": self.generator.get_state(),
            "act_generator": self.act_generator.get_state(),
            "metric_acc": cpu_copy(self._metric_acc),
            "num_resets": self._resets,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.load_snapshot(state)
        self.actor_optim.load_state_dict(state["actor_optim"])
        self.critic_optim.load_state_dict(state["critic_optim"])
        self.alpha_optim.load_state_dict(state["alpha_optim"])
        restore_generator(self.generator, state["generator"])
        restore_generator(self.act_generator, state["act_generator"])
        self._set_counts(int(state["num_updates"]), int(state["num_skipped_updates"]))
        self._resets = int(state.get("num_resets", 0))  # 0 in checkpoints that predate resets
        acc = torch.as_tensor(state["metric_acc"])
        if acc.numel() == self._metric_acc.numel() - 1:  # written before the actor's own count: every update was one
            acc = torch.cat((acc, acc[-2:-1]))
        self._metric_acc.copy_(acc)

