"""SyncTrainer: the reference loop everything asynchronous is checked against.

Per vector step of ``num_envs`` envs: act (random before ``learning_starts``,
then the CPU policy replica), step the env on the plan's device, store the
transitions (``next_obs`` is the true final observation at an auto-reset),
with ``model.enabled`` train the ensemble and roll out into the model buffer
when ``model.train_freq`` is crossed (mbpo.model_based), then run
``num_envs * utd_ratio`` gradient updates on batches mixed by ``real_ratio``. Evaluation, logging and
checkpoints happen when env steps cross their intervals. Deterministic on CPU:
the same seed gives identical metrics and parameters, and resuming from a
checkpoint continues bit-exactly.
"""

from __future__ import annotations

import random
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

import envs
from mbpo.agents import make_agent
from mbpo.buffers import make_replay_buffer, transitions
from mbpo.checkpoint import capture_rng, load_latest, restore_rng, save_checkpoint
from mbpo.config import Config, load_config, to_yaml
from mbpo.devices import DevicePlan
from mbpo.evaluation import evaluate
from mbpo.metrics import MetricsLogger
from mbpo.model_based import ModelBased

__all__ = ["SyncTrainer", "seed_everything"]

RECENT_EPISODES = 10  # train_return is the mean of the last this-many finished episodes
EVAL_SEED_OFFSET = 1_000_003


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class SyncTrainer:
    """Collect, store, update, evaluate, log and checkpoint, one vector step at a time."""

    def __init__(self, config: Config, run_dir: str | Path) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        torch.set_num_threads(config.torch_threads)  # small RL nets: more threads only contend
        seed_everything(config.seed)
        self.plan = DevicePlan.resolve(config.device)
        device = self.plan.device
        self.env = envs.make(config.env.id, config.env.num_envs, device=device, seed=config.seed)
        self.eval_env = envs.make(config.env.id, config.eval_episodes, device=device, seed=config.seed + 1)
        self.agent = make_agent(config.agent, self.env.observation_space, self.env.action_space, device, config.seed)
        self.buffer = make_replay_buffer(
            config.agent.buffer_size, device, torch.Generator(device=device).manual_seed(config.seed)
        )
        self.model: ModelBased | None = None
        components = {"env": self.env, "eval env": self.eval_env, "learner": self.agent, "replay buffer": self.buffer}
        if config.model.enabled:
            self.model = ModelBased(config.model, config.env.id, self.env.observation_space, self.env.action_space,
                                    device, config.seed)
            components |= {"ensemble": self.model.ensemble, "model buffer": self.model.model_buffer}
        self.plan.check(components, {"policy replica": self.agent.acting_replica})
        self._action_generator = torch.Generator().manual_seed(config.seed)
        self.env_steps = 0
        self.learning_env_steps = 0  # env transitions that earned updates (after learning_starts)
        self.pending_updates = 0.0  # fractional updates carried to the next vector step
        self.wall_s = 0.0
        self.last_eval_return: float | None = None
        self._episode_return = torch.zeros(self.env.num_envs, dtype=torch.float64)
        self._recent_returns: deque[float] = deque(maxlen=RECENT_EPISODES)
        self._obs: torch.Tensor | None = None

    # -- the loop ----------------------------------------------------------------
    def run(self, logger: MetricsLogger | None = None) -> dict[str, Any]:
        """Train until ``total_env_steps``; write the final checkpoint; return the last metrics row."""
        cfg = self.config
        own_logger = logger is None
        logger = logger or MetricsLogger(self.run_dir, cfg.total_env_steps, cfg.progress,
                                         resume_at=self.env_steps or None)  # a resumed run keeps its rows
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(to_yaml(cfg))  # the config in effect, resumes included
        if self._obs is None:
            self._obs = self.env.reset()
        n = self.env.num_envs
        start, start_steps, start_updates = time.perf_counter(), self.env_steps, self.agent.num_updates
        row: dict[str, Any] = {}
        try:
            while self.env_steps < cfg.total_env_steps:
                before = self.env_steps
                self._collect_step()
                if self.model is not None:
                    self.model.after_collect(before, self.env_steps, self.buffer, self.agent.rollout_act)
                if self.env_steps >= cfg.agent.learning_starts:
                    self.learning_env_steps += n
                    self.pending_updates += n * cfg.agent.utd_ratio
                    for _ in range(int(self.pending_updates)):
                        self.agent.update(self._policy_batch())  # metrics: pop_metrics() at log time
                    self.pending_updates -= int(self.pending_updates)
                evaluated = _crossed(before, self.env_steps, cfg.eval_every)
                if evaluated:
                    returns = evaluate(self.agent, self.eval_env, cfg.seed + EVAL_SEED_OFFSET + self.env_steps)
                    self.last_eval_return = float(np.mean(returns))
                elapsed = time.perf_counter() - start
                rates = {
                    "env_steps_per_s": (self.env_steps - start_steps) / max(elapsed, 1e-9),
                    "updates_per_s": (self.agent.num_updates - start_updates) / max(elapsed, 1e-9),
                }
                done = self.env_steps >= cfg.total_env_steps
                if evaluated or done or _crossed(before, self.env_steps, cfg.log_every):
                    row = self._row(self.wall_s + elapsed, rates, evaluated)
                    logger.log(row)
                if _crossed(before, self.env_steps, cfg.checkpoint.every) or done:
                    self.wall_s += time.perf_counter() - start
                    start = time.perf_counter()
                    start_steps, start_updates = self.env_steps, self.agent.num_updates
                    self.save()
                logger.progress(self.env_steps, {
                    "eval_return": self.last_eval_return, "steps/s": rates["env_steps_per_s"],
                    "upd/s": rates["updates_per_s"],
                })
        finally:
            if own_logger:
                logger.close()
        return row

    def _policy_batch(self):  # noqa: ANN202 - a TensorDict
        batch_size = self.config.agent.batch_size
        if self.model is not None:
            return self.model.policy_batch(self.buffer, batch_size)
        return self.buffer.sample(batch_size=batch_size)

    def _collect_step(self) -> None:
        obs = self._obs
        if self.env_steps < self.config.agent.learning_starts:
            actions = envs.random_actions(self.env, self._action_generator)
        else:
            actions = self.agent.act(obs.cpu(), explore=True).to(self.env.device)
        next_obs, reward, terminated, truncated, info = self.env.step(actions)
        done = terminated | truncated
        # The true next observation: at an auto-reset, obs is already the next episode's first.
        real_next = torch.where(done.unsqueeze(-1), info["final_obs"], next_obs)
        self.buffer.extend(transitions(obs, actions, reward, real_next, terminated))
        self._obs = next_obs
        self.env_steps += self.env.num_envs
        self._episode_return += reward.cpu().double()
        done_cpu = done.cpu()
        if bool(done_cpu.any()):
            self._recent_returns.extend(self._episode_return[done_cpu].tolist())
            self._episode_return[done_cpu] = 0.0

    def _row(self, wall_s: float, rates: dict[str, float], evaluated: bool) -> dict[str, Any]:
        cfg = self.config.agent
        row: dict[str, Any] = {
            "env_steps": self.env_steps,
            "updates": self.agent.num_updates,
            "wall_s": round(wall_s, 3),
            "train_return": float(np.mean(self._recent_returns)) if self._recent_returns else None,
            "eval_return": self.last_eval_return if evaluated else None,
            "utd_ratio": cfg.utd_ratio,
            "utd_ratio_realised": (self.agent.num_updates + self.agent.num_skipped_updates)
            / max(self.learning_env_steps, 1),
            "updates_per_vector_step": self.env.num_envs * cfg.utd_ratio,
            "skipped_updates": self.agent.num_skipped_updates,
            **{k: round(v, 3) for k, v in rates.items()},
        }
        metrics = self.agent.pop_metrics()
        metrics.pop("updates"), metrics.pop("skipped")
        row.update(metrics)
        if self.model is not None:
            row.update(self.model.metrics(self.env_steps))
        return row

    # -- checkpoint and resume ---------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        env_state = self.env.state_dict() if hasattr(self.env, "state_dict") else None
        return {
            "format": 1,
            "config": to_yaml(self.config),
            "trainer": {
                "env_steps": self.env_steps,
                "learning_env_steps": self.learning_env_steps,
                "pending_updates": self.pending_updates,
                "wall_s": self.wall_s,
                "last_eval_return": self.last_eval_return,
                "episode_return": self._episode_return.clone(),
                "recent_returns": list(self._recent_returns),
                "obs": None if self._obs is None else self._obs.cpu(),
                "action_generator": self._action_generator.get_state(),
            },
            "env": env_state,
            "agent": self.agent.state_dict(),
            "buffer": self.buffer.state_dict(),
            "model": None if self.model is None else self.model.state_dict(),
            "rng": capture_rng(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        t = state["trainer"]
        self.env_steps, self.learning_env_steps = t["env_steps"], t["learning_env_steps"]
        self.pending_updates, self.wall_s = t["pending_updates"], t["wall_s"]
        self.last_eval_return = t["last_eval_return"]
        self._episode_return = t["episode_return"].clone()
        self._recent_returns = deque(t["recent_returns"], maxlen=RECENT_EPISODES)
        self._action_generator.set_state(t["action_generator"])
        self.agent.load_state_dict(state["agent"])
        self.buffer.load_state_dict(state["buffer"])
        if self.model is not None:
            self.model.load_state_dict(state["model"])
        if state["env"] is not None and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
            self._obs = t["obs"].to(self.env.device)
        else:
            warnings.warn(
                f"{self.config.env.id} cannot save its simulator state: the resumed run starts new "
                "episodes, so it is not bit-identical to an uninterrupted one", stacklevel=2)
            self._obs = self.env.reset()
            self._episode_return.zero_()
        restore_rng(state["rng"])

    def save(self) -> Path:
        return save_checkpoint(self.run_dir / "checkpoints", self.env_steps, self.state_dict(),
                               self.config.checkpoint.keep)

    @classmethod
    def resume(cls, run_dir: str | Path, overrides: list[str] | None = None) -> SyncTrainer:
        """Rebuild the run in ``run_dir`` from its config.yaml and newest loadable checkpoint."""
        run_dir = Path(run_dir)
        config = load_config(run_dir / "config.yaml", overrides)
        _, state = load_latest(run_dir / "checkpoints")
        trainer = cls(config, run_dir)
        trainer.load_state_dict(state)
        return trainer


def _crossed(before: int, after: int, every: int) -> bool:
    """Whether env steps crossed a multiple of ``every`` going from ``before`` to ``after``."""
    return after // every > before // every
