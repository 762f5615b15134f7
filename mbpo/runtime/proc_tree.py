"""The processes below a process, from /proc (Linux), and ending them: what a library's own shutdown leaves to
exit on its own time (Ray's agents and idle workers, once their raylet is killed).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["alive", "descendants", "end_orphans", "exists", "kill_and_wait", "start_time", "stop_all", "tree_of"]


def descendants(pids: Iterable[int]) -> set[int]:
    """Every live process below ``pids`` (not ``pids`` themselves); empty where there is no /proc."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    for d in proc.iterdir() if proc.is_dir() else []:
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # a process that ended meanwhile
            continue
        children.setdefault(ppid, []).append(int(d.name))
    found: set[int] = set()
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tree_of(pid: int) -> dict[int, int | None]:
    """Every live process below ``pid``, each with its start time: once ``pid`` is gone they are orphans, no longer
    below anything of ours, so the tree is read while it stands.
    """
    return {p: start_time(p) for p in descendants([pid])}


def end_orphans(tree: dict[int, int | None], timeout_s: float) -> set[int]:
    """SIGKILL the processes of ``tree`` (:func:`tree_of`) still running as the same processes (their start time
    unchanged: a pid the kernel has since given to another process is left alone); those still there.
    """
    same = {p for p in alive(tree) if start_time(p) == tree[p]}
    return kill_and_wait(same, timeout_s) if same else set()


def stop_all(pids: Iterable[int]) -> None:
    """SIGSTOP ``pids`` (which no process can block): frozen, a process starts no child while its tree is read."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            pass


def kill_and_wait(pids: Iterable[int], timeout_s: float) -> set[int]:
    """SIGKILL ``pids`` and wait up to ``timeout_s`` for them to be gone (a zombie counts as gone: its parent
    reaps it); the ones still there.
    """
    pids = set(pids)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + timeout_s
    while True:
        left = alive(pids)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.01)


def alive(pids: Iterable[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie is not: it only waits for its parent to reap it)."""
    running = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            running.add(pid)
    return running


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (/proc's ``starttime``): with the pid, it names one process
    even once the kernel has given its pid to another. None where there is no /proc, or once it has been reaped
    (a zombie still has its own).
    """
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def exists(pid: int) -> bool:
    """``pid`` is a process, running or a zombie not yet reaped (what a machine without /proc can tell: the
    signal-0 probe); one of another user's counts.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
