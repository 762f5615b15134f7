"""A run dir holds one run: locked while it runs, and resume only continues that run, only forward.

Each test reproduces a way a run used to be lost or corrupted (two runs writing
one dir, another run's checkpoint resumed, a finished run rewritten, the good
checkpoint pruned for a corrupt one) and checks the refusal or the fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mbpo import cli
from mbpo.config import load_config
from mbpo.run.checkpoint import list_checkpoints, load_checkpoint
from mbpo.run.metrics import read_metrics
from mbpo.run.run_dir import RunIdentity, RunLock, config_hash, remove_if_never_started
from tests.conftest import only_learner

pytestmark = pytest.mark.timeout(120)

TINY = ["device=cpu", "progress=false", "eval_every=150", "eval_episodes=2", "log_every=150",
        "agent.learning_starts=100", "agent.utd_ratio=0.2", "agent.batch_size=32", "agent.sac.hidden_sizes=[32,32]",
        "agent.dqn.hidden_sizes=[32,32]", "checkpoint.every=150", "checkpoint.keep=2", "trainer=sync"]
"""A small sync run: 30 updates per 150 env steps (a learner with optimizer state to checkpoint and resume; the
tests are about the run dir, not the learning)."""
HOLD = ("import sys; from mbpo.run.run_dir import RunLock; RunLock(sys.argv[1]).acquire(); "
        "print('locked', flush=True); sys.stdin.read()")


TOP_LEVEL_ONLY = ("total_env_steps", "eval_every", "eval_episodes", "eval_video", "log_every", "progress",
                  "checkpoint", "run_dir")
"""What the identity of a run written before nested keys were left out did not hash."""
PRECISIONS_HASHED = (*TOP_LEVEL_ONLY, "debug", "runtime.nonfinite")
"""What the identity of a run written before its precisions and device could change on resume did not hash."""


def earlier_hash(config_yaml: str, left_out: tuple[str, ...]) -> str:
    """A run's identity hash as an earlier rule took it: the config without the dotted keys ``left_out``."""
    import hashlib
    import json

    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.create(config_yaml))
    assert isinstance(data, dict)
    for key in left_out:
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node[part]
        node.pop(last, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def record_identity(run: Path, path: Path, state: dict, recorded: str) -> None:
    """Make ``recorded`` the identity hash of ``run``: in its checkpoint at ``path`` (``state``) and in run.json."""
    import torch

    state["identity"]["config_hash"] = recorded
    torch.save(state, path)
    identity = RunIdentity.read(run)
    assert identity is not None
    RunIdentity(identity.run_id, recorded).write(run, load_config(None, [f"run_dir={run}"]))


def train(run: Path, *overrides: str, config: str = "configs/pendulum_sac.yaml") -> int:
    return cli.main(["train", "--config", config, f"run_dir={run}", *only_learner([*TINY, *overrides], config)])


def files(run: Path) -> dict[str, bytes]:
    """Every file of a run dir with its contents (the lock file's content is the holder, not the run)."""
    return {
        str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"
    }


def hold_lock(run: Path) -> subprocess.Popen:
    """Another process holding ``run``'s lock; returns once it holds it (it says so on stdout)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_train_or_resume_on_a_busy_run_dir_fails_at_once_naming_the_holder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "same"
    holder = hold_lock(run)
    try:
        assert train(run, "total_env_steps=300") == 2
        err = capsys.readouterr().err
        assert f"is in use by pid {holder.pid} on host" in err and err.count("\n") == 1 and "Traceback" not in err
        assert files(run) == {}  # nothing written: no metrics.csv, no config.yaml
        assert cli.main(["resume", str(run)]) == 2
        assert f"pid {holder.pid}" in capsys.readouterr().err
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    assert train(run, "total_env_steps=150") == 0  # released when the holder ended


def test_a_train_that_loses_the_race_for_a_new_run_dir_leaves_the_winners_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Two trains started at once on one new run_dir: both see no dir, one makes it and locks it; the other,
    refused, must not remove it as a dir it made itself and that never started.
    """
    run = tmp_path / "new"
    holder = hold_lock(run)  # the winner: it made the dir and holds the lock
    try:
        (run / "config.yaml").write_text("seed: 0\n")  # the winner's start under way
        real_exists, seen = Path.exists, []

        def exists_before_the_winner(self: Path, *args: object, **kwargs: object) -> bool:
            if self == run and not seen:  # the loser looked before the winner made the dir
                seen.append(self)
                return False
            return real_exists(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Path, "exists", exists_before_the_winner)
        assert train(run, "total_env_steps=300") == 2
        assert seen and f"is in use by pid {holder.pid}" in capsys.readouterr().err
        assert (run / "config.yaml").read_text() == "seed: 0\n"
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "stale"
    holder = hold_lock(run)
    holder.kill()
    holder.wait(30)
    assert str(holder.pid) in (run / ".lock").read_text()  # SIGKILL left its pid behind
    assert train(run, "total_env_steps=150") == 0
    assert f"left by pid {holder.pid} on this host, which is no longer running" in capsys.readouterr().err
    assert (run / ".lock").read_text() == ""  # a clean end leaves no holder


def test_the_lock_is_reentrant_within_a_process_and_released_by_the_last_holder(tmp_path: Path) -> None:
    with RunLock(tmp_path), RunLock(tmp_path):
        assert str(os.getpid()) in (tmp_path / ".lock").read_text()
    assert (tmp_path / ".lock").read_text() == ""


def test_resume_refuses_another_runs_checkpoint_and_changes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pendulum, cartpole = tmp_path / "pendulum", tmp_path / "cartpole"
    assert train(pendulum, "total_env_steps=300") == 0
    assert train(cartpole, "total_env_steps=300", "agent.name=dqn", config="configs/cartpole_dqn.yaml") == 0
    shutil.copy(cartpole / "checkpoints/ckpt_000000000300.pt", pendulum / "checkpoints/ckpt_000000000450.pt")
    before = files(pendulum)
    capsys.readouterr()
    assert cli.main(["resume", str(pendulum), "total_env_steps=600"]) == 2
    err = capsys.readouterr().err
    assert "ckpt_000000000450.pt holds a checkpoint taken at 300 env steps, not the 450" in err
    os.replace(pendulum / "checkpoints/ckpt_000000000450.pt", pendulum / "checkpoints/ckpt_000000000300.pt")
    assert cli.main(["resume", str(pendulum), "total_env_steps=600"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run (CartPole-v1, dqn" in err and "(Pendulum-v1, sac" in err
    assert "Traceback" not in err
    changed = {k for k in files(pendulum) if files(pendulum)[k] != before.get(k)} - {"checkpoints/ckpt_000000000300.pt"}
    assert changed == set()  # config.yaml and metrics.csv untouched


def test_resuming_a_finished_run_writes_nothing_and_a_shorter_run_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command it suggests is quoted: pasted, a run dir with a space was two arguments."""
    import shlex

    run = tmp_path / "my run"
    assert train(run, "total_env_steps=300") == 0
    before = files(run)
    capsys.readouterr()
    assert cli.main(["resume", str(run)]) == 0
    assert (f"is already done (300 of total_env_steps=300 env steps); nothing was written. To train longer: python -m "
            f"mbpo resume {shlex.quote(str(run))} total_env_steps=<more than 300>") in capsys.readouterr().err
    assert cli.main(["resume", str(run), "total_env_steps=100"]) == 2
    assert "total_env_steps=100 is below the 300 env steps" in capsys.readouterr().err
    assert files(run) == before


def test_a_sync_checkpoint_resumed_at_its_own_env_steps_is_done(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The sync trainer stops between whole vector steps: a mid-run checkpoint of an MBPO run owes nothing (its
    fits are whole), so a resume with total_env_steps at its env steps has nothing to do and writes nothing.
    """
    run = tmp_path / "run"
    assert train(run, "total_env_steps=300", "model.train_freq=50", "model.hidden_sizes=[16,16]",
                 "model.weight_decay=[0,0,0]", "model.max_epochs=2", "model.rollouts_per_real=4", "agent.utd_ratio=2",
                 config="configs/pendulum_mbpo.yaml") == 0
    (run / "checkpoints/ckpt_000000000300.pt").unlink()  # the newest is now the mid-run one at 150
    before = files(run)
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=150"]) == 0
    assert "is already done (150 of total_env_steps=150 env steps)" in capsys.readouterr().err
    assert files(run) == before


def test_each_resume_is_logged_and_config_yaml_keeps_the_start(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train(run, "total_env_steps=300") == 0
    config = (run / "config.yaml").read_text()
    assert cli.main(["resume", str(run), "total_env_steps=450"]) == 0
    assert cli.main(["resume", str(run), "total_env_steps=600", "eval_every=300"]) == 0
    assert (run / "config.yaml").read_text() == config
    import yaml

    log = yaml.safe_load((run / "resumes.yaml").read_text())
    assert [(e["at_env_steps"], e["overrides"]) for e in log] == [
        (300, ["total_env_steps=450"]), (450, ["total_env_steps=600", "eval_every=300"])]
    assert [r["env_steps"] for r in read_metrics(run / "metrics.csv")] == ["150", "300", "450", "600"]
    state = load_checkpoint(run / "checkpoints/ckpt_000000000600.pt")
    assert RunIdentity.from_dict(state["identity"]) == RunIdentity.read(run)
    on_disk = config_hash((run / "config.yaml").read_text())
    assert state["identity"]["config_hash"] == config_hash(state["config"]) == on_disk


def test_a_run_written_before_a_config_key_existed_still_resumes(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The schema grows (agent.obs_norm and agent.compile were added after runs existed): a checkpoint whose
    stored config lacks them keeps its identity, so resume continues it instead of calling it foreign, and
    says which keys take today's defaults.
    """
    import torch

    run = tmp_path / "run"
    assert train(run, "total_env_steps=150") == 0
    path = run / "checkpoints/ckpt_000000000150.pt"
    state = load_checkpoint(path)
    older = "".join(line for line in state["config"].splitlines(keepends=True)
                    if line.strip() not in ("obs_norm: false", "compile: false"))
    assert older.count("\n") == state["config"].count("\n") - 2
    state["config"] = older
    state["identity"]["config_hash"] = config_hash(older)  # what the run recorded when it was written
    torch.save(state, path)
    identity = RunIdentity.read(run)
    assert identity is not None
    RunIdentity(identity.run_id, config_hash(older)).write(run, load_config(None, [f"run_dir={run}"]))
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=300"]) == 0
    assert [r["env_steps"] for r in read_metrics(run / "metrics.csv")][-1] == "300"
    assert "config predates agent.obs_norm, agent.compile; the resumed run takes today's defaults" in \
        capsys.readouterr().err


def test_a_run_resumed_with_a_key_a_resume_may_change_resumes_again(tmp_path: Path) -> None:
    """``runtime.nonfinite=drop`` (the fix the non-finite error suggests) and debug mode may change on resume: the
    checkpoints written after such a resume still match the run, so it resumes again, and so does a run whose
    identity was recorded before nested keys were left out of it.
    """
    run = tmp_path / "run"
    assert train(run, "total_env_steps=150") == 0
    assert cli.main(["resume", str(run), "total_env_steps=300", "runtime.nonfinite=drop"]) == 0
    assert cli.main(["--debug", "resume", str(run), "total_env_steps=450"]) == 0
    assert cli.main(["resume", str(run), "total_env_steps=600"]) == 0
    state = load_checkpoint(run / "checkpoints/ckpt_000000000600.pt")
    assert "nonfinite: drop" in state["config"] and "debug: false" in state["config"]
    assert RunIdentity.from_dict(state["identity"]) == RunIdentity.read(run)

    recorded = earlier_hash(state["config"].replace("nonfinite: drop", "nonfinite: raise"), TOP_LEVEL_ONLY)
    record_identity(run, run / "checkpoints/ckpt_000000000600.pt", state, recorded)  # as the run recorded its start
    assert cli.main(["resume", str(run), "total_env_steps=750"]) == 0


def test_a_run_whose_auto_precision_became_bf16_resumes_on_a_machine_without_native_bf16(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``precision: auto`` is written as what it resolved to, so a run started where bf16 is native (AMX, a GPU)
    was stuck on a machine without it: resume refused bf16 and told the user to set fp32, which resume refused
    too. The precisions may change on resume (autocast over fp32 weights: the checkpoint is the same), and the run
    resumes again after that, as does one whose identity was recorded when the precisions were hashed.
    """
    import mbpo.device.precision as precision

    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(precision, "native_bf16", lambda device: (True, "an AMX machine, pretended"))
        assert train(run, "total_env_steps=150", "agent.sac.precision=auto") == 0
    assert "precision: bf16" in (run / "config.yaml").read_text()
    monkeypatch.setattr(precision, "native_bf16", lambda device: (False, "a machine without it, pretended"))
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=300"]) == 2
    assert "agent.sac.precision=bf16 was requested but cpu has no native bf16 (a machine without it, pretended); " \
           "set agent.sac.precision=fp32 or auto (a resume takes it too" in capsys.readouterr().err
    assert cli.main(["resume", str(run), "total_env_steps=300", "agent.sac.precision=fp32"]) == 0
    assert cli.main(["resume", str(run), "total_env_steps=450"]) == 0
    state = load_checkpoint(run / "checkpoints/ckpt_000000000450.pt")
    assert "precision: fp32" in state["config"]

    started = state["config"].replace("precision: fp32", "precision: bf16", 1)  # agent.sac's (model's stays fp32)
    record_identity(run, run / "checkpoints/ckpt_000000000450.pt", state, earlier_hash(started, PRECISIONS_HASHED))
    assert cli.main(["resume", str(run), "total_env_steps=600"]) == 0


@pytest.mark.parametrize("rule", ["precisions hashed", "top-level keys only"])
def test_an_identity_of_an_earlier_rule_matches_after_a_precision_or_device_change_and_refuses_an_edit(
        rule: str) -> None:


    from mbpo.config import to_yaml
    from mbpo.run.run_dir import matches_identity

    start = to_yaml(load_config("configs/pendulum_mbpo.yaml", ["agent.sac.precision=bf16", "model.precision=bf16",
                                                               "device=cuda:1"]))
    started = earlier_hash(start, PRECISIONS_HASHED if rule == "precisions hashed" else TOP_LEVEL_ONLY)
    resumed = load_config("configs/pendulum_mbpo.yaml", ["agent.sac.precision=fp32", "model.precision=auto",
                                                         "device=cpu"])
    assert matches_identity(resumed, started, start)
    assert not matches_identity(resumed, started)  # the device it started on is in its config.yaml only
    older = "\n".join(line for line in start.splitlines() if line.strip() != "device: null")  # before env.device
    assert "device: null" in start and matches_identity(older, earlier_hash(older, TOP_LEVEL_ONLY))
    resumed.agent.sac.gamma = 0.9
    assert not matches_identity(resumed, started, start)


def cuda_like(state: object) -> object:
    """``state`` with each CPU generator state in it swapped for one of a CUDA generator's size (16 bytes: seed
    and offset), as a run on a GPU wrote them.
    """
    import torch

    if isinstance(state, dict):
        return {key: cuda_like(value) for key, value in state.items()}
    if isinstance(state, list):
        return [cuda_like(value) for value in state]
    if isinstance(state, torch.Tensor) and state.dtype == torch.uint8 and \
            state.numel() == torch.Generator().get_state().numel():
        return torch.arange(16, dtype=torch.uint8)
    return state


def test_a_run_trained_on_a_device_this_machine_lacks_resumes_here_with_device_set(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run started with ``device=cuda:N`` was stuck on a machine without that GPU: resume refused the device and
    advised ``device=cpu``, which resume refused too ("cannot change when resuming"). Checkpoints load onto the CPU
    first, so the device may change; the generators a CUDA run saved (a state the CPU's cannot take) are seeded
    from their states, the same way each time; the run then resumes again as any other.
    """
    run = tmp_path / "run"
    assert train(run, "total_env_steps=150") == 0
    for path in [run / "config.yaml", *list_checkpoints(run / "checkpoints")]:  # as a run on a GPU wrote them
        if path.suffix == ".yaml":
            path.write_text(path.read_text().replace("device: cpu", "device: cuda:63", 1))
        else:
            state = cuda_like(load_checkpoint(path))
            assert isinstance(state, dict)
            state["config"] = state["config"].replace("device: cpu", "device: cuda:63", 1)
            state["trainer"]["device"] = "cuda:63"
            record_identity(run, path, state, config_hash(state["config"]))
    again = tmp_path / "again"
    shutil.copytree(run, again)
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=300"]) == 2
    assert "cuda:63" in capsys.readouterr().err
    assert cli.main(["resume", str(run), "total_env_steps=300", "device=cpu"]) == 0
    assert "the checkpoint was written on cuda:63 and the run resumes on cpu: the random streams" in \
        capsys.readouterr().err
    assert cli.main(["resume", str(again), "total_env_steps=300", "device=cpu"]) == 0
    assert read_metrics(run / "metrics.csv")[-1]["eval_return"] == read_metrics(again / "metrics.csv")[-1][
        "eval_return"]
    assert cli.main(["resume", str(run), "total_env_steps=450"]) == 0
    assert "device: cpu" in load_checkpoint(run / "checkpoints/ckpt_000000000450.pt")["config"]


def test_debug_mode_on_resume_is_the_command_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--debug resume`` turns debug mode on from there and a resume without it turns it off; each change is
    logged in resumes.yaml as an override.
    """
    import yaml

    run = tmp_path / "run"
    assert train(run, "total_env_steps=150") == 0
    capsys.readouterr()
    assert cli.main(["--debug", "resume", str(run), "total_env_steps=300"]) == 0
    assert "debug mode on from here" in capsys.readouterr().err
    assert "debug: true" in load_checkpoint(run / "checkpoints/ckpt_000000000300.pt")["config"]
    assert cli.main(["resume", str(run), "total_env_steps=450"]) == 0
    assert "debug: false" in load_checkpoint(run / "checkpoints/ckpt_000000000450.pt")["config"]
    log = yaml.safe_load((run / "resumes.yaml").read_text())
    assert [e["overrides"] for e in log] == [["total_env_steps=300", "debug=true"],
                                             ["total_env_steps=450", "debug=false"]]


@pytest.mark.parametrize("left", ["a run cut off before its first checkpoint", "a config of the user's own"])
def test_train_never_overwrites_a_run_dir_that_holds_a_run_or_a_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], left: str) -> None:
    run = tmp_path / "run"
    if left == "a config of the user's own":
        run.mkdir()
        (run / "config.yaml").write_text("# my settings\ntotal_env_steps: 150\n")
    else:
        assert train(run, "total_env_steps=150") == 0
        shutil.rmtree(run / "checkpoints")  # what a SIGKILL before the first checkpoint leaves: rows, no checkpoint
    before = files(run)
    capsys.readouterr()
    assert train(run, "total_env_steps=150") == 2
    err = capsys.readouterr().err
    assert "which a new run there would overwrite" in err and "config.yaml" in err and "Traceback" not in err
    assert files(run) == before


def test_a_checkpoint_whose_config_was_edited_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    run = tmp_path / "run"
    assert train(run, "total_env_steps=150") == 0
    path = run / "checkpoints/ckpt_000000000150.pt"
    state = load_checkpoint(path)
    assert "gamma: 0.99" in state["config"]
    state["config"] = state["config"].replace("gamma: 0.99", "gamma: 0.9", 1)  # agent.sac's: agent.dqn's is refused
    torch.save(state, path)
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=300"]) == 2
    assert "does not match the identity it records" in capsys.readouterr().err


def test_resume_skips_a_corrupt_checkpoint_and_never_prunes_the_good_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert train(run, "total_env_steps=300") == 0  # keep=2: ckpt_150, ckpt_300
    os.truncate(run / "checkpoints/ckpt_000000000300.pt", 100)
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=350"]) == 0
    err = capsys.readouterr().err
    assert "ckpt_000000000300.pt is unreadable" in err and "renamed it to ckpt_000000000300.pt.corrupt" in err
    assert "resuming" in err and "from ckpt_000000000150.pt" in err
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["ckpt_000000000300.pt", "ckpt_000000000300.pt.corrupt", "ckpt_000000000350.pt"]
    for path in list_checkpoints(run / "checkpoints"):
        load_checkpoint(path)  # every checkpoint kept is a good one


def test_a_checkpoint_dropped_into_a_run_that_would_run_code_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from tests.run.test_checkpoint import RunsCode

    run, marker = tmp_path / "run", tmp_path / "PWNED"
    assert train(run, "total_env_steps=150") == 0
    torch.save({"x": RunsCode(marker)}, run / "checkpoints/ckpt_000000000300.pt")
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=450"]) == 2
    assert cli.main(["eval", "--checkpoint", str(run / "checkpoints/ckpt_000000000300.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("needs full unpickling to load") == 2 and "--trust-checkpoint" in err
    assert not marker.exists()


def test_an_older_checkpoint_resumes_only_with_trust_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A format-1 checkpoint (TensorDicts, numpy's global RNG, no identity) in a run dir without run.json."""
    import numpy as np
    import torch
    from tensordict import TensorDict

    run = tmp_path / "run"
    assert train(run, "total_env_steps=150") == 0
    path = run / "checkpoints/ckpt_000000000150.pt"
    old = load_checkpoint(path)
    old.pop("identity")
    old["format"], old["rng"] = 1, {"numpy": np.random.get_state()}
    old["buffer"]["data"] = TensorDict(old["buffer"]["data"], [150])
    torch.save(old, path)
    (run / "run.json").unlink()
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=300"]) == 2
    assert "needs full unpickling" in capsys.readouterr().err
    assert cli.main(["resume", str(run), "total_env_steps=300", "--trust-checkpoint"]) == 0
    assert "without a run identity" in capsys.readouterr().err
    assert RunIdentity.read(run) is not None  # recorded from now on
    assert cli.main(["resume", str(run), "total_env_steps=450"]) == 0  # new checkpoints need no trust


@pytest.mark.parametrize("where", [".", "checkpoints"])
def test_a_run_dir_that_holds_a_users_file_is_never_removed_as_never_started(tmp_path: Path, where: str) -> None:
    """What a failed start leaves is removed; a file no run writes (a best model kept beside the checkpoints,
    notes) keeps the whole dir.
    """
    run_dir = tmp_path / "r"
    (run_dir / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "run.json", ".lock"):
        (run_dir / name).write_text("")
    (run_dir / where / "ckpt_best.pt").write_text("the user's")
    assert not remove_if_never_started(run_dir, took_no_step=True)
    assert (run_dir / where / "ckpt_best.pt").read_text() == "the user's"
    (run_dir / where / "ckpt_best.pt").unlink()
    (run_dir / "videos").mkdir()  # what the run writes itself: a first evaluation's video, a write's temporary
    (run_dir / ".config.yaml.tmp-123").write_text("")
    assert remove_if_never_started(run_dir, took_no_step=True) and not run_dir.exists()


def test_a_resume_says_which_of_its_overrides_the_run_does_not_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As `train` does: a precision of a part the run does not have is a note, and another learner's key is
    refused without the advice to change agent.name, which a resume cannot (it resumed in silence, and the
    override went into resumes.yaml as if it applied).
    """
    run = tmp_path / "run"
    assert train(run, "total_env_steps=150", config="configs/cartpole_dqn.yaml") == 0
    capsys.readouterr()
    assert cli.main(["resume", str(run), "total_env_steps=300", "model.precision=fp32"]) == 0
    assert "[mbpo] note: model.precision=fp32 has no effect with model.enabled=false" in capsys.readouterr().err
    assert cli.main(["resume", str(run), "total_env_steps=450", "agent.sac.precision=bf16"]) == 2
    err = capsys.readouterr().err
    assert f"error: agent.sac.precision is for agent.name=sac, and {run} trains agent.name=dqn, which a resume " \
           "keeps; drop agent.sac.precision=bf16" in err, err[-2000:]
