"""A tiny async run: small nets, a few hundred env steps, seconds per test."""

from __future__ import annotations

import gc
import os
import re
import select
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from envs.faults import FaultyFactory
from mbpo.config import Config, load_config
from mbpo.runtime.semaphores import semaphore_files_of
from tests.conftest import only_learner, parametrized_with

if TYPE_CHECKING:
    from mbpo.runtime.collectors import CollectorBatch
    from mbpo.trainers import AsyncTrainer

TINY = [
    "total_env_steps=384", "eval_every=10000", "eval_episodes=2", "log_every=128", "progress=false",
    "agent.learning_starts=64", "agent.batch_size=32", "agent.sac.hidden_sizes=[32,32]",
    "agent.dqn.hidden_sizes=[32,32]", "runtime.collection_batch_size=32", "runtime.num_collectors=2",
    "runtime.publish_every=8", "runtime.collector_timeout_s=5", "runtime.shutdown_timeout_s=5",
    "checkpoint.every=100000", "device=cpu",
]


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., Config]:
    def make(*overrides: str, config: str | None = None) -> Config:
        cfg = load_config(config, only_learner([*TINY, f"run_dir={tmp_path / 'run'}", *overrides], config))
        return cfg

    return make


def faulty(fault: str, collectors: set[int], at_step: int = 3, **kw: object) -> FaultyFactory:
    """An env_factory whose first incarnation of the chosen collectors gets ``fault`` at ``at_step``
    (picklable, so it works with collector processes too).
    """
    return FaultyFactory(fault, tuple(sorted(collectors)), at_step, options=dict(kw))


LIBRARY_POOL = re.compile(r"ThreadPoolExecutor-\d+_\d+")
"""An unnamed ``concurrent.futures`` pool's thread. mbpo names every thread it starts; such a pool is a
library's (tensordict's and torch's keep one per process, started on first use), which lives as long as the
process does, so a test that happens to use it first in its xdist worker is not leaking it."""


@pytest.fixture
def thread_baseline(request: pytest.FixtureRequest) -> Iterator[int]:
    """The thread count before the test; the test must end with the same threads, less a library's pool (see
    LIBRARY_POOL). A ``ray`` run's module Ray is up first: its driver threads are the module's, not the run's.
    """
    if parametrized_with(request, "ray"):
        request.getfixturevalue("module_ray")
    before = set(threading.enumerate())
    yield len(before)
    new = [t.name for t in set(threading.enumerate()) - before if not LIBRARY_POOL.fullmatch(t.name)]
    assert not new, new


@pytest.fixture(params=["thread", "process"])
def backend(request: pytest.FixtureRequest) -> str:
    """Runs a test once per collector backend."""
    return str(request.param)


@pytest.fixture(params=["thread", "process", pytest.param("ray", marks=pytest.mark.slow)])
def every_backend(request: pytest.FixtureRequest) -> str:
    """Runs a test once per collector backend, Ray actors (on a private loopback Ray) too: for the guards whose
    code each backend's transport takes its own way. Ray is skipped, with the reason, only without its extra.
    """
    if request.param == "ray":
        request.getfixturevalue("module_ray")
    return str(request.param)


def wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    """Of ``pids`` (not this process's children), the ones still running after ``timeout_s`` seconds: a pidfd
    turns readable when its process ends (a zombie holds no resources, and init may never reap it here).
    """
    deadline, left = time.monotonic() + timeout_s, set()
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            if not select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))[0]:
                left.add(pid)
        finally:
            os.close(fd)
    return left


def run_shm_files(pids: Iterable[int], names: set[str]) -> set[str]:
    """Of the /dev/shm entries ``names``, those of the runs whose processes have ``pids``: their named semaphores
    (mbpo.runtime.semaphores names them after the trainer's pid) and torch's segments (``torch_<pid>_...``).
    What other processes on the machine hold (a training beside the tests) is not ours to check.
    """
    torch_files = {f"torch_{pid}_" for pid in pids}
    return ({n for pid in pids for n in semaphore_files_of(pid, names)}
            | {n for n in names if any(n.startswith(prefix) for prefix in torch_files)})


def shm_names() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """The test must end with no collector process alive and nothing of its run left in /dev/shm (a trainer
    here is this process: its run's files carry this pid). The semaphores of a run still alive are a leak too:
    each dies with the object that holds it, so a run that ended holds none.
    """
    import multiprocessing as mp

    import tqdm

    tqdm.tqdm.get_lock()  # tqdm's lock lives as long as the process: made now, it is not the test's
    before = run_shm_files([os.getpid()], shm_names())
    yield
    assert mp.active_children() == []
    gc.collect()  # a semaphore's file goes with the lock that holds it, once nothing refers to the trainer
    assert run_shm_files([os.getpid()], shm_names()) - before == set()


def snapshot_batches(trainer: AsyncTrainer, seen: list[CollectorBatch]) -> None:
    """Record a copy of every batch the trainer ingests (a process batch's data is a reused shared slot)."""
    import dataclasses

    ingest = trainer._ingest

    def spy(item: CollectorBatch) -> None:
        seen.append(dataclasses.replace(item, data=item.data.clone(), on_release=None))
        ingest(item)

    trainer._ingest = spy  # type: ignore[method-assign]  # a spy in place of the bound method
