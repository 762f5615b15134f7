"""Command line: ``python -m mbpo <command>``.

    train  [--config YAML] [key=value ...]                        train; writes a new run dir (below)
    eval   --checkpoint PATH [--episodes N] [--video MP4|GIF]     evaluate a checkpoint's policy (and film it)
    resume RUN_DIR [key=value ...] [--trust-checkpoint]           continue a run from its newest checkpoint
    plot   RUN_DIR [RUN_DIR ...] [--out PNG] [--x env_steps|wall_s]  evaluation curves, seeds as median+range
    rollout [--env ID --num-envs N --steps T]                     random-policy env throughput

With no command (or only ``key=value`` overrides), it trains the default
config, ``configs/pendulum_mbpo.yaml``. A run dir is
``runs/<env>-<agent>-s<seed>-<YYYYmmdd-HHMMSS>-<pid>/`` under the current
directory unless ``run_dir=DIR`` is given. ``--help-config`` lists every config key.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mbpo.config import describe, load_config
from mbpo.config.validation import DEVICE_PATTERN
from mbpo.errors import MbpoError, RunFailedError

if TYPE_CHECKING:
    from mbpo.runtime.supervisor import StopOnSignals

# torch, torchrl and envs are imported by the commands that use them, not here: a mistake in the command line or
# the config is one line within a fraction of a second, not after seconds of imports.

COMMANDS = ("train", "eval", "resume", "plot", "rollout")
DEFAULT_CONFIG = "configs/pendulum_mbpo.yaml"
REPO_ROOT = Path(__file__).resolve().parents[1]
TRUST_HELP = ("load a checkpoint that needs full unpickling (one written by an older mbpo); that runs any code "
              "the file contains, so use it only for files you wrote yourself")


def _config_path(path: str) -> Path:
    """A config path as given, or relative to the repo (so the default works from any cwd)."""
    p = Path(path)
    return p if p.exists() or p.is_absolute() else REPO_ROOT / p


def cmd_train(args: argparse.Namespace) -> int:
    config = load_config(_config_path(args.config), args.overrides)
    quiet_torchrl()
    from mbpo.run.run_dir import RunDirBusyError, RunLock, refuse_a_used_run_dir, remove_if_never_started, safe_name
    from mbpo.trainers import make_trainer

    if config.run_dir is None:  # unique even for runs started in the same second (the lock creates it)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        learner = f"mbpo-{config.agent.name}" if config.model.enabled else config.agent.name  # MBPO apart from SAC
        config.run_dir = f"runs/{safe_name(config.env.id)}-{learner}-s{config.seed}-{stamp}-{os.getpid()}"
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
            print(f"[mbpo] {config.trainer} training of {mode}{config.agent.name} on {config.env.id}{built_by} "
                  f"{size}, device={config.device}; run dir {run_dir}", file=sys.stderr)
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
    from mbpo.run.run_dir import RunLock
    from mbpo.trainers import RunAlreadyDone, resume_trainer

    run_dir = Path(args.run_dir)
    try:  # checked before the lock, which would create it
        what = None if run_dir.is_dir() else "is a file" if run_dir.exists() else "does not exist"
    except OSError as exc:  # e.g. a name longer than the file system allows
        what = f"cannot be read ({exc.strerror or exc})"
    if what is not None:
        raise MbpoError(f"run dir {str(args.run_dir)!r} {what}; expected a directory written by "
                        "`python -m mbpo train`")
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
    try:
        device = DevicePlan.resolve(args.device or config.device).device
    except envs.DeviceUnavailableError as exc:
        if args.device is not None:
            raise as_flag(exc) from None
        raise MbpoError(f"the checkpoint's run trained with device={config.device!r}, which this machine does not "
                        f"have ({exc}); evaluate it here with --device cpu") from None
    # the run's env id or factory, as it trained
    try:
        env = build_env(config.env, args.episodes, device, args.seed, render=video is not None)
    except envs.EnvTooLargeError as exc:  # its advice names env.num_envs; here --episodes sets the envs
        fits = f" to at most {exc.fits:,}" if exc.fits else ""
        raise MbpoError(f"--episodes {args.episodes:,} runs as many {config.env.id} envs at once (one per episode), "
                        f"more than {device} has memory for; lower --episodes{fits}") from None
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

    check_run_dirs([Path(d) for d in args.run_dirs])  # a mistyped run dir is named as one, not as its --out
    out = default_out(args.run_dirs) if args.out is None else Path(args.out)
    check_out(out)  # before any run is read
    runs = plottable(args.run_dirs)  # read once: a run in progress or a damaged one is noted once and skipped
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


def _device(value: str) -> str:
    """``--device``, checked as the config's device keys are (argparse reports a bad one in one line, exit 2)."""
    if not DEVICE_PATTERN.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a device; expected auto, cpu, cuda or cuda:N")
    return value


def _seed(value: str) -> int:
    """``--seed``, in the range the config's ``seed`` takes (argparse reports a bad one in one line, exit 2)."""
    try:
        seed = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer; expected one in [0, 2**64 - 1]") from None
    if not 0 <= seed <= 2**64 - 1:
        raise argparse.ArgumentTypeError(f"{seed} is out of range; expected an integer in [0, 2**64 - 1]")
    return seed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mbpo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true",
                        help="debug mode (./run_async.sh --debug also sets CUDA_LAUNCH_BLOCKING=1, "
                             "TORCH_USE_CUDA_DSA=1)")
    parser.add_argument("--help-config", action="store_true", help="list every config key with its default and meaning")
    sub = parser.add_subparsers(dest="command")
    tr = sub.add_parser("train", help="train from a YAML config with key=value overrides")
    tr.add_argument("--config", default=DEFAULT_CONFIG, help=f"YAML config (default: {DEFAULT_CONFIG})")
    tr.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. env.num_envs=8 seed=1")
    tr.set_defaults(fn=cmd_train)
    ev = sub.add_parser("eval", help="evaluate the deterministic policy of a checkpoint")
    ev.add_argument("--checkpoint", required=True, help="path to a ckpt_*.pt file")
    ev.add_argument("--episodes", type=int, default=10)
    ev.add_argument("--device", default=None, type=_device, help="auto, cpu, cuda or cuda:N (default: the run's)")
    ev.add_argument("--seed", type=_seed, default=12345)
    ev.add_argument("--trust-checkpoint", action="store_true", help=TRUST_HELP)
    ev.add_argument("--video", default=None, metavar="PATH",
                    help="also write the episodes as a video, MP4 or GIF by the extension, side by side in a grid "
                         "(--episodes 1 for one at full size); drawn offscreen, MuJoCo through MUJOCO_GL=egl or "
                         "osmesa (docs/envs.md); needs the video extra")
    ev.set_defaults(fn=cmd_eval)
    re_ = sub.add_parser("resume", help="continue a run from its newest loadable checkpoint")
    re_.add_argument("run_dir")
    re_.add_argument("overrides", nargs="*", default=[], help="e.g. total_env_steps=50000 to train longer")
    re_.add_argument("--trust-checkpoint", action="store_true", help=TRUST_HELP)
    re_.set_defaults(fn=cmd_resume)
    pl = sub.add_parser("plot", help="evaluation curves of runs on one chart, seeds of one config as median "
                                     "and range, and for MBPO runs the model's health beside it, as "
                                     "<out>_model_health.png (needs the plots extra)")
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    pl.add_argument("--out", default=None, help="image path, its format from its extension: .png, .pdf, .svg, ... "
                                                "(default: RUN_DIR/learning_curve.png for one run, "
                                                "./learning_curves.png for several)")
    pl.add_argument("--x", choices=["env_steps", "wall_s"], default="env_steps", help="x axis (default: env_steps)")
    pl.set_defaults(fn=cmd_plot)
    ro = sub.add_parser("rollout", help="random-policy rollout of a vectorized env; prints its throughput")
    ro.add_argument("--env", default="Pendulum-v1", help="env id (default: Pendulum-v1)")
    ro.add_argument("--num-envs", type=int, default=4096, help="envs stepped together (default: 4096)")
    ro.add_argument("--steps", type=int, default=1000, help="vector steps (default: 1000)")
    ro.add_argument("--device", default="auto", type=_device, help="auto, cpu, cuda or cuda:N (default: auto)")
    ro.add_argument("--seed", type=_seed, default=0)
    ro.set_defaults(fn=cmd_rollout)
    return parser


OPTIONS_WITH_VALUES = ("--config", "--checkpoint", "--episodes", "--device", "--seed", "--out", "--x", "--env",
                      "--num-envs", "--steps", "--video")


def _mistyped_command(argv: list[str]) -> str | None:
    """What is wrong with a command line whose first word is no command but looks like one (``resme RUN``),
    which would otherwise be read as a ``train`` override; None for a line without a command (train).
    """
    words = iter(argv)
    for arg in words:
        if arg in OPTIONS_WITH_VALUES:
            next(words, None)
        elif not arg.startswith("-"):
            close = difflib.get_close_matches(arg, COMMANDS, n=1, cutoff=0.6) if "=" not in arg else []
            return (f"unknown command {arg!r} (did you mean {close[0]}?); expected one of {', '.join(COMMANDS)}, "
                    "or key=value overrides to train") if close else None
    return None


def _command_first(argv: list[str]) -> list[str]:
    """``--config X train ...`` as ``train --config X ...``: options before the command are its options (argparse
    read the config's path as the command).
    """
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in OPTIONS_WITH_VALUES else 1
    if 0 < i < len(argv) and argv[i] in COMMANDS:
        return [argv[i], *argv[:i], *argv[i + 1:]]
    return argv


def _overrides_last(argv: list[str]) -> list[str]:
    """Reorder to ``command, options, positionals, key=value overrides``, so overrides may stand anywhere:
    ``train seed=1 --config X steps=2`` parses like ``train --config X seed=1 steps=2`` (argparse stops
    filling a positional list at the first option).
    """
    argv = _command_first(argv)
    if not argv or argv[0] not in COMMANDS:
        return argv
    options: list[str] = []
    positionals: list[str] = []
    overrides: list[str] = []
    rest = iter(argv[1:])
    for arg in rest:
        if arg.startswith("-"):
            options.append(arg)
            if arg in OPTIONS_WITH_VALUES:
                value = next(rest, None)
                if value is not None:  # none left: argparse says the option needs one
                    options.append(value)
        else:
            (overrides if "=" in arg else positionals).append(arg)
    return [argv[0], *options, *positionals, *overrides]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = [a for a in argv if a == "--debug"]  # a global flag: accepted anywhere on the line
    argv = [a for a in argv if a != "--debug"]
    if not any(a in COMMANDS or a in ("-h", "--help", "--help-config") for a in argv):
        mistyped = _mistyped_command(argv)
        if mistyped is not None:
            print(f"error: {mistyped}", file=sys.stderr)
            return 2
        argv = ["train", *argv]  # default: train the default config
    argv = flags + _overrides_last(argv)
    args = build_parser().parse_args(argv)
    if args.help_config:
        print(f"# every key with the schema's default and meaning; a config file sets its own (the default run's is "
              f"{DEFAULT_CONFIG}, whose resolved values each run writes to its run dir's config.yaml)")
        for key, default, doc in describe():
            print(f"{key} = {default}\n    {doc}")
        return 0
    if args.debug or os.environ.get("MBPO_DEBUG") == "1":
        switches = {k: os.environ.get(k, "unset") for k in ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA")}
        print(f"[mbpo] debug mode: {switches}", file=sys.stderr)
    try:
        return args.fn(args)
    except (Interrupted, KeyboardInterrupt) as exc:  # Ctrl-C outside a run's own handling (start-up, eval, plot):
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT  # one line, no traceback
        print(f"[mbpo] {signal.Signals(signum).name}: stopped", file=sys.stderr)
        return 128 + signum
    except RunFailedError as exc:  # its cause's traceback is already on stderr, where it happened
        if args.debug:
            traceback.print_exc()
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not isinstance(exc, user_errors()):  # a bug keeps its traceback
            raise
        if args.debug:  # a user's mistake is one line and exit 2; --debug shows where it was raised too
            traceback.print_exc()
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2


class Interrupted(Exception):
    """A stop signal (Ctrl-C, SIGTERM) during start-up: the command ends with exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def user_errors() -> tuple[type[BaseException], ...]:
    """What the CLI reports as ``error: <message>`` with exit 2 (mbpo's own MbpoError covers config, device plan,
    checkpoint and run-dir mistakes; envs never imports mbpo, so its user errors are listed here, once envs is
    imported: an error raised before that is not one of them).
    """
    if "envs" not in sys.modules:
        return (MbpoError,)
    import envs

    return (MbpoError, envs.UnknownEnvError, envs.DeviceUnavailableError, envs.MissingExtraError,
            envs.EnvTooLargeError, envs.UnsupportedSpaceError)


def quiet_torchrl() -> None:
    """mbpo.run.logs.quiet_torchrl (it imports torchrl), for the commands that load it."""
    from mbpo.run.logs import quiet_torchrl as quiet

    quiet()


AFTER_START = "after the run's final checkpoint, which holds what it trained"
"""What the start-up guard says of a signal once the run is built: one before the run's own handler is in place
(the run then starts stopped) or after it is gone (the run closing down, its final checkpoint written)."""


def stop_on_signals(when: Any) -> StopOnSignals:
    """A start-up's signal guard (mbpo.runtime.supervisor, imported with the trainer's modules)."""
    from mbpo.runtime.supervisor import StopOnSignals

    return StopOnSignals(threading.Event(), when)


def one_line(exc: BaseException) -> str:
    """The message on one line (a device-plan mismatch lists its components on several): lines joined by
    "; ", except after a line that ends in ":" (a heading and its first item read "Components: env: ...").
    """
    out = ""
    for line in (line.strip() for line in str(exc).splitlines() if line.strip()):
        out += line if not out else (" " if out.endswith(":") else "; ") + line
    return out
