"""A collector env that runs a helper process beside it (a simulator's server, an ``AsyncVectorEnv``'s workers),
for the tests that check what a collector ended by force leaves behind.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from envs import VecEnv
from envs.faults import FaultyEnv, FaultyFactory


class WithHelperProcess(FaultyEnv):
    """``env`` (a :class:`FaultyEnv`) plus a helper process it starts, writes the pid of into ``pid_dir`` and
    ends in :meth:`close`, as a well-behaved simulator does.
    """

    def __init__(self, env: FaultyEnv, pid_dir: Path) -> None:
        super().__init__(env.env, env.fault, env.at_step, env.env_index, env.hang_s, env.delay_s)
        self.helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (pid_dir / str(self.helper.pid)).touch()

    def close(self) -> None:
        self.helper.kill()
        self.helper.wait()
        super().close()


@dataclass(frozen=True)
class HangsWithAHelper:
    """``env_factory(collector_id, incarnation, seed)``: every env has a helper process; the first incarnation of
    ``collector`` hangs at ``at_step``. Plain data: a collector process or Ray actor can be sent it.
    """

    pid_dir: str
    collector: int = 1
    at_step: int = 40

    def __call__(self, collector_id: int, incarnation: int, seed: int) -> VecEnv:
        env = FaultyFactory("hang", (self.collector,), self.at_step, every_incarnation=False)(
            collector_id, incarnation, seed)
        if not isinstance(env, FaultyEnv):
            env = FaultyEnv(env, "slow", at_step=10**9)  # never fires
        return WithHelperProcess(env, Path(self.pid_dir))
