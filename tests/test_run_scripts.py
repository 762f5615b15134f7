"""run_async.sh installs the extras a command needs, so every README command works on a fresh clone."""

from __future__ import annotations

import subprocess
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
    assert extras_for("train", "env.id=Mjlab-Cartpole-Balance") == "mjlab"
    assert extras_for("train", "--config", "configs/mjlab_cartpole_sac_256.yaml") == "mjlab"
    assert extras_for("train", "runtime.backend=ray", "env.id=Mjlab-Cartpole-Balance") == "mjlab,ray"
    config = tmp_path / "c.yaml"
    config.write_text("runtime:\n  backend: ray\n")
    assert extras_for("train", f"--config={config}") == "ray"


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
