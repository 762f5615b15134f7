"""``runtime.backend=process``: each collector runs in its own process (forked from a fork server: forkserver.py).

For CPU-bound or flaky simulators (the GIL no longer serialises them, and a
process stuck in ``env.step`` can be killed), and for several GPUs. What
crosses into a child is checked plain data (mbpo.runtime.handoff): the config,
the env config (an id, or an ``env.factory`` name the child imports), device
strings, seeds and shared-memory handles. Each child has
its own pipe to the trainer, so a child killed at any instant can corrupt
nothing another child uses:

* transitions: the child writes a batch into a ring slot the trainer granted
  (mbpo.runtime.shared_ring) and sends back only the slot index;
* weights: every published snapshot is mirrored into a seqlocked shared slot
  (mbpo.runtime.shared_weights) that the child reads between batches;
* the ratio gate: for each child a proxy thread in the trainer runs the same
  :class:`~mbpo.runtime.collectors.CollectorLoop` as a thread collector, so
  the :class:`~mbpo.runtime.gate.RatioGate`'s rule and counters stay in the
  trainer and no lock is shared with a process that may be killed inside it;
* heartbeats: a shared float per collector, written after every env step.

A child that raises sends its traceback; one that exits or is killed is seen
by its pipe closing. Either way the supervisor restarts it from the newest
weights; a hung one is terminated (SIGTERM, then SIGKILL), with the processes
its env started (it closes no env then), and replaced.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from mbpo.config import EnvConfig
from mbpo.data.transitions import DISCOUNT
from mbpo.device.checks import check_transitions
from mbpo.errors import remote_mbpo_error
from mbpo.runtime.backends.child import ChildSpec, collector_main
from mbpo.runtime.backends.forkserver import LOST_TO_THE_SERVER, SERVER_BLOCKS, ForkServerLease, server_gone
from mbpo.runtime.collectors import (
    COLLECTOR_ID,
    POLICY_VERSION,
    CollectorBatch,
    CollectorLoop,
    CollectorSetup,
    CollectorStopped,
)
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.handoff import check_plain
from mbpo.runtime.main_guard import (
    COLLECTOR_PROCESS_PREFIX,
    UNGUARDED_MAIN_EXIT,
    UnguardedMainError,
    check_children_can_import_main,
)
from mbpo.runtime.proc_tree import end_orphans, start_time, tree_of
from mbpo.runtime.queue import TransitionQueue
from mbpo.runtime.semaphores import name_semaphores_after
from mbpo.runtime.shared_ring import SharedRing
from mbpo.runtime.shared_weights import SharedWeights
from mbpo.runtime.timing import POLL_S, PROCESS_START_TIMEOUT_S, TERM_GRACE_S
from mbpo.runtime.weights import WeightStore

__all__ = ["ProcessBackend", "ProcessCollector", "CollectorProcessError", "ForkServerGone"]



class CollectorProcessError(RuntimeError):
    """A collector process raised (the message holds its traceback), exited or was killed."""


class ForkServerGone(CollectorProcessError):
    """A collector process ended because the fork server it was forked from did (the OOM killer, a stray
    ``kill``): each of its collectors ends with it, so the supervisor counts the restarts that follow as one
    (``shared_cause``), and the first restart starts a new server.
    """

    def __init__(self, message: str, server_pid: int, server_start: int | None) -> None:
        super().__init__(message)
        self.shared_cause = f"the fork server (pid {server_pid}) is gone"
        self.shared_cause_key = ("fork server", server_pid, server_start)
        """The server by pid and start time: a later server given a dead one's pid is another cause."""


def remote_error(cid: int, pid: int | None, type_name: str, message: str, text: str,
                 mbpo_error: bool) -> BaseException:
    """The parent-side exception for a child's: an MbpoError stays one (the supervisor stops the run on it)."""
    where = f"collector {cid}'s process (pid {pid}) raised {type_name}: {message}\n{text}"
    return remote_mbpo_error(type_name, message, where) if mbpo_error else CollectorProcessError(where)


class ProcessCollector(CollectorLoop):
    """The trainer-side half of a collector process: starts the child and runs its gate/queue loop."""

    killable = True
    depth = 2

    def __init__(self, collector_id: int, incarnation: int, setup: CollectorSetup,
                 queue: TransitionQueue[CollectorBatch], weights: WeightStore, gate: RatioGate,
                 backend: ProcessBackend, spec: ChildSpec) -> None:
        super().__init__(collector_id, incarnation, setup, queue, weights, gate)
        self.backend, self.spec = backend, spec
        self.pid: int | None = None
        self.server_pid: int | None = None
        """The fork server this collector's process was forked from (None: spawned)."""
        self.server_start: int | None = None
        """That server's start time (``proc_tree.start_time``; None without /proc)."""
        self.process: Any = None
        self._conn: Any = None
        self._slots: set[int] = set()  # granted to the child and not yet handed on
        self._closed = False

    # -- the Collector protocol --------------------------------------------------------
    @property
    def last_beat(self) -> float:
        return max(self._beat, float(self.backend.beats[self.collector_id]))

    def _launch(self) -> None:
        """Spawn the child (from the caller's thread, so it dies with the trainer)."""
        b = self.backend
        check_plain(self.spec, f"collector {self.collector_id}'s spec")
        b.lease.start()
        parent_end, child_end = b.ctx.Pipe()
        process = b.ctx.Process(target=collector_main, args=(self.spec, child_end, b.ring, b.shared_weights, b.beats),
                                name=f"{COLLECTOR_PROCESS_PREFIX}{self.collector_id}.{self.incarnation}")
        # Ctrl-C reaches the whole process group, children too: blocked from here (and in the fork server, which
        # starts with this mask), the child starts with it blocked and only lifts it once it ignores SIGINT
        # (collector_main), so a Ctrl-C while it imports cannot print a KeyboardInterrupt traceback; the trainer
        # stops its children itself.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SERVER_BLOCKS)
        try:
            process.start()
        except BaseException:  # no child: nothing for close() to stop, and its error is the run's
            parent_end.close()
            child_end.close()
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self.process = process
        child_end.close()  # ours closed: the pipe reports EOF as soon as the child is gone
        self._conn, self.pid, self.server_pid = parent_end, self.process.pid, b.lease.server_pid
        self.server_start = start_time(self.server_pid) if self.server_pid is not None else None

    def join(self, timeout: float) -> bool:
        """The proxy thread ends; then the child is asked to stop and joined, all by ``timeout``."""
        deadline = time.monotonic() + timeout
        super().join(timeout)
        if self.process is not None and self.process.is_alive():
            self._send(("stop",))
            self.process.join(max(deadline - time.monotonic(), 0.0))
        return not self._thread.is_alive() and (self.process is None or not self.process.is_alive())

    def close(self) -> None:
        """Stop the proxy, end the child (asked; then SIGTERM; then SIGKILL, and the processes it left), free its
        slot. Idempotent.
        """
        self.stop()
        if self._closed:
            return
        self._closed = True
        if self.process is not None:
            self._send(("stop",))
            self.process.join(POLL_S)
            if self.process.is_alive():  # ended by force, it closes no env: its env's own processes would outlive it
                tree = tree_of(self.process.pid)
                self.process.terminate()
                self.process.join(TERM_GRACE_S)
                if self.process.is_alive():
                    tree |= tree_of(self.process.pid)
                    self.process.kill()
                    self.process.join()
                end_orphans(tree, TERM_GRACE_S)
        if self._thread.ident is not None:
            self._thread.join(TERM_GRACE_S)
        for slot in self._slots:  # the child is gone: nobody writes these slots any more
            self.backend.ring.free(slot)
        self._slots.clear()
        if self._conn is not None:
            self._conn.close()
        if self.process is not None:
            self.process.close()  # releases the process's own handles (a sentinel fd)
            self.process = None

    # -- the proxy thread ------------------------------------------------------------------
    def _prepare(self) -> None:
        """Wait for the child to say it is ready. Starting a Python interpreter and importing torch takes
        seconds (more with several children on few cores), so it is timed by PROCESS_START_TIMEOUT_S, not by
        runtime.collector_timeout_s: the proxy beats for it meanwhile.
        """
        message = self._recv(startup_deadline=time.monotonic() + PROCESS_START_TIMEOUT_S)
        if message[0] != "ready":
            raise CollectorProcessError(f"collector {self.collector_id}'s process said {message[0]!r} before "
                                        "'ready'")
        if self.setup.debug:
            print(f"[mbpo debug] collector {self.collector_id}.{self.incarnation} runs as pid {self.pid}",
                  file=sys.stderr)

    def _submit(self, first: int, granted: int) -> int:
        """Grant the child a batch into a free slot; the child works through its grants in order."""
        slot = self.backend.ring.acquire(self._stop)
        if slot is None and granted == 0:  # a stopped collector's open n-step windows: a free slot, or none
            slot = self.backend.ring.try_acquire()
        if slot is None:
            raise CollectorStopped
        self._slots.add(slot)
        self._send(("collect", first, granted, slot), required=True)
        return slot

    def _finish(self, slot: int) -> CollectorBatch:
        ring = self.backend.ring
        _, done, rows, version, returns, env_steps, dropped, created, started, env_s, act_s, planned, cpu = self._recv()
        assert done == slot, f"collector {self.collector_id}'s child answered slot {done} before slot {slot}"
        data = ring.view(slot, rows)
        if self.setup.debug:
            check_transitions(data, f"ring slot {slot} -> collector {self.collector_id}'s batch", torch.device("cpu"),
                              data["obs"].shape[-1], self.setup.action_space)
        self._slots.discard(slot)
        return CollectorBatch(data, self.collector_id, version, list(returns), env_steps, dropped, created, started,
                              env_s=env_s, act_s=act_s, planned=planned, cpu_s=cpu,
                              on_release=lambda: ring.free(slot))

    def _send(self, message: tuple, required: bool = False) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError):  # the child is gone (its pipe broke) or we closed our end
            if required:
                raise self._death() from None

    def _recv(self, startup_deadline: float | None = None) -> tuple:
        """The child's next message; its error, or its death, raised here."""
        while True:
            if startup_deadline is not None:
                if time.monotonic() > startup_deadline:
                    raise CollectorProcessError(f"collector {self.collector_id}'s process (pid {self.pid}) did not "
                                                f"start within {PROCESS_START_TIMEOUT_S:.0f} s")
                self.beat()
            try:
                if self._conn.poll(POLL_S):
                    message = self._conn.recv()
                    if message[0] == "error":
                        raise remote_error(self.collector_id, self.pid, *message[1:])
                    return message
            except (EOFError, OSError):
                raise self._death() from None
            if self.abandoned:
                raise CollectorStopped
            if not self.process.is_alive() and not self._conn.poll(0):
                raise self._death()

    def _death(self) -> BaseException:
        if self.abandoned or self._closed:
            return CollectorStopped()
        self.process.join(1.0)
        code = self.process.exitcode
        if code == UNGUARDED_MAIN_EXIT:
            return UnguardedMainError()
        server = self.server_pid
        if code == LOST_TO_THE_SERVER and server is not None and server_gone(server, self.server_start):
            return ForkServerGone(f"collector {self.collector_id}'s process (pid {self.pid}) ended with the fork "
                                  f"server it was forked from (pid {server}), which is gone (killed: the "
                                  "OOM killer? the kernel log says)", server, self.server_start)
        how = ("is still running but closed its pipe" if code is None else
               f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}")
        return CollectorProcessError(f"collector {self.collector_id}'s process (pid {self.pid}) {how}")


class ProcessBackend:
    """Shared resources of the collector processes (ring, weights mirror, heartbeats) and their factory."""

    name = "process"
    uses_trainer_env = False
    """Every child builds its own env; the trainer's first one only gave the spaces."""

    def __init__(self, setup: CollectorSetup, queue: TransitionQueue[CollectorBatch], weights: WeightStore,
                 gate: RatioGate, num_collectors: int, env: EnvConfig, env_device: str,
                 env_seed: Callable[[int, int], int], action_seed: Callable[[int, int], int],
                 template_snapshot: dict[str, Any], env_factory: Callable[..., Any] | None = None) -> None:
        check_children_can_import_main(env_factory)
        self.setup, self.queue, self.weights, self.gate = setup, queue, weights, gate
        self.env, self.env_device = env, str(env_device)
        self.env_seed, self.action_seed, self.env_factory = env_seed, action_seed, env_factory
        self.lease = ForkServerLease()  # forkserver (spawn where there is none); never fork: CUDA, threads
        self.ctx = self.lease.context
        try:
            name_semaphores_after(os.getpid())  # the spawn context's locks below, and the children's
            # An n-step builder closes an env's pending windows when its episode ends: a batch of k vector steps can
            # hold k + n - 1 rows per env (all of them where every env's episode ends on the batch's last step).
            rows = (setup.vector_steps_per_batch + max(setup.agent.n_step - 1, 0)) * setup.num_envs
            # Every batch the queue may hold, the ones granted to each collector, and one to spare for a batch the
            # queue's drop_oldest has just displaced.
            self.ring = SharedRing(queue.max_size + ProcessCollector.depth * num_collectors + 1, rows,
                                   int(setup.observation_space.shape[0]), setup.action_space,
                                   extra_int64=(POLICY_VERSION, COLLECTOR_ID),
                                   extra_float=(DISCOUNT,) if setup.agent.n_step > 1 else (),
                                   first_step=setup.agent.n_step > 1 and setup.keep_first_step)
            self.shared_weights = SharedWeights(template_snapshot, self.ctx)
            self.beats = torch.zeros(num_collectors, dtype=torch.float64).share_memory_()
        except BaseException:
            self.lease.release()
            raise
        weights.add_mirror(self.shared_weights.write)

    def make_collector(self, collector_id: int, incarnation: int) -> ProcessCollector:
        spec = ChildSpec(collector_id, incarnation, self.setup, self.env, self.env_device,
                         self.env_seed(collector_id, incarnation), self.action_seed(collector_id, incarnation),
                         trainer_pid=os.getpid(), env_factory=self.env_factory)
        return ProcessCollector(collector_id, incarnation, self.setup, self.queue, self.weights, self.gate, self,
                                spec)

    def close(self) -> None:
        """After every collector has ended (the pool closes first)."""
        self.weights.remove_mirror(self.shared_weights.write)
        self.lease.release()
