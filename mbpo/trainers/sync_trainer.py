"""SyncTrainer: the reference loop everything asynchronous is checked against.

Per vector step of ``num_envs`` envs: act (random before ``learning_starts``,
then the CPU policy replica), step the env on the plan's device, store the
transitions (``next_obs`` is the true final observation at an auto-reset),
with ``model.enabled`` train the ensemble and roll out into the model buffer
when ``model.train_freq`` is crossed (mbpo.model_based.learner), then run
``num_envs * utd_ratio`` gradient updates on batches mixed by ``real_ratio``. Evaluation, logging and
checkpoints happen when env steps cross their intervals. Deterministic on CPU:
the same seed gives identical metrics and parameters, and resuming from a
checkpoint continues bit-exactly. Ctrl-C (SIGINT) and SIGTERM stop the run after
the vector step in progress (a model fit stops at its next gradient step), log
and checkpoint it there, and set ``exit_code`` to 130 / 143, as the AsyncTrainer does.
"""

from __future__ import annotations

import math
import shlex
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import envs
from envs.device import restore_generator
from mbpo.config import Config
from mbpo.data.nstep import n_step_builder
from mbpo.data.transitions import real_transitions
from mbpo.device.checks import check_transitions, switches
from mbpo.model_based.planning_policy import PlanningPolicy
from mbpo.run.metrics import MetricsLogger
from mbpo.runtime.env_builder import check_training_env, env_label
from mbpo.runtime.nonfinite import NonFiniteEnvError, reset_poisoned, screen
from mbpo.runtime.supervisor import StopOnSignals
from mbpo.trainers.async_stop import final_checkpoint
from mbpo.trainers.base import INTERVAL_COLUMNS, EnvFactory, Trainer

__all__ = ["SyncTrainer"]


class SyncTrainer(Trainer):
    """Collect, store, update, evaluate, log and checkpoint, one vector step at a time."""

    def __init__(self, config: Config, run_dir: str | Path, env_factory: EnvFactory | None = None) -> None:
        super().__init__(config, run_dir, env_factory)
        config = self.config  # the run's own copy, checked and resolved
        self._action_generator = torch.Generator().manual_seed(self.seed("actions"))
        self._n_step = n_step_builder(config.agent, keep_first_step=config.model.enabled)
        self._episode_return = torch.zeros(self.env.num_envs, dtype=torch.float64)
        self._obs: torch.Tensor | None = None
        self._env_ahead = False
        """The env took a step that was never stored (it returned a non-finite value under nonfinite=raise): a
        checkpoint then holds no env state, and a resume starts new episodes."""
        self._step_checked = False
        """The run's first step was held to the contract (check_training_env); no later one is."""
        self._who = env_label(config.env)
        """How errors name the env (once: not per vector step)."""

    def _build_runtime(self, config: Config) -> None:
        self.check_devices()
        self.policy: Any = self.agent
        """What acts: the agent, or under model.lookahead a planner over the learner's own ensemble and critics."""
        if self.model is not None and config.model.lookahead.enabled:
            self.policy = PlanningPolicy(self.agent, self.model.ensemble, self.model.rules, config.model,
                                         self.env.action_space, self.seed("lookahead"))

    def _cast_to_float32(self, fields: tuple[str, ...]) -> None:
        """Its one training env is the one it steps (state_dict and the rest read through the cast)."""
        self.env = envs.as_float32(self.env, fields)

    # -- the loop ----------------------------------------------------------------
    def run(self, logger: MetricsLogger | None = None) -> dict[str, Any]:
        """Train until ``total_env_steps`` or a stop signal; write the final checkpoint; return the last row."""
        cfg = self.config
        self.exit_code = 0
        try:
            self._open_run_dir()
        except BaseException:
            self.close()  # its envs: a run dir refused here leaves nothing open
            raise
        own_logger = logger is None
        stop = threading.Event()
        anomaly = torch.is_anomaly_enabled()
        try:
            logger = logger or MetricsLogger(self.run_dir, cfg.total_env_steps, cfg.progress,
                                             resume_at=self.env_steps or None)  # a resumed run keeps its rows
            self._forget_logged_metrics(logger)
            if cfg.debug:  # as the async trainer: anomaly detection, and the hand-offs checked (_store, _run)
                torch.autograd.set_detect_anomaly(True)
                for line in switches(1, "sync", model=self.model is not None,
                                     discrete=isinstance(self.env.action_space, gym.spaces.Discrete)):
                    print(f"[mbpo debug] {line}", file=sys.stderr)
            with StopOnSignals(stop, lambda: "after the step in progress; " + self.stopping()) as signals:
                try:
                    row = self._run(logger, stop)
                except Exception:  # the env's or a worker's error: what came before is kept, as the async
                    final_checkpoint(self.env_steps, self.save, announce=True)  # trainer keeps it
                    raise
            if signals.signum is not None:
                self.exit_code = 128 + signals.signum
            return row
        finally:
            torch.autograd.set_detect_anomaly(anomaly)
            if own_logger and logger is not None:
                logger.close()
            self._close_run_dir()

    def _run(self, logger: MetricsLogger, stop: threading.Event) -> dict[str, Any]:
        cfg = self.config
        if self._obs is None:
            self._obs = self._first_reset()
        n = self.env.num_envs
        throughput = self._start_clock()
        row: dict[str, Any] = {}
        saved_at = -1
        if self.work_owed():  # a stop cut a fit short: fit again first, on the data it had (not merged with the
            assert self.model is not None  # next step's training, which would lose one), then roll out
            self.model.after_collect(self.env_steps, self.env_steps, self.buffer, self.agent, should_stop=stop.is_set)
            if self.env_steps >= cfg.total_env_steps and not self.model.fit_pending:  # it was the last step's fit
                timing = throughput.row(self.env_steps, self.agent.num_updates)
                self.wall_s = timing["wall_s"]
                row = self._row(timing, False)  # the whole model's columns, added to the step's row
                logger.amend(row, INTERVAL_COLUMNS)
                self.save()
                saved_at = self.env_steps
        while self.env_steps < cfg.total_env_steps and not stop.is_set():
            before = self.env_steps
            self._collect_step()
            tick = time.perf_counter()
            if self.model is not None:
                self.model.after_collect(before, self.env_steps, self.buffer, self.agent, should_stop=stop.is_set)
            tock = time.perf_counter()
            if self.env_steps >= cfg.agent.learning_starts:
                self.learning_env_steps += n
                owed = math.floor(self.learning_env_steps * self.utd_ratio + 1e-9) - self.updates_issued
                for batch in self.policy_batches(owed):
                    if cfg.debug:
                        check_transitions(batch, "replay -> learner", self.plan.device, self.env.obs_dim,
                                          self.env.action_space)
                    self.agent.update(batch)  # metrics: pop_metrics() at log time
                self.updates_issued += owed
            self.time_s["model"] += tock - tick
            self.time_s["update"] += time.perf_counter() - tock
            done = self.env_steps >= cfg.total_env_steps
            due = self.due(before, self.env_steps, done)
            if due.evaluate:
                self._evaluate()
            if due.log:
                timing = throughput.row(self.env_steps, self.agent.num_updates)
                self.wall_s = timing["wall_s"]
                row = self._row(timing, due.evaluate)
                logger.log(row)
            if due.checkpoint:
                self.wall_s = throughput.wall_s()
                self.save()
                saved_at = self.env_steps
            rates = throughput.live(self.env_steps, self.agent.num_updates)
            logger.progress(self.env_steps, {
                "eval_return": self.last_eval_return, "steps/s": rates["env_steps_per_s"],
                "upd/s": rates["updates_per_s"],
            })
        if stop.is_set() and saved_at != self.env_steps and self.env_steps > 0:  # between the cadence's rows
            if row.get("env_steps") != self.env_steps:
                timing = throughput.row(self.env_steps, self.agent.num_updates)
                self.wall_s = timing["wall_s"]
                row = self._row(timing, False)
                logger.log(row)
            self.wall_s = throughput.wall_s()
            print(f"[mbpo] stopped at {self.env_steps:,} env steps; final checkpoint: {self.save()}; `python -m mbpo "
                  f"resume {shlex.quote(str(self.run_dir))}` goes on from it", file=sys.stderr)
        return row

    def _first_reset(self) -> torch.Tensor:
        """The env's reset where the run starts episodes, held to the contract (check_training_env)."""
        obs = self.env.reset()
        check_training_env(self.env, self._who, obs=obs)
        return obs

    def _collect_step(self) -> None:
        obs = self._obs
        assert obs is not None, "run() resets the env before the first step"
        who = self._who
        tick = time.perf_counter()
        try:
            if self.env_steps < self.config.agent.learning_starts:
                actions = envs.random_actions(self.env, self._action_generator)
            else:
                actions = self.policy.act(obs.cpu(), explore=True).to(self.env.device)
                self.planned_actions += int(getattr(self.policy, "planned", False)) * self.env.num_envs
        except Exception:  # noqa: BLE001 - re-raised: observations that break the contract are named as such
            check_training_env(self.env, who, obs=obs, first=False)
            raise
        tock = time.perf_counter()
        result = self.env.step(actions)
        if not self._step_checked:
            check_training_env(self.env, who, step=result)
            self._step_checked = True
        self.time_s["act"] += tock - tick
        self.time_s["env"] += time.perf_counter() - tock
        try:
            self._store(obs, actions, result)
        except Exception:  # noqa: BLE001 - re-raised: a later step that breaks the contract is named as such
            check_training_env(self.env, who, step=result, first=False)
            raise

    def _store(self, obs: torch.Tensor, actions: torch.Tensor, result: envs.base.StepResult) -> None:
        """One vector step's transitions into the buffers, its episode bookkeeping, and the next observations."""
        next_obs, reward, terminated, truncated, info = result
        done = terminated | truncated
        data = real_transitions(obs, actions, reward, next_obs, terminated, truncated, info)
        try:
            keep = screen(data, self.config.runtime.nonfinite, self.env_steps)
        except NonFiniteEnvError:
            self._env_ahead = True  # the env took a step the checkpoint does not hold
            raise
        reward_cpu = reward.cpu().double()
        if keep is not None:  # runtime.nonfinite=drop
            self.nonfinite_dropped += int((~keep).sum())
            reward_cpu = torch.where(keep, reward_cpu, 0.0)
        self.agent.observe(obs if keep is None else obs[keep.to(obs.device)])  # running obs statistics
        # (agent.obs_norm) learn from real, finite observations only
        if self._n_step is not None:
            data = self._n_step.push(data, truncated, keep=keep)
        elif keep is not None:
            data = data[keep.to(data.device)]
        if data.shape[0]:
            if self.config.debug:
                check_transitions(data, "env -> replay buffer", self.plan.device, self.env.obs_dim,
                                  self.env.action_space)
            self.buffer.extend(data)
        self._obs, poisoned = reset_poisoned(self.env, next_obs, self._who)
        self.env_steps += self.env.num_envs
        self._episode_return += reward_cpu
        if poisoned is not None:
            self._episode_return[poisoned] = 0.0
        done_cpu = done.cpu()
        if isinstance(self.policy, PlanningPolicy):  # new episodes start from no warm start
            self.policy.end_episodes(done_cpu if poisoned is None else done_cpu | poisoned)
        if bool(done_cpu.any()):
            self._recent_returns.extend(self._episode_return[done_cpu].tolist())
            self._episode_return[done_cpu] = 0.0

    # -- checkpoint and resume ---------------------------------------------------
    def work_owed(self) -> bool:
        """A model fit a stop cut short (it is redone first; only at the last step is nothing else left)."""
        return self.model is not None and self.model.fit_pending

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["trainer"] |= {
            "episode_return": self._episode_return.clone(),
            "obs": None if self._obs is None or self._env_ahead else self._obs.cpu(),
            "action_generator": self._action_generator.get_state(),
            "env_ahead": self._env_ahead,
            "n_step": None if self._n_step is None else self._n_step.state_dict(),
            "lookahead": self.policy.state_dict() if isinstance(self.policy, PlanningPolicy) else None,
        }
        state["env"] = self.env.state_dict() if hasattr(self.env, "state_dict") and not self._env_ahead else None
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        t = state["trainer"]
        self._episode_return = t["episode_return"].clone()
        restore_generator(self._action_generator, t["action_generator"])
        if self._n_step is not None and t.get("n_step") is not None:  # None: an mbpo that did not save them
            self._n_step.load_state_dict(t["n_step"], self.env.device)
        if isinstance(self.policy, PlanningPolicy) and t.get("lookahead") is not None:  # None: planning off then
            self.policy.load_state_dict(t["lookahead"])
        if state["env"] is not None and hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(state["env"])
            self._obs = t["obs"].to(self.env.device)
        else:
            pending = None if self._n_step is None else self._n_step.flush()
            if pending is not None and pending.shape[0]:  # the cut episodes' last steps, as time-outs
                self.buffer.extend(pending)
            why = ("the run stopped on an env step it did not store" if t.get("env_ahead")
                   else f"{self.config.env.id} cannot save its simulator state")
            warnings.warn(f"{why}: the resumed run starts new episodes, so it is not bit-identical to an "
                          "uninterrupted one", stacklevel=2)
            self._obs = self._first_reset()
            self._episode_return.zero_()
            if isinstance(self.policy, PlanningPolicy):  # no warm start carries into the new episodes
                self.policy.end_episodes(torch.ones(self.env.num_envs, dtype=torch.bool))
