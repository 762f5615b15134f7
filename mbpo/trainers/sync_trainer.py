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

import math
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
from mbpo.buffers import load_replay_state, make_replay_buffer, replay_state, transitions
from mbpo.checkpoint import capture_rng, load_latest, restore_rng, save_checkpoint
from mbpo.config import Config, ConfigError, config_from_yaml, to_yaml
from mbpo.devices import DevicePlan
from mbpo.evaluation import evaluate
from mbpo.metrics import MetricsLogger
from mbpo.model_based import ModelBased

__all__ = ["SyncTrainer", "seed_everything", "stream_seeds"]

RECENT_EPISODES = 10  # train_return is the mean of the last this-many finished episodes
EVAL_SEED_OFFSET = 1_000_003


STREAMS = ("env", "eval_env", "actions", "replay", "agent", "model")


def stream_seeds(seed: int) -> dict[str, int]:
    """One independent seed per RNG stream, derived from ``seed``.

    Seeding every generator with the same ``seed`` makes streams that draw the
    same distribution draw the same numbers (the env's initial states and the
    warm-up random actions did); ``SeedSequence`` spreads them apart.
    """
    return dict(zip(STREAMS, np.random.SeedSequence(seed).generate_state(len(STREAMS)).tolist()))


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
        seeds = stream_seeds(config.seed)
        self.env = envs.make(config.env.id, config.env.num_envs, device=device, seed=seeds["env"])
        self.eval_env = envs.make(config.env.id, config.eval_episodes, device=device, seed=seeds["eval_env"])
        self.agent = make_agent(config.agent, self.env.observation_space, self.env.action_space, device,
                                seeds["agent"])
        self.buffer = make_replay_buffer(
            config.agent.buffer_size, device, torch.Generator(device=device).manual_seed(seeds["replay"])
        )
        self.model: ModelBased | None = None
        components = {"env": self.env, "eval env": self.eval_env, "replay buffer": self.buffer,
                      **{f"learner {name}": net for name, net in self.agent.networks.items()}}
        if config.model.enabled:
            self.model = ModelBased(config.model, config.env.id, self.env.observation_space, self.env.action_space,
                                    device, seeds["model"])
            components |= {"ensemble": self.model.ensemble, "model buffer": self.model.model_buffer}
        self.plan.check(components, {"policy replica": self.agent.acting_replica})
        self._action_generator = torch.Generator().manual_seed(seeds["actions"])
        self.env_steps = 0
        self.learning_env_steps = 0  # env transitions that earned updates (after learning_starts)
        self.updates_issued = 0  # update() calls so far: floor(learning_env_steps * utd_ratio), no float drift
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
                    due = math.floor(self.learning_env_steps * cfg.agent.utd_ratio + 1e-9) - self.updates_issued
                    for _ in range(due):
                        self.agent.update(self._policy_batch())  # metrics: pop_metrics() at log time
                    self.updates_issued += due
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
            "utd_ratio_realised": self.updates_issued / max(self.learning_env_steps, 1),
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
                "updates_issued": self.updates_issued,
                "wall_s": self.wall_s,
                "last_eval_return": self.last_eval_return,
                "episode_return": self._episode_return.clone(),
                "recent_returns": list(self._recent_returns),
                "obs": None if self._obs is None else self._obs.cpu(),
                "action_generator": self._action_generator.get_state(),
            },
            "env": env_state,
            "agent": self.agent.state_dict(),
            "buffer": replay_state(self.buffer),
            "model": None if self.model is None else self.model.state_dict(),
            "rng": capture_rng(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        t = state["trainer"]
        self.env_steps, self.learning_env_steps = t["env_steps"], t["learning_env_steps"]
        self.updates_issued, self.wall_s = t["updates_issued"], t["wall_s"]
        self.last_eval_return = t["last_eval_return"]
        self._episode_return = t["episode_return"].clone()
        self._recent_returns = deque(t["recent_returns"], maxlen=RECENT_EPISODES)
        self._action_generator.set_state(t["action_generator"])
        self.agent.load_state_dict(state["agent"])
        load_replay_state(self.buffer, state["buffer"])
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
        """Rebuild the run in ``run_dir`` from its newest loadable checkpoint and that checkpoint's config.

        Only keys that do not change what was built may be overridden (how long
        and how often: ``RESUMABLE_OVERRIDES``); anything else is a ConfigError.
        """
        run_dir = Path(run_dir)
        for item in overrides or []:
            key = item.split("=", 1)[0]
            if not any(key == k or key.startswith(k + ".") for k in RESUMABLE_OVERRIDES):
                raise ConfigError(f"{key!r} cannot change when resuming (the checkpoint was built with it); "
                                  f"keys that can: {', '.join(RESUMABLE_OVERRIDES)}")
        _, state = load_latest(run_dir / "checkpoints")
        config = config_from_yaml(state["config"], overrides)
        trainer = cls(config, run_dir)
        trainer.load_state_dict(state)
        return trainer


RESUMABLE_OVERRIDES = ("total_env_steps", "eval_every", "eval_episodes", "log_every", "progress", "checkpoint")


def _crossed(before: int, after: int, every: int) -> bool:
    """Whether env steps crossed a multiple of ``every`` going from ``before`` to ``after``."""
    return after // every > before // every
