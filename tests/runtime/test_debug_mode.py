"""Debug mode where collectors run outside the trainer's process: each reports its own debug switches, in the
same words on every such backend (a collector process's environment, or a Ray worker's, which is its raylet's, may
differ from the trainer's), and checks its own hand-off. The trainer's own report: tests/trainers/test_async_trainer.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mbpo.config import Config
from mbpo.trainers import AsyncTrainer

pytestmark = [pytest.mark.timeout(120)]

HANDOFF = {"process": "collector -> ring write", "ray": "collector -> object store"}
TRAINER_HANDOFF = {"process": "collector -> ring write, ring read, queue -> replay",
                   "ray": "collector -> object store, queue -> replay"}


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_debug_mode_collectors_report_their_switches_and_check_their_hand_off(
        backend: str, tiny_config: Callable[..., Config], capfd: pytest.CaptureFixture[str], no_leaks: None,
        request: pytest.FixtureRequest) -> None:
    if backend == "ray":
        request.getfixturevalue("module_ray")
    # two batches through the checked hand-off; the updates, slow under anomaly detection, are not what is checked
    cfg = tiny_config(f"runtime.backend={backend}", "debug=true", "total_env_steps=64")
    AsyncTrainer(cfg, cfg.run_dir).run()
    err = capfd.readouterr().err
    assert "[mbpo debug] collector 0.0 runs as pid " in err
    assert "[mbpo debug] CUDA_LAUNCH_BLOCKING:" in err  # the trainer's
    child = [line for line in err.splitlines() if line.startswith("[mbpo debug] collector 0 (pid ")]
    assert len(child) == 3 and "): CUDA_LAUNCH_BLOCKING: " in child[0], child  # the collector's own words
    assert child[-1].endswith(f"): hand-off checks (device, dtype, shape, finiteness): on at {HANDOFF[backend]}")
    assert not any("collectors: 1" in line or "replay" in line for line in child), child  # the trainer's, not its
    assert f"[mbpo debug] hand-off checks (device, dtype, shape, finiteness): on at {TRAINER_HANDOFF[backend]}" in err
