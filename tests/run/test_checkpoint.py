"""Checkpoint files: atomic, read back before pruning, corrupt ones set aside, and never a code path.

A checkpoint is loaded with ``weights_only=True``: a file that would run code
when unpickled is refused (and its code never runs); a truncated file is renamed
``*.corrupt`` and the previous checkpoint is used; the newest ``keep`` are kept
only once the new one has been read back.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from mbpo.data.replay import ModelBuffer
from mbpo.run import checkpoint as ckpt

pytestmark = pytest.mark.timeout(60)


def state(step: int, **extra: object) -> dict:
    """The smallest state that passes as an mbpo checkpoint."""
    return {"config": "seed: 0\n", "trainer": {"env_steps": step}, **extra}


class RunsCode:
    """Unpickling this runs ``os.system``: what a malicious checkpoint does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_keeps_the_newest_k(tmp_path: Path) -> None:
    for step in (100, 200, 300, 400):
        ckpt.save_checkpoint(tmp_path, step, state(step), keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000300.pt", "ckpt_000000000400.pt"]
    path, loaded = ckpt.load_latest(tmp_path)
    assert loaded == state(400) and path.name.endswith("400.pt")


@pytest.mark.parametrize("keep", [1, 2])
def test_files_of_the_users_beside_the_checkpoints_are_never_pruned_nor_resumed_from(tmp_path: Path, keep: int) -> None:
    """A best model or a backup kept in checkpoints/ was counted toward checkpoint.keep: pruned, and a
    ckpt_best.pt, sorting after every real name, made each save delete the checkpoint it had just written.
    """
    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=keep)
    theirs = ["ckpt_best.pt", "ckpt_000000000100_backup.pt", "ckpt_000000000100 (copy).pt", "ckpt_100.pt", "ckpt_².pt",
              ".ckpt_000000000100.pt.tmp-²"]
    for name in theirs:
        (tmp_path / name).write_bytes((tmp_path / "ckpt_000000000100.pt").read_bytes())
    for step in (200, 300):
        ckpt.save_checkpoint(tmp_path, step, state(step), keep=keep)
    ours = ["ckpt_000000000200.pt", "ckpt_000000000300.pt"][-keep:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*theirs, *ours])
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ours
    path, loaded = ckpt.load_latest(tmp_path)
    assert path.name == "ckpt_000000000300.pt" and loaded == state(300)


def test_checkpoints_are_ordered_by_their_env_steps_past_twelve_digits(tmp_path: Path) -> None:
    for step in (999_999_999_999, 1_000_000_000_000):
        ckpt.save_checkpoint(tmp_path, step, state(step), keep=2)
    path, loaded = ckpt.load_latest(tmp_path)
    assert loaded == state(1_000_000_000_000)


def test_crash_mid_write_leaves_the_previous_checkpoint_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt.save_checkpoint(tmp_path, 100, state(100, w=torch.ones(3)), keep=3)
    real_save = torch.save

    def crash_half_way(obj: object, f: object) -> None:
        real_save({"partial": True}, f)
        raise OSError("disk full (injected)")

    monkeypatch.setattr(ckpt.torch, "save", crash_half_way)
    with pytest.raises(ckpt.CheckpointWriteError) as caught:
        ckpt.save_checkpoint(tmp_path, 200, state(200, w=torch.zeros(3)), keep=3)
    assert str(caught.value) == (f"cannot write {tmp_path / 'ckpt_000000000200.pt'} (disk full (injected)); free "
                                 f"space or make the dir writable, then `python -m mbpo resume {tmp_path.parent}` "
                                 "goes on from the newest checkpoint")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_000000000100.pt"]  # no temp, no partial
    _, loaded = ckpt.load_latest(tmp_path)
    assert torch.equal(loaded["w"], torch.ones(3))


def test_a_checkpoint_that_does_not_read_back_prunes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """keep=1: the old checkpoint goes only once the new one has been read back."""
    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=1)

    def write_garbage(obj: object, f: BinaryIO) -> None:  # a silently bad write (full disk, bad sector)
        f.write(b"PK\x03\x04 not really a zip")

    monkeypatch.setattr(ckpt.torch, "save", write_garbage)
    with pytest.raises(ckpt.CorruptCheckpointError, match="did not read back"):
        ckpt.save_checkpoint(tmp_path, 200, state(200), keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_000000000100.pt", "ckpt_000000000200.pt.corrupt"]
    assert ckpt.load_latest(tmp_path)[1] == state(100)


def test_a_corrupt_newest_is_renamed_and_reported_and_the_previous_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=3)
    ckpt.save_checkpoint(tmp_path, 200, state(200), keep=3)
    os.truncate(tmp_path / "ckpt_000000000200.pt", 100)
    path, loaded = ckpt.load_latest(tmp_path)
    assert loaded == state(100) and path.name == "ckpt_000000000100.pt"
    assert "ckpt_000000000200.pt is unreadable" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_000000000100.pt", "ckpt_000000000200.pt.corrupt"]
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000100.pt"]  # not counted toward keep


def test_no_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ckpt.CheckpointError, match="no checkpoint"):
        ckpt.load_latest(tmp_path)
    with pytest.raises(ckpt.CheckpointError, match="does not exist"):
        ckpt.load_checkpoint(tmp_path / "missing.pt")


def test_a_file_that_runs_code_is_refused_and_its_code_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    torch.save({"x": RunsCode(marker)}, tmp_path / "evil.pt")
    with pytest.raises(ckpt.UnsafeCheckpointError, match=r"posix.system.*--trust-checkpoint"):
        ckpt.load_checkpoint(tmp_path / "evil.pt")
    (tmp_path / "checkpoints").mkdir()
    ckpt.save_checkpoint(tmp_path / "checkpoints", 100, state(100), keep=3)
    torch.save(state(200, x=RunsCode(marker)), tmp_path / "checkpoints/ckpt_000000000200.pt")
    with pytest.raises(ckpt.UnsafeCheckpointError):  # never skipped in favour of an older one, never renamed
        ckpt.load_latest(tmp_path / "checkpoints")
    assert not marker.exists()
    assert (tmp_path / "checkpoints/ckpt_000000000200.pt").exists()


def test_an_older_checkpoint_loads_only_when_trusted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Format 1 held TensorDicts and numpy's global RNG state: refused by default, loaded on request."""
    old = state(100, rng={"numpy": np.random.get_state()}, buffer={"data": TensorDict({"obs": torch.ones(2, 3)}, [2])})
    torch.save(old, tmp_path / "ckpt_000000000100.pt")
    with pytest.raises(ckpt.UnsafeCheckpointError, match="numpy"):
        ckpt.load_latest(tmp_path)
    _, loaded = ckpt.load_latest(tmp_path, trust=True)
    assert torch.equal(loaded["buffer"]["data"]["obs"], torch.ones(2, 3))
    assert "full unpickling" in capsys.readouterr().err


def test_a_cut_short_newest_is_set_aside_with_trust_too_and_an_intact_one_that_fails_is_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Full unpickling (--trust-checkpoint) of a cut-short file falls back to the previous checkpoint as a safe
    load does; an intact file whose pickle fails (code it names no longer imports) stops the search, untouched.
    """
    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=3)
    ckpt.save_checkpoint(tmp_path, 200, state(200), keep=3)
    os.truncate(tmp_path / "ckpt_000000000200.pt", (tmp_path / "ckpt_000000000200.pt").stat().st_size // 2)
    path, loaded = ckpt.load_latest(tmp_path, trust=True)
    assert loaded == state(100) and path.name == "ckpt_000000000100.pt"
    assert "ckpt_000000000200.pt is unreadable" in capsys.readouterr().err
    gone = types.ModuleType("mbpo_module_since_removed")  # what an older mbpo's checkpoint may name
    gone.Thing = type("Thing", (), {"__module__": gone.__name__})  # type: ignore[attr-defined]
    sys.modules[gone.__name__] = gone
    try:
        torch.save(state(300, x=gone.Thing()), tmp_path / "ckpt_000000000300.pt")  # type: ignore[attr-defined]
    finally:
        del sys.modules[gone.__name__]
    with pytest.raises(ckpt.CheckpointError, match="did not load even with full unpickling") as caught:
        ckpt.load_latest(tmp_path, trust=True)
    assert not isinstance(caught.value, ckpt.CorruptCheckpointError)
    assert "mbpo_module_since_removed" in str(caught.value)
    assert (tmp_path / "ckpt_000000000300.pt").exists()


def test_an_intact_newest_that_does_not_fit_in_memory_is_kept_and_no_older_one_is_resumed_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It was renamed *.corrupt and the run went on from the checkpoint before it (its later metrics rows lost)."""
    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=3)
    ckpt.save_checkpoint(tmp_path, 200, state(200), keep=3)
    load = torch.load

    def out_of_memory(path: Path, *args: object, **kwargs: object) -> object:
        if Path(path).name == "ckpt_000000000200.pt":
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 200000000 bytes")
        return load(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", out_of_memory)
    with pytest.raises(ckpt.CheckpointError, match=r"ckpt_000000000200.pt did not load \(RuntimeError: "
                       r"DefaultCPUAllocator: can't allocate memory.*the file is intact") as caught:
        ckpt.load_latest(tmp_path)
    assert not isinstance(caught.value, ckpt.CorruptCheckpointError)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000100.pt", "ckpt_000000000200.pt"]
    (tmp_path / "ckpt_000000000200.pt").unlink()  # the same where a save reads its new checkpoint back
    with pytest.raises(ckpt.CheckpointError, match="did not read back .*; kept it and every older checkpoint$"):
        ckpt.save_checkpoint(tmp_path, 200, state(200), keep=1)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000100.pt", "ckpt_000000000200.pt"]


def test_a_checkpoint_this_process_cannot_open_is_kept_and_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No permission (or an I/O error): a one-line error that keeps the file (it was a traceback)."""
    import builtins
    import errno

    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=3)
    ckpt.save_checkpoint(tmp_path, 200, state(200), keep=3)
    newest, real_open = str(tmp_path / "ckpt_000000000200.pt"), builtins.open

    def refused(file: object, *args: object, **kwargs: object) -> object:
        if str(file) == newest:
            raise PermissionError(errno.EACCES, "Permission denied", newest)
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", refused)
    with pytest.raises(ckpt.CheckpointError, match=r"ckpt_000000000200.pt cannot be read \(Permission denied\); it "
                                                   r"was left as it is"):
        ckpt.load_latest(tmp_path)
    monkeypatch.undo()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000100.pt", "ckpt_000000000200.pt"]


def test_a_state_that_would_need_full_unpickling_is_set_aside_when_saved(tmp_path: Path) -> None:
    """It reads back only with --trust-checkpoint: never the newest checkpoint a resume would stop on."""
    from pathlib import PurePosixPath

    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=3)
    with pytest.raises(ckpt.CorruptCheckpointError, match="did not read back.*renamed it to "
                                                          "ckpt_000000000200.pt.corrupt"):
        ckpt.save_checkpoint(tmp_path, 200, state(200, where=PurePosixPath("/x")), keep=3)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000100.pt"]


def test_an_archive_whose_contents_do_not_load_is_set_aside_for_the_previous_checkpoint(tmp_path: Path) -> None:
    """Intact as a zip (its CRCs hold) but not a loadable checkpoint: corrupt, unlike a file that met a lack of
    memory.
    """
    import zipfile

    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=3)
    newest = tmp_path / "ckpt_000000000200.pt"
    with zipfile.ZipFile(newest, "w") as archive:  # a torch.save layout whose pickle is garbage
        archive.writestr("archive/data.pkl", b"\x80\x02garbage")
        archive.writestr("archive/version", b"3\n")
    path, loaded = ckpt.load_latest(tmp_path)
    assert path.name == "ckpt_000000000100.pt" and loaded == state(100)
    assert [p.name for p in ckpt.corrupt_checkpoints(tmp_path)] == ["ckpt_000000000200.pt.corrupt"]


def test_a_torch_file_that_is_not_a_checkpoint_is_named(tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(2)}, tmp_path / "w.pt")
    with pytest.raises(ckpt.CheckpointError, match="not an mbpo checkpoint"):
        ckpt.load_checkpoint(tmp_path / "w.pt")


def test_model_buffer_checkpoint_holds_only_filled_rows_and_resumes_exactly(tmp_path: Path) -> None:
    rows = TensorDict({"obs": torch.arange(30.0).reshape(10, 3), "reward": torch.arange(10.0)}, [10])
    sizes = []
    for n in (10, 20):
        buf = ModelBuffer(1_000_000, "cpu")
        buf.add(rows[: n // 2])
        buf.add(torch.cat([rows] * 2)[: n - n // 2])
        path = ckpt.save_checkpoint(tmp_path / str(n), n, state(n, buffer=buf.state_dict()), keep=1)
        sizes.append(path.stat().st_size)
        again = ModelBuffer(1, "cpu")
        again.load_state_dict(ckpt.load_checkpoint(path)["buffer"])
        g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
        assert (again.capacity, len(again)) == (1_000_000, n)
        assert (buf.sample(64, g1) == again.sample(64, g2)).all()
    assert sizes[1] > sizes[0] and sizes[1] < 100_000  # the full ring would be 16 MB



def test_the_temporary_of_a_save_cut_off_by_a_kill_is_removed_by_the_next_save(tmp_path: Path) -> None:
    """SIGKILL mid-save leaves ``.ckpt_*.pt.tmp-<pid>``, as large as a checkpoint and never read: the next save
    (the resumed run's) removes it; a live process's save in progress is left alone.
    """
    import subprocess

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f".ckpt_000000000200.pt.tmp-{gone.pid}"
    live = tmp_path / f".ckpt_000000000200.pt.tmp-{os.getppid()}"
    for tmp in (stale, live):
        tmp.write_bytes(b"x" * 1000)
    ckpt.save_checkpoint(tmp_path, 100, state(100), keep=3)
    assert not stale.exists() and live.exists()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000100.pt"]


def test_a_run_dir_removed_while_the_run_ran_is_not_made_again(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with pytest.raises(ckpt.CheckpointWriteError) as caught:
        ckpt.save_checkpoint(run / "checkpoints", 100, state(100), keep=3)
    assert str(caught.value) == (f"cannot write {run / 'checkpoints/ckpt_000000000100.pt'}: the run dir {run} is gone "
                                 "(removed while the run ran?); start the run again with `python -m mbpo train`")
    assert not run.exists()
