"""run_async.sh installs the extras a command needs, so every README command works on a fresh clone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(30)


def extras_for(*args: str) -> str:
    """run_async.sh's extras_for, called by sourcing the script (its main only runs when executed)."""
    quoted = " ".join(f"'{a}'" for a in args)
    out = subprocess.run(["bash", "-c", f"source ./run_async.sh && extras_for {quoted}"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_each_command_gets_the_extras_it_needs(tmp_path: Path) -> None:
    assert extras_for("train", "--config", "configs/pendulum_sac.yaml") == ""
    assert extras_for("plot", "runs/a", "runs/b") == "plots"
    assert extras_for("--debug", "plot", "runs/a") == "plots"  # --debug is global: it may come first
    assert extras_for("train", "eval_video=True") == "video"  # a YAML true in any spelling
    assert extras_for("train", "env.id=Mjlab-Cartpole-Balance") == "mjlab"
    assert extras_for("train", "--config", "configs/mjlab_cartpole_sac_256.yaml") == "mjlab"
    assert extras_for("train", "runtime.backend=ray", "env.id=Mjlab-Cartpole-Balance") == "mjlab,ray"
    config = tmp_path / "c.yaml"
    config.write_text("runtime:\n  backend: ray\n")
    assert extras_for("train", f"--config={config}") == "ray"
    assert extras_for("eval", "--checkpoint", "c.pt", "--video", "out.mp4") == "video"
    assert extras_for("train", "eval_video=true", "runtime.backend=ray") == "ray,video"
    assert extras_for("train", "eval_video=false") == ""


def test_resume_and_eval_get_the_extras_of_the_runs_own_config_and_rollout_those_of_its_env(tmp_path: Path) -> None:
    """On a fresh clone, ``resume`` or ``eval`` of an mjlab or Ray run, and ``rollout --env Mjlab-...``, got the base
    install only, and then an error about the extra missing.
    """
    run = tmp_path / "my run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("env:\n  id: Mjlab-Cartpole-Balance\nruntime:\n  backend: ray\n")
    assert extras_for("resume", str(run), "total_env_steps=9") == "mjlab,ray"
    assert extras_for("--debug", "resume", str(run)) == "mjlab,ray"
    assert extras_for("eval", "--checkpoint", str(run / "checkpoints/ckpt_000000000064.pt")) == "mjlab,ray"
    assert extras_for("eval", f"--checkpoint={run / 'checkpoints/ckpt_000000000064.pt'}", "--video", "v.mp4") == \
        "mjlab,ray,video"
    assert extras_for("resume", str(tmp_path / "no run")) == ""  # the CLI says what is missing
    assert extras_for("rollout", "--env", "Mjlab-Cartpole-Balance") == "mjlab"
    assert extras_for("rollout", "--env=CartPole-v1") == ""


def test_extras_come_from_the_configs_keys_not_its_text(tmp_path: Path) -> None:
    """env.id and runtime.backend as YAML reads them, over the file's bases, and overrides beat the file: a
    comment or another key that mentions Mjlab- or ray installs nothing.
    """
    mentions = tmp_path / "mentions.yaml"
    mentions.write_text("# compare with Mjlab-Cartpole-Balance\nenv:\n  id: Pendulum-v1\nruntime:\n"
                        "  backend: thread  # not ray\n  ray:\n    address: null\n")
    assert extras_for("train", "--config", str(mentions)) == ""
    (tmp_path / "variant.yaml").write_text(f"base: {ROOT / 'configs/mjlab_cartpole_sac_256.yaml'}\nseed: 1\n")
    assert extras_for("train", "--config", str(tmp_path / "variant.yaml")) == "mjlab"
    assert extras_for("train", "--config", "configs/mjlab_cartpole_sac_256.yaml", "env.id=Pendulum-v1") == ""
    assert extras_for("train", "--config", str(mentions), "runtime.backend=ray") == "ray"


@pytest.mark.parametrize(("text", "says"), [
    (None, "README.md is not valid YAML"),
    ("- seed: 0\n", "holds a YAML list at the top level; expected a mapping of config keys"),
    ("Mjlab-Cartpole-Balance\nbackend: ray\n", "is not valid YAML (mapping values are not allowed here)"),
    ("Train on Mjlab-Cartpole-Balance with the ray backend\n", "holds a YAML str at the top level"),
])
def test_a_config_that_is_not_a_yaml_mapping_is_refused_before_anything_installs(
        tmp_path: Path, text: str | None, says: str) -> None:
    """main() with a stand-in .venv/bin/python that logs any pip install and runs Python otherwise."""
    config = ROOT / "README.md" if text is None else tmp_path / "c.yaml"
    if text is not None:
        config.write_text(text)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    log = tmp_path / "installs.log"
    python.write_text(f"""#!/usr/bin/env bash
if [[ "$1 $2 $3" == "-m pip install" ]]; then echo "$@" >>"{log}"; exit 0; fi
exec "{sys.executable}" "$@"
""")
    python.chmod(0o755)
    script = f"source ./run_async.sh && ROOT={tmp_path} VENV={tmp_path}/.venv && main train --config {config}"
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2, result
    assert result.stderr.splitlines() == [result.stderr.strip()] and result.stderr.startswith("error: ")
    assert says in result.stderr and str(config) in result.stderr
    assert not log.exists()  # nothing installed, not even the base


@pytest.mark.skipif(subprocess.run(["bash", "-c", "command -v flock"], capture_output=True).returncode != 0,
                    reason="no flock on this machine (run_async.sh installs without the lock there)")
def test_the_install_runs_under_a_lock_so_two_first_uses_cannot_interleave(tmp_path: Path) -> None:
    """A stand-in .venv/bin/python records whether the lock was held while it 'installed'; a second call
    finds the stamp and installs nothing.
    """
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    log = tmp_path / "installs.log"
    python.write_text(f"""#!/usr/bin/env bash
if [[ "$1" == --version ]]; then echo "Python 3.11.0"; exit 0; fi
if [[ "$1 $2 $3" == "-m pip install" ]]; then
  if flock -n "{tmp_path}/.venv.lock" true; then echo free >>"{log}"; else echo held >>"{log}"; fi
fi
""")
    python.chmod(0o755)
    script = f"source ./run_async.sh && ROOT={tmp_path} VENV={tmp_path}/.venv && ensure_venv && ensure_venv"
    subprocess.run(["bash", "-c", script], cwd=ROOT, check=True, capture_output=True, text=True)
    assert log.read_text().splitlines() == ["held"]


def test_a_failed_install_writes_no_stamp_also_where_bash_turns_set_e_off(tmp_path: Path) -> None:
    """``ensure_venv "" && ...`` (run_async.sh's path to PyYAML where no python outside the venv has it) runs with
    set -e off: a failed pip install went on to write the stamp, and no later start tried the install again.
    """
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("""#!/usr/bin/env bash
if [[ "$1" == --version ]]; then echo "Python 3.11.0"; exit 0; fi
if [[ "$1 $2 $3" == "-m pip install" ]]; then echo "pip: no network" >&2; exit 1; fi
""")
    python.chmod(0o755)
    script = f"source ./run_async.sh && ROOT={tmp_path} VENV={tmp_path}/.venv && ensure_venv '' && echo went-on"
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0 and "went-on" not in result.stdout, result
    assert "installing mbpo into" in result.stderr and "failed" in result.stderr, result.stderr
    assert not list((tmp_path / ".venv").glob(".mbpo-install-*"))


def test_a_script_called_through_a_symlink_finds_the_checkout(tmp_path: Path) -> None:
    """``ln -s <repo>/run_async.sh ~/bin/mbpo-train``: the script took the link's folder for the checkout and set up
    a new .venv there ("file:///... does not appear to be a Python project"). run_async_test.sh finds it by the same
    line.
    """
    link = tmp_path / "mbpo-train"
    link.symlink_to(ROOT / "run_async.sh")
    out = subprocess.run(["bash", "-c", f"source '{link}' && echo \"$ROOT\""], cwd=tmp_path, capture_output=True,
                         text=True, check=True)  # sourced, as run_async_test.sh sources it
    assert out.stdout.strip() == str(ROOT)
    lines = [[line for line in (ROOT / script).read_text().splitlines() if line.startswith("ROOT=")]
             for script in ("run_async.sh", "run_async_test.sh")]
    assert lines[0] == lines[1] and len(lines[0]) == 1


def test_the_test_scripts_paths_are_the_callers_and_smoke_with_pytest_args_is_refused(tmp_path: Path) -> None:
    """``cd tests; ../run_async_test.sh test_x.py`` ran pytest on the checkout's ``test_x.py`` (none there), and
    ``--smoke -k foo`` dropped ``-k foo`` without a word. A -k expression that names a file stays as it is.
    """
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_a.py").write_text("")
    (tmp_path / "envs").mkdir()
    script = ROOT / "run_async_test.sh"
    line = "pytest_args sub/test_a.py::t[a/b] -k envs -x envs --deselect sub/test_a.py::t"
    out = subprocess.run(["bash", "-c", f"source '{script}' && {line}"], cwd=tmp_path, capture_output=True, text=True,
                         check=True)
    assert out.stdout.splitlines() == [f"{tmp_path}/sub/test_a.py::t[a/b]", "-k", "envs", "-x", f"{tmp_path}/envs",
                                       "--deselect", "sub/test_a.py::t"]
    refused = subprocess.run(["bash", str(script), "--smoke", "-k", "foo"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=20)
    assert refused.returncode == 2 and refused.stderr.startswith("error: --smoke runs the stages only, so pytest's "
                                                                 "arguments (-k foo) would be ignored")
