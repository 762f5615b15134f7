"""Memory: freed heap memory goes back to the OS, and the start-up estimate of the networks matches what is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mbpo.device import memory

pytestmark = pytest.mark.timeout(60)


FREED_STAYS_UNTIL_TRIMMED = """
import torch
from mbpo.device import memory

def resident_mib() -> int:
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024

blocks = [torch.ones(16_000) for _ in range(3_000)]  # 64 KB each, below glibc's mmap threshold: 183 MiB of heap
last = blocks.pop()  # still in use, at the top of the heap: free() alone cannot give back what lies below it
grown = resident_mib()
del blocks
freed = resident_mib()
memory.release_free_memory()
print(grown, freed, resident_mib(), float(last.sum()))
"""
"""In a fresh interpreter, whose only thread is this one: in a test worker a thread left by an earlier test (or
another arena's free) can trim or shrink the heap between two readings (a fresh clone's suite once read 133 MiB
gone before the trim)."""


@pytest.mark.skipif(not sys.platform.startswith("linux") or memory._MALLOC_TRIM is None, reason="needs glibc")
def test_freed_heap_memory_leaves_the_resident_set() -> None:
    out = subprocess.run([sys.executable, "-c", FREED_STAYS_UNTIL_TRIMMED], capture_output=True, text=True,
                         timeout=50, check=True, cwd=Path(__file__).resolve().parents[2])
    grown, freed, trimmed, total = (float(x) for x in out.stdout.split())
    assert freed > grown - 50  # freed, but still resident
    assert trimmed < grown - 150  # given back by release_free_memory
    assert total == 16_000


@pytest.mark.parametrize(("overrides", "norms"), [
    (["agent.sac.num_critics=3", "agent.sac.hidden_sizes=[16,8]", "agent.sac.critic_hidden_sizes=[24]"], 0),
    (["agent.name=dqn", "agent.dqn.hidden_sizes=[16,8]"], 0),
    # CrossQ: no target critics; batch renorm's scale and shift on the input and every hidden layer are not counted
    (["agent.sac.crossq=true", "agent.sac.hidden_sizes=[16,8]"], 2 * (5 + 16 + 8) + 2 * 2 * (7 + 16 + 8)),
])
def test_the_network_estimate_counts_the_parameters_the_learner_builds(overrides: list[str], norms: int) -> None:
    """The start-up memory check sizes the networks from the config alone; it must match what make_agent builds:
    every parameter (less the norms' few) times weights, gradients and Adam's two moments, and the target networks
    once.
    """
    import gymnasium as gym

    from mbpo.agents import make_agent
    from mbpo.config import load_config

    config = load_config(None, overrides)
    dqn = config.agent.name == "dqn"
    action_space = gym.spaces.Discrete(3) if dqn else gym.spaces.Box(-1.0, 1.0, (2,))
    agent = make_agent(config.agent, gym.spaces.Box(-1.0, 1.0, (5,)), action_space, "cpu", seed=0)
    trained = {"q-network"} if dqn else {"actor", "critic"}
    count = {name: sum(p.numel() for p in net.parameters()) for name, net in agent.networks.items()}
    target = count["q-network"] if dqn else count.get("target critic", 0)
    learner, ensemble = memory.network_bytes(config.agent, None, obs_dim=5, act_dim=3 if dqn else 2)
    assert learner == 4 * (memory.TRAINED_COPIES * (sum(count[name] for name in trained) - norms) + target)
    assert ensemble == 0
