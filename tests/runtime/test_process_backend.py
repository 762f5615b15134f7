"""runtime.backend=process: plain data into children, no torn weights, deaths seen fast, nothing left behind.

The fault tests shared with the thread backend are parametrized over both in
test_faults.py and test_async_trainer.py; these are the ones only processes
have: refusing what must not cross, the seqlock under a racing writer, exits
and SIGKILLs, and a run in its own interpreter checked for orphans, shared
memory and leaked semaphores after it exits.
"""

from __future__ import annotations

import functools
import json
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch

import envs
from mbpo.config import Config
from mbpo.runtime.backends.process import ProcessCollector
from mbpo.runtime.collectors import CpuSinceLast
from mbpo.runtime.handoff import NotPlainError, check_plain
from mbpo.runtime.proc_tree import descendants
from mbpo.runtime.shared_weights import READ_TIMEOUT_S, STARVED_AFTER, SharedWeights, _unlock
from mbpo.trainers import AsyncTrainer
from tests.conftest import WorkerForkServer
from tests.runtime.conftest import faulty, run_shm_files, shm_names, wait_gone
from tests.runtime.weights_reader import read_snapshots

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]


@pytest.fixture(scope="module", autouse=True)
def no_worker_fork_server() -> None:
    """These tests are about a run's own fork server: the worker's shared one is stopped first."""
    WorkerForkServer.down()


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value, says", [
    (torch.empty(2, device="meta"), "is a tensor on meta; a CUDA tensor must never cross"),
    (torch.device("cpu"), "send the device string 'cpu' instead"),
    (threading.Lock(), "only works within one process; use the spawn context's"),
    (threading.Event(), "only works within one process"),
    (threading.Condition(), "only works within one process"),
    (torch.nn.Linear(2, 2), "is an nn.Module (Linear); send a CPU state_dict snapshot"),
    (lambda seed: seed, "a lambda or a local function cannot be sent to a spawned process"),
])
def test_what_may_not_cross_into_a_child_is_refused_naming_the_field(value: object, says: str) -> None:
    with pytest.raises(NotPlainError) as info:
        check_plain({"options": {"factory": value}}, "spec")
    assert str(info.value).startswith("spec['options']['factory'] ") and says in str(info.value)


def test_a_live_env_is_refused_and_plain_data_passes() -> None:
    from mbpo.config import AgentConfig
    from mbpo.runtime.collectors import CollectorSetup

    env = envs.make("Pendulum-v1", 1)
    with pytest.raises(NotPlainError, match=r"spec\[0\] is a live env \(ClassicVecEnv\); send its id"):
        check_plain([env], "spec")
    setup = CollectorSetup(AgentConfig(), env.observation_space, env.action_space, 1, 8, 0)
    check_plain({"setup": setup, "device": "cuda:1", "seed": 3, "cpu": torch.zeros(3),
                 "factory": faulty("raise", {0})}, "spec")


@pytest.mark.gpu
def test_a_cuda_tensor_is_refused(cuda_device: str) -> None:
    with pytest.raises(NotPlainError, match="a CUDA tensor must never cross"):
        check_plain({"w": torch.zeros(2, device=cuda_device)}, "snapshot")


def test_a_process_run_with_a_local_env_factory_stops_before_any_child_starts(
        tiny_config: Callable[..., Config], no_leaks: None) -> None:
    def local_factory(collector_id: int, incarnation: int, seed: int) -> envs.VecEnv:
        return envs.make("Pendulum-v1", 1, seed=seed)

    cfg = tiny_config("runtime.backend=process")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=local_factory)
    match = r"collector 0's spec.env_factory \(function\) cannot be sent.*module level"
    with pytest.raises(NotPlainError, match=match):
        trainer.run()


@pytest.mark.parametrize("fails", ["server", "fork"])
def test_a_collector_that_cannot_be_started_is_the_runs_error_and_the_run_closes(
        tiny_config: Callable[..., Config], no_leaks: None, monkeypatch: pytest.MonkeyPatch, fails: str) -> None:
    """The fork server cannot start (a TMPDIR too long for its socket's path) or the fork fails: that error ends
    the run, not an AttributeError from closing a collector that never started, and the run lets go of the server.
    """
    from mbpo.runtime.backends import forkserver

    def cannot_start(*args: object) -> None:
        raise OSError("AF_UNIX path too long")

    if fails == "server":
        monkeypatch.setattr(forkserver, "start_server", cannot_start)
    else:
        monkeypatch.setattr(mp.process.BaseProcess, "start", cannot_start)
    cfg = tiny_config("runtime.backend=process")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    with pytest.raises(OSError, match="AF_UNIX path too long"):
        trainer.run()
    assert forkserver.ForkServerLease._holders == 0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("runs", ["trainer", "cli"])
def test_a_script_without_a_main_guard_is_named_and_no_collector_is_restarted(tmp_path: Path, runs: str) -> None:
    """A collector process imports the script again; one that builds its trainer at its top level built a second
    trainer there (which failed on the run dir in use): "exited with code 1", three restarts, then a traceback.
    A script that calls ``mbpo.cli.main`` met the run dir's lock before any trainer was built: the same.
    """
    overrides = ['runtime.backend=process', 'progress=false', 'eval_every=400', 'total_env_steps=400',
                 f'run_dir={tmp_path / "run"}']
    script = tmp_path / "train.py"
    script.write_text("from mbpo.config import load_config\nfrom mbpo.trainers import AsyncTrainer\n"
                      f"cfg = load_config(None, {overrides!r})\nAsyncTrainer(cfg, cfg.run_dir).run()\n"
                      if runs == "trainer" else
                      f"import sys\nfrom mbpo.cli import main\nsys.exit(main(['train', *{overrides!r}]))\n")
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=80)
    last = out.stderr.strip().splitlines()[-1]
    expected = "process starts each collector by importing your script"
    if runs == "trainer":
        assert out.returncode == 1 and last.startswith(f"mbpo.runtime.main_guard.UnguardedMainError: runtime.backend="
                                                       f"{expected}"), out.stderr[-3000:]
    else:  # the command line's form of a user's mistake: one line, exit 2
        assert out.returncode == 2 and last.startswith(f"error: runtime.backend={expected}"), out.stderr[-3000:]
    assert 'if __name__ == "__main__":' in last and "restarting it" not in out.stderr, out.stderr[-3000:]
    assert "RunDirBusyError" not in out.stderr, out.stderr[-3000:]


GUARDED_FACTORY = """
import sys
import envs
from mbpo.config import load_config
from mbpo.trainers import make_trainer

{top}
if __name__ == "__main__":
{guarded}
    cfg = load_config(None, ["runtime.backend=process", "progress=false", "eval_every=400", "total_env_steps=400",
                             "model.enabled=false", "run_dir=" + sys.argv[-1]])
    make_trainer(cfg, cfg.run_dir, env_factory=factory).run()
"""
FACTORY = """def factory(collector_id, incarnation, seed):
    return envs.make("Pendulum-v1", 1, seed=seed)
"""


@pytest.mark.timeout(90)
def test_a_factory_a_collector_process_cannot_import_is_named_before_any_child_starts(tmp_path: Path) -> None:
    """A child imports the script again by its path, its guarded block skipped: a factory defined there failed
    each child (AttributeError) until the restart budget was spent. One error, naming where the factory is,
    before any child starts. (``python -c`` and stdin: the test below, in this process.)
    """
    guarded = "\n".join("    " + line for line in FACTORY.splitlines())
    script = tmp_path / "train.py"
    script.write_text(GUARDED_FACTORY.format(top="", guarded=guarded))
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], cwd=REPO, capture_output=True,
                         text=True, timeout=80)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 1 and last.startswith(
        "mbpo.runtime.main_guard.MainNotImportableError: runtime.backend=process: env_factory factory is defined in "
        f'{script} under `if __name__ == "__main__":`'), out.stderr[-3000:]
    assert "restarting it" not in out.stderr and "runtime.backend=thread" in last, out.stderr[-3000:]


@pytest.mark.parametrize("how", ["python -c", "stdin"])
def test_an_interactive_factory_or_a_script_read_from_stdin_is_named(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -c`` (a REPL, a notebook): no file for a child to import the factory from; stdin: a child runs
    ``<stdin>`` again by its path (FileNotFoundError), factory or not.
    """
    import types

    from mbpo.runtime.main_guard import MainNotImportableError, check_children_can_import_main

    main = types.ModuleType("__main__")
    if how == "stdin":
        main.__file__ = "<stdin>"
    monkeypatch.setitem(sys.modules, "__main__", main)

    def factory() -> None:
        pass
    factory.__module__, factory.__qualname__ = "__main__", "factory"
    where = {"python -c": "env_factory factory is defined in an interactive __main__ (python -c, a REPL, a notebook)",
             "stdin": "this program runs from <stdin>, which each collector process runs again"}[how]
    with pytest.raises(MainNotImportableError, match=rf"^runtime\.backend=process: {re.escape(where)}.*"
                                                     r"runtime\.backend=thread$"):
        check_children_can_import_main(None if how == "stdin" else factory)


def test_a_factory_at_a_scripts_top_level_or_in_its_other_blocks_is_importable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the child does define passes: top level, a top-level try, match or with, the guard's else branch; a
    package's __main__ (python -m pkg), which a child never imports, does not.
    """
    import types

    from mbpo.runtime.main_guard import MainNotImportableError, check_children_can_import_main

    script = tmp_path / "train.py"
    script.write_text("try:\n    def in_try(): pass\nexcept ImportError:\n    pass\n"
                      "def top(): pass\n"
                      "match 1:\n    case 1:\n        def in_match(): pass\n"
                      "with open(__file__) as in_with:\n    pass\n"
                      "if __name__ == '__main__':\n    def guarded(): pass\nelse:\n    def in_else(): pass\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)

    def named(name: str) -> Callable[..., None]:
        def f() -> None:
            pass
        f.__module__, f.__qualname__ = "__main__", name
        return f

    for name in ("top", "in_try", "in_else", "in_match", "in_with", "<lambda>"):  # a lambda: check_plain's to name
        check_children_can_import_main(named(name))
    with pytest.raises(MainNotImportableError, match="env_factory guarded is defined in"):
        check_children_can_import_main(named("guarded"))
    check_children_can_import_main(functools.partial(named("top"), 1))  # a partial: its function is imported
    main.__spec__ = types.SimpleNamespace(name="mypkg.__main__")  # type: ignore[assignment]  # python -m mypkg
    with pytest.raises(MainNotImportableError, match=r"env_factory top is defined in mypkg\.__main__, the __main__ "
                                                     r"module of a package run as a program, which a collector"):
        check_children_can_import_main(named("top"))


def test_a_collector_process_sees_the_trainers_environment_and_stderr_at_its_runs_start(
        tiny_config: Callable[..., Config], tmp_path: Path, no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forked from a fork server started by an earlier run of the process, a collector saw the environment and
    stderr that run started with: a variable set since (CUDA_VISIBLE_DEVICES, MUJOCO_GL) and a redirected stderr
    did not reach it. Each run has its own server, started with what the trainer has at the run's start.
    """
    cfg = tiny_config("runtime.backend=process", "runtime.num_collectors=1", "total_env_steps=128")
    AsyncTrainer(cfg, cfg.run_dir).run()
    monkeypatch.setenv("MBPO_PROBE", "set after the server started")
    cfg = tiny_config("runtime.backend=process", "runtime.num_collectors=1", "total_env_steps=128",
                      "env.factory=tests.envs.factories:reports_where_it_runs", "env.id=Probe-v0",
                      f"run_dir={tmp_path / 'second'}")
    redirected = tmp_path / "stderr.txt"
    saved = os.dup(2)
    try:
        with open(redirected, "w") as f:
            os.dup2(f.fileno(), 2)
        trainer = AsyncTrainer(cfg, cfg.run_dir)
        trainer.run()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    lines = [line for line in redirected.read_text().splitlines() if line.startswith("[probe] pid ")]
    children = [line for line in lines if not line.startswith(f"[probe] pid {os.getpid()} ")]
    assert children and all(line.endswith("MBPO_PROBE=set after the server started") for line in children), lines


def test_collector_processes_seed_their_global_generators_each_from_its_own_stream(
        tiny_config: Callable[..., Config], tmp_path: Path) -> None:
    """Forked from one server, every collector process (and every restart) drew alike from numpy's and torch's
    globals, from the server's import-time state: two collectors stepped identical episodes of a simulator that
    draws from them, and two runs with one seed differed.
    """
    def draws(run: str) -> list[str]:
        cfg = tiny_config("runtime.backend=process", "runtime.num_collectors=2", "total_env_steps=64",
                          "env.factory=tests.envs.factories:reports_global_draws", "env.id=Globals-v0",
                          f"run_dir={tmp_path / run}")
        redirected = tmp_path / f"{run}.txt"
        saved = os.dup(2)
        try:
            with open(redirected, "w") as f:
                os.dup2(f.fileno(), 2)
            AsyncTrainer(cfg, cfg.run_dir).run()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        lines = redirected.read_text().splitlines()
        return sorted(line.split(" ", 3)[3] for line in lines
                      if line.startswith("[globals] pid ") and not line.startswith(f"[globals] pid {os.getpid()} "))

    first = draws("first")
    assert len(first) == 2 and first[0] != first[1]  # one draw per collector, each its own
    assert draws("again") == first  # and the run's seed repeats them


@pytest.mark.parametrize("name, exits", [("mbpo-collector-0.0", True), ("SpawnPoolWorker-1", False),
                                         ("MainProcess", False)])
def test_only_a_collector_process_that_imports_main_exits_78(
        name: str, exits: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another library's spawned child (a process pool's) keeps Python's own message about the missing guard."""
    from mbpo.runtime.main_guard import UNGUARDED_MAIN_EXIT, exit_if_a_child_imports_main

    child = mp.current_process()
    monkeypatch.setattr(child, "_inheriting", True, raising=False)
    monkeypatch.setattr(child, "name", name)
    exited_with: list[int] = []
    monkeypatch.setattr(os, "_exit", exited_with.append)  # os._exit: a fork server's child ends SystemExit with 1
    exit_if_a_child_imports_main()
    assert exited_with == ([UNGUARDED_MAIN_EXIT] if exits else [])


@pytest.mark.timeout(60)
def test_a_sac_collector_child_starts_without_torchrl() -> None:
    """What a SAC collector process or Ray actor imports to build its env and policy leaves torchrl out: its
    replay buffers and losses are the trainer's, and importing them took 0.7 s of every child's start (and
    restart). A fresh interpreter, as a spawned child is.
    """
    code = ("import sys, mbpo.runtime.backends.child, mbpo.runtime.backends.ray_actor, mbpo.runtime.env_builder;"
            "from mbpo.agents import make_agent; import mbpo.agents.sac;"
            "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('torchrl')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_a_child_never_reads_a_half_written_snapshot() -> None:
    """The learner publishes all-zero and all-one weights alternately, as fast as it can, while two
    children read: every snapshot a child gets is all zeros or all ones (the sequence check retries the
    rest). Zeros and ones alternate per buffer, so a copy overtaken by a write would show a mix.
    """
    ctx = mp.get_context("spawn")
    template = {"actor": {"w": torch.zeros(1 << 18)}, "epsilon": 0.0, "num_updates": 0}
    weights = SharedWeights(template, ctx)
    weights.write(1, template)
    stop = threading.Event()

    def publish() -> None:
        version = 1
        while not stop.is_set():
            version += 1
            value = float(version // 2 % 2)  # each of the two buffers gets zeros and ones in turn
            weights.write(version, {"actor": {"w": torch.full((1 << 18,), value)}, "epsilon": value,
                                    "num_updates": version})

    writer = threading.Thread(target=publish)
    pipes = [ctx.Pipe() for _ in range(2)]
    # 50 reads each: with the copy's sequence check taken out, a mix shows in about one read in four (200 reads
    # only lengthened the race, most of the test's CPU)
    children = [ctx.Process(target=read_snapshots, args=(weights, 50, child)) for _, child in pipes]
    try:
        for p in children:
            p.start()
        for _, child in pipes:
            child.close()  # the children hold their ends: one that dies is an EOFError here, not a hang
        assert [parent.recv() for parent, _ in pipes] == ["ready", "ready"]
        writer.start()
        for parent, _ in pipes:
            parent.send("go")
        mixed = [parent.recv() for parent, _ in pipes]
    finally:
        stop.set()
        if writer.ident is not None:
            writer.join()
        for p in children:
            p.join(30)
    assert mixed == [0, 0]
    assert all(p.exitcode == 0 for p in children)


@pytest.mark.timeout(60)
def test_a_reader_overtaken_again_and_again_holds_the_writer_off_until_it_has_its_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A learner that publishes faster than a reader copies (16 cores and a tight loop on a lent H100 timed this
    file's child readers out) overtakes every copy. Here the writer publishes twice during every copy the reader
    makes. After STARVED_AFTER overtaken copies the reader says so, the writer skips its publications (it never
    waits), the reader gets a whole snapshot, and publishing resumes.
    """
    weights = SharedWeights({"w": torch.zeros(4)}, mp.get_context("spawn"))
    versions = iter(range(1, 10_000))

    def publish() -> None:
        version = next(versions)
        weights.write(version, {"w": torch.full((4,), float(version))})

    publish()
    copy = weights._copy

    def overtaken_copy(buffer: int) -> dict[str, torch.Tensor]:
        out = copy(buffer)
        publish()
        publish()  # two publications during the copy: the buffer it read may have been rewritten
        return out

    monkeypatch.setattr(weights, "_copy", overtaken_copy)
    read = weights.read(-1, timeout=10.0)
    assert read is not None
    version, snapshot = read
    assert bool((snapshot["w"] == float(version)).all())  # one whole publication
    assert weights.skipped == 2 and weights._read_meta()[5] == 0  # the copy that succeeded held two off
    assert version == 1 + 2 * STARVED_AFTER  # the newest before the reader asked
    publish()
    assert weights.version == version + 3  # publishing resumed once the reader had its copy


def test_a_hold_whose_reader_died_waiting_ends_once_no_live_reader_could_still_wait() -> None:
    """A collector killed while it held the writer off (the OOM killer, an external kill) froze the weights every
    later collector read for the rest of the run, without a word.
    """
    weights = SharedWeights({"w": torch.zeros(4)}, mp.get_context("spawn"))
    weights.write(1, {"w": torch.ones(4)})
    slow = weights._ask_to_hold()  # a reader asks, and is killed (or only very slow) before it ends its hold
    weights.write(2, {"w": torch.full((4,), 2.0)})
    assert weights.version == 1 and weights.skipped == 1  # held, while a live reader could still be waiting
    weights._meta[6] -= int(READ_TIMEOUT_S * 1e9)  # as long ago as a live reader waits at most
    weights.write(3, {"w": torch.full((4,), 3.0)})
    assert weights.version == 3 and weights.expired_holds == 1 and weights._read_meta()[5] == 0
    newer = weights._ask_to_hold()  # another reader asks; then the slow one ends its expired hold, late
    weights._end_hold(slow)
    weights.write(4, {"w": torch.full((4,), 4.0)})
    assert weights.version == 3  # the new reader's hold holds
    weights._end_hold(newer)
    weights.write(5, {"w": torch.full((4,), 5.0)})
    assert weights.version == 5


def test_a_lock_holder_taken_for_dead_after_a_long_wait_releases_without_an_error() -> None:
    """A holder descheduled past STUCK_LOCK_S on a loaded machine has its lock released by the next process that
    wants it; its own release then raised 'released too many times' (in the learner, the run's end).
    """
    weights = SharedWeights({"w": torch.zeros(4)}, mp.get_context("spawn"))
    held = weights._locked()  # the learner, about to be descheduled inside the lock
    reader = threading.Thread(target=weights._read_meta)
    reader.start()
    reader.join(10)  # it waits STUCK_LOCK_S, takes the lock for the holder's, reads and releases
    assert not reader.is_alive()
    _unlock(held)  # the holder wakes and releases: no error
    weights.write(1, {"w": torch.ones(4)})
    assert weights.version == 1


@pytest.mark.parametrize("fault, how", [("exit", "exited with code 3"), ("sigkill", "was killed by SIGKILL")])
def test_a_collector_process_that_dies_is_seen_by_its_pipe_closing_and_restarted(
    tiny_config: Callable[..., Config], thread_baseline: int, no_leaks: None, capsys: pytest.CaptureFixture[str],
    fault: str, how: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mbpo.runtime.backends import forkserver

    # as where there is no /proc to tell a live server: a collector's own death must still be its own
    monkeypatch.setattr(forkserver, "alive", lambda pids: set())
    cfg = tiny_config("runtime.backend=process", "runtime.num_collectors=1")
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=faulty(fault, {0}, at_step=100))
    row = trainer.run()
    assert row["collector_restarts"] == 1 and row["env_steps"] == 384 and len(trainer.buffer) == 384
    (cid, incarnation, detected_at, last_beat, what), = trainer.pool.failures
    # seen when its pipe closed, not by the hang timeout (no fixed seconds: a loaded machine delays the check)
    assert (cid, incarnation) == (0, 0) and detected_at - last_beat < cfg.runtime.collector_timeout_s
    assert f"collector 0's process (pid {trainer.pool.retired[0].pid}) {how}" in capsys.readouterr().err


@pytest.mark.reliability
def test_collectors_that_end_with_their_fork_server_are_one_restart_and_a_new_server_forks_the_next(
    tiny_config: Callable[..., Config], thread_baseline: int, no_leaks: None, capsys: pytest.CaptureFixture[str],
) -> None:
    """Each collector dies with the server (its parent); its exit code is then the stdlib's 255 for every one of
    them. Counted one by one, a server killed by the OOM killer spent the budget of a run with more collectors
    than ``runtime.max_restarts``.
    """
    from multiprocessing import forkserver

    cfg = tiny_config("runtime.backend=process", "runtime.num_collectors=2", "runtime.max_restarts=1")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    killed: list[int] = []
    ingest = trainer._ingest

    def kill_the_server_once(item: Any) -> None:
        ingest(item)
        server = cast(Any, forkserver)._forkserver._forkserver_pid  # the stdlib's
        if not killed and server is not None and all(c.pid for c in trainer.pool.collectors.values()):
            killed.append(server)
            os.kill(server, signal.SIGKILL)

    trainer._ingest = kill_the_server_once  # type: ignore[method-assign]  # a spy in place of the bound method
    row = trainer.run()
    assert killed and row["env_steps"] == 384 and len(trainer.buffer) == 384
    assert row["collector_restarts"] == 1 and sorted(f[:2] for f in trainer.pool.failures) == [(0, 0), (1, 0)]
    err = capsys.readouterr().err
    first, second = sorted(trainer.pool.failures, key=lambda f: f[2])  # by when each was seen
    assert (f"ForkServerGone: collector {first[0]}'s process (pid {trainer.pool.retired[0].pid}) ended with the fork "
            f"server it was forked from (pid {killed[0]}), which is gone (killed: the OOM killer?") in err, err[-3000:]
    assert (f"[mbpo] collector {second[0]} failed: the fork server (pid {killed[0]}) is gone, as for an earlier "
            "restart; restarting it from the newest weights (not counted again: restart 1/1)") in err, err[-3000:]
    assert trainer.backend.lease.server_pid is None  # released with the run (a new one forked the restarts)


def test_a_process_run_counts_its_collectors_cpu_seconds(tiny_config: Callable[..., Config], no_leaks: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``cpu_s`` covers collector processes: what their batches report is CPU the child really used (at most
    what the reaped child used, and most of it: start-up and collection are in, only its exit after the last
    batch, about a second, is left out), and the final row counts it on top of the trainer process's own.
    One collector, which takes every batch of the run (two could leave one without a batch, its start-up
    unreported, on a loaded machine). Spawned (the start method where there is no forkserver): the kernel counts
    a child's CPU for the process that reaps it, and a fork server's child is the server's.
    """
    monkeypatch.setattr(mp, "get_all_start_methods", lambda: ["spawn"])  # as on a platform without forkserver
    cfg = tiny_config("runtime.backend=process", "runtime.num_collectors=1")
    before, children_before = time.process_time(), _children_cpu_s()
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    own, children = time.process_time() - before, _children_cpu_s() - children_before
    reported = sum(trainer._collector_cpu_s)
    assert row["collector_restarts"] == 0  # one child, reaped: what children counts
    assert 0.5 * children < reported <= children + 0.01
    assert row["cpu_s"] > own  # this process alone cannot account for it


def test_cpu_since_last_hands_out_each_cpu_second_once() -> None:
    """What a collector sends with its batches adds up to its process's CPU time, none counted twice."""
    since_last = CpuSinceLast()
    parts = [since_last()]
    sum(i * i for i in range(200_000))  # some CPU between two batches
    parts.append(since_last())
    upto = time.process_time()
    parts.append(since_last())
    assert all(part >= 0 for part in parts)
    assert parts[0] > 0 and parts[1] > 0  # start-up in the first, the work in the second
    assert sum(parts[:2]) <= upto <= sum(parts)


def _children_cpu_s() -> float:
    """CPU seconds of this process's children that have been waited for (joined collector processes)."""
    t = os.times()
    return t.children_user + t.children_system


def run_elsewhere(tmp_path: Path, *args: str, signal_at_progress: int | None = None) -> tuple[int, dict, str]:
    """Run tests.runtime.process_run in a fresh interpreter (its own session, like a terminal job); check that
    nothing of its run is left in /dev/shm (its files carry its pid; another process's are not this test's).
    """
    proc = subprocess.Popen([sys.executable, "-m", "tests.runtime.process_run", str(tmp_path / "run"), *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    if signal_at_progress is not None:
        for line in proc.stdout:  # torchrl logs to stdout too
            if line.strip() == "progress":
                break
        # the run's semaphores are named after it (or the check below could not see a leaked one)
        assert run_shm_files([proc.pid], shm_names()), "a live process run holds no semaphore named after it"
        os.killpg(proc.pid, signal_at_progress)  # to the whole group, as a terminal's Ctrl-C is
    out, err = proc.communicate(timeout=100)
    result = json.loads(out.strip().splitlines()[-1])
    for pid in result["pids"]:
        assert not Path(f"/proc/{pid}").exists(), f"collector process {pid} outlived the run"
    assert run_shm_files([proc.pid, *result["pids"]], shm_names()) == set()  # no segment, no semaphore left
    assert "resource_tracker" not in err and "leaked" not in err, err[-2000:]
    return proc.returncode, result, err


def _report_signals(conn: Any) -> None:
    """A child's target: the signals it has blocked as it starts, and its parent (the fork server)."""
    conn.send((sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])), os.getppid()))


def test_a_forked_child_starts_with_sigint_blocked_and_takes_sigterm_and_the_server_blocks_both() -> None:
    """The server blocks both for good; a child started with SIGTERM blocked as well, so the trainer's
    ``terminate()`` of a collector still importing waited out its grace period (2 s) before the SIGKILL.
    """
    from mbpo.runtime.backends.forkserver import ForkServerLease

    lease = ForkServerLease()
    try:
        lease.start()
        parent, child = lease.context.Pipe()
        process = lease.context.Process(target=_report_signals, args=(child,))
        process.start()
        blocked, server = parent.recv()
        process.join()
        status = dict(line.split(":\t") for line in Path(f"/proc/{server}/status").read_text().splitlines())
    finally:
        lease.release()
    assert int(signal.SIGINT) in blocked and int(signal.SIGTERM) not in blocked, blocked
    mask = int(status["SigBlk"], 16)
    assert mask >> (signal.SIGINT - 1) & 1 and mask >> (signal.SIGTERM - 1) & 1, status["SigBlk"]


def test_no_collector_holds_the_fork_servers_alive_pipe(tiny_config: Callable[..., Config], no_leaks: None) -> None:
    """The server exits once every holder of its "alive" pipe has closed it, and the stdlib hands every child it
    forks one: a collector stuck in ``env.step`` kept the server alive past a SIGKILLed trainer, and so itself
    (it dies with its parent, the server). A collector drops it first thing.
    """
    from multiprocessing import forkserver

    cfg = tiny_config("runtime.backend=process")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    pipes: list[str] = []
    held: dict[int, bool] = {}
    ingest = trainer._ingest

    def look(item: Any) -> None:
        if not pipes:  # the server the collectors were forked from (started at the first launch)
            pipes.append(os.readlink(f"/proc/self/fd/{cast(Any, forkserver)._forkserver._forkserver_alive_fd}"))
        pipe = pipes[0]
        c = trainer.pool.collectors[item.collector_id]  # past its start-up: it has collected a batch
        if c.pid not in held:  # (a child just forked holds every fd of the server's until it drops them)
            held[c.pid] = any(os.readlink(fd) == pipe for fd in Path(f"/proc/{c.pid}/fd").iterdir())
        ingest(item)

    trainer._ingest = look  # type: ignore[method-assign]  # a spy in place of the bound method
    trainer.run()
    assert pipes[0].startswith("pipe:[") and len(held) == 2 and not any(held.values()), (pipes, held)


@pytest.mark.reliability
@pytest.mark.timeout(120)
def test_a_trainer_killed_with_sigkill_leaves_no_collector_and_no_fork_server(tmp_path: Path) -> None:
    """Nothing can stop collectors for a SIGKILLed trainer: the fork server exits when the trainer does (its
    end of a pipe closes), and each collector gets SIGKILL when its parent, the server, dies.
    """
    proc = subprocess.Popen([sys.executable, "-m", "tests.runtime.process_run", str(tmp_path / "run"),
                             "total_env_steps=100000"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "progress":
            break
    below = descendants([proc.pid])
    children = below - descendants(below)  # the trainer's own: the resource tracker and the fork server
    servers = [p for p in children if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
    collectors = descendants(servers)  # forked from it: the same command line
    assert len(servers) == 1 and len(collectors) == 2, below
    proc.kill()
    proc.wait(timeout=30)
    proc.stdout.close()
    assert wait_gone(below, timeout_s=30) == set()


@pytest.mark.slow
def test_raise_exit_sigkill_and_hang_leave_nothing_behind(tmp_path: Path) -> None:
    code, result, err = run_elsewhere(tmp_path, "faults=raise,exit,sigkill,hang", "runtime.max_restarts=4",
                                      "runtime.collector_timeout_s=3", "total_env_steps=100000")
    assert code == 0 and result["restarts"] == 4 and result["env_steps"] < 100000, err[-3000:]
    assert len(result["pids"]) == 8  # 4 first incarnations + 4 replacements
    for said in ("InjectedFault: injected fault at step 30", "exited with code 3", "was killed by SIGKILL",
                 "collector 3 is hung"):
        assert said in err


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_drain_checkpoint_and_leave_nothing_behind(tmp_path: Path, signum: int,
                                                                      code: int) -> None:
    returncode, result, err = run_elsewhere(tmp_path, "total_env_steps=100000", signal_at_progress=signum)
    assert returncode == code and result["exit_code"] == code, err[-3000:]
    assert 128 <= result["env_steps"] < 100000 and result["restarts"] == 0  # children ignored the Ctrl-C
    ckpts = sorted((tmp_path / "run/checkpoints").glob("ckpt_*.pt"))
    assert ckpts and ckpts[-1].name == f"ckpt_{result['env_steps']:012d}.pt"


@pytest.mark.slow
def test_a_child_imports_env_factory_by_name_and_builds_it_with_env_kwargs(
        tiny_config: Callable[..., Config], no_leaks: None) -> None:
    """Only the name crosses (the spec holds no callable); env.kwargs reach the child: a 3-d PointReach has
    6-wide observations, and a child that built the 2-d default could not write into the ring.
    """
    cfg = tiny_config("runtime.backend=process", "runtime.num_collectors=1", "env.id=PointReach",
                      "env.factory=examples.point_reach:make_env", "env.kwargs.dim=3", "env.num_envs=2",
                      "total_env_steps=192")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    spec = cast(ProcessCollector, trainer.pool.collectors[0]).spec
    assert spec.env_factory is None and (spec.env.factory, spec.env.kwargs) == ("examples.point_reach:make_env",
                                                                                {"dim": 3})
    check_plain(spec, "spec")
    row = trainer.run()
    assert row["env_steps"] == 192 and row["collector_restarts"] == 0 and trainer.buffer[:]["obs"].shape[-1] == 6
    assert trainer.pool.collectors[0].pid not in (None, os.getpid())


@pytest.mark.slow
def test_an_isaac_lab_task_trains_on_processes_with_one_simulation_each(
        tiny_config: Callable[..., Config], no_leaks: None, fake_isaaclab: None) -> None:
    """The recipe of docs/envs.md on the fake Isaac Lab (one simulation per process, as Isaac Sim): the trainer
    closes the env it read the spaces from before it builds the evaluation env; the children hold the others.
    """
    cfg = tiny_config("runtime.backend=process", "runtime.num_collectors=1", "env.id=FakeIsaacCartpole",
                      "env.factory=examples.isaaclab_env:make_env", "env.kwargs.task=Isaac-Fake-Cartpole-v0",
                      "env.num_envs=4", "total_env_steps=192", "eval_every=96")
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    row = trainer.run()
    assert row["env_steps"] == 192 and row["collector_restarts"] == 0 and trainer.last_eval_env_steps == 192
    eval_env: Any = trainer.eval_env  # an RslRlVecEnv
    assert eval_env.num_envs == cfg.eval_episodes and eval_env.obs_group == "policy"
