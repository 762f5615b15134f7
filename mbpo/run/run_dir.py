"""A run dir: one run writes it at a time, and it knows which run it holds.

* ``.lock``: an exclusive ``fcntl.flock`` held for the run's lifetime, with the
  holder's pid and host written inside so a second ``train``/``resume`` can say
  who holds it. The kernel drops the lock when its process dies; a lock file
  still naming a dead pid of this host is taken over with a message.
* ``run.json``: the run's identity, written when it starts: a random run
  id and a hash of its config minus the keys a resume may change. Every
  checkpoint carries the same identity, so resume refuses another run's file.
  Beside it, ``provenance``: what produced the run (commit, dirty tree, package
  versions, CPU flags; mbpo.run.provenance), one record at the start and one
  appended by every resume.
* ``config.yaml``: the config the run started with (never rewritten);
  ``resumes.yaml``: one entry per resume, with its overrides.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from mbpo.config import Config, config_from_yaml
from mbpo.errors import MbpoError
from mbpo.run.checkpoint import corrupt_checkpoints, list_checkpoints
from mbpo.run.provenance import provenance

__all__ = ["RunLock", "RunDirBusyError", "RunIdentity", "config_hash", "identity_data", "matches_identity",
           "settings_data", "check_belongs", "write_config", "log_resume", "refuse_a_used_run_dir", "RUN_RECORD",
           "record_provenance", "safe_name", "remove_if_never_started", "check_is_run_dir",
           "RESUMABLE_OVERRIDES", "PRECISION_KEYS", "DEVICE_KEYS",
           "LOCK_FILE", "IDENTITY_FILE", "RESUMES_FILE", "RUN_FILES", "files_in_the_way"]

LOCK_FILE, IDENTITY_FILE, RESUMES_FILE = ".lock", "run.json", "resumes.yaml"
RUN_FILES = ("config.yaml", IDENTITY_FILE, "metrics.csv", RESUMES_FILE, "checkpoints", "tb")
"""What a run writes in its run dir (beside the lock): a new run refuses a dir that holds any of them."""
RUN_RECORD = ("config.yaml", IDENTITY_FILE, RESUMES_FILE)
"""The run's own record among :data:`RUN_FILES` (metrics.csv and tb/ are also a MetricsLogger's)."""
PRECISION_KEYS = ("agent.sac.precision", "model.precision")
"""How the matmuls are computed (bf16 autocast over fp32 weights), not what was built: a run whose ``auto`` became
bf16 on one machine resumes on another without native bf16 with them set to fp32 or auto."""
DEVICE_KEYS = ("device", "env.device")
"""Where the run computes, not what it built: checkpoints load onto the CPU first, so a run trained on
``cuda:1`` resumes on a machine with one GPU, or on none, with ``device=cuda:0`` or ``device=cpu``."""
RESUMABLE_OVERRIDES = ("total_env_steps", "eval_every", "eval_episodes", "eval_video", "log_every", "progress",
                       "checkpoint", "runtime.nonfinite", "debug", *PRECISION_KEYS, *DEVICE_KEYS)
"""Keys a resume may change: how long and how often, what to do with an env's non-finite values (the fix a run
stopped by one is told to use), debug mode (``--debug``: checks, one collector), the matmuls' precision and the
device, never what was built."""
_NOT_IDENTITY = (*RESUMABLE_OVERRIDES, "run_dir")
"""Keys (dotted for nested ones) left out of a run's identity hash: a resume may change them, so a checkpoint
written after such a resume must still match its run."""
_HOW_LONG_AND_HOW_OFTEN = ("total_env_steps", "eval_every", "eval_episodes", "eval_video", "log_every", "progress",
                           "checkpoint", "run_dir")
"""Keys that change neither what is learned nor how: left out of the identity of runs written before nested keys
were, and of the settings that tell plotted configs apart (:func:`settings_data`)."""
_ONCE_HASHED = {"runtime.nonfinite": ("raise", "drop"), "debug": (False, True),
                **{key: ("fp32", "bf16", "auto") for key in PRECISION_KEYS}, **dict.fromkeys(DEVICE_KEYS, ())}
"""Keys a resume may change now that earlier identity rules hashed, with the values a run may have started with
(a device's, open-ended, are the run's own: its config.yaml's and the checkpoint's)."""
_IDENTITY_RULES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (_NOT_IDENTITY, ()),
    (tuple(key for key in _NOT_IDENTITY if key not in (*PRECISION_KEYS, *DEVICE_KEYS)),
     (*PRECISION_KEYS, *DEVICE_KEYS)),
    (_HOW_LONG_AND_HOW_OFTEN, tuple(_ONCE_HASHED)),
)
"""How a run's identity hash was taken, newest first: (keys left out, keys it hashed that a resume may change now).
A run written before its precisions and device could change on resume hashed them, and one written before nested
keys were left out hashed only top-level ones, so such a run, resumed since with another value of such a key, is
matched under each value it may have started with."""


class RunDirBusyError(MbpoError):
    """The run dir cannot be used: another live process holds its lock, or it cannot be written."""


def _config_data(config: Config | str) -> dict[str, Any]:
    """A config as plain data: a config YAML (as stored in a checkpoint) as written, not read through today's
    schema, so a key added to the schema later, with its default, does not change the identity of a run
    written before it.
    """
    if isinstance(config, str):
        data = OmegaConf.to_container(OmegaConf.create(config))
    else:
        data = OmegaConf.to_container(OmegaConf.structured(config))
    assert isinstance(data, dict)
    return {str(key): value for key, value in data.items()}


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _parent(data: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    """The dict that holds dotted ``key``'s last part (None where a part is missing), and that part."""
    *parents, last = key.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), last


def _without(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    for key in keys:
        node, last = _parent(data, key)
        if node is not None:
            node.pop(last, None)
    return data


def identity_data(config: Config | str) -> dict[str, Any]:
    """What makes two configs the same run, as plain data: every key but the ones a resume may change and the
    run dir.
    """
    return _without(_config_data(config), _NOT_IDENTITY)


def settings_data(config: Config | str) -> dict[str, Any]:
    """What makes two runs seeds of one setting, as plain data: every key but how long and how often the run goes
    and where it computed (a precision or debug mode, which a resume may change, is another setting to compare, not
    another seed; a run on cuda:0 and one on cuda:1 are seeds of one).
    """
    return _without(_config_data(config), (*_HOW_LONG_AND_HOW_OFTEN, *DEVICE_KEYS))


def config_hash(config: Config | str) -> str:
    """:func:`identity_data`'s digest."""
    return _digest(identity_data(config))


def matches_identity(config: Config | str, recorded: str, start: Config | str | None = None) -> bool:
    """Whether ``recorded`` (a run's identity hash) is ``config``'s under today's rule or an earlier one
    (:data:`_IDENTITY_RULES`); ``start``: the config the run started with (its config.yaml), whose devices are
    among those an earlier rule's hash may hold.
    """
    data = _config_data(config)
    started = _config_data(start) if start is not None else {}
    for left_out, hashed in _IDENTITY_RULES:
        kept = _without(data, left_out)
        choices = [_ONCE_HASHED[key] or _values_of(key, data, started) or (None,) for key in hashed]  # None: absent
        for values in itertools.product(*choices):
            variant = copy.deepcopy(kept)
            for key, value in zip(hashed, values, strict=True):
                node, last = _parent(variant, key)
                if node is not None and last in node:
                    node[last] = value
            if _digest(variant) == recorded:
                return True
    return False


def _values_of(key: str, *configs: dict[str, Any]) -> tuple[Any, ...]:
    """The distinct values dotted ``key`` has in ``configs`` (plain data), in order."""
    values: list[Any] = []
    for data in configs:
        node, last = _parent(data, key)
        if node is not None and last in node and node[last] not in values:
            values.append(node[last])
    return tuple(values)


@dataclass(frozen=True)
class RunIdentity:
    """Which run a checkpoint or run dir belongs to (plain data: it goes into every checkpoint)."""

    run_id: str
    config_hash: str

    @classmethod
    def new(cls, config: Config) -> RunIdentity:
        return cls(uuid.uuid4().hex, config_hash(config))

    def as_dict(self) -> dict[str, str]:
        return {"run_id": self.run_id, "config_hash": self.config_hash}

    @classmethod
    def from_dict(cls, data: Any) -> RunIdentity | None:
        if not isinstance(data, dict) or not {"run_id", "config_hash"} <= set(data):
            return None
        return cls(str(data["run_id"]), str(data["config_hash"]))

    @classmethod
    def read(cls, run_dir: str | Path) -> RunIdentity | None:
        """The identity in ``run_dir/run.json``; None if the run dir has none (an older run)."""
        path = Path(run_dir) / IDENTITY_FILE
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def write(self, run_dir: str | Path, config: Config, at_env_steps: int = 0) -> None:
        """Record the identity (and what run it is, for people reading the file), with the provenance of this
        start (``at_env_steps``: where a run dir without a run.json is resumed).
        """
        summary = {**self.as_dict(), "env": config.env.id, "agent": config.agent.name,
                   "mbpo": config.model.enabled, "seed": config.seed, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                   "provenance": [provenance(at_env_steps)]}
        _write_atomic(Path(run_dir) / IDENTITY_FILE, json.dumps(summary, indent=1) + "\n")


def record_provenance(run_dir: str | Path, at_env_steps: int) -> None:
    """Append what runs a resume (commit, packages, machine) to run.json's ``provenance`` list."""
    path = Path(run_dir) / IDENTITY_FILE
    data = json.loads(path.read_text())
    data.setdefault("provenance", []).append(provenance(at_env_steps))
    _write_atomic(path, json.dumps(data, indent=1) + "\n")


def safe_name(text: str) -> str:
    """``text`` as one harmless path component: runs of anything but ASCII letters, digits, ``.``, ``_`` and
    ``-`` become ``_`` and leading or trailing dots and underscores go, so an env id such as ``../../x`` or
    ``a/b c`` can neither leave ``runs/`` nor nest dirs (empty: ``env``).
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "env"


def remove_if_never_started(run_dir: Path, took_no_step: bool = False) -> bool:
    """Remove ``run_dir`` if no run ever started in it: no checkpoint and no metrics row (what a failed start
    leaves: the lock, maybe the config and run.json), or, when the caller knows the run ``took_no_step``
    (stopped before its first env step), no checkpoint whatever its rows say; never one that holds a file no run
    writes. Returns whether it did.
    """
    metrics = run_dir / "metrics.csv"
    rows = 0 if took_no_step or not metrics.is_file() else metrics.read_text().count("\n")
    if not run_dir.is_dir() or list_checkpoints(run_dir / "checkpoints") or rows > 1:  # header + a row
        return False
    checkpoints = run_dir / "checkpoints"  # a save's or a write's temporary is hidden: ours
    theirs = [p for p in run_dir.iterdir() if p.name not in (*RUN_FILES, "videos") and not p.name.startswith(".")]
    if checkpoints.is_dir():  # a file a user put there, a ckpt_best.pt say
        theirs += [p for p in checkpoints.iterdir() if not p.name.startswith(".")]
    if theirs:
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return not run_dir.exists()


def check_is_run_dir(run_dir: Path) -> None:
    """Refuse, naming what it is instead, a path that is no run dir (``train`` takes the lock, writes run.json and
    config.yaml, then checkpoints; another tool's config.yaml or checkpoints/ does not make one): checked before a
    resume takes the lock, which would leave a ``.lock`` in a user's directory.
    """
    try:
        lock = run_dir / LOCK_FILE  # held, it names its holder: a run starting there (released, it is emptied)
        found = [checkpoints(run_dir / "checkpoints") for checkpoints in (list_checkpoints, corrupt_checkpoints)]
        ours = (run_dir / IDENTITY_FILE).is_file() or any(found) or (lock.is_file() and lock.stat().st_size > 0)
        what = (None if ours
                else "holds no run.json and no mbpo checkpoint" if run_dir.is_dir()
                else "is a file" if run_dir.exists() else "does not exist")
    except OSError as exc:  # e.g. a name longer than the file system allows
        what = f"cannot be read ({exc.strerror or exc})"
    if what is None:
        return
    parent = run_dir.absolute().parent
    hint = (f"; its parent is one: python -m mbpo resume {shlex.quote(str(parent))}"
            if run_dir.name == "checkpoints" and (parent / IDENTITY_FILE).is_file() else "")
    raise MbpoError(f"run dir {str(run_dir)!r} {what}; expected a directory written by `python -m mbpo train`{hint}")


def files_in_the_way(run_dir: Path) -> list[str]:
    """The names of :data:`RUN_FILES` that ``run_dir`` already holds: a new run there would overwrite them."""
    return [name for name in RUN_FILES if (run_dir / name).exists()]


def refuse_a_used_run_dir(run_dir: Path, names: tuple[str, ...] = RUN_FILES) -> None:
    """A new run never overwrites another's files: a dir holding checkpoints is to be resumed, one holding
    ``names`` (a run stopped before its first checkpoint, a user's own config.yaml) is left alone. A trainer
    run from Python with a MetricsLogger of its caller's passes the names other than the logger's own.
    """
    if list_checkpoints(run_dir / "checkpoints"):
        raise MbpoError(f"{run_dir} already holds a run with checkpoints; continue it with "
                        f"`python -m mbpo resume {shlex.quote(str(run_dir))}` or set run_dir=<new dir>")
    in_the_way = [name for name in files_in_the_way(run_dir) if name in names]
    if in_the_way:
        raise MbpoError(f"{run_dir} already holds {', '.join(in_the_way)}, which a new run there would "
                        "overwrite (a run that stopped before its first checkpoint has nothing to resume); "
                        "set run_dir=<new dir>, or move them away first")


def write_config(run_dir: str | Path, config_yaml: str) -> None:
    """The config the run starts with; a resume never rewrites it (see :func:`log_resume`)."""
    _write_atomic(Path(run_dir) / "config.yaml", config_yaml)


def log_resume(run_dir: str | Path, env_steps: int, checkpoint: str, overrides: list[str]) -> None:
    """Append one resume (when, from which checkpoint, with which overrides) to ``resumes.yaml``."""
    entry = {"at_env_steps": env_steps, "checkpoint": checkpoint, "overrides": list(overrides),
             "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(Path(run_dir) / RESUMES_FILE, "a") as f:
        f.write(yaml.safe_dump([entry], sort_keys=False))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _file_on(path: Path) -> Path | None:
    """``path`` or the first of its parents that exists and is not a directory (a file); None if there is none."""
    for p in (path, *path.parents):
        try:
            if p.exists() and not p.is_dir():
                return p
        except OSError:  # a name too long to look up: mkdir reports it
            return None
    return None


class RunLock:
    """Exclusive lock on a run dir for as long as a run uses it.

    Re-entrant within one process (the CLI takes it before building the trainer,
    the trainer takes it again), so nesting costs nothing; another process gets
    :class:`RunDirBusyError` at once, naming the holder.
    """

    _held: dict[Path, list[Any]] = {}  # resolved run dir -> [fd, depth]; one entry per process
    _guard = threading.Lock()

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._acquired = False

    def acquire(self) -> RunLock:
        if self._acquired:
            return self
        in_the_way = _file_on(self.run_dir)
        if in_the_way == self.run_dir:  # mkdir would say "File exists"
            raise RunDirBusyError(f"run dir {self.run_dir} is a file; expected a directory: choose another "
                                  "run_dir=<dir>")
        if in_the_way is not None:  # mkdir would say "Not a directory"
            raise RunDirBusyError(f"run dir {self.run_dir} cannot be made: {in_the_way} on its path is a file, not a "
                                  "directory; choose another run_dir=<dir>")
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            probe = self.run_dir / LOCK_FILE
            os.close(os.open(probe, os.O_RDWR | os.O_CREAT, 0o644))
        except OSError as exc:
            raise RunDirBusyError(f"run dir {self.run_dir} cannot be written ({exc.strerror or exc}); choose a "
                                  "writable run_dir=<dir>") from None
        key = self.run_dir.resolve()
        with RunLock._guard:
            held = RunLock._held.get(key)
            if held is not None:
                held[1] += 1
                self._acquired = True
                return self
            fd = os.open(key / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunDirBusyError(f"run dir {self.run_dir} is in use by {_describe(holder)}; wait for that "
                                      "run to end, or choose another run_dir") from None
            previous = _read_holder(fd)
            if previous and previous.get("host") == socket.gethostname() and not _alive(previous.get("pid")):
                print(f"[mbpo] taking over the lock of {self.run_dir} left by pid {previous.get('pid')} on this "
                      "host, which is no longer running", file=sys.stderr)
            me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "command": " ".join(sys.argv)[:200]}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
            RunLock._held[key] = [fd, 1]
        self._acquired = True
        return self

    def release(self) -> None:
        """Idempotent; the last release of this process unlocks and empties the lock file."""
        if not self._acquired:
            return
        self._acquired = False
        key = self.run_dir.resolve()
        with RunLock._guard:
            held = RunLock._held.get(key)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del RunLock._held[key]
            fd = held[0]
            try:
                os.ftruncate(fd, 0)  # a clean end leaves no holder behind to take over
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process (it has not written its pid yet)"
    return (f"pid {holder.get('pid')} on host {holder.get('host')} since {holder.get('since')} "
            f"(`{holder.get('command', '?')}`)")


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def check_belongs(run_dir: str | Path, path: Path, state: dict[str, Any]) -> None:
    """Refuse a checkpoint that is not this run dir's: another run's identity, a config that does not match
    the identity it records, or env steps that disagree with its file name (a copied or renamed file).
    """
    from mbpo.run.checkpoint import ForeignCheckpointError, checkpoint_steps

    run_dir = Path(run_dir)
    move = f"move it out of {run_dir / 'checkpoints'} and resume again"
    steps, named = state["trainer"]["env_steps"], checkpoint_steps(path)
    if named != steps:
        raise ForeignCheckpointError(f"{path.name} holds a checkpoint taken at {steps} env steps, not the {named} "
                                     f"its name says: it was renamed or copied from another run; {move}")
    ident = RunIdentity.from_dict(state.get("identity"))
    if ident is None:
        print(f"[mbpo] {path.name} is an older checkpoint without a run identity: it cannot be checked against "
              f"{run_dir}", file=sys.stderr)
        return
    theirs = config_from_yaml(state["config"])
    try:  # the config the run started with: a device it hashed once and a resume has changed since is there
        start: str | None = (run_dir / "config.yaml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        start = None
    if not matches_identity(state["config"], ident.config_hash, start):
        raise ForeignCheckpointError(f"{path.name}'s config does not match the identity it records (edited by "
                                     f"hand?); {move}")
    ours = RunIdentity.read(run_dir)
    if ours is None:  # a run dir without run.json (a checkpoint copied into a new dir to branch a run)
        ident.write(run_dir, theirs)
        return
    if ident != ours:
        mine = _run_summary(run_dir)
        raise ForeignCheckpointError(
            f"{path.name} belongs to another run ({theirs.env.id}, {theirs.agent.name}"
            f"{', MBPO' if theirs.model.enabled else ''}, seed {theirs.seed}, run id {ident.run_id[:8]}) than "
            f"{run_dir} ({mine}run id {ours.run_id[:8]}); {move}")


def _run_summary(run_dir: Path) -> str:
    try:
        info = json.loads((run_dir / IDENTITY_FILE).read_text())
        return f"{info['env']}, {info['agent']}{', MBPO' if info['mbpo'] else ''}, seed {info['seed']}, "
    except (OSError, ValueError, KeyError):
        return ""
