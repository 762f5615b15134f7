"""Shared fixtures and marker handling for the mbpo test suite."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from mbpo.runtime.backends.forkserver import ForkServerLease

FAKE_ISAACLAB = Path(__file__).parent / "envs" / "fake_isaaclab"


def only_learner(overrides: Sequence[str], config: str | Path | None = None) -> list[str]:
    """``overrides`` less the keys of the learner the run does not use (agent.sac.* for agent.name=dqn, which the
    config refuses), so one list of small-net overrides serves both learners. The learner is the last
    ``agent.name=`` override, else the config file's, else the default's.
    """
    from mbpo.config import load_config
    from mbpo.config.validation import learner_keys

    names = [o.split("=", 1)[1] for o in overrides if o.startswith("agent.name=")]
    name = names[-1] if names else load_config(config).agent.name
    unused = {key for key, (learner, _) in learner_keys().items() if learner != name}
    return [o for o in overrides if o.split("=", 1)[0] not in unused]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests skip cleanly, with the reason, on a machine without CUDA."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; torch.cuda.is_available() is False here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


SET_FOR_GOOD = {"RAY_AUTH_MODE"}
"""Variables a library sets together with process state it keeps: the first local ``ray.init`` in a process sets
``RAY_AUTH_MODE=token`` and caches token mode in its C++ config for the process's life. Removed, the Ray nodes a
later test starts from this process (``ray.cluster_utils.Cluster``) ran without tokens, the driver refused their
calls ("Missing authorization header"), and every actor was destroyed before it started."""


@pytest.fixture(autouse=True)
def environment_restored() -> Iterator[None]:
    """What a test writes to ``os.environ`` is undone after it, so the next test in the worker, and the processes
    it spawns, start from the same environment whatever ran before. Product code sets variables for good
    (``envs.offscreen.headless_gl``'s ``MUJOCO_GL``), and ``monkeypatch.delenv`` of an unset variable records
    nothing to restore: a ``MUJOCO_GL=egl`` left by one test once made every spawned collector of later tests
    die importing torchrl (which imports mujoco) on a GPU machine without libEGL.
    """
    before = dict(os.environ)
    yield
    for name in set(os.environ) - set(before) - SET_FOR_GOOD:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


TRAINER_RUNS: dict[str, list[str]] = {
    "sync": ["trainer=sync"], "thread": ["trainer=async", "runtime.backend=thread"],
    "process": ["trainer=async", "runtime.backend=process"], "ray": ["trainer=async", "runtime.backend=ray"]}
"""Each trainer and collector backend as overrides: a guard added to one must hold on all of them."""


@pytest.fixture(params=list(TRAINER_RUNS))
def trainer_run(request: pytest.FixtureRequest) -> str:
    """Runs a test once per trainer and backend (a key of TRAINER_RUNS); Ray is skipped, with the reason, only
    where its extra is missing.
    """
    if request.param == "ray":
        request.getfixturevalue("module_ray")
    return str(request.param)


class WorkerRay:
    """One private loopback Ray per xdist worker that in-process ``ray`` runs join, as a run joins a Ray already
    initialized in its process, instead of each starting and stopping its own (about 4 s of 2 cores a start).
    Started by the first test that asks for it (:func:`module_ray`), stopped at the session's end, or before a
    test that needs no Ray in its process (tests/runtime/test_ray_backend.py: what a run's own private Ray does,
    loopback only, gone after the run, the signals), and started again by the next test that asks.
    """

    saved: tuple[str | None, bool] | None = None

    @classmethod
    def up(cls) -> None:
        ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
        from mbpo.runtime.backends.ray import start_private_ray

        if cls.saved is not None and not ray.is_initialized():  # shut down by a test: its failure, not the next's
            cls.down()
        if cls.saved is None:
            assert not ray.is_initialized(), "a Ray left initialized by an earlier test"
            cls.saved = start_private_ray(ray, num_cpus=8)  # logical CPUs: room for every run's collectors

    @classmethod
    def down(cls) -> None:
        if cls.saved is not None:
            import ray

            from mbpo.runtime.backends.ray import stop_private_ray

            saved, cls.saved = cls.saved, None
            stop_private_ray(ray, saved)


@pytest.fixture(scope="module")
def module_ray() -> None:
    """The worker's Ray (:class:`WorkerRay`), up from the first test of the module that asks for it (the variables
    ``ray.init`` set are then undone after that test, as any test's are: Ray's processes read them at start, and
    nothing reads them since); skipped, with the reason, only where the ray extra is missing.
    """
    WorkerRay.up()


class WorkerForkServer:
    """One fork server per xdist worker that the in-process ``process`` runs of the tests parametrized by backend
    share, as two runs of one process share it (:class:`mbpo.runtime.backends.forkserver.ForkServerLease`), instead
    of each starting and stopping its own (about 3 s of CPU a start, torch's and tensordict's imports: a tenth of
    the suite). It holds a lease of its own, taken before the test's body, so it starts from the environment every
    test starts from. Stopped before a test reading what collectors print (``capfd``: a server started before the
    test writes past its capture), for tests/runtime/test_process_backend.py (what a run's own server inherits,
    its death, nothing left after the run) and at the session's end.
    """

    lease: ForkServerLease | None = None

    @classmethod
    def up(cls) -> None:
        from mbpo.runtime.backends.forkserver import ForkServerLease

        if cls.lease is None:
            cls.lease = ForkServerLease()
        cls.lease.start()  # again where a test's run killed it

    @classmethod
    def down(cls) -> None:
        if cls.lease is not None:
            lease, cls.lease = cls.lease, None
            lease.release()


def parametrized_with(request: pytest.FixtureRequest, value: str) -> bool:
    """Whether one of the test's parameters is ``value`` (a string; other parameters may be arrays)."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    return any(isinstance(v, str) and v == value for v in params.values())


@pytest.fixture(autouse=True)
def fork_server_of_the_worker(request: pytest.FixtureRequest) -> None:
    """The worker's fork server (:class:`WorkerForkServer`) up for a test parametrized with the process backend,
    stopped for one that reads collectors' output; other tests leave it as it is.
    """
    if "capfd" in request.fixturenames:
        WorkerForkServer.down()
    elif parametrized_with(request, "process"):
        WorkerForkServer.up()


@pytest.fixture(scope="session", autouse=True)
def worker_fork_server_stopped_at_the_end() -> Iterator[None]:
    yield
    WorkerForkServer.down()


@pytest.fixture(scope="session", autouse=True)
def ray_session_files_in_a_temp_dir() -> Iterator[Path]:
    """Every Ray the session starts (the worker's, a run's private one, those of the subprocesses it runs, which
    inherit the variable) keeps its session files (logs, sockets, about 240 KB a start) under a directory of this
    session's own, removed at its end, instead of adding a ``session_*`` to the machine's ``/tmp/ray`` for good
    (a thousand of them after a few full runs). Under /tmp, where Ray puts them by default, not under TMPDIR: Ray's
    socket paths below it must stay under 108 bytes, and a long TMPDIR (a cluster job's, macOS's) would overflow.
    """
    temp = Path(tempfile.mkdtemp(prefix="mbpo-ray-", dir="/tmp" if os.path.isdir("/tmp") else None))
    os.environ["RAY_TMPDIR"] = str(temp)
    try:
        yield temp
    finally:
        os.environ.pop("RAY_TMPDIR", None)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def worker_ray_stopped_at_the_end(ray_session_files_in_a_temp_dir: Path) -> Iterator[None]:
    """After the worker's Ray, which needs its session files until it stops."""
    yield
    WorkerRay.down()


@pytest.fixture
def cuda_device() -> str:
    """The first CUDA device, as a string (gpu-marked tests only)."""
    return "cuda:0"


@pytest.fixture(autouse=True)
def one_torch_thread() -> None:
    """Tests share 2 cores with whatever else runs: oversubscribed intra-op pools are 100x slower."""
    torch.set_num_threads(1)


@pytest.fixture
def fake_isaaclab(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Test doubles of Isaac Lab's modules importable (also by spawned children, which copy ``sys.path``); none
    left imported afterwards, so each test starts its own app.
    """
    monkeypatch.syspath_prepend(str(FAKE_ISAACLAB))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] in ("isaaclab", "isaaclab_tasks", "isaaclab_rl")]:
        del sys.modules[name]
    import gymnasium as gym

    gym.registry.pop("Isaac-Fake-Cartpole-v0", None)
    import examples.isaaclab_env as recipe

    recipe._app = None
