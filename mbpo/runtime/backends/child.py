"""The body of a collector process (``runtime.backend=process``): build, then collect into ring slots.

It receives plain data only (a :class:`ChildSpec`, shared-memory handles, its
end of a pipe), builds its own env (and, for ``cuda:N``, its own CUDA context)
and CPU policy, and then, for each grant from the trainer, reads the newest
weights, collects one batch, writes it into the granted ring slot and answers
with the slot index and the batch's bookkeeping. An exception is sent back
with its traceback before the process exits with code 1; Ctrl-C is the
trainer's to handle (the trainer stops its children), and the process dies
with the trainer if the trainer is killed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import torch

from mbpo.config import EnvConfig
from mbpo.config.seeding import derive, seed_everything
from mbpo.errors import MbpoError
from mbpo.runtime.backends.forkserver import SERVER_BLOCKS, leave_the_fork_server_alone
from mbpo.runtime.collectors import CollectorSetup, CpuSinceLast, EnvStepper
from mbpo.runtime.proc_tree import exists
from mbpo.runtime.semaphores import name_semaphores_after
from mbpo.runtime.shared_ring import SharedRing
from mbpo.runtime.shared_weights import SharedWeights

__all__ = ["ChildSpec", "collector_main"]

PR_SET_PDEATHSIG = 1


@dataclass
class ChildSpec:
    """Everything a collector process is built from: plain, picklable data (checked before it starts)."""

    collector_id: int
    incarnation: int
    setup: CollectorSetup
    env: EnvConfig
    """The run's env config: ``env.id``, or ``env.factory`` (a name the child imports) and its kwargs."""
    env_device: str
    """A device string (``"cpu"``, ``"cuda:1"``), never a ``torch.device``."""
    env_seed: int
    action_seed: int
    trainer_pid: int = 0
    """The trainer's pid: a child whose parent is no longer it exits at once."""
    env_factory: Callable[[int, int, int], Any] | None = None
    """``(collector_id, incarnation, seed) -> VecEnv``, importable by the child (module-level); None: the env
    that ``env`` describes."""

    def build_env(self) -> Any:
        """The child's env, built in the child (so a CUDA context or simulator is its own)."""
        from mbpo.runtime.env_builder import build_env, collector_env_from

        if self.env_factory is not None:
            return collector_env_from(self.env_factory, self.collector_id, self.incarnation, self.env_seed,
                                      self.env_device, self.setup.num_envs)
        return build_env(self.env, self.setup.num_envs, self.env_device, self.env_seed)


def collector_main(spec: ChildSpec, conn: Connection, ring: SharedRing, weights: SharedWeights,
                   beats: torch.Tensor) -> None:
    """Entry point of the collector process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the trainer, which stops its children;
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SERVER_BLOCKS)  # blocked until now (the fork server's or _launch's)
    leave_the_fork_server_alone()
    _die_with_parent(spec.trainer_pid)
    name_semaphores_after(spec.trainer_pid)
    cid, setup = spec.collector_id, spec.setup
    torch.set_num_threads(setup.torch_threads)
    env = None
    try:
        from mbpo.agents import make_agent
        from mbpo.device.checks import check_transitions, switches

        if setup.debug:
            discrete = isinstance(setup.action_space, gym.spaces.Discrete)
            for line in switches(1, "process", discrete=discrete, in_collector=True):
                print(f"[mbpo debug] collector {cid} (pid {os.getpid()}): {line}", file=sys.stderr, flush=True)

        def beat() -> None:
            beats[cid] = time.monotonic()

        beat()
        seed_everything(derive(spec.env_seed, "globals"))  # before the env: a simulator may draw from them
        env = spec.build_env()
        seed = setup.stream_seed(spec.action_seed)
        policy = make_agent(setup.agent, setup.observation_space, setup.action_space, "cpu", seed)
        stepper = EnvStepper(cid, setup, env, policy, seed, beat)
        _to_trainer(conn, ("ready", os.getpid()))
        cpu_since_last = CpuSinceLast()
        while True:
            message = _from_trainer(conn)
            if message[0] == "stop":
                return
            _, first, granted, slot = message
            newest = weights.read(stepper.policy_version)
            if newest is not None:
                stepper.use_weights(*newest)
            batch = stepper.collect(first, granted // env.num_envs)
            if setup.debug:
                check_transitions(batch.data, f"collector {cid} -> ring slot {slot}", env.device, env.obs_dim,
                                  env.action_space)
            ring.write(slot, batch.data)
            _to_trainer(conn, ("batch", slot, batch.data.shape[0], batch.policy_version, batch.episode_returns,
                               batch.env_steps, batch.dropped_nonfinite, batch.created_at, batch.started_at,
                               batch.env_s, batch.act_s, batch.planned, cpu_since_last()))
    except TrainerGone:
        return  # the trainer is gone or has closed our pipe: nothing left to report to
    except BaseException as exc:  # noqa: BLE001 - reported to the trainer, which decides
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
        try:
            conn.send(("error", type(exc).__name__, str(exc), text, isinstance(exc, MbpoError)))
        except OSError:
            pass
        sys.exit(1)
    finally:
        if env is not None:
            env.close()


class TrainerGone(Exception):
    """The pipe to the trainer broke: it is gone, or closed our end. Apart from an env's own EOFError or
    BrokenPipeError (a simulator over a socket, a vector env whose worker died), which is reported.
    """


def _to_trainer(conn: Connection, message: tuple[Any, ...]) -> None:
    try:
        conn.send(message)
    except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
        raise TrainerGone from exc


def _from_trainer(conn: Connection) -> Any:
    try:
        return conn.recv()
    except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
        raise TrainerGone from exc


def _die_with_parent(trainer_pid: int) -> None:
    """Linux: SIGKILL this process when its parent dies (the fork server, which exits when the trainer does; or
    the trainer, which spawned it), so no collector outlives the trainer (a no-op elsewhere).
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    if os.getppid() != parent or not exists(trainer_pid):  # gone before the prctl took effect
        os._exit(1)
