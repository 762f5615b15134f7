"""How collector processes start: forked from a fork server that has imported torch once, CUDA-safe.

A spawned child is a fresh interpreter that imports torch and tensordict (which imports torch._dynamo) before
it can step an env: about 4 s of CPU on a 2-core machine, for each collector and each restart. Under Python's
``forkserver`` start method a server process (fork and exec, like a spawned child) imports them once; each
collector is then forked from that server in milliseconds. The server never touches CUDA, so its children may
(PyTorch's rule: spawn or forkserver, never fork after CUDA init). Where the platform lacks forkserver,
collectors are spawned.

A forked child inherits what the server had when it started (environment, stdout/stderr, CPU affinity, nice
value, limits), not what the trainer has when it launches the child. So the server lives as long as the
process-backend runs that use it (:class:`ForkServerLease`): each run starts one with what the trainer has
then, and the last to close stops it; a collector restarted mid-run sees the run's start, not a variable the
trainer set since.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from multiprocessing import forkserver, resource_tracker
from multiprocessing.context import ForkServerContext, SpawnContext
from pathlib import Path
from typing import Any

from mbpo.runtime.proc_tree import alive, exists, start_time

__all__ = ["FORKSERVER_PRELOAD", "SERVER_BLOCKS", "LOST_TO_THE_SERVER", "ForkServerLease",
           "leave_the_fork_server_alone", "server_gone"]

FORKSERVER_PRELOAD = ("torch", "tensordict", "mbpo.runtime.backends.fork_server_hook")
"""What the fork server imports before it forks: torch and tensordict (the bulk of a collector's start-up;
neither touches CUDA), and the hook that lets each child it forks take SIGTERM again."""

LOST_TO_THE_SERVER = 255
"""The exit code the stdlib gives a forked child whose server it can no longer ask (``popen_forkserver.poll``)."""

SERVER_BLOCKS = {signal.SIGINT, signal.SIGTERM}
"""Blocked in the fork server for good: a Ctrl-C or a scheduler's SIGTERM to the process group reaches the
trainer, which stops its collectors, and not the server, which must outlive them to reap them (their zombies
would otherwise go to init)."""


def leave_the_fork_server_alone() -> None:
    """In a collector: drop the server's "alive" pipe that every forked child inherits. The server exits only
    once every holder has closed it, so a collector stuck in ``env.step`` would keep it alive past a SIGKILLed
    trainer, and the collector's SIGKILL-on-parent-death (``child._die_with_parent``) would never fire.
    """
    server: Any = forkserver._forkserver  # the stdlib's, with no public handle on the pipe
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None
        server._forkserver_address = None


class ForkServerLease:
    """The process-backend runs of this process that use the fork server. The first run's first collector starts
    it (unless one runs already: another library's, reused as it is), the last run stops the one it started.
    Started at a launch (:meth:`start`), not with the run: a run that fails its start-up (an env that breaks the
    contract) starts none, so it does not wait out the server's imports (about 3 s of CPU) to stop it.
    """

    _lock = threading.Lock()
    _holders = 0
    _ours = False

    def __init__(self) -> None:
        self.context: ForkServerContext | SpawnContext
        self._held = False
        if "forkserver" not in mp.get_all_start_methods():
            self.context = mp.get_context("spawn")
            return
        self.context = mp.get_context("forkserver")
        with ForkServerLease._lock:
            if ForkServerLease._holders == 0:
                ForkServerLease._ours = forkserver._forkserver._forkserver_pid is None  # type: ignore[attr-defined]
                self.context.set_forkserver_preload(list(FORKSERVER_PRELOAD))
            ForkServerLease._holders += 1
            self._held = True

    def start(self) -> None:
        """Before each fork: start the server if it is not running (again, if it died); a no-op where collectors
        are spawned.
        """
        if self._held:
            start_server()

    @property
    def server_pid(self) -> int | None:
        """The fork server's pid now (None where collectors are spawned): the process a collector forked now
        dies with (``child._die_with_parent``), so the trainer can tell a collector killed with it.
        """
        if not self._held:
            return None
        return forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]  # the stdlib's

    def release(self) -> None:
        """Idempotent; after the run's collectors have ended. The last holder stops the server it started (the
        stdlib's stop waits for it, and it exits once no collector holds its pipe).
        """
        with ForkServerLease._lock:
            if not self._held:
                return
            self._held = False
            ForkServerLease._holders -= 1
            if ForkServerLease._holders == 0 and ForkServerLease._ours:
                forkserver._forkserver._stop()  # type: ignore[attr-defined]  # the stdlib's own, since Python 3.8
                ForkServerLease._ours = False


def server_gone(pid: int, started: int | None = None) -> bool:
    """The fork server ``pid`` (which started at ``started``, :func:`start_time`'s clock, where known) has ended
    (a zombie not yet reaped has: it forks nothing); a process that has its pid now but started at another time
    is another. Where there is no /proc to tell a zombie, only a process already reaped: a live-looking server
    charges each collector's restart.
    """
    if not Path("/proc").is_dir():
        return not exists(pid)
    return not alive([pid]) or (started is not None and start_time(pid) != started)


def start_server() -> None:
    """Start the fork server if it is not running (again, if it died), with :data:`SERVER_BLOCKS` blocked."""
    resource_tracker.ensure_running()  # first: starting it unblocks SIGINT and SIGTERM in this thread
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SERVER_BLOCKS)
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
