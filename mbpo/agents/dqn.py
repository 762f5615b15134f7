"""DQN / Double DQN on torchrl's ``DQNLoss`` with a ``HardUpdate`` target net.

The loss, the double-DQN target and the TD(0) bootstrap come from torchrl; this
module owns the learner bookkeeping torchrl leaves to the caller: the epsilon
schedule (decayed on the learner, published with the weights), skipping
non-finite steps, gradient clipping, the CPU acting replica, and exact resume.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.data import Categorical
from torchrl.modules import MLP, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate, ValueEstimators

from envs.device import restore_generator
from mbpo.agents.base import AgentSpaceError
from mbpo.config import DQNConfig
from mbpo.config.seeding import derive
from mbpo.data.transitions import ACTION, NEXT_OBS, OBS, REWARD, TERMINATED
from mbpo.device.state import cpu_copy

__all__ = ["DQN"]

# Huber (smooth L1, beta=1) as in Mnih et al. 2015 and SB3: bounded gradients on large TD errors.
LOSS_FUNCTION = "smooth_l1"



class DQN:
    """Epsilon-greedy (Double) DQN learner implementing :class:`mbpo.agents.base.Agent`."""

    def __init__(
        self,
        config: DQNConfig,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Discrete,
        device: torch.device | str,
        seed: int = 0,
    ) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise AgentSpaceError(
                f"DQN needs a Discrete action space, got {action_space}; "
                "use agent.name=sac for continuous (Box) actions"
            )
        if int(action_space.start) != 0:
            raise AgentSpaceError(f"DQN expects Discrete actions starting at 0, got start={action_space.start} "
                                  "(wrap the env to number its actions from 0)")
        if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
            raise AgentSpaceError(f"DQN needs a flat Box observation space, got {observation_space}")
        self.config = config
        self.device = torch.device(device)
        self.obs_dim = int(observation_space.shape[0])
        self.num_actions = int(action_space.n)
        self.num_updates = 0
        self.num_skipped_updates = 0
        self._metric_sums: dict[str, float] = {}
        self._metric_counts = [0, 0]  # [applied, skipped] since the last pop_metrics()
        self.epsilon = self._epsilon_at(0)

        # Seed the init locally so constructing an agent never moves the global RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = MLP(
                in_features=self.obs_dim,
                out_features=self.num_actions,
                num_cells=list(config.hidden_sizes),
                activation_class=nn.ReLU,
            )
        self._replica = copy.deepcopy(net).eval()  # CPU acting copy, refreshed lazily
        self._replica_version = 0
        self.q_net = net.to(self.device)
        spec = Categorical(self.num_actions, device=self.device)  # actions are indices, not one-hot
        actor = QValueActor(self.q_net, in_keys=["observation"], spec=spec)
        self.loss = DQNLoss(
            actor, loss_function=LOSS_FUNCTION, delay_value=True, double_dqn=config.double, action_space=spec
        )
        # the estimator keeps gamma as a buffer on torch.get_default_device() unless told: on a GPU run that left
        # the loss on two devices (cpu and cuda), which the device plan refuses at start-up
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=config.gamma, device=self.device)
        # HardUpdate copies on the (interval+1)-th step; interval-1 gives "every target_update_interval updates".
        self.target_updater = HardUpdate(self.loss, value_network_update_interval=config.target_update_interval - 1)
        self._keys = self._param_keys()
        self.optimizer = self._make_optimizer()
        self.act_generator = torch.Generator().manual_seed(derive(seed, "act"))

    # --- bookkeeping -------------------------------------------------------------------------
    def _epsilon_at(self, updates: int) -> float:
        """Linear decay from epsilon_start to epsilon_end over epsilon_decay_updates, then flat."""
        c = self.config
        frac = min(1.0, updates / c.epsilon_decay_updates)
        return float(c.epsilon_start + frac * (c.epsilon_end - c.epsilon_start))

    def _make_optimizer(self) -> torch.optim.Adam:
        return torch.optim.Adam(self.q_net.parameters(), lr=self.config.lr)

    def _param_keys(self) -> dict[str, tuple[str, ...]]:
        """q_net state_dict name -> key in the loss's (target) params, matched by storage identity."""
        by_ptr = {t.data_ptr(): k for k, t in self.loss.value_network_params.items(True, True)}
        keys = {name: by_ptr.get(t.data_ptr()) for name, t in self.q_net.state_dict().items()}
        missing = [name for name, key in keys.items() if key is None]
        if missing:
            raise RuntimeError(f"DQNLoss does not share the Q-network tensors {missing}; cannot map the target net")
        return {name: key for name, key in keys.items() if key is not None}  # all of them, as just checked

    def _target_state(self) -> dict[str, torch.Tensor]:
        target = self.loss.target_value_network_params
        return {name: target.get(key) for name, key in self._keys.items()}

    # --- acting ------------------------------------------------------------------------------
    @property
    def networks(self) -> dict[str, nn.Module]:
        """The learner's modules by name, for the device plan's start-up check."""
        return {"q-network": self.q_net, "loss (target q-network)": self.loss}

    @property
    def acting_replica(self) -> nn.Module:
        """The CPU copy of the policy that ``act`` runs (the device plan checks it is on CPU)."""
        return self._replica

    @torch.no_grad()
    def act(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """Epsilon-greedy (explore) or greedy int64 ``(N,)`` actions from the CPU replica."""
        if obs.device.type != "cpu" or obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise ValueError(
                f"act() wants CPU obs of shape (N, {self.obs_dim}); got {tuple(obs.shape)} on {obs.device}"
            )
        if self._replica_version != self.num_updates:
            self._replica.load_state_dict(cpu_copy(self.q_net.state_dict()))
            self._replica_version = self.num_updates
        greedy = self._replica(obs.float()).argmax(dim=-1)
        if not explore:
            return greedy
        n = obs.shape[0]
        coin = torch.rand(n, generator=self.act_generator)
        random_actions = torch.randint(self.num_actions, (n,), generator=self.act_generator)
        return torch.where(coin < self.epsilon, random_actions, greedy)

    def rollout_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The exploration noise of ``n`` model-rollout branches for one step, ``(n, 2)``: the epsilon coin and
        a uniformly random action (as a float, exact for any action count a net can have).
        """
        coin = torch.rand(n, generator=generator, device=self.device)
        random_actions = torch.randint(self.num_actions, (n,), generator=generator, device=self.device)
        return torch.stack((coin, random_actions.float()), -1)

    def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Epsilon-greedy int64 actions for model rollouts from the learner's own net on its device, with their
        rows of :meth:`rollout_noise`.
        """
        with torch.no_grad():
            greedy = self.q_net(obs).argmax(dim=-1)
        return torch.where(noise[:, 0] < self.epsilon, noise[:, 1].long(), greedy)

    # --- learning ----------------------------------------------------------------------------
    def _loss_input(self, batch: TensorDictBase) -> TensorDict:
        """Our buffer keys -> DQNLoss's layout. ``done`` mirrors ``terminated``: TD(0) bootstraps
        on ``terminated`` only, and truncations (which reach the buffer as terminated=False) bootstrap.
        """
        obs, action = batch[OBS], batch[ACTION]
        if action.is_floating_point():
            raise TypeError(f"DQN needs integer action indices, got {action.dtype}; use agent.name=sac for Box actions")
        b = obs.shape[0]
        terminated = batch[TERMINATED].reshape(b, 1).bool()
        nxt = {
            "observation": batch[NEXT_OBS],
            "reward": batch[REWARD].reshape(b, 1).float(),
            "done": terminated,
            "terminated": terminated,
        }
        return TensorDict({"observation": obs, "action": action.reshape(b).long(), "next": nxt}, batch_size=[b])

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``max_a Q(s, a)``: the online network's value of the greedy (evaluation) policy at ``obs``."""
        return self.q_net(obs.float()).max(-1).values.float()

    def entropy_bonus(self) -> float:
        """0: DQN's targets are rewards and bootstrapped values only."""
        return 0.0

    def observe(self, obs: torch.Tensor) -> None:
        """No running statistics here: agent.obs_norm is SAC's (the config refuses it with dqn)."""

    def update(self, batch: TensorDictBase) -> dict[str, float]:
        """One Adam step on the DQN loss; a non-finite loss or gradient skips the step entirely."""
        td = self._loss_input(batch)
        self.q_net.train()
        with torch.no_grad():
            q_mean = self.q_net(td["observation"]).gather(-1, td["action"].unsqueeze(-1)).mean()
        loss = self.loss(td)["loss"]
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = list(self.q_net.parameters())
        if self.config.max_grad_norm > 0:
            grad_norm = nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
        else:
            grad_norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        stats = torch.stack([loss.detach(), q_mean, grad_norm]).tolist()  # the one host sync
        applied = math.isfinite(stats[0]) and math.isfinite(stats[2])
        if applied:
            self.optimizer.step()
            self.num_updates += 1
            self.target_updater.step()
            self.epsilon = self._epsilon_at(self.num_updates)
        else:
            self.num_skipped_updates += 1
        self.optimizer.zero_grad(set_to_none=True)
        metrics = {"loss": stats[0], "q_mean": stats[1], "epsilon": self.epsilon, "grad_norm": stats[2]}
        self._metric_counts[0 if applied else 1] += 1
        if applied:
            for key, value in metrics.items():
                self._metric_sums[key] = self._metric_sums.get(key, 0.0) + value
        return metrics

    def pop_metrics(self) -> dict[str, float]:
        """Means over the updates applied since the last call, plus ``updates``/``skipped`` counts."""
        applied, skipped = self._metric_counts
        means = {k: v / applied for k, v in self._metric_sums.items()} if applied else {}
        self._metric_sums, self._metric_counts = {}, [0, 0]
        return {**means, "updates": applied, "skipped": skipped}

    # --- state -------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """CPU-only publishable state; the target net is included so a rebuilt learner is complete."""
        return {
            "q_net": cpu_copy(self.q_net.state_dict()),
            "target_q_net": cpu_copy(self._target_state()),
            "epsilon": float(self.epsilon),
            "num_updates": int(self.num_updates),
        }

    @torch.no_grad()
    def load_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Load weights in place (the loss shares them) and start a fresh Adam consistent with them."""
        missing = {"q_net", "target_q_net", "epsilon", "num_updates"} - set(snapshot)
        if missing:
            raise KeyError(f"not a DQN snapshot: missing {sorted(missing)}")
        self.q_net.load_state_dict(snapshot["q_net"])
        target, current = snapshot["target_q_net"], self._target_state()
        if set(target) != set(current):
            raise KeyError(f"target_q_net keys {sorted(target)} do not match the Q-network's {sorted(current)}")
        for name, tensor in current.items():
            tensor.copy_(target[name])
        self.num_updates = int(snapshot["num_updates"])
        self.epsilon = float(snapshot["epsilon"])
        self.target_updater.counter = self.num_updates % self.config.target_update_interval
        self.optimizer = self._make_optimizer()
        self._replica_version = -1  # weights changed under the same num_updates

    def state_dict(self) -> dict[str, Any]:
        """Snapshot + optimizer + RNG + counters: everything for a bit-exact resume."""
        return {
            **self.snapshot(),
            "optimizer": cpu_copy(self.optimizer.state_dict()),
            "act_generator": self.act_generator.get_state(),
            "num_skipped_updates": int(self.num_skipped_updates),
            "target_updater": dict(self.target_updater.state_dict()),
            "metric_sums": dict(self._metric_sums),
            "metric_counts": list(self._metric_counts),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.load_snapshot(state)
        self.optimizer.load_state_dict(state["optimizer"])
        restore_generator(self.act_generator, state["act_generator"])
        self.num_skipped_updates = int(state["num_skipped_updates"])
        self.target_updater.load_state_dict(state["target_updater"])
        self._metric_sums = dict(state.get("metric_sums", {}))
        self._metric_counts = list(state.get("metric_counts", [0, 0]))
