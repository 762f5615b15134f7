"""Command line: ``python -m mbpo <command>``.

    train  [--config YAML] [key=value ...]                        train; writes a new run dir (below)
    eval   --checkpoint PATH [--episodes N] [--video MP4|GIF]     evaluate a checkpoint's policy (and film it)
    resume RUN_DIR [key=value ...] [--trust-checkpoint]           continue a run from its newest checkpoint
    plot   RUN_DIR [RUN_DIR ...] [--out PNG] [--x env_steps|wall_s]  evaluation curves, seeds as median+range
    rollout [--env ID --num-envs N --steps T]                     random-policy env throughput

With no command (or only ``key=value`` overrides), it trains the default
config, ``configs/pendulum_mbpo.yaml``. A run dir is
``runs/<env>-[mbpo-]<agent>-s<seed>-<YYYYmmdd-HHMMSS>-<pid>/`` under the current
directory unless ``run_dir=DIR`` is given. ``--help-config`` lists every config key.
"""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys
import traceback

from mbpo.commands import Interrupted, cmd_eval, cmd_plot, cmd_resume, cmd_rollout, cmd_train
from mbpo.config import describe
from mbpo.config.validation import DEVICE_PATTERN
from mbpo.errors import MbpoError, RunFailedError

# torch, torchrl and envs are imported by the commands that use them (mbpo.commands), not here: a mistake in the
# command line or the config is one line within a fraction of a second, not after seconds of imports.

COMMANDS = ("train", "eval", "resume", "plot", "rollout")
DEFAULT_CONFIG = "configs/pendulum_mbpo.yaml"
TRUST_HELP = ("load a checkpoint that needs full unpickling (one written by an older mbpo); that runs any code "
              "the file contains, so use it only for files you wrote yourself")


def _device(value: str) -> str:
    """``--device``, checked as the config's device keys are (argparse reports a bad one in one line, exit 2)."""
    if not DEVICE_PATTERN.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a device; expected auto, cpu, cuda or cuda:N")
    return value


def _path(value: str) -> str:
    """A path argument with ``~`` expanded as ``run_dir=~/...`` is: a shell leaves it to us when it is quoted or
    comes from a script.
    """
    return os.path.expanduser(value)


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
    tr.add_argument("--config", default=DEFAULT_CONFIG, type=_path, help=f"YAML config (default: {DEFAULT_CONFIG})")
    tr.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. env.num_envs=8 seed=1")
    tr.set_defaults(fn=cmd_train)
    ev = sub.add_parser("eval", help="evaluate the deterministic policy of a checkpoint")
    ev.add_argument("--checkpoint", required=True, type=_path, help="path to a ckpt_*.pt file")
    ev.add_argument("--episodes", type=int, default=10)
    ev.add_argument("--device", default=None, type=_device, help="auto, cpu, cuda or cuda:N (default: the run's)")
    ev.add_argument("--seed", type=_seed, default=12345)
    ev.add_argument("--trust-checkpoint", action="store_true", help=TRUST_HELP)
    ev.add_argument("--video", default=None, metavar="PATH", type=_path,
                    help="also write the episodes as a video, MP4 or GIF by the extension, side by side in a grid "
                         "(--episodes 1 for one at full size); drawn offscreen, MuJoCo through MUJOCO_GL=egl or "
                         "osmesa (docs/envs.md); needs the video extra")
    ev.set_defaults(fn=cmd_eval)
    re_ = sub.add_parser("resume", help="continue a run from its newest loadable checkpoint")
    re_.add_argument("run_dir", type=_path)
    re_.add_argument("overrides", nargs="*", default=[], help="e.g. total_env_steps=50000 to train longer")
    re_.add_argument("--trust-checkpoint", action="store_true", help=TRUST_HELP)
    re_.set_defaults(fn=cmd_resume)
    pl = sub.add_parser("plot", help="evaluation curves of runs on one chart, seeds of one config as median "
                                     "and range, and for MBPO runs the model's health beside it, as "
                                     "<out>_model_health.png (needs the plots extra)")
    pl.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", type=_path)
    pl.add_argument("--out", default=None, type=_path,
                    help="image path, its format from its extension: .png, .pdf, .svg, ... (default: "
                         "RUN_DIR/learning_curve.png for one run, ./learning_curves.png for several)")
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


def _takes_value(arg: str) -> bool:
    """Whether ``arg`` is an option whose value is the next word: one of :data:`OPTIONS_WITH_VALUES`, or an
    abbreviation of one, which argparse accepts (``--num 64`` for ``--num-envs 64``).
    """
    return arg in OPTIONS_WITH_VALUES or (arg.startswith("--") and len(arg) > 2 and "=" not in arg and
                                          any(option.startswith(arg) for option in OPTIONS_WITH_VALUES))


def _mistyped_command(argv: list[str]) -> str | None:
    """What is wrong with a command line whose first word is no command but looks like one (``resme RUN``),
    which would otherwise be read as a ``train`` override; None for a line without a command (train).
    """
    words = iter(argv)
    for arg in words:
        if _takes_value(arg):
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
        i += 2 if _takes_value(argv[i]) else 1
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
            if _takes_value(arg):
                value = next(rest, None)
                if value is not None:  # none left: argparse says the option needs one
                    options.append(value)
        else:
            (overrides if "=" in arg else positionals).append(arg)
    return [argv[0], *options, *positionals, *overrides]


def _config_key_as_option(argv: list[str]) -> str | None:
    """What is wrong with ``train --seed 1`` (SB3 and rl-zoo's habit), where a config key is written as an option
    (argparse said only "unrecognized arguments"); None where no such option is on the line.
    """
    if not argv or argv[argv[0] == "--debug":][:1] != ["train"]:
        return None
    leaves = [key for key, _, _ in describe()]
    for i, arg in enumerate(argv):
        name, _, value = arg.partition("=")
        key = name[2:].replace("-", "_")
        own = any(option.startswith(name) for option in ("--config", "--help", "--debug"))  # or an abbreviation
        if not name.startswith("--") or own:
            continue
        value = value or (argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else "<value>")
        if key in leaves:
            return f"{name} is not an option of train; config keys are overrides: write {key}={value}"
        under = [leaf for leaf in leaves if leaf.startswith(key + ".")]
        if under:  # a section: --env Pendulum-v1
            return (f"{name} is not an option of train; config keys are overrides by their dotted name, such as "
                    f"{under[0]}={value} (python -m mbpo --help-config lists them)")
    return None


def main(argv: list[str] | None = None) -> int:
    from mbpo.runtime.main_guard import exit_if_a_child_imports_main

    exit_if_a_child_imports_main()  # a script calling main() unguarded, imported again by a collector process
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help-config" in argv:  # accepted anywhere on the line (`train --config X --help-config`), as --debug
        print(f"# every key with the schema's default and meaning; a config file sets its own (the default run's is "
              f"{DEFAULT_CONFIG}, whose resolved values each run writes to its run dir's config.yaml)")
        for key, default, doc in describe():
            print(f"{key} = {default}\n    {doc}")
        return 0
    flags = [a for a in argv if a == "--debug"]  # a global flag: accepted anywhere on the line
    argv = [a for a in argv if a != "--debug"]
    if not any(a in COMMANDS or a in ("-h", "--help") for a in argv):
        mistyped = _mistyped_command(argv)
        if mistyped is not None:
            print(f"error: {mistyped}", file=sys.stderr)
            return 2
        argv = ["train", *argv]  # default: train the default config
    option_for_a_key = _config_key_as_option(_command_first(argv))  # before the values move away from their options
    argv = flags + _overrides_last(argv)
    if option_for_a_key is not None:
        print(f"error: {option_for_a_key}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
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


def one_line(exc: BaseException) -> str:
    """The message on one line (a device-plan mismatch lists its components on several): lines joined by
    "; ", except after a line that ends in ":" (a heading and its first item read "Components: env: ...").
    """
    out = ""
    for line in (line.strip() for line in str(exc).splitlines() if line.strip()):
        out += line if not out else (" " if out.endswith(":") else "; ") + line
    return out
