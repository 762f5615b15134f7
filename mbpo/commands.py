"""What each command of ``python -m mbpo`` does (mbpo.cli parses the line and reports errors): train, resume,
eval, plot and rollout, and the start-up signal guard they share.

torch, torchrl and envs are imported by the commands that use them, not here: a mistake in the command line or
the config is one line within a fraction of a second, not after seconds of imports.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mbpo.config import ConfigError, load_config
from mbpo.errors import MbpoError

if TYPE_CHECKING:
    from mbpo.runtime.supervisor import StopOnSignals

REPO_ROOT = Path(__file__).resolve().parents[1]


def _config_path(path: str) -> Path:
    """A config path as given, or relative to the repo (so the default works from any cwd); one in neither place
    is named as typed, with both places looked in.
    """
    p = Path(path)
    if p.exists() or p.is_absolute() or (REPO_ROOT / p).exists():
        return p if p.exists() or p.is_absolute() else REPO_ROOT / p
    raise ConfigError(f"config file {path!r} does not exist here ({Path.cwd()}) nor in mbpo's folder ({REPO_ROOT}); "
                      "expected a YAML file such as configs/pendulum_sac.yaml")


def cmd_train(args: argparse.Namespace) -> int:
    config = load_config(_config_path(args.config), args.overrides)
    quiet_torchrl()
    from mbpo.run.run_dir import RunDirBusyError, RunLock, refuse_a_used_run_dir, remove_if_never_started, safe_name
    from mbpo.trainers import make_trainer

    if config.run_dir is None:  # unique even for runs started in the same second (the lock creates it)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        learner = f"mbpo-{config.agent.name}" if config.model.enabled else config.agent.name  # MBPO apart from SAC
        config.run_dir = f"runs/{safe_name(config.env.id)}-{learner}-s{config.seed}-{stamp}-{os.getpid()}"
    config.run_dir = os.path.expanduser(config.run_dir)  # `run_dir: ~/runs/x` in YAML, or quoted: not a ./~ dir
    run_dir = Path(config.run_dir)
    try:
        created = not run_dir.exists()
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise MbpoError(f"run dir {run_dir} cannot be used ({exc.strerror or exc}); choose another "
                        "run_dir=<dir>") from None
    try:
        with RunLock(run_dir):  # before looking: two runs started at once on one dir cannot both pass
            refuse_a_used_run_dir(run_dir)
            if args.debug or os.environ.get("MBPO_DEBUG") == "1":
                config.debug = True
            mode = "MBPO-" if config.model.enabled else ""
            built_by = f" (env.factory={config.env.factory})" if config.env.factory else ""
            collectors = 1 if config.trainer == "sync" or config.debug else config.runtime.num_collectors
            size = f"x{config.env.num_envs}" if collectors == 1 else \
                f"{collectors} collectors x {config.env.num_envs} envs"
            device = config.device
            if device == "auto":  # as the trainer will resolve it
                from mbpo.device.plan import DevicePlan

                device = f"auto ({DevicePlan.for_run(config.device, config.env.device).device})"
            print(f"[mbpo] {config.trainer} training of {mode}{config.agent.name} on {config.env.id}{built_by} "
                  f"{size}, device={device}; run dir {run_dir}", file=sys.stderr)
            phase = ["during start-up: once the trainer is built"]
            with stop_on_signals(lambda: phase[0]) as early:
                trainer = make_trainer(config, run_dir, args.overrides)  # Ctrl-C is held off until then: library code
                if early.signum is not None:  # cut by KeyboardInterrupt can fail another way (omegaconf's does)
                    trainer.close()
                    raise Interrupted(early.signum)
                phase[0] = AFTER_START
                row = trainer.run()  # a signal before its own handler is installed reaches it through `early`
        if trainer.exit_code and trainer.env_steps == 0 and created and remove_if_never_started(run_dir, True):
            print(f"[mbpo] removed {run_dir}: stopped before the first env step, so there is nothing to resume",
                  file=sys.stderr)
            return int(trainer.exit_code)
    except RunDirBusyError:  # another run holds the dir (it may have made it a moment ago): never ours to remove
        raise
    except BaseException:
        # a start that failed before its first row leaves nothing in the way of `plot runs/*` or a new train
        try:
            removed = created and remove_if_never_started(run_dir)
        except OSError:  # the clean-up must not hide the error that stopped the start
            removed = False
        if removed:
            print(f"[mbpo] removed {run_dir}: the run failed before it logged anything", file=sys.stderr)
        raise
    return finish(trainer, run_dir, row)


def finish(trainer: Any, run_dir: Path, row: dict[str, Any]) -> int:
    """A short human summary, then the last metrics row as one JSON line (scripts read the last line)."""
    from mbpo.run.metrics import read_metrics
    from mbpo.run.throughput import interval_rates, steady_rate

    last = {"last_eval_return": trainer.last_eval_return, "last_eval_env_steps": trainer.last_eval_env_steps}
    minutes, seconds = divmod(int(round(trainer.wall_s)), 60)
    evaluation = ("no evaluation yet" if trainer.last_eval_return is None else
                  f"last evaluation {trainer.last_eval_return:.1f} at {trainer.last_eval_env_steps:,} env steps")
    metrics = run_dir / "metrics.csv"
    rows = read_metrics(metrics) if metrics.is_file() else []
    steady, intervals = steady_rate(rows), interval_rates(rows)
    rate = "" if steady is None or "env_steps_per_s_whole_run" not in row else (
        f" ({steady:,.1f} env steps/s steady, {intervals[-1]:,.1f} in the last interval, "
        f"{row['env_steps_per_s_whole_run']:,.1f} over the whole run)")
    print(f"[mbpo] {trainer.env_steps:,} env steps, {trainer.agent.num_updates:,} updates in {minutes} min "
          f"{seconds} s{rate}; {evaluation}; run dir {run_dir}")
    summary = {"run_dir": str(run_dir), **row, **last}  # NaN (a loss mean over no update) is JSON's null, as the CSV's
    print(json.dumps({k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in summary.items()},
                     allow_nan=False))
    return getattr(trainer, "exit_code", 0)


def cmd_resume(args: argparse.Namespace) -> int:
    quiet_torchrl()
    from mbpo.run.metrics import MetricsLogger
    from mbpo.run.run_dir import RunLock, check_is_run_dir
    from mbpo.trainers import RunAlreadyDone, resume_trainer

    check_is_run_dir(Path(args.run_dir))  # before the lock, which would create it
    phase = ["during start-up: once the trainer is built; the run is left as it was"]
    early = stop_on_signals(lambda: phase[0])
    with RunLock(args.run_dir), early:  # the lock: held from before the checkpoint is read until the run ends
        try:
            trainer = resume_trainer(args.run_dir, args.overrides, trust=args.trust_checkpoint,
                                     debug=bool(args.debug or os.environ.get("MBPO_DEBUG") == "1"))
        except RunAlreadyDone as done:
            print(f"[mbpo] {done}", file=sys.stderr)
            return 0
        if early.signum is not None:
            trainer.close()
            raise Interrupted(early.signum)
        phase[0] = AFTER_START
        assert trainer.resumed_from is not None  # set by resume_trainer
        print(f"[mbpo] resuming {args.run_dir} at {trainer.env_steps} env steps "
              f"(from {trainer.resumed_from.path.name})", file=sys.stderr)
        logger = MetricsLogger(args.run_dir, trainer.config.total_env_steps, trainer.config.progress,
                               resume_at=trainer.env_steps)
        try:
            row = trainer.run(logger)
        finally:
            logger.close()
    return finish(trainer, Path(args.run_dir), row)


def cmd_eval(args: argparse.Namespace) -> int:
    quiet_torchrl()
    import numpy as np

    import envs
    from mbpo.agents import acting_config, make_agent
    from mbpo.config import config_from_yaml
    from mbpo.device.plan import DevicePlan
    from mbpo.run.checkpoint import load_checkpoint
    from mbpo.run.evaluation import evaluate
    from mbpo.run.video import EpisodeRecorder, check_video_path
    from mbpo.runtime.env_builder import build_env, check_env

    if args.episodes < 1:
        raise MbpoError(f"--episodes {args.episodes} is not allowed; expected at least 1 (one env per episode)")
    if not args.checkpoint.strip():
        raise MbpoError("--checkpoint is empty; expected the path of a ckpt_*.pt file")
    video = None if args.video is None else check_video_path(args.video)  # before anything is loaded or built
    state = load_checkpoint(args.checkpoint, trust=args.trust_checkpoint)
    config = config_from_yaml(state["config"])
    try:  # --device puts env and policy there; else where the run had them (device=auto follows env.device)
        plan = (DevicePlan.resolve(args.device) if args.device is not None
                else DevicePlan.for_run(config.device, config.env.device))
    except envs.DeviceUnavailableError as exc:
        if args.device is not None:
            raise as_flag(exc) from None
        also = "" if config.env.device is None else f" and env.device={config.env.device!r}"
        raise MbpoError(f"the checkpoint's run trained with device={config.device!r}{also}, which this machine "
                        f"does not have ({exc}); evaluate it here with --device cpu") from None
    device, env_device = plan.device, plan.env  # --device: both there; else where the run had them
    try:
        env = build_env(config.env, args.episodes, env_device, args.seed, render=video is not None)
    except envs.EnvTooLargeError as exc:  # its advice names env.num_envs; here --episodes sets the envs
        fits = f" to at most {exc.fits:,}" if exc.fits else ""
        raise MbpoError(f"--episodes {args.episodes:,} runs as many {config.env.id} envs at once (one per episode), "
                        f"more than {env_device} has memory for; lower --episodes{fits}") from None
    env, _ = check_env(env, config.env, args.seed)  # evaluate() reseeds it
    agent = make_agent(acting_config(config.agent), env.observation_space, env.action_space, device, config.seed)
    try:
        agent.load_state_dict(state["agent"])
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:  # weights of another shape or learner, keys lost
        env.close()
        what = f"no {exc.args[0]!r} entry" if isinstance(exc, KeyError) else str(exc).strip().splitlines()[0]
        raise MbpoError(f"{args.checkpoint}: its agent does not fit the {config.agent.name} learner on {config.env.id} "
                        f"that its own config builds ({what}); expected a checkpoint `python -m mbpo train` wrote, "
                        "unchanged") from None
    out: dict[str, Any] = {}
    if video is None:
        returns = evaluate(agent, env, args.seed)
    else:
        with EpisodeRecorder(env, video) as recorder:  # every episode, tiled (only env 0's view: renders_batch)
            returns = evaluate(agent, env, args.seed, frames=recorder)
        filmed = recorder.close()
        out = {"video": str(filmed.path), "video_frames": filmed.frames, "video_size": [filmed.width, filmed.height],
               "video_episodes": len(recorder.env_ids)}
    env.close()
    print(json.dumps({"checkpoint": str(args.checkpoint), "env_id": config.env.id, "episodes": len(returns),
                      "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
                      "env_steps": state["trainer"]["env_steps"], **out}))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from mbpo.run.plotting import check_out, check_run_dirs, default_out, plot_model_health, plot_runs, plottable

    once: dict[Path, Path] = {}  # each run once, as first spelled: `plot runs/a "$PWD"/runs/a` counted it twice
    for run_dir in map(Path, args.run_dirs):
        once.setdefault(run_dir.resolve(), run_dir)
    run_dirs = list(once.values())
    check_run_dirs(run_dirs)  # a mistyped run dir is named as one, not as its --out
    out = default_out(run_dirs) if args.out is None else Path(args.out)
    check_out(out)  # before any run is read
    runs = plottable(run_dirs)  # read once: a run in progress or a damaged one is noted once and skipped
    png = plot_runs(runs, out, args.x)
    print(png)
    health = plot_model_health(runs, png.with_name(png.stem + "_model_health.png"), args.x)
    if health is not None:
        print(health)
    return 0


def rollout(env_id: str, num_envs: int, steps: int, device: str, seed: int) -> dict[str, float | int | str | None]:
    """Step ``num_envs`` envs with uniform random actions; return throughput and returns."""
    import torch

    import envs
    from envs import random_actions

    env = envs.make(env_id, num_envs, device=device, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    actions = [random_actions(env, gen) for _ in range(min(steps, 64))]  # sampled off the clock
    env.reset()
    ret = torch.zeros(num_envs, device=env.device)
    finished_sum = torch.zeros((), device=env.device)
    finished = torch.zeros((), dtype=torch.int64, device=env.device)
    start = time.perf_counter()
    for t in range(steps):
        _, reward, terminated, truncated, _ = env.step(actions[t % len(actions)])
        done = terminated | truncated
        ret += reward
        finished_sum += torch.where(done, ret, 0.0).sum()
        finished += done.sum()
        ret.masked_fill_(done, 0.0)
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)
    elapsed = time.perf_counter() - start
    env.close()
    episodes = int(finished)
    return {
        "env_id": env_id, "device": str(env.device), "num_envs": num_envs, "env_steps": steps * num_envs,
        "wall_s": round(elapsed, 3), "env_steps_per_s": round(steps * num_envs / elapsed),
        "episodes": episodes, "mean_return": round(float(finished_sum) / episodes, 2) if episodes else None,
    }


def cmd_rollout(args: argparse.Namespace) -> int:
    for flag, value in (("--num-envs", args.num_envs), ("--steps", args.steps)):
        if value < 1:
            raise MbpoError(f"{flag} {value} is not allowed; expected at least 1")
    quiet_torchrl()
    import envs

    print("[mbpo] random-policy rollout: measures env throughput, does not train", file=sys.stderr)
    try:
        result = rollout(args.env, args.num_envs, args.steps, args.device, args.seed)
    except envs.EnvTooLargeError as exc:  # its advice names env.num_envs; here --num-envs sets the envs
        fits = f" to at most {exc.fits:,}" if exc.fits else ""
        raise MbpoError(f"--num-envs {args.num_envs:,} {args.env} envs are more than {args.device} has memory for; "
                        f"lower --num-envs{fits}") from None
    except envs.DeviceUnavailableError as exc:
        raise as_flag(exc) from None
    print(json.dumps(result))
    return 0


def as_flag(exc: Exception) -> MbpoError:
    """A device error in the command's own words: ``--device 'cuda'``, not the config's ``device='cuda'``."""
    return MbpoError(re.sub(r"\bdevice=('[^']*')", r"--device \1", str(exc)))


class Interrupted(Exception):
    """A stop signal (Ctrl-C, SIGTERM) during start-up: the command ends with exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def quiet_torchrl() -> None:
    """mbpo.run.logs.quiet_torchrl (it imports torchrl, and so torch), for the commands that load it, with stop
    signals held off (:func:`signals_held_off`).
    """
    with signals_held_off():
        from mbpo.run.logs import quiet_torchrl as quiet

        quiet()


@contextmanager
def signals_held_off() -> Iterator[None]:
    """SIGINT and SIGTERM within the block are held, and stop the command (:class:`Interrupted`) once it ends. For
    torch's import: a Ctrl-C in its middle was swallowed there and left numpy half-imported, so the command went on
    (a run trained to its end) or failed later with an AttributeError traceback. Main thread only (Python's rule
    for handlers); elsewhere a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held:
        raise Interrupted(held[0])


AFTER_START = "after the run's final checkpoint, which holds what it trained"
"""What the start-up guard says of a signal once the run is built: one before the run's own handler is in place
(the run then starts stopped) or after it is gone (the run closing down, its final checkpoint written)."""


def stop_on_signals(when: Any) -> StopOnSignals:
    """A start-up's signal guard (mbpo.runtime.supervisor, imported with the trainer's modules)."""
    from mbpo.runtime.supervisor import StopOnSignals

    return StopOnSignals(threading.Event(), when)


