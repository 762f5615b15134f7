"""runtime.backend=ray: collectors as Ray actors, on a private loopback Ray or a (two-node) cluster.

Skipped, with the reason, only where the ``ray`` extra is missing; ``./run_async_test.sh`` installs it
(the test extra pulls it in), so there they run.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from envs.faults import FaultyFactory
from mbpo.config import Config
from mbpo.runtime.collectors import CollectorBatch
from mbpo.runtime.proc_tree import alive, descendants
from mbpo.trainers import AsyncTrainer
from tests.conftest import WorkerRay
from tests.runtime.conftest import faulty

if TYPE_CHECKING:
    from mbpo.runtime.backends.ray import RayCollector

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
pytestmark = [pytest.mark.reliability, pytest.mark.timeout(180)]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def no_worker_ray() -> None:
    """These tests start (or refuse) a Ray of their own: the worker's shared one is stopped first."""
    WorkerRay.down()


def listening() -> dict[int, tuple[str, int]]:
    """socket inode -> (local address, port) of every listening TCP socket on this machine (from /proc/net)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                address, port = fields[1].split(":")
                found[int(fields[9])] = (address, int(port, 16))
    return found


def listening_of(pid: int) -> dict[int, tuple[int, str, int]]:
    """socket inode -> (holder pid, local address, port) of the listening TCP sockets that ``pid`` or a process
    below it holds: what a run started, not what another process on the machine (a training beside the tests, a
    Ray of another xdist worker that takes a freed port next) listens on.
    """
    held: dict[int, int] = {}
    for p in {pid} | descendants([pid]):
        try:
            for fd in Path(f"/proc/{p}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    held[int(target[8:-1])] = p
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return {inode: (held[inode], *address) for inode, address in listening().items() if inode in held}


def still_listening(opened: dict[int, tuple[int, str, int]]) -> dict[int, tuple[int, str, int]]:
    """Those of ``opened`` (from :func:`listening_of`) still listening: the same socket, not its port reused."""
    now = listening()
    return {inode: held for inode, held in opened.items() if inode in now}


def is_loopback(hex_address: str) -> bool:
    """127.0.0.1 in /proc/net/tcp (little-endian hex) or ::1 / ::ffff:127.0.0.1 in tcp6."""
    return hex_address in ("0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F")


def ray_children() -> dict[int, set[int]]:
    """The stop signals (SIGINT, SIGTERM) each of this process's Ray children blocks (from /proc)."""
    found = {}
    for d in Path("/proc").iterdir():
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) if d.name.isdigit() else -1
            if ppid != os.getpid() or b"ray" not in (d / "cmdline").read_bytes():
                continue
            mask = next(int(line.split()[1], 16) for line in (d / "status").read_text().splitlines()
                        if line.startswith("SigBlk:"))
        except (OSError, StopIteration):  # a process that ended meanwhile
            continue
        found[int(d.name)] = {int(s) for s in (signal.SIGINT, signal.SIGTERM) if mask >> (s - 1) & 1}
    return found


def test_without_ray_installed_the_run_stops_with_the_command_that_fixes_it(
        tiny_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch) -> None:
    from mbpo.errors import MbpoError

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    cfg = tiny_config("runtime.backend=ray")
    with pytest.raises(MbpoError, match=r"runtime.backend=ray needs Ray.*pip install -e \"\.\[ray\]\""):
        AsyncTrainer(cfg, cfg.run_dir)


def test_a_cluster_that_is_not_there_is_one_line_naming_the_key_and_how_to_start_one(
        tiny_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's own message names its --address flag; the run's names runtime.ray.address and `ray start`."""
    from mbpo.errors import MbpoError

    if ray.is_initialized():
        ray.shutdown()

    def no_cluster(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to by "
                              "setting `--address` flag or `RAY_ADDRESS` environment variable.")

    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = tiny_config("runtime.backend=ray", "runtime.ray.address=auto")
    with pytest.raises(MbpoError) as caught:
        AsyncTrainer(cfg, cfg.run_dir)
    assert str(caught.value).startswith("runtime.ray.address=auto: no running Ray was found (RAY_ADDRESS unset, none "
                                        "started on this machine); start one first (`ray start --head` here")


def test_a_private_ray_stops_without_waiting_on_the_sigterm_its_processes_block(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ray.shutdown sends each head process a SIGTERM and waits a second for it: ours block SIGTERM, so every run
    ended 5 s late, and Ray's agents outlived their raylet by seconds more. None is sent, and none is left.
    """
    from mbpo.runtime.backends.ray import start_private_ray, stop_private_ray

    terminated: list[int] = []
    terminate = subprocess.Popen.terminate
    monkeypatch.setattr(subprocess.Popen, "terminate", lambda self: (terminated.append(self.pid), terminate(self)))
    before = descendants([os.getpid()])
    saved = start_private_ray(ray, num_cpus=1)
    started = descendants([os.getpid()]) - before
    assert started
    stop_private_ray(ray, saved)
    assert terminated == [] and not ray.is_initialized()
    assert alive(started) == set()


def test_a_private_ray_is_its_own_beside_another_ray_listens_on_loopback_only_and_is_gone_after_the_run(
        tiny_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        thread_baseline: int) -> None:
    """Another Ray on this machine (a second run, a test worker beside this one), named by RAY_ADDRESS too: the
    run neither joins it (Ray's default for ray.init without an address) nor stops it. Its own Ray listens on
    loopback only, and its processes block SIGINT and SIGTERM: a signal to the run's process group (Ctrl-C, a
    scheduler's SIGTERM) reaches the trainer alone, which stops them after its final checkpoint (if raylet died
    with it, Ray's core worker would end the trainer with exit 1 first). Its session files are under the test
    session's RAY_TMPDIR (conftest), not the machine's /tmp/ray. One run checks both (a private Ray's start is
    the cost of each).
    """
    code = ("import ray, sys; ray.init(address='local', num_cpus=1, include_dashboard=False); "
            "print(ray.get_runtime_context().gcs_address, flush=True); sys.stdin.read(); ray.shutdown()")
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             start_new_session=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        assert other.stdout is not None
        address = other.stdout.readline().strip()
        assert address, "the other Ray did not start"
        monkeypatch.setenv("RAY_ADDRESS", address)
        cfg = tiny_config("runtime.backend=ray", "agent.utd_ratio=2", "runtime.num_collectors=1",
                          "total_env_steps=192")  # one actor: what is checked is the Ray's, not its actors
        trainer = AsyncTrainer(cfg, cfg.run_dir)
        ours = ray.get_runtime_context().gcs_address
        opened: list[dict[int, tuple[int, str, int]]] = []
        children: list[dict[int, set[int]]] = []
        sessions: list[Path] = []
        ingest = trainer._ingest

        def look_while_running(item: CollectorBatch) -> None:
            if not opened:  # the run's own: the other Ray is this process's child too
                theirs = listening_of(other.pid)
                opened.append({k: v for k, v in listening_of(os.getpid()).items() if k not in theirs})
                children.append({pid: s for pid, s in ray_children().items() if pid != other.pid})
                sessions.append(Path(ray._private.worker._global_node.get_session_dir_path()))
            ingest(item)

        trainer._ingest = look_while_running  # type: ignore[method-assign]  # a spy in place of the bound method
        row = trainer.run()
        assert ours != address and not ray.is_initialized()  # the run started its own and shut it down
        assert f"RAY_ADDRESS={address} is set, runtime.ray.address is not" in capsys.readouterr().err
        assert other.poll() is None  # the other Ray's driver is still there
        assert row["env_steps"] == 192 and len(trainer.buffer) == 192
        assert row["utd_ratio_realised"] == pytest.approx(2.0)
        assert opened[0] and all(is_loopback(address) for _, address, _ in opened[0].values()), opened[0]
        stop = {int(signal.SIGINT), int(signal.SIGTERM)}
        assert children[0] and all(blocked == stop for blocked in children[0].values()), children[0]
        assert sessions[0].is_relative_to(os.environ["RAY_TMPDIR"]), sessions[0]
        gc.collect()  # Ray objects no one holds any more
        assert still_listening(opened[0]) == {}
    finally:
        assert other.stdin is not None
        other.stdin.close()
        try:
            other.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(other.pid, signal.SIGKILL)
            other.wait()


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[str]:
    """One loopback Ray for the fault tests, joined by address (a joined Ray is left running)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    info = ray.init(address="local", num_cpus=3, include_dashboard=False, configure_logging=False)
    address = info.address_info["gcs_address"]
    yield address
    ray.shutdown()


@pytest.mark.parametrize("fault, said", [
    ("raise", "InjectedFault: injected fault at step 40"),
    ("sigkill", "actor died"),
])
def test_an_actor_that_raises_or_dies_is_restarted_from_the_newest_weights(
        tiny_config: Callable[..., Config], local_cluster: str, capsys: pytest.CaptureFixture[str],
        fault: str, said: str) -> None:
    cfg = tiny_config("runtime.backend=ray", f"runtime.ray.address={local_cluster}", "runtime.num_collectors=1")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty(fault, {0}, at_step=40))
    row = trainer.run()
    assert row["collector_restarts"] == 1 and row["env_steps"] == 384 and len(trainer.buffer) == 384
    assert said in capsys.readouterr().err
    assert trainer.pool.collectors[0].incarnation == 1 and trainer.pool.collectors[0].policy_version > 1
    assert ray.is_initialized()  # a joined cluster is left running


def test_a_hung_actor_is_killed_and_replaced(tiny_config: Callable[..., Config], local_cluster: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The run lasts until the hung actor was replaced and a batch came in after it (total_env_steps is only a
    bound): actors start seconds apart, and collector 0 could otherwise take a short budget alone.
    """
    cfg = tiny_config("runtime.backend=ray", f"runtime.ray.address={local_cluster}", "runtime.collector_timeout_s=4",
                      "total_env_steps=200000")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty("hang", {1}, at_step=40))
    ingest, replaced = trainer._ingest, []

    def stop_after_the_replacement(item: CollectorBatch) -> None:
        ingest(item)
        if replaced:
            trainer.stop_event.set()
        elif trainer.pool.restarts:
            replaced.append(True)

    trainer._ingest = stop_after_the_replacement  # type: ignore[method-assign]  # a spy in place of the bound method
    row = trainer.run()
    assert len(trainer.buffer) == row["env_steps"] < 200000 and row["collector_restarts"] == 1
    assert "collector 1 is hung" in capsys.readouterr().err


def test_an_actor_imports_env_factory_by_name_and_builds_it_with_env_kwargs(
        tiny_config: Callable[..., Config], local_cluster: str) -> None:
    """A 3-d PointReach (6-wide observations) in the actor: the name and env.kwargs reached it, nothing else."""
    cfg = tiny_config("runtime.backend=ray", f"runtime.ray.address={local_cluster}", "runtime.num_collectors=1",
                      "env.id=PointReach", "env.factory=examples.point_reach:make_env", "env.kwargs.dim=3",
                      "env.num_envs=2", "total_env_steps=192")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    spec = cast("RayCollector", trainer.pool.collectors[0]).spec
    assert spec.env_factory is None and spec.env.factory == "examples.point_reach:make_env"
    row = trainer.run()
    assert row["env_steps"] == 192 and row["collector_restarts"] == 0 and trainer.buffer[:]["obs"].shape[-1] == 6
    assert sum(trainer._collector_cpu_s) > 0  # the actor's CPU seconds, sent with its batches, are in cpu_s


def test_two_nodes_both_collect_and_the_run_survives_losing_one(tiny_config: Callable[..., Config]) -> None:
    """Two raylets on this machine (1 CPU each), one collector on each; a node is removed once both have
    delivered data, and the run goes on with that collector restarted on the remaining node. Every env is a slow
    one (20 ms a step, replacements too): the run lasts as long as the replacement's start, and without the pace
    the collectors and the learner trained flat out meanwhile (thousands of updates no assertion reads).
    """
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()  # the module's one-node Ray (local_cluster) is done with
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        cfg = tiny_config("runtime.backend=ray", f"runtime.ray.address={cluster.address}",
                          "runtime.ray.num_cpus_per_collector=0.5", "total_env_steps=100000")
        paced = FaultyFactory("slow", (0, 1), at_step=1, every_incarnation=True, options={"delay_s": 0.02})
        trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=paced)
        nodes_seen: set[str] = set()
        ingest, removed, after = trainer._ingest, [], []

        def remove_a_node_once_both_produced(item: CollectorBatch) -> None:
            ingest(item)
            collector = cast("RayCollector", trainer.pool.collectors[item.collector_id])  # runtime.backend=ray
            nodes_seen.update(collector.node_ids)
            if len(nodes_seen) == 2 and not removed:
                removed.append(True)
                cluster.remove_node(worker)
            elif removed and collector.incarnation == 1:
                after.append(item)  # the replacement delivers: enough, stop as Ctrl-C would
                trainer.stop_event.set()

        trainer._ingest = remove_a_node_once_both_produced  # type: ignore[method-assign]  # a spy on ingestion
        row = trainer.run()
        assert removed and len(nodes_seen) == 2 and after
        assert row["collector_restarts"] == 1 and len(trainer.buffer) == row["env_steps"]
        survivor = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        collectors = [trainer.pool.collectors[i] for i in (0, 1)]
        assert all(c.node_ids <= survivor for c in collectors if c.incarnation)
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_stop_a_ray_run_with_a_checkpoint(tmp_path: Path, signum: int, code: int) -> None:
    # one actor: a stop is the trainer's, and what the group's signal must not reach is Ray's head processes
    proc = subprocess.Popen([sys.executable, "-m", "tests.runtime.process_run", str(tmp_path / "run"),
                             "runtime.backend=ray", "runtime.num_collectors=1", "total_env_steps=100000"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "progress":
            break
    opened = listening_of(proc.pid)  # the private Ray's, as the run holds them
    assert opened, "a ray run that listens on nothing: the check below could not fail"
    os.killpg(proc.pid, signum)
    out, err = proc.communicate(timeout=120)
    # Ray's head processes share the run's process group and stdout: a signalled one may print a traceback
    # after the run's result line, so look for that line rather than take the last.
    lines = [line for line in out.splitlines() if line.startswith('{"') and '"exit_code"' in line]
    assert lines, f"no result line; exit code {proc.returncode}; stdout: {out[-2000:]}; stderr: {err[-3000:]}"
    result = json.loads(lines[-1])
    assert proc.returncode == code and result["exit_code"] == code, err[-3000:]
    ckpts = sorted((tmp_path / "run/checkpoints").glob("ckpt_*.pt"))
    assert ckpts and ckpts[-1].name == f"ckpt_{result['env_steps']:012d}.pt"
    assert still_listening(opened) == {}  # the private Ray it started is gone



def test_an_actor_runs_the_batches_in_the_order_asked_whichever_call_starts_first() -> None:
    """Ray may start the later of two asked-for batches first (the earlier waits for its weights' object): that
    batch acted with older weights, and errors named another env step. Without Ray: the actor's method as Ray's
    two threads would call it, the later turn first.
    """
    import threading
    from types import SimpleNamespace

    import torch
    from tensordict import TensorDict

    from mbpo.runtime.backends.ray_actor import CollectorActor

    ran: list[int] = []

    def collect(first: int, vector_steps: int) -> SimpleNamespace:
        ran.append(first)
        return SimpleNamespace(data=TensorDict({"obs": torch.zeros(2, 1)}, batch_size=[2]), policy_version=0,
                               episode_returns=[], env_steps=2, dropped_nonfinite=0, created_at=1.0, started_at=0.0,
                               env_s=0.0, act_s=0.0, planned=0)

    actor = CollectorActor.__new__(CollectorActor)  # its env and policy are not what this is about
    actor._turn, actor._turns = 0, threading.Condition()
    actor.stepper = SimpleNamespace(collect=collect, use_weights=lambda version, weights: None)  # type: ignore
    actor.env = SimpleNamespace(num_envs=2)
    actor.spec = SimpleNamespace(setup=SimpleNamespace(debug=False))  # type: ignore[assignment]
    actor._cpu_since_last = lambda: 0.0  # type: ignore[assignment,method-assign]
    later = threading.Thread(target=actor.collect, args=(1, 2, 2, 0, None))
    later.start()
    later.join(0.2)  # it waits for the earlier turn
    assert later.is_alive() and ran == []
    actor.collect(0, 0, 2, 0, None)
    later.join(10)
    assert ran == [0, 2] and actor._turn == 2
