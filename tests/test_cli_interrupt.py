"""Ctrl-C at any moment of start-up leaves a resumable run or nothing, in one line, with quiet children.

The signal is raised in this process at a chosen moment (``signal.raise_signal``: its handler runs before the
next line), so each moment is tested deterministically: while the trainer is built (library code that a
KeyboardInterrupt would cut, e.g. omegaconf's, which then fails with another error), and after the run dir is
opened but before the first env step. A collector process starts with SIGINT blocked (its fork server keeps it
blocked), so a Ctrl-C to the process group while it imports cannot print a KeyboardInterrupt traceback there; it
then ignores SIGINT.
"""

from __future__ import annotations

import multiprocessing.context
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mbpo.trainers
from mbpo import cli, commands
from mbpo.runtime.supervisor import StopOnSignals
from mbpo.trainers.base import Trainer
from tests.conftest import TRAINER_RUNS, WorkerForkServer

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]

TINY = ["device=cpu", "progress=false", "total_env_steps=64", "agent.learning_starts=32", "eval_every=64",
        "eval_episodes=2", "log_every=32", "env.num_envs=2", "agent.batch_size=16", "agent.sac.hidden_sizes=[16,16]",
        "model.enabled=false", "runtime.num_collectors=1", "runtime.collection_batch_size=16"]
# Ray's Ctrl-C and SIGTERM: tests/runtime/test_ray_backend.py
RUNS = {name: overrides for name, overrides in TRAINER_RUNS.items() if name != "ray"}


def test_a_block_entered_after_an_outer_one_caught_a_signal_starts_stopped() -> None:
    outer_stop, inner_stop = threading.Event(), threading.Event()
    with StopOnSignals(outer_stop) as outer:
        signal.raise_signal(signal.SIGINT)
        assert outer.signum == signal.SIGINT and outer_stop.is_set()
        with StopOnSignals(inner_stop) as inner:
            assert inner.signum == signal.SIGINT and inner_stop.is_set()
    with StopOnSignals(threading.Event()) as fresh:  # nothing pending outside: a new block is not stopped
        assert fresh.signum is None


def train(run: str, run_dir: Path) -> int:
    return cli.main(["train", "--config", "configs/pendulum_sac.yaml", *TINY, *RUNS[run], f"run_dir={run_dir}"])


@pytest.mark.parametrize("run", list(RUNS))
def test_ctrl_c_while_the_trainer_is_built_leaves_nothing(
        run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    make_trainer = mbpo.trainers.make_trainer
    built: list[Any] = []

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        signal.raise_signal(signal.SIGINT)  # as the user's Ctrl-C, in the middle of building
        built.append(make_trainer(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(mbpo.trainers, "make_trainer", interrupted)
    assert train(run, tmp_path / "r") == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "[mbpo] SIGINT: stopped", err[-2000:]
    assert built and built[0].env_steps == 0 and not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["train", "resume", "eval", "rollout"])
def test_ctrl_c_while_torch_is_imported_stops_the_command(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's import swallowed a KeyboardInterrupt raised in its middle and left numpy half-imported: the command
    went on (a run trained to its end, exit 0) or failed later with an AttributeError traceback. The import here
    swallows it as torch's did; the signal must still stop the command, before it does anything.
    """
    import mbpo.run.logs

    def import_that_swallows_it() -> None:
        try:
            signal.raise_signal(signal.SIGINT)  # as the user's Ctrl-C, in the middle of the import
        except KeyboardInterrupt:
            pass

    monkeypatch.setattr(mbpo.run.logs, "quiet_torchrl", import_that_swallows_it)
    argv = {"train": ["train", "--config", "configs/pendulum_sac.yaml", *TINY, f"run_dir={tmp_path / 'r'}"],
            "resume": ["resume", str(tmp_path / "r")], "eval": ["eval", "--checkpoint", str(tmp_path / "c.pt")],
            "rollout": ["rollout", "--env", "Pendulum-v1", "--steps", "8"]}[command]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "[mbpo] SIGINT: stopped", err[-2000:]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("run", list(RUNS))
def test_ctrl_c_before_the_first_env_step_leaves_nothing(
        run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The run dir is open (config, run.json), the run's own handler not yet installed."""
    open_run_dir = Trainer._open_run_dir

    def interrupted(self: Trainer) -> None:
        open_run_dir(self)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(Trainer, "_open_run_dir", interrupted)
    assert train(run, tmp_path / "r") == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "writing a final checkpoint" not in err, err[-2000:]
    assert "stopped before the first env step, so there is nothing to resume" in err
    assert not (tmp_path / "r").exists()


def test_a_collector_process_starts_with_sigint_blocked_and_then_ignores_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    WorkerForkServer.down()  # the mask of the server this run starts, not of one an earlier test of the worker did
    start: Callable[[Any], None] = multiprocessing.context.ForkServerProcess.start
    blocked_at_start: list[bool] = []
    children: dict[int, dict[str, int]] = {}
    servers: list[int] = []

    def spy(process: Any) -> None:
        blocked_at_start.append(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
        start(process)

    ingest = mbpo.trainers.AsyncTrainer._ingest

    def read_masks(self: Any, item: Any) -> None:  # the child is past its start-up once it sends a batch
        for c in self.pool.collectors.values():
            status = dict(line.split(":\t") for line in Path(f"/proc/{c.pid}/status").read_text().splitlines())
            children[c.pid] = {k: int(status[k], 16) for k in ("SigBlk", "SigIgn")}
            server = dict(line.split(":\t") for line in Path(f"/proc/{status['PPid'].strip()}/status").read_text()
                          .splitlines())  # the fork server: its children start with its mask
            servers.append(int(server["SigBlk"], 16))
        ingest(self, item)

    monkeypatch.setattr(multiprocessing.context.ForkServerProcess, "start", spy)
    monkeypatch.setattr(mbpo.trainers.AsyncTrainer, "_ingest", read_masks)
    assert train("process", tmp_path / "r") == 0, capsys.readouterr().err[-2000:]
    bit = 1 << (signal.SIGINT - 1)
    assert blocked_at_start == [True]
    assert children and all(m["SigIgn"] & bit and not m["SigBlk"] & bit for m in children.values()), children
    assert servers and all(mask & bit for mask in servers), servers
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the parent's mask is restored


@pytest.mark.parametrize("run", list(RUNS))
def test_ctrl_c_while_a_finished_run_closes_down_is_not_called_a_start_up_one(
        run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C while the run closes (its handler gone, its final checkpoint written) reaches the start-up
    guard: it says so as it is, never that the run is starting or left as it was.
    """
    close_run_dir = Trainer._close_run_dir
    signalled: list[bool] = []

    def interrupted(self: Trainer) -> None:
        if not signalled:
            signalled.append(True)
            signal.raise_signal(signal.SIGINT)
        close_run_dir(self)

    monkeypatch.setattr(Trainer, "_close_run_dir", interrupted)
    code = train(run, tmp_path / "r")
    err = capsys.readouterr().err
    assert signalled and "during start-up" not in err and "left as it was" not in err, err[-2000:]
    assert f"[mbpo] SIGINT: stopping ({commands.AFTER_START})" in err, err[-2000:]
    assert code == 0 and list((tmp_path / "r/checkpoints").glob("ckpt_*.pt"))  # the run had finished
