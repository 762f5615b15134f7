"""A collector env that runs a helper process beside it (a simulator's server, an ``AsyncVectorEnv``'s workers),
for the tests that check what a collector ended by force leaves behind; and a paced env, for runs that wait.
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
        # a stand-in server: it does nothing until a signal ends it (no timing is waited on)
        self.helper = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
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


PACE_S = 0.02
"""A paced env's seconds a step: 50 steps a second per collector, a simulator in real time."""


@dataclass(frozen=True)
class Paced:
    """``env_factory(collector_id, incarnation, seed)``: Pendulum-v1 (the tests' config's env) on every collector
    and incarnation, each step ``step_s`` longer (a ``slow`` :class:`FaultyEnv`). For a run whose length is set by
    what it waits for (an actor's start on a node), not by ``total_env_steps``: meanwhile, collectors and learner
    trained flat out on every core (thousands of updates no assertion reads, most of the test's CPU), and slowed
    the start they waited for. Plain data: a collector process or Ray actor can be sent it.
    """

    step_s: float = PACE_S

    def __call__(self, collector_id: int, incarnation: int, seed: int) -> VecEnv:
        from envs.registry import make

        return FaultyEnv(make("Pendulum-v1", 1, device="cpu", seed=seed), "slow", at_step=1, delay_s=self.step_s)
