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
