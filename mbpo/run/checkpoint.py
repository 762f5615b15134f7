"""Checkpoint files: written atomically and read back before older ones go; loaded without running code.

A write goes to a temp file, is fsynced and renamed, so a crash never leaves a
half-written checkpoint under a real name. Before the newest ``keep`` are
pruned, the new file is read back: a checkpoint that does not load never
replaces one that does (one that failed for want of memory is kept, and nothing
pruned). A checkpoint found unreadable is renamed ``*.corrupt`` (no longer
counted toward ``keep``) and the previous one is used.

Files are loaded with ``torch.load(weights_only=True)``: tensors and plain
Python data only, so a crafted file cannot run code. A file that needs more
(an older mbpo checkpoint, or a malicious one) is refused with
:class:`UnsafeCheckpointError` unless the caller explicitly trusts it.
"""

from __future__ import annotations

import os
import shlex
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch

from mbpo.errors import MbpoError

__all__ = [
    "save_checkpoint", "load_checkpoint", "read_file", "load_latest", "list_checkpoints", "checkpoint_steps",
    "CheckpointError", "UnsafeCheckpointError", "CorruptCheckpointError", "ForeignCheckpointError",
    "CheckpointWriteError", "remove_stale_temporaries", "corrupt_checkpoints",
    "FORMAT", "CORRUPT_SUFFIX",
]

PREFIX, SUFFIX, CORRUPT_SUFFIX = "ckpt_", ".pt", ".corrupt"
CHECKPOINTS_DIR = "checkpoints"
"""Where a run dir keeps its checkpoints."""
ZIP_MAGIC = b"PK\x03\x04"
"""The first bytes of every file torch.save writes (a zip archive)."""
FORMAT = 2
"""2: tensors and plain data only (loads with weights_only=True); 1: held TensorDicts and global RNG states."""
TRUST_HINT = ("Pass --trust-checkpoint only if you wrote this file yourself (for example with an older "
              "mbpo): full unpickling runs any code the file contains.")


class CheckpointError(MbpoError):
    """A checkpoint that cannot be used: missing, unreadable, unsafe to load, or from another run."""


class UnsafeCheckpointError(CheckpointError):
    """Loading the file would need full unpickling, which can run arbitrary code."""


class ForeignCheckpointError(CheckpointError):
    """The checkpoint belongs to another run than the run dir it was found in."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (no space left, no permission); the older ones are intact."""


class CorruptCheckpointError(CheckpointError):
    """The file is not a readable checkpoint (truncated, overwritten, not written by torch.save)."""


def list_checkpoints(directory: str | Path, suffix: str = SUFFIX) -> list[Path]:
    """The checkpoints mbpo wrote in ``directory`` (``ckpt_<env steps, 12 digits or more>.pt``), oldest first;
    with ``suffix`` ``SUFFIX + CORRUPT_SUFFIX``, those found unreadable and set aside. Any other file, such as a
    user's ``ckpt_best.pt`` or a copy, is neither resumed from nor counted toward (and pruned by)
    ``checkpoint.keep``.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        steps = checkpoint_steps(path.name[: -len(suffix)] + SUFFIX) if path.name.endswith(suffix) else None
        if steps is not None and path.name == f"{PREFIX}{steps:012d}{suffix}":
            found.append((steps, path))
    return [path for _, path in sorted(found)]


def corrupt_checkpoints(directory: str | Path) -> list[Path]:
    """Checkpoints of ``directory`` found unreadable and renamed ``*.corrupt`` (kept: a user may repair one)."""
    return list_checkpoints(directory, SUFFIX + CORRUPT_SUFFIX)


def no_checkpoint_loads(directory: str | Path, corrupt: list[Path]) -> str:
    """Why ``directory`` has nothing to load when every checkpoint it had was found corrupt."""
    names = ", ".join(p.name for p in corrupt[-3:]) + (f" and {len(corrupt) - 3} more" if len(corrupt) > 3 else "")
    return (f"no checkpoint in {str(directory)!r} loads: each was found unreadable and renamed *{CORRUPT_SUFFIX} "
            f"({names}); put back a good copy of one (named without {CORRUPT_SUFFIX}), or train again with "
            "run_dir=<new dir>")


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Remove the temporaries of saves cut off by a kill (``.ckpt_*.pt.tmp-<pid>`` of a pid that is gone): one
    is as large as a checkpoint, hidden, and never read. A live pid's is another process's save in progress.
    """
    removed = []
    for tmp in directory.glob(f".{PREFIX}*{SUFFIX}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[1]
        if pid.isascii() and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def _reason(exc: BaseException) -> str:
    """An OS error's own words (``No space left on device``), else the exception's first line."""
    while exc.__cause__ is not None and not isinstance(exc, OSError):
        exc = exc.__cause__
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def checkpoint_steps(path: str | Path) -> int | None:
    """The env steps a checkpoint's file name states, or None for a name we did not write."""
    stem = Path(path).name[len(PREFIX):-len(SUFFIX)]
    return int(stem) if Path(path).name.startswith(PREFIX) and stem.isascii() and stem.isdigit() else None


def save_checkpoint(directory: str | Path, env_steps: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as ``ckpt_<env_steps>.pt`` atomically, read it back, then prune all but the newest
    ``keep``. A file that does not read back is renamed ``*.corrupt`` (one that failed to load for a reason
    outside the file, out of memory, is kept) and nothing older is pruned.
    """
    directory = Path(directory)
    final = directory / f"{PREFIX}{env_steps:012d}{SUFFIX}"
    tmp = directory / f".{final.name}.tmp-{os.getpid()}"
    try:
        directory.mkdir(exist_ok=True)  # not its parents: a run dir removed while the run ran is not made again
        remove_stale_temporaries(directory)
        try:
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                tmp.unlink()
        _fsync_dir(directory)
    except (OSError, RuntimeError) as exc:  # a full disk, a read-only dir: the run's older checkpoints are intact
        if isinstance(exc, RuntimeError) and "PytorchStreamWriter" not in str(exc):
            raise  # torch.save reports a failed write of its zip file as such a RuntimeError; anything else is ours
        if isinstance(exc, FileNotFoundError) and not directory.parent.exists():
            raise CheckpointWriteError(f"cannot write {final}: the run dir {directory.parent} is gone (removed "
                                       "while the run ran?); start the run again with `python -m mbpo train`") from exc
        raise CheckpointWriteError(f"cannot write {final} ({_reason(exc)}); free space or make the dir writable, "
                                   f"then `python -m mbpo resume {shlex.quote(str(directory.parent))}` goes on from "
                                   "the newest checkpoint") from exc
    try:
        read_file(final)
    except (CorruptCheckpointError, UnsafeCheckpointError) as exc:  # unsafe: a state holding more than tensors
        bad = _mark_corrupt(final)
        raise CorruptCheckpointError(f"the checkpoint just written did not read back ({exc}); renamed it to "
                                     f"{bad.name} and kept every older checkpoint") from exc
    except CheckpointError as exc:  # a good file that did not load here (out of memory): kept, nothing pruned
        raise CheckpointError(f"the checkpoint just written did not read back ({exc}); kept it and every older "
                              "checkpoint") from exc
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink()
    return final


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", trust: bool = False) -> dict[str, Any]:
    """Load one mbpo checkpoint: tensors and plain data only, unless ``trust`` (older checkpoints)."""
    state = read_file(path, map_location, trust)
    if not isinstance(state, dict) or "config" not in state or "trainer" not in state:
        keys = sorted(map(str, state))[:8] if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path} is not an mbpo checkpoint (it holds {keys}; expected the keys config, "
                              "trainer, agent, ... that `python -m mbpo train` writes)")
    return state


def read_file(path: str | Path, map_location: str | torch.device = "cpu", trust: bool = False) -> Any:
    """``torch.load`` with ``weights_only=True`` (tensors and plain data), classifying what fails."""
    path = Path(path)
    if path.is_dir():
        found = list_checkpoints(path / CHECKPOINTS_DIR) or list_checkpoints(path)
        if found:
            raise CheckpointError(f"{path} is a directory (a run dir?); expected a checkpoint file; its newest "
                                  f"checkpoint is {found[-1]}")
        raise CheckpointError(f"{path} is a directory holding no checkpoint; expected a checkpoint file (ckpt_*.pt)")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist (or is not a file)")
    if trust:
        print(f"[mbpo] loading {path} with full unpickling (--trust-checkpoint): it can run any code the file "
              "contains", file=sys.stderr)
    try:
        return torch.load(path, map_location=map_location, weights_only=not trust)
    except Exception as exc:  # noqa: BLE001 - unpickling errors come in many types; we classify them
        raise _classify(path, exc, trust) from None


def load_latest(
    directory: str | Path, map_location: str | torch.device = "cpu", trust: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """The newest checkpoint that loads. An unreadable newer one is renamed ``*.corrupt`` (reported on
    stderr) and the previous one is tried; an unsafe one, or an intact one that failed for a reason outside the
    file (out of memory), stops the search (neither is ever skipped silently).
    """
    candidates = list_checkpoints(directory)
    if not candidates:
        corrupt = corrupt_checkpoints(directory)
        raise CheckpointError(no_checkpoint_loads(directory, corrupt) if corrupt else
                              f"no checkpoint ({PREFIX}*{SUFFIX}) in {str(directory)!r}")
    for path in reversed(candidates):
        try:
            return path, load_checkpoint(path, map_location, trust)
        except CorruptCheckpointError as exc:
            bad = _mark_corrupt(path)
            print(f"[mbpo] {exc}; renamed it to {bad.name} (not counted toward checkpoint.keep) and trying "
                  "the previous checkpoint", file=sys.stderr)
    raise CheckpointError(no_checkpoint_loads(directory, corrupt_checkpoints(directory)))


def _classify(path: Path, exc: Exception, trust: bool = False) -> CheckpointError:
    """Unsafe (the pickle names code to run), corrupt (not a readable torch.save file, or an archive whose
    contents do not load), or an intact archive that failed to load for a reason outside the file (out of memory;
    with ``trust``, code it names that no longer imports): only a corrupt one is set aside for an older checkpoint.
    """
    try:
        unsafe = [] if trust else torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - not even a zip archive torch can list: corrupt
        unsafe = []
    if unsafe:
        return UnsafeCheckpointError(
            f"{path} needs full unpickling to load (it references {', '.join(unsafe[:5])}"
            f"{', ...' if len(unsafe) > 5 else ''}), which can run arbitrary code, so it was not loaded; "
            f"mbpo checkpoints hold only tensors and plain data. {TRUST_HINT}")
    try:
        with open(path, "rb") as f:
            zipped = f.read(4) == ZIP_MAGIC
    except OSError as opening:  # no permission, an I/O error: nothing says the file is bad
        return CheckpointError(f"checkpoint {path} cannot be read ({_reason(opening)}); it was left as it is: fix "
                               "the cause and load it again")
    if not zipped:  # torch's own advice (weights_only=False) would be wrong here: it is no torch file at all
        return CorruptCheckpointError(f"{path} is not a checkpoint: not a file torch.save writes (mbpo's are "
                                      f"{PREFIX}<env steps>{SUFFIX} in a run dir's {CHECKPOINTS_DIR}/)")
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if (_outside_the_file(exc) or trust) and _intact_archive(path):  # out of memory, say; trusted: code its
        how = " even with full unpickling" if trust else ""  # pickle names that no longer imports
        return CheckpointError(f"checkpoint {path} did not load{how} ({type(exc).__name__}: {first_line}); the file "
                               "is intact, so it was left as it is: fix the cause and load it again")
    return CorruptCheckpointError(f"checkpoint {path} is unreadable, corrupt or cut short ({first_line})")


def _outside_the_file(exc: BaseException) -> bool:
    """Whether a load failed for want of a resource where it ran (memory, an I/O error, a permission), which a
    good file meets too: such a file is kept, never set aside for an older checkpoint.
    """
    if isinstance(exc, (MemoryError, OSError, torch.OutOfMemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        words in text for words in ("can't allocate memory", "DefaultCPUAllocator", "out of memory"))


def _intact_archive(path: Path) -> bool:
    """Whether every member of the zip archive ``path`` reads back with its CRC (a cut-short file does not)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (OSError, zipfile.BadZipFile):
        return False


def _mark_corrupt(path: Path) -> Path:
    bad = path.with_name(path.name + CORRUPT_SUFFIX)
    os.replace(path, bad)
    return bad


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
