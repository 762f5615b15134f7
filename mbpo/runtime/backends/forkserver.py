"""How collector processes start: forked from a fork server that has imported torch once, CUDA-safe.

A spawned child is a fresh interpreter that imports torch and tensordict (which imports torch._dynamo) before
it can step an env: about 4 s of CPU on a 2-core machine, for each collector and each restart. Under Python's
``forkserver`` start method a server process, started once per trainer process (fork and exec, like a spawned
child), imports them once; each collector is then forked from that server in milliseconds. The server never
touches CUDA, so its children may (PyTorch's rule: spawn or forkserver, never fork after CUDA init); it exits
when the trainer process does. Where the platform lacks forkserver, collectors are spawned.

A forked child inherits the server's environment and file descriptors, not the trainer's: the server's were the
trainer's when it started, perhaps in an earlier run of the same process. :class:`AsIfSpawned` carries the
trainer's environment and stdout/stderr at the collector's launch, so it sees what a spawned one would.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from dataclasses import dataclass, field
from multiprocessing import forkserver, reduction, resource_tracker
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any

__all__ = ["FORKSERVER_PRELOAD", "SERVER_BLOCKS", "AsIfSpawned", "collector_context"]

FORKSERVER_PRELOAD = ("torch", "tensordict")
"""What the fork server imports before it forks: the bulk of a collector's start-up. Neither touches CUDA."""

SERVER_BLOCKS = {signal.SIGINT, signal.SIGTERM}
"""Blocked in the fork server for good, and in each collector until it has set up its own handling."""


def collector_context() -> ForkServerContext | SpawnContext:
    """The forkserver context, its server running (the spawn context where there is no forkserver).

    The server is started with SIGINT and SIGTERM blocked, and keeps that mask for good: a Ctrl-C or a
    scheduler's SIGTERM to the process group reaches the trainer, which stops its collectors, and not the server,
    which must outlive them to reap them (their zombies would otherwise go to init). Each collector forked from
    it starts with both blocked, as a spawned one started with SIGINT blocked through exec, until it ignores
    SIGINT and takes SIGTERM again itself (``collector_main``). A server already running (an earlier run in this
    process) is reused.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    resource_tracker.ensure_running()  # first: starting it unblocks SIGINT and SIGTERM in this thread
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SERVER_BLOCKS)
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return ctx


class _TrainerFd:
    """One of the trainer's file descriptors, sent to the child when the collector is launched."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _received, (reduction.DupFd(self.fd),)  # the launching popen's


def _received(dup: Any) -> int:
    return int(dup.detach())


@dataclass
class AsIfSpawned:
    """The trainer's environment and stdout/stderr when it launched the collector (a collector process's args)."""

    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    stdout: Any = field(default_factory=lambda: _TrainerFd(1))
    stderr: Any = field(default_factory=lambda: _TrainerFd(2))

    def apply(self) -> None:
        """In the child, first thing: take them as its own."""
        os.environ.clear()
        os.environ.update(self.environ)
        for fd, received in ((1, self.stdout), (2, self.stderr)):
            if isinstance(received, int) and received != fd:
                os.dup2(received, fd)
                os.close(received)
