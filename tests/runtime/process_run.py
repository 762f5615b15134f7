"""A process- or ray-backend run in its own interpreter, for tests that check what is left after it exits.

``python -m tests.runtime.process_run RUN_DIR [key=value ...]`` trains a tiny async run with
``runtime.backend=process`` (or ray, given as an override); ``faults=raise,exit,sigkill,hang`` gives
collector ``i`` the ``i``-th fault.
It prints ``progress`` once 128 env steps are in (a test may signal it then), and at the end one JSON line:
every collector process pid it started, the restarts, and the exit code it then exits with. With faults,
the run stops once every one was handled and a batch came in after (``total_env_steps`` is then a bound: a
child that starts late on a loaded machine would otherwise never reach its fault).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from envs.faults import FaultyFactory

if TYPE_CHECKING:
    from envs import VecEnv
    from mbpo.runtime.collectors import CollectorBatch

# The trainer's imports are main()'s own: each collector process imports this module again (as the spawn and
# forkserver start methods import the main module), and at the top they took most of a second of every child's
# CPU (the trainers and torchrl, pytest and the test suite's conftests), eight children a test.


class PerCollectorFaults:
    """Collector ``i``'s first incarnation gets ``faults[i]`` at step 30 + 15 i (plain data: picklable)."""

    def __init__(self, faults: list[str]) -> None:
        self.factories = [FaultyFactory(f, (i,), at_step=30 + 15 * i) for i, f in enumerate(faults)]

    def __call__(self, collector_id: int, incarnation: int, seed: int) -> VecEnv:
        return self.factories[collector_id](collector_id, incarnation, seed)


def main(argv: list[str]) -> int:
    from mbpo.config import load_config
    from mbpo.trainers import AsyncTrainer
    from tests.conftest import only_learner
    from tests.runtime.conftest import TINY

    run_dir, rest = argv[0], argv[1:]
    faults = next((a.split("=", 1)[1].split(",") for a in rest if a.startswith("faults=")), [])
    overrides = [a for a in rest if not a.startswith("faults=")]
    cfg = load_config(None, only_learner([*TINY, f"run_dir={run_dir}", "runtime.backend=process",
                                          f"runtime.num_collectors={max(len(faults), 2)}", *overrides]))
    trainer = AsyncTrainer(cfg, cfg.run_dir, env_factory=PerCollectorFaults(faults) if faults else None)
    ingest, told, handled = trainer._ingest, [], []

    def tell_progress(item: CollectorBatch) -> None:
        ingest(item)
        if trainer.env_steps >= 128 and not told:
            told.append(True)
            print("progress", flush=True)
        if faults and trainer.pool.restarts >= len(faults):
            if handled:
                trainer.stop_event.set()
            handled.append(True)

    trainer._ingest = tell_progress  # type: ignore[method-assign]  # a spy in place of the bound method
    row = trainer.run()
    pids = [c.pid for c in [*trainer.pool.collectors.values(), *trainer.pool.retired] if c.pid is not None]
    print(json.dumps({"pids": pids, "restarts": row["collector_restarts"], "env_steps": row["env_steps"],
                      "exit_code": trainer.exit_code}), flush=True)
    return trainer.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
