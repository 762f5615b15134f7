"""What the sync and async trainers share: building the learner side, metrics rows, checkpoints, resume.

Both trainers hold the same learner (agent, replay buffer, optional MBPO
model) on the plan's device and count the same things, so their checkpoints
share one format and their metrics rows one set of columns.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import envs
from mbpo.agents import make_agent
from mbpo.config import Config, ConfigError, checked_copy, rollouts_per_transition, to_yaml, updates_per_transition
from mbpo.config.seeding import derive, seed_everything
from mbpo.data.replay import load_replay_state, make_replay_buffer, replay_state, sample_batches
from mbpo.device.plan import DevicePlan
from mbpo.device.precision import resolve_precision
from mbpo.model_based.learner import ModelBased
from mbpo.models.rules import probe_transitions
from mbpo.run.checkpoint import FORMAT, save_checkpoint
from mbpo.run.evaluation import critic_bias, eval_stats, evaluate_episodes
from mbpo.run.run_dir import (
    RESUMABLE_OVERRIDES,
    RUN_RECORD,
    RunIdentity,
    RunLock,
    log_resume,
    record_provenance,
    refuse_a_used_run_dir,
    write_config,
)
from mbpo.run.throughput import RATE_COLUMNS, Throughput
from mbpo.run.video import EvalVideos
from mbpo.runtime.env_builder import (
    EnvContractError,
    build_env,
    check_env,
    check_interface,
    collector_env_from,
    env_label,
    factory_name,
)
from mbpo.runtime.main_guard import exit_if_a_child_imports_main
from mbpo.trainers.memory_check import check_memory
from mbpo.trainers.resume import ResumePoint, check_same_env_factory, load_for_resume

if TYPE_CHECKING:
    from tensordict import TensorDict

    from mbpo.run.metrics import MetricsLogger

__all__ = ["Trainer", "EnvFactory", "Due", "seed_everything", "crossed", "RESUMABLE_OVERRIDES", "INTERVAL_COLUMNS"]

RECENT_EPISODES = 10  # train_return is the mean of the last this-many finished episodes
TIME_PARTS = ("env", "act", "update", "model", "eval")
"""Where training time goes: env.step, choosing actions, gradient updates (with their batch sampling), the
dynamics model (training and rollouts), evaluation."""
INTERVAL_COLUMNS = frozenset({*RATE_COLUMNS, *(f"time_{part}_s" for part in TIME_PARTS)})
"""Row columns measured over the process's own interval (what a resume's row must not put over an earlier one)."""
DRAW_ROWS = 8192  # policy batches are drawn up to this many transitions at a time (bounded memory)


def crossed(before: int, after: int, every: int) -> bool:
    """Whether env steps crossed a multiple of ``every`` going from ``before`` to ``after``."""
    return after // every > before // every


@dataclass(frozen=True)
class Due:
    """What the cadence asks for after env steps went from ``before`` to ``after`` (:meth:`Trainer.due`)."""

    evaluate: bool
    log: bool
    checkpoint: bool


EnvFactory = Callable[[int, int, int], Any]
"""``(collector_id, incarnation, seed) -> env``: a run's training envs from Python (a VecEnv, or any env that
``envs.as_vec_env`` wraps); the sync trainer's one env is collector 0's."""


class Trainer:
    """The learner side of a run; subclasses bring the training env(s) and the loop."""

    exit_code = 0
    """128 + the signal that stopped the last :meth:`run` (130 Ctrl-C, 143 SIGTERM); 0 when it ran to the end."""

    def __init__(self, config: Config, run_dir: str | Path | None, env_factory: EnvFactory | None = None) -> None:
        """Plans devices, builds the training env (:meth:`_make_env`), the learner on its spaces, then what the
        subclass needs (:meth:`_build_runtime`), then the evaluation env; a failed start-up closes every env it
        built. ``env_factory(collector_id, incarnation, seed)``: the training envs from Python instead of the
        config's (wrapped by type as ``env.factory``'s are; the evaluation env stays the config's).
        """
        exit_if_a_child_imports_main()  # a collector process importing a script with no __main__ guard
        config = checked_copy(config)  # the run's own, held to what a config file is (it may come from Python)
        if run_dir is None:
            raise ConfigError("run_dir is None; expected the directory the run writes to (make_trainer(config, "
                              "'runs/my-run'), or set config.run_dir and pass it)")
        self._env_factory = env_factory
        self.config = config
        self.run_dir = Path(run_dir).expanduser()  # `~/runs/x` from Python, as on the command line
        self.utd_ratio = updates_per_transition(config)
        """Gradient updates per collected transition in effect (agent.utd_ratio or updates_per_vector_step)."""
        torch.set_num_threads(config.torch_threads)  # small RL nets: more threads only contend
        seed_everything(config.seed)
        self.plan = DevicePlan.for_run(config.device, config.env.device)
        device = self.plan.device
        self.env_device = self.plan.env
        _resolve_precisions(config, device)
        self.identity = RunIdentity.new(config)
        """Which run this is; a resume adopts its checkpoint's (see :meth:`resume`)."""
        self.resumed_from: ResumePoint | None = None
        self.clock: Callable[[], float] = time.perf_counter
        """The clock of ``wall_s`` and the rate columns (mbpo.run.throughput); tests swap in a fake one."""
        self._cpu_origin = time.process_time()
        """This process's CPU seconds when this trainer was built: ``cpu_s`` counts from here."""
        self._collector_cpu_s = [0.0, 0.0]
        """CPU seconds of process and Ray collectors since then, as their batches report them: [ingested batches
        (the learner thread adds), batches a full queue dropped (the queue's drop adds)], one writer each."""
        self._lock = RunLock(self.run_dir)
        if config.total_env_steps < config.agent.learning_starts:  # the vector step that reaches it earns updates
            print(f"[mbpo] warning: total_env_steps={config.total_env_steps} is below agent.learning_starts="
                  f"{config.agent.learning_starts}: this run takes random actions only and trains nothing; raise "
                  "total_env_steps or lower agent.learning_starts", file=sys.stderr)
        if config.eval_every > config.total_env_steps:
            print(f"[mbpo] warning: eval_every={config.eval_every:,} is above total_env_steps="
                  f"{config.total_env_steps:,}: this run never evaluates, so it has no eval_return to report or "
                  "plot; lower eval_every", file=sys.stderr)
        self.env = self._make_env()
        try:
            check_interface(self.env, config.env)  # before anything reads its device, spaces or reset
            self._build_learner(config, device)
            self._build_runtime(config)
            # Last: a backend whose children build their own envs has closed the trainer's by now, and a simulator
            # that runs one instance per process (Isaac Sim) can then hold the evaluation env.
            try:
                self.eval_env = build_env(config.env, config.eval_episodes, self.env_device, self.seed("eval_env"),
                                          render=config.eval_video)
            except envs.EnvTooLargeError as exc:  # its advice names env.num_envs; here eval_episodes sets the envs
                fits = f" to at most {exc.fits:,}" if exc.fits else ""
                raise ConfigError(f"eval_episodes={config.eval_episodes:,} runs as many {config.env.id} envs at once "
                                  f"(one per episode), more than {self.env_device} has memory for; lower "
                                  f"eval_episodes{fits}") from None
            self.plan.check({"eval env": self.eval_env})
            # Before any collector starts, on every backend: the eval env is built as every collector's is, and
            # every evaluation reseeds it, so its probe step changes nothing the run does afterwards.
            self.eval_env, probe = check_env(self.eval_env, config.env, self.seed("env_probe"))
            for name in ("observation_space", "action_space"):  # an env_factory's env against the config's
                trained, evaluated = getattr(self.env, name), getattr(self.eval_env, name)
                if trained != evaluated:
                    raise EnvContractError(
                        f"{env_label(config.env)}: the training env's {name} is {trained}, the evaluation env's "
                        f"(built from the config) {evaluated}; expected one task: make env.id / env.factory build "
                        "the env the trainer's env_factory returns")
            self.components["eval env"] = self.eval_env
            self.eval_videos = EvalVideos(self.run_dir / "videos", self.eval_env) if config.eval_video else None
            """eval_video=true: a video of each evaluation's first episode (it draws a frame now, to fail early)."""
            self.float32_fields = tuple(probe.float32_fields)
            """Env fields returned in another float dtype, cast to float32 wherever the run steps an env."""
            self._cast_to_float32(self.float32_fields)
            if self.model is not None:
                self._check_rules(self.model, probe_transitions(probe))
        except BaseException:
            self.close_envs()  # a simulator (mjlab, Isaac Lab) must not outlive a failed start-up
            raise

    def seed(self, *stream: str | int) -> int:
        """The seed of one random stream of this run (mbpo.config.seeding: derived from ``seed``, never an offset)."""
        return derive(self.config.seed, *stream)

    def run(self, logger: MetricsLogger | None = None) -> dict[str, Any]:
        """Train until ``total_env_steps``; write the final checkpoint; return the last metrics row."""
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    def _build_runtime(self, config: Config) -> None:
        """What a subclass builds after the learner (collectors, the model thread); the envs close if it fails."""

    def _cast_to_float32(self, fields: tuple[str, ...]) -> None:
        """Have the training envs cast ``fields`` to float32 (envs.contract.as_float32), as the start-up check
        found they need; a subclass knows where its training envs are stepped.
        """

    def _build_learner(self, config: Config, device: torch.device) -> None:
        self.plan.check({"env": self.env})  # before anything else is built or stepped
        check_memory(config, self.env.obs_dim, self.env.act_dim, self.env.action_space, device)
        self.agent = make_agent(config.agent, self.env.observation_space, self.env.action_space, device,
                                self.seed("agent"))
        self.buffer = make_replay_buffer(
            config.agent.buffer_size, device, torch.Generator(device=device).manual_seed(self.seed("replay"))
        )
        self.model: ModelBased | None = None
        self.components: dict[str, Any] = {
            "env": self.env, "replay buffer": self.buffer,
            **{f"learner {name}": net for name, net in self.agent.networks.items()}}
        if config.model.enabled:
            gamma = config.agent.sac.gamma if config.agent.name == "sac" else config.agent.dqn.gamma
            self.model = ModelBased(config.model, config.env.id, self.env.observation_space, self.env.action_space,
                                    device, self.seed("model"), rollouts_per_transition(config),
                                    config.agent.learning_starts, env=self.env, num_envs=config.env.num_envs,
                                    gamma=gamma)
            self.model.debug = config.debug
            self.components |= {"ensemble": self.model.ensemble, "model buffer": self.model.model_buffer}
        self._init_counters()

    def _init_counters(self) -> None:
        self.env_steps = 0
        self.learning_env_steps = 0  # env transitions that earned updates (after learning_starts)
        self.updates_issued = 0  # update() calls so far: floor(learning_env_steps * utd_ratio), no float drift
        self.wall_s = 0.0
        self._cpu_before: float | None = 0.0  # the CPU seconds of earlier invocations (a checkpoint's)
        self.last_eval_return: float | None = None
        self.last_eval_env_steps: int | None = None
        self.nonfinite_dropped = 0
        """Env rows dropped for a non-finite value (runtime.nonfinite=drop, mbpo.runtime.nonfinite), all runs of
        the run dir together."""
        self.planned_actions = 0
        """Env actions planned through the model (model.lookahead), all runs of the run dir together."""
        self.last_eval_stats: dict[str, float] = {}
        """The spread of the last evaluation's episodes (mbpo.run.evaluation.eval_stats)."""
        self.last_q_bias: dict[str, float] = {}
        """The critic's bias at the last evaluation's start states (q_start, mc_return_start, q_bias)."""
        self._recent_returns: deque[float] = deque(maxlen=RECENT_EPISODES)
        self.time_s = dict.fromkeys(TIME_PARTS, 0.0)
        """Seconds spent in each part of training since this process started it (logged as time_<part>_s).
        Parts overlap in the async trainer (collectors, model thread and learner run at once)."""

    def _check_rules(self, model: ModelBased, transitions: TensorDict) -> None:
        """Say which termination and reward rules the rollouts use, and run them on real ``transitions`` (the
        start-up probe's random step of the eval env) before anything trains. Last in start-up: the rules come
        from the training env, the transitions from the eval env.
        """
        print(f"[mbpo] model rules: {model.rules.describe()}", file=sys.stderr)
        if model.termination is None and model.reward is None:
            return
        # on the model's device, where the rollouts call them (the env may live elsewhere: env.device=cpu)
        for line in model.check_rules(transitions.to(model.device)):
            print(f"[mbpo] warning: {line}", file=sys.stderr)

    def due(self, before: int, after: int, done: bool = False) -> Due:
        """Evaluate, log and checkpoint when env steps cross their intervals; the last step always logs and
        checkpoints (and evaluates only where the cadence says so: an evaluation is not free).
        """
        cfg = self.config
        evaluate = crossed(before, after, cfg.eval_every)
        return Due(evaluate, evaluate or done or crossed(before, after, cfg.log_every),
                   done or crossed(before, after, cfg.checkpoint.every))

    def _evaluate(self, poll: Callable[[], None] | None = None) -> None:
        """The deterministic policy on the eval env, seeded per evaluation (its own stream), and the critic's
        bias at the episodes' start states: mean Q against the mean discounted Monte-Carlo return.
        """
        start = time.perf_counter()
        gamma = self.config.agent.sac.gamma if self.config.agent.name == "sac" else self.config.agent.dqn.gamma
        recorder = None if self.eval_videos is None else self.eval_videos.recorder(self.env_steps)
        with recorder or contextlib.nullcontext():
            episodes = evaluate_episodes(self.agent, self.eval_env, self.eval_seed(), poll, gamma, frames=recorder)
        self.last_eval_return = float(np.mean(episodes.returns))
        self.last_eval_stats = eval_stats(episodes)
        self.last_q_bias = critic_bias(self.agent, episodes)
        self.last_eval_env_steps = self.env_steps
        self.time_s["eval"] += time.perf_counter() - start

    def _start_clock(self) -> Throughput:
        """The run's wall-clock and rate columns from now on (a start, or a resume at the checkpoint's counters)."""
        return Throughput(self.env_steps, self.agent.num_updates, self.wall_s, self.clock)

    def close(self) -> None:
        """Release what the trainer holds without running (a start-up cut short): its envs; the async trainer
        also its workers and the run dir.
        """
        self.close_envs()

    def close_envs(self) -> None:
        """Close every env built so far (safe to call twice: VecEnv.close is)."""
        for env in (getattr(self, "env", None), getattr(self, "eval_env", None), *getattr(self, "envs", ())):
            if env is not None:
                env.close()

    def check_devices(self) -> None:
        """Start-up assertion: every component on the plan's device, the policy replica on CPU."""
        self.plan.check(self.components, {"policy replica": self.agent.acting_replica})

    def _make_env(self) -> envs.VecEnv:
        """The training env (the first collector's, for the async trainer)."""
        if self._env_factory is not None:
            return collector_env_from(self._env_factory, 0, 0, self.seed("env"), self.env_device,
                                      self.config.env.num_envs)
        return build_env(self.config.env, self.config.env.num_envs, self.env_device, self.seed("env"))

    def policy_batches(self, count: int) -> Iterator[Any]:
        """The next ``count`` policy batches (TensorDicts), drawn several at a time: MBPO's learner does
        ``utd_ratio`` updates per transition and a draw's fixed cost would otherwise be paid per update.
        """
        batch_size = self.config.agent.batch_size
        per_draw = max(1, DRAW_ROWS // batch_size)
        for start in range(0, count, per_draw):
            n = min(per_draw, count - start)
            if self.model is not None:
                yield from self.model.policy_batches(self.buffer, batch_size, n)
            else:
                yield from sample_batches(self.buffer, batch_size, n, self.config.debug)

    def cpu_s(self) -> float | None:
        """The run's CPU seconds, summed over resumes: this process's, every thread of it (the learner, the model
        thread, the thread backend's collectors), and the processes of process and Ray collectors up to the
        last batch of each that was ingested or dropped by a full queue, so a run that shares the machine is
        costed by what it used, where ``wall_s`` also counts its waits for a core. None after resuming a
        checkpoint that did not record it.
        """
        if self._cpu_before is None:
            return None
        return self._cpu_before + time.process_time() - self._cpu_origin + sum(self._collector_cpu_s)

    def eval_seed(self) -> int:
        return self.seed("eval", self.env_steps)

    def _forget_logged_metrics(self, logger: MetricsLogger) -> None:
        """A resumed run whose metrics.csv holds a row at the checkpoint's env step: that row may have logged the
        update metrics the checkpoint holds (a checkpoint written before its row: a run's final one by an older
        mbpo), so the first row after the resume starts their means afresh instead of counting updates twice.
        """
        rows = getattr(logger, "rows", None)  # a caller's own logger may keep none
        if self.env_steps and rows and int(rows[-1]["env_steps"]) == self.env_steps:
            self.agent.pop_metrics()

    def _row(self, timing: dict[str, float], evaluated: bool) -> dict[str, Any]:
        """A metrics row; ``timing`` is :meth:`Throughput.row`'s (``wall_s`` and the rates)."""
        rates = {k: v for k, v in timing.items() if k != "wall_s"}
        row: dict[str, Any] = {
            "env_steps": self.env_steps,
            "updates": self.agent.num_updates,
            "wall_s": round(timing["wall_s"], 3),
            "cpu_s": None if (cpu := self.cpu_s()) is None else round(cpu, 3),
            "train_return": float(np.mean(self._recent_returns)) if self._recent_returns else None,
            "eval_return": self.last_eval_return if evaluated else None,
            **(self.last_eval_stats if evaluated else {}),
            **(self.last_q_bias if evaluated else {}),
            "utd_ratio": self.utd_ratio,
            "utd_ratio_realised": self.updates_issued / max(self.learning_env_steps, 1),
            "updates_per_vector_step": self.config.env.num_envs * self.utd_ratio,
            "skipped_updates": self.agent.num_skipped_updates,
            "nonfinite_dropped": self.nonfinite_dropped,
            **({"planned_actions": self.planned_actions} if self.config.model.lookahead.enabled else {}),
            **{k: round(v, 3) for k, v in rates.items()},
            **{f"time_{part}_s": round(s, 3) for part, s in self.time_s.items()},
        }
        metrics = self.agent.pop_metrics()
        metrics.pop("updates"), metrics.pop("skipped")
        row.update(metrics)
        if self.model is not None:
            row.update(self.model.metrics(self.env_steps))
        return row

    # -- checkpoint and resume ---------------------------------------------------
    def _trainer_state(self) -> dict[str, Any]:
        return {
            "env_steps": self.env_steps,
            "learning_env_steps": self.learning_env_steps,
            "updates_issued": self.updates_issued,
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s(),
            "last_eval_return": self.last_eval_return,
            "last_eval_env_steps": self.last_eval_env_steps,
            "recent_returns": list(self._recent_returns),
            "nonfinite_dropped": self.nonfinite_dropped,
            "planned_actions": self.planned_actions,
            "work_owed": self.work_owed(),
            "device": str(self.plan.device),
        }

    def stopping(self) -> str:
        """What a stop (Ctrl-C, SIGTERM) leaves, as the signal's line says it: a run with no env step yet has
        nothing to resume, and ``python -m mbpo train`` removes its run dir.
        """
        return "no env step taken yet: nothing to checkpoint" if self.env_steps == 0 else "writing a final checkpoint"

    def work_owed(self) -> bool:
        """Work the env steps taken have earned but not had (updates, a model fit, an evaluation): a resume
        at ``total_env_steps`` does it.
        """
        return False

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "identity": self.identity.as_dict(),
            "config": to_yaml(self.config),
            "trainer": self._trainer_state(),
            "env": None,
            "env_factory": None if self._env_factory is None else factory_name(self._env_factory),
            "agent": self.agent.state_dict(),
            "buffer": replay_state(self.buffer),
            "model": None if self.model is None else self.model.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        t = state["trainer"]
        self.env_steps, self.learning_env_steps = t["env_steps"], t["learning_env_steps"]
        self.updates_issued, self.wall_s = t["updates_issued"], t["wall_s"]
        self._cpu_before = t.get("cpu_s")  # None: written by an mbpo that did not count CPU seconds
        self.last_eval_return = t["last_eval_return"]
        self.last_eval_env_steps = t.get("last_eval_env_steps")
        self._recent_returns = deque(t["recent_returns"], maxlen=RECENT_EPISODES)
        self.nonfinite_dropped = int(t.get("nonfinite_dropped", 0))  # 0 in checkpoints that predate it
        self.planned_actions = int(t.get("planned_actions", 0))
        was = t.get("device")  # None: written before checkpoints named it
        if was is not None and torch.device(was).type != self.plan.device.type:
            print(f"[mbpo] the checkpoint was written on {was} and the run resumes on {self.plan.device}: the random "
                  f"streams of the learner, buffers and envs on {was} start again from seeds drawn from their states "
                  "(a CPU generator cannot take a CUDA one's); the run goes on, on new draws", file=sys.stderr)
        self.agent.load_state_dict(state["agent"])
        load_replay_state(self.buffer, state["buffer"])
        if self.model is not None:
            self.model.load_state_dict(state["model"])
        identity = RunIdentity.from_dict(state.get("identity"))
        if identity is not None:
            self.identity = identity

    def save(self, state: dict[str, Any] | None = None) -> Path:
        """Write ``state`` (default: :meth:`state_dict`) as the checkpoint of the current env step."""
        return save_checkpoint(self.run_dir / "checkpoints", self.env_steps,
                               self.state_dict() if state is None else state, self.config.checkpoint.keep)

    def _open_run_dir(self) -> None:
        """Take the run dir's lock for the whole run, then record what this run is: identity and starting
        config for a new run, one ``resumes.yaml`` entry for a resumed one.
        """
        self._lock.acquire()
        try:
            if self.resumed_from is None:
                if self.env_steps == 0:
                    refuse_a_used_run_dir(self.run_dir, RUN_RECORD)  # as `train` does; a caller's logger
                    # may have made metrics.csv and tb/ already
                    self.identity.write(self.run_dir, self.config)
                    write_config(self.run_dir, to_yaml(self.config))
            else:
                if RunIdentity.read(self.run_dir) is None:  # an older run dir: record the identity from now on
                    self.identity.write(self.run_dir, self.config, self.env_steps)
                else:
                    record_provenance(self.run_dir, self.env_steps)
                log_resume(self.run_dir, self.env_steps, self.resumed_from.path.name, self.resumed_from.overrides)
        except BaseException:
            self._lock.release()
            raise

    def _close_run_dir(self) -> None:
        self._lock.release()

    @classmethod
    def resume(cls, run_dir: str | Path, overrides: list[str] | None = None, trust: bool = False,
               point: ResumePoint | None = None, env_factory: EnvFactory | None = None) -> Trainer:
        """Rebuild the run in ``run_dir`` from its newest loadable checkpoint and that checkpoint's config.

        Only keys that do not change what was built may be overridden (how long
        and how often: ``RESUMABLE_OVERRIDES``); anything else is a ConfigError.
        Raises :class:`RunAlreadyDone` for a run that has nothing left to do. A run trained with an
        ``env_factory`` goes on with the same one.
        """
        point = point or load_for_resume(run_dir, overrides, trust)
        check_same_env_factory(point, env_factory)
        trainer = cls(point.config, point.run_dir, env_factory)
        trainer.load_state_dict(point.state)
        trainer.resumed_from = point
        return trainer


def _resolve_precisions(config: Config, device: torch.device) -> None:
    """Replace ``auto`` precisions by what this device computes natively, once, before the config is written
    (so config.yaml and a resume keep the decision), and say what was chosen and why.
    """
    keys: list[tuple[str, Any]] = [("agent.sac.precision", config.agent.sac)] if config.agent.name == "sac" else []
    if config.model.enabled:
        keys.append(("model.precision", config.model))
    refused = []
    for key, section in keys:
        try:
            resolved, why = resolve_precision(section.precision, device, key)
        except ValueError as exc:
            refused.append(str(exc))
            continue
        section.precision = resolved
        print(f"[mbpo] {key}={section.precision} on {device} ({why})", file=sys.stderr)
    if refused:  # each at once: a run whose two auto precisions became bf16 elsewhere resumes with both set
        raise ConfigError("; and ".join(refused))
