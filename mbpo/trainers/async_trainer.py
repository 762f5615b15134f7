"""AsyncTrainer: collectors, the model thread and the learner run at the same time, on the ratios MBPO needs.

Threads and what they own:

* ``num_collectors`` collector threads (mbpo.runtime.collectors): an env each
  and a CPU policy replica; they push batches into a bounded queue.
* the model thread (mbpo.runtime.model_worker): the dynamics ensemble; trains
  it when a training is due and rolls out into the model buffer.
* the main thread: the learner. It ingests batches into the replay buffer,
  issues exactly the updates the ingested data has earned (``utd_ratio``),
  publishes a CPU snapshot every ``publish_every`` updates, evaluates, logs,
  checkpoints, and supervises the others (mbpo.runtime.supervisor).

The :class:`~mbpo.runtime.gate.RatioGate` holds collectors back when the
learner or the model falls more than ``ratio_tolerance`` behind. Ctrl-C or
SIGTERM stops the run cleanly: the queue is drained, threads are joined, a final
checkpoint is written and :attr:`AsyncTrainer.exit_code` is 130 or 143.
Unlike the SyncTrainer it is not bit-reproducible (thread timing decides which
policy version acts), and a resume starts new episodes.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import gymnasium as gym
import torch

import envs
from mbpo.agents import acting_config, make_agent
from mbpo.config import Config, updates_per_transition
from mbpo.data.transitions import DISCOUNT, FIRST_STEP, NEXT_OBS_VALID, OBS, TRANSITION_KEYS
from mbpo.device.checks import DEBUG_QUEUE_SIZE, check_snapshot, check_transitions, switches
from mbpo.device.plan import DeviceMismatchError, device_of, same_device
from mbpo.model_based.planning_policy import MODEL_KEY
from mbpo.run.metrics import MetricsLogger
from mbpo.runtime.backends import make_backend
from mbpo.runtime.collectors import CollectorBatch, CollectorSetup
from mbpo.runtime.env_builder import EnvContractError, build_env, check_interface, collector_env_from, env_label
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.model_worker import ModelWorker
from mbpo.runtime.queue import TransitionQueue
from mbpo.runtime.supervisor import CollectorPool, StopOnSignals, WorkerError, cause_line
from mbpo.runtime.timing import POLL_S, SUPERVISE_EVERY_S
from mbpo.runtime.weights import WeightStore
from mbpo.trainers.async_stop import checkpoint_between_cycles, final_checkpoint, state_between_cycles, stop_workers
from mbpo.trainers.async_telemetry import AsyncTelemetry
from mbpo.trainers.base import INTERVAL_COLUMNS, EnvFactory, Trainer

__all__ = ["AsyncTrainer", "EnvFactory"]


class AsyncTrainer(Trainer):
    """The async MBPO (or plain SAC/DQN) trainer; ``run()`` trains, ``close()`` is idempotent."""

    @property
    def num_collectors(self) -> int:
        """One in debug mode, else ``runtime.num_collectors``; read from the checked config (the base's check)."""
        return 1 if self.config.debug else self.config.runtime.num_collectors

    def _build_runtime(self, config: Config) -> None:
        rt = config.runtime
        self.envs = [self.env]
        self.components["collector 0 env"] = self.env
        self.check_devices()
        n = config.env.num_envs
        self.weights = WeightStore()
        self.stop_event = threading.Event()
        self.real_lock = threading.Lock()
        steps_per_batch = -(-rt.collection_batch_size // n)
        self.gate = RatioGate(
            config.total_env_steps, n, config.agent.learning_starts, updates_per_transition(config),
            config.model.train_freq if self.model is not None else None, rt.ratio_tolerance,
            min_lead=steps_per_batch * n, max_lead=rt.max_lead, max_lag=config.model.max_lag)
        self.queue: TransitionQueue[CollectorBatch] = TransitionQueue(
            DEBUG_QUEUE_SIZE if config.debug else rt.max_queue_size, rt.queue_full, on_drop=self._dropped)
        planning = self.model is not None and self.model.acting is not None  # model.lookahead
        self.setup = CollectorSetup(acting_config(config.agent), self.env.observation_space, self.env.action_space, n,
                                    steps_per_batch, config.agent.learning_starts, rt.nonfinite,
                                    rt.collector_threads, config.debug, keep_first_step=config.model.enabled,
                                    lookahead=config.model if planning else None, env_id=config.env.id,
                                    env_label=env_label(config.env))
        self.backend = make_backend(
            rt.backend, self.setup, self.queue, self.weights, self.gate, num_collectors=self.num_collectors,
            env=config.env, env_device=str(self.env_device), env_seed=self._env_seed, action_seed=self._action_seed,
            thread_env=self._thread_env, template_snapshot=self._snapshot, ray=rt.ray,
            env_factory=self._env_factory)
        if not self.backend.uses_trainer_env:  # it gave the spaces and passed the device check; children build theirs
            self.env.close()
        self.pool = CollectorPool(self.num_collectors, self.backend.make_collector, self.gate, rt.max_restarts,
                                  rt.collector_timeout_s)
        self.model_worker: ModelWorker | None = None
        if self.model is not None:
            rollout_agent = make_agent(config.agent, self.env.observation_space, self.env.action_space,
                                       self.plan.device, self.seed("rollout_agent"))
            self.model_worker = ModelWorker(self.model, self.buffer, self.real_lock, self.gate, self.weights,
                                            rollout_agent, self.stop_event, rt.model_threads)
        self.exit_code = 0
        self.telemetry = AsyncTelemetry()
        self._closed = False
        self._started = self._stopped = False
        self._stopped_at = 0.0
        """The clock when the workers stopped: the final checkpoint's and the final row's wall_s."""
        self._counts_before = dict.fromkeys(("weights_version", "collector_restarts", "queue_drops", "gate_waits"), 0)
        """The run counts (:meth:`_run_counts`) at the checkpoint this process resumed from."""
        self._checkpoint_due = False
        self._loop_ended = False
        """The loop reached its end: every env step in, every update and model fit they earned done."""
        self._finished = False
        """The loop ended and the final evaluation (where the cadence asks for one) is done: nothing is owed."""
        self._waiting_for_owed_rollouts = False
        """A resume found a fit's rollouts owed (a stop came between them): the learner waits for them."""
        self._cadence_env_steps: int | None = None
        """A resumed run's env steps the eval/log/checkpoint cadence had been checked up to."""
        self._periodic_steps = 0  # this run's (set when it starts)

    def _cast_to_float32(self, fields: tuple[str, ...]) -> None:
        """Every collector casts them, whatever runs it: thread collectors share the setup, process and Ray
        collectors are sent it when they start (after this).
        """
        self.setup.float32_fields = fields

    # -- construction helpers -----------------------------------------------------------
    def _make_env(self) -> envs.VecEnv:
        return self._collector_env(0, 0)

    def _collector_env(self, collector_id: int, incarnation: int) -> envs.VecEnv:
        """Collector ``collector_id``'s env in the trainer's process: ``env_factory``'s, else the config's."""
        seed = self._env_seed(collector_id, incarnation)
        if self._env_factory is None:
            env = build_env(self.config.env, self.config.env.num_envs, self.env_device, seed)
        else:
            env = collector_env_from(self._env_factory, collector_id, incarnation, seed, self.env_device,
                                     self.config.env.num_envs)
        try:
            check_interface(env, self.config.env)  # its device must be one before it is compared
        except EnvContractError:
            env.close()
            raise
        factory_made = self._env_factory is not None or self.config.env.factory is not None
        if factory_made and not same_device(device_of(env), self.plan.device):  # a factory's env chose its own
            env.close()
            raise DeviceMismatchError(f"collector {collector_id}'s env is on {env.device}, but the run's device "
                                      f"plan is {self.plan.device}; build it on {self.plan.device}")
        return env

    def _env_seed(self, collector_id: int, incarnation: int) -> int:
        return self.seed("collector_env", collector_id, incarnation)

    def _action_seed(self, collector_id: int, incarnation: int) -> int:
        return self.seed("collector_actions", collector_id, incarnation)

    def close_envs(self) -> None:
        """Also the collectors' envs (and processes) and the backend, when a start-up fails after they were built."""
        super().close_envs()
        if getattr(self, "pool", None) is not None:
            self.pool.close()
        if getattr(self, "backend", None) is not None:
            self.backend.close()

    def _thread_env(self, collector_id: int, incarnation: int) -> envs.VecEnv:
        """Collector 0's first env is the one the trainer built; every other is built here (device-checked)."""
        return self.env if (collector_id, incarnation) == (0, 0) else self._collector_env(collector_id, incarnation)

    def _dropped(self, batch: CollectorBatch) -> None:
        """queue_full=drop_oldest displaced ``batch``: its env steps were spent, and its slot is free again."""
        self.gate.discard(batch.env_steps)
        self._collector_cpu_s[1] += batch.cpu_s
        batch.release()

    # -- the loop --------------------------------------------------------------------------
    def run(self, logger: MetricsLogger | None = None) -> dict[str, Any]:
        """Train until ``total_env_steps`` (or a stop signal); write the final checkpoint; return the last row."""
        cfg = self.config
        try:
            self._open_run_dir()
        except BaseException:
            self.close()
            raise
        own_logger = logger is None
        try:
            logger = logger or MetricsLogger(self.run_dir, cfg.total_env_steps, cfg.progress,
                                             resume_at=self.env_steps or None)
            self._forget_logged_metrics(logger)
        except BaseException:
            self.close()
            raise
        self._logger = logger
        anomaly = torch.is_anomaly_enabled()
        torch.set_num_threads(cfg.runtime.learner_threads)
        if cfg.debug:
            torch.autograd.set_detect_anomaly(True)
            for line in switches(cfg.runtime.num_collectors, cfg.runtime.backend, model=self.model is not None,
                                 discrete=isinstance(self.env.action_space, gym.spaces.Discrete)):
                print(f"[mbpo debug] {line}", file=sys.stderr)
        try:
            with StopOnSignals(self.stop_event, self._stopping) as signals:
                self._start()
                evaluated = completed = False
                try:
                    self._loop()
                    cadence = self._periodic_steps  # where the cadence stood before the final evaluation
                    if self._loop_ended:
                        # The final policy (after the last updates) is evaluated when the cadence reaches the end,
                        # as the SyncTrainer does (an eval the cadence does not ask for is not free), before the
                        # final checkpoint, which then holds a finished run; a stopped run's resume catches up.
                        evaluated = self.due(self._periodic_steps, self.env_steps).evaluate
                        if evaluated:
                            self._evaluate()
                        self._periodic_steps = self.env_steps
                        self._finished = True
                    completed = True
                finally:
                    failing = not completed  # not sys.exc_info(): a caller's except block that runs us has one
                    shut_down = False
                    try:
                        self._shutdown()
                        shut_down = True
                    except Exception as exc:  # noqa: BLE001 - never hide the error that ended the run
                        if not failing:
                            raise
                        print(f"[mbpo] during shutdown: {exc!r}", file=sys.stderr)
                    finally:
                        if not shut_down and self._finished:  # the final row is not written: the checkpoint
                            self._finished = False  # owes it, and the final evaluation the row shows
                            self._periodic_steps = cadence
                        try:  # the final row before the final checkpoint, as the SyncTrainer: a kill between
                            if shut_down and not failing:  # them leaves a row its resume writes again, never a
                                row = self._log(logger, evaluated=evaluated, final=True)  # checkpoint without it
                        finally:
                            final_checkpoint(self.env_steps, self.save, announce=signals.signum is not None or failing)
                self._progress()  # the bar ends at the env steps really taken
            if signals.signum is not None:
                self.exit_code = 128 + signals.signum
        finally:
            self.close()
            torch.autograd.set_detect_anomaly(anomaly)
            if own_logger:
                logger.close()
        return row

    def _stopping(self) -> str:
        if self.env_steps == 0:  # the queue may still hold the first batches
            return "draining the queue (a final checkpoint if it holds env steps), joining threads"
        return "draining the queue, joining threads, " + self.stopping()

    def _gate_from_counters(self) -> None:
        """The gate's counters from the trainer's (a resumed run goes on from its checkpoint's)."""
        g = self.gate
        g.reserved = self.env_steps
        g.ingested = self.env_steps - g.discarded  # dropped batches are env steps that never reached the buffer
        g.updates = self.updates_issued
        if self.model is not None:
            g.model_start = self.model.budget_start  # from the checkpoint's model, which may predate today's rule
            # at most what the data earned: a checkpoint from before the one-per-vector-step rule counted more
            g.trainings = min(self.model.trainings + self.model.trainings_folded, g.trainings_earned())

    def _start(self) -> None:
        self._gate_from_counters()
        self._publish()
        self._throughput = self._start_clock()
        # env steps the eval/log/checkpoint cadence has been checked up to (a stopped run ingests what is queued
        # without checking it: its resume catches up, and does the final evaluation a stop at the end skipped)
        self._periodic_steps = self.env_steps if self._cadence_env_steps is None else self._cadence_env_steps
        self.telemetry = AsyncTelemetry()  # its columns are per interval, from this run's start
        self._waiting_for_owed_rollouts = self.model is not None and self.model.rollouts_owed
        if self.stop_event.is_set():  # stopped before it began (Ctrl-C during start-up): no worker is started,
            return  # so no env step is taken after it
        self._started = True
        self.pool.start()
        if self.model_worker is not None:
            self.model_worker.start()

    def _loop(self) -> None:
        cfg = self.config
        while not self.stop_event.is_set():
            self._supervise()
            before = self.env_steps
            for item in self.queue.drain():
                self._ingest(item)
            due = self._updates_allowed()
            if due > 0:
                self._update(min(due, cfg.runtime.publish_every - self.updates_issued % cfg.runtime.publish_every))
            elif self.pool.finished and len(self.queue) == 0 and self.gate.updates_due() <= 0 \
                    and self.gate.trainings_due() <= 0 and not self._owed_rollouts_pending():
                # the last fit and its rollouts end (a finished run holds a whole model)
                self._loop_ended = True
                break
            elif self.env_steps == before:
                waited = self.queue.get(POLL_S)
                if waited is not None:
                    self._ingest(waited)
            self._periodic()
            if self._checkpoint_due and checkpoint_between_cycles(self.model_worker, super().state_dict, self.save):
                self._checkpoint_due = False

    def _supervise(self) -> None:
        """Raise here, in the main thread, whatever killed a worker (collectors: after the restart budget)."""
        self.pool.check()
        if self.model_worker is not None and self.model_worker.error is not None:
            cause = self.model_worker.error  # named in the message too: a traceback's last line must say what failed
            raise WorkerError(f"the model thread (ensemble training and rollouts) failed: {cause_line(cause)}") \
                from cause

    def _updates_allowed(self) -> int:
        due = self.gate.updates_due()
        if due > 0 and self.model is not None and len(self.model.model_buffer) == 0 \
                and self.gate.trainings_earned() > 0 and (self.gate.trainings == 0 or self.model.rollouts_owed):
            return 0  # the first model is due (or fitted, its rollouts not made): wait for them, as the sync trainer
        if due > 0 and self._owed_rollouts_pending():
            return 0  # a resume's owed rollouts come first, as the sync trainer makes a fit's before its updates
        return due

    def _owed_rollouts_pending(self) -> bool:
        """The rollouts a resume found owed are not made yet (the model thread makes them before anything else)."""
        if self._waiting_for_owed_rollouts and self.model is not None and not self.model.rollouts_owed:
            self._waiting_for_owed_rollouts = False
        return self._waiting_for_owed_rollouts

    def _ingest(self, item: CollectorBatch) -> None:
        data = item.data
        device = self.plan.device
        if self.config.debug:  # as the replay buffer takes it: a process or Ray batch comes on the CPU, moved below
            check_transitions(data.to(device), "queue -> replay buffer", device, self.env.obs_dim,
                              self.env.action_space)
        n = data.shape[0]
        with self.real_lock:
            if n:
                keys = (*TRANSITION_KEYS, NEXT_OBS_VALID,
                        *(k for k in (DISCOUNT, *FIRST_STEP.values()) if k in data.keys()))  # n-step rows' extras
                self.buffer.extend(data.select(*keys).to(device))
                self.agent.observe(data[OBS])  # running obs statistics (agent.obs_norm): real observations only
            self.gate.add(ingested=item.env_steps)
        item.release()  # copied into the replay buffer: a shared-memory slot can take the next batch
        self.env_steps = self.gate.ingested + self.gate.discarded  # env interactions, dropped batches included
        self.learning_env_steps = self.gate.learning_transitions()
        self.nonfinite_dropped += item.dropped_nonfinite
        self.time_s["env"] += item.env_s  # summed over collectors: can exceed the wall-clock
        self.time_s["act"] += item.act_s
        self.planned_actions += item.planned
        self._collector_cpu_s[0] += item.cpu_s
        self._recent_returns.extend(item.episode_returns)
        if item.env_steps:  # a collector's last open n-step windows took no step: no policy lag to count
            superseded = self.weights.published_at(item.policy_version + 1)  # how long its weights were stale
            self.telemetry.ingested(self.weights.version - item.policy_version,
                                    0.0 if superseded is None else max(time.monotonic() - superseded, 0.0),
                                    len(self.queue))

    def _update(self, k: int) -> None:
        start = checked = time.perf_counter()
        debug = self.config.debug
        for batch in self.policy_batches(k):
            if time.perf_counter() - checked > SUPERVISE_EVERY_S:  # a long chunk still surfaces worker errors
                self._supervise()
                checked = time.perf_counter()
            if debug:
                check_transitions(batch, "replay -> learner", self.plan.device, self.env.obs_dim,
                                  self.env.action_space)
            self.agent.update(batch)
        self.updates_issued += k
        self.gate.add(updates=k)
        self.time_s["update"] += time.perf_counter() - start
        if self.updates_issued % self.config.runtime.publish_every == 0:
            self._publish()

    def _snapshot(self) -> dict[str, Any]:
        """What collectors load: the agent's snapshot, and under model.lookahead the ensemble of its last fit."""
        snapshot = self.agent.snapshot()
        if self.model is not None and self.model.acting is not None:
            snapshot[MODEL_KEY] = self.model.acting
        return snapshot

    def _publish(self) -> None:
        snapshot = self._snapshot()
        if self.config.debug:
            check_snapshot(snapshot, "learner -> collectors")
        self.weights.publish(snapshot)

    def _periodic(self) -> None:
        """Evaluate, log and checkpoint when ingested env steps cross their intervals (the final ones
        happen after the last updates, in run()).
        """
        cfg, logger = self.config, self._logger
        if self.env_steps >= cfg.total_env_steps:
            return
        due = self.due(self._periodic_steps, self.env_steps)
        self._periodic_steps = self.env_steps
        if due.evaluate:
            self._evaluate(None if self._stopped else self._supervise)  # long evaluations surface worker errors
        if due.log:
            self._log(logger, due.evaluate)
        if due.checkpoint:
            self._checkpoint_due = True
        self._progress()

    def _progress(self) -> None:
        rates = self._throughput.live(self.env_steps, self.agent.num_updates)
        self._logger.progress(self.env_steps, {
            "eval_return": self.last_eval_return, "steps/s": rates["env_steps_per_s"],
            "upd/s": rates["updates_per_s"], "queue": len(self.queue),  # metrics.csv's names: queue_depth, policy_lag_
            "lag": self.telemetry.last_lag,  # versions (of the newest batch here), learner_busy (over the interval)
            "learner_busy": self.telemetry.learner_busy(self.time_s["update"], self._throughput.since_row()),
            "model_v": None if self.model is None else self.model.ensemble.version,
            "restarts": self._counts_before["collector_restarts"] + self.pool.restarts,
            "drops": self._counts_before["queue_drops"] + self.queue.dropped, "nonfinite": self.nonfinite_dropped,
        })

    def _log(self, logger: MetricsLogger, evaluated: bool, final: bool = False) -> dict[str, Any]:
        """One metrics row; the final one fills a row already at its env step (a resume that took no new steps)."""
        # the final row is timed where the workers stopped, as the final checkpoint is: a resume's clock starts
        # from the checkpoint's wall_s, and the rows went back by the time the checkpoint took to write
        timing = self._throughput.row(self.env_steps, self.agent.num_updates,
                                      self._stopped_at if final and self._stopped else None)
        self.wall_s = timing["wall_s"]
        model_s = None
        if self.model_worker is not None:
            self.time_s["model"] = model_s = self.model_worker.busy_s
        row = self._row(timing, evaluated)
        row.update(self.telemetry.row(self.time_s["update"], model_s, self._throughput.interval_s))  # rates' interval
        row.update({**self._run_counts(), "hung_collectors": self.pool.hung_now})
        if self.model_worker is not None:
            row["rollout_policy_version"] = self._counts_before["weights_version"] + self.model_worker.policy_version
        if final:
            logger.amend(row, INTERVAL_COLUMNS | AsyncTelemetry.COLUMNS)
        else:
            logger.log(row)
        return row

    # -- shutdown ----------------------------------------------------------------------------
    def _shutdown(self) -> None:
        """Stop every worker, join them by the deadline, and ingest what is still queued."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self.stop_event.set()
        stop_workers(self.pool, self.model_worker, self.queue.drain, self._ingest,
                     self.config.runtime.shutdown_timeout_s)
        self._stopped_at = self.clock()
        self.wall_s = self._throughput.wall_s(self._stopped_at)

    def work_owed(self) -> bool:
        """Until the loop ends, the learner owes the newest batches' updates (up to ``max_lead * utd_ratio``),
        maybe a model fit or its rollouts, and then the final evaluation: a stop (or a failure) before they are
        all done leaves them to the resume.
        """
        return not self._finished

    def _run_counts(self) -> dict[str, int]:
        """The async columns that count over the whole run, resumes included: this process's counts on top of
        the checkpoint's (weights versions restart at 1 in a resumed process, its publications go on counting).
        """
        now = {"weights_version": self.weights.version, "collector_restarts": self.pool.restarts,
               "queue_drops": self.queue.dropped, "gate_waits": self.gate.waits}
        return {key: self._counts_before[key] + value for key, value in now.items()}

    def _trainer_state(self) -> dict[str, Any]:
        if self._started and not self._stopped:  # a periodic checkpoint: the seconds up to now, as sync's holds
            self.wall_s = self._throughput.wall_s()
        cadence = self._periodic_steps if self._started else self.env_steps
        return {**super()._trainer_state(), "discarded": self.gate.discarded, "cadence_env_steps": cadence,
                "run_counts": self._run_counts()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.setup.resumed_at = self.env_steps  # its collectors draw new streams, not the run's first ones
        t = state["trainer"]
        self.gate.discarded = int(t.get("discarded", 0))  # 0 in checkpoints that predate it
        self._cadence_env_steps = t.get("cadence_env_steps")
        self._counts_before.update({k: int(v) for k, v in t.get("run_counts", {}).items()})  # older: from 0

    def state_dict(self) -> dict[str, Any]:
        """Waits for the model thread's current cycle (a consistent ensemble, not mid-fit), at most
        ``runtime.shutdown_timeout_s``; a model thread stuck longer raises instead of hanging the run.
        """
        state = self._state_between_cycles(self.config.runtime.shutdown_timeout_s)
        if state is None:
            raise TimeoutError(f"the model thread held the ensemble for more than runtime.shutdown_timeout_s="
                               f"{self.config.runtime.shutdown_timeout_s} s; no consistent checkpoint")
        return state

    def _state_between_cycles(self, timeout: float) -> dict[str, Any] | None:
        return state_between_cycles(self.model_worker, super().state_dict, timeout)

    def close(self) -> None:
        """Stop and join every thread, close every env and release the run dir. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._shutdown()
            self.pool.close()  # closes every collector's env (or ends its process)
            self.backend.close()
            self.eval_env.close()
        finally:
            self._close_run_dir()
