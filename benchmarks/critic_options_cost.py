"""What each SAC critic option costs per gradient update, against plain SAC in the same run (a ratio).

Hopper's sizes (obs 11, act 3), batch 256, 256x256 actor, one intra-op thread, CPU; the options as the
configs set them (configs/hopper_{redq,droq,crossq}.yaml, configs/hopper_mbpo_{redq,droq}.yaml). Measurements
are interleaved (every option once, then again) so machine noise hits all alike; each figure is the median
over repeats of the mean milliseconds per update (metrics are not read: no host sync per update). At MBPO's
20 updates per env step the learner is the run's bottleneck (learner_busy about 0.99), so these ratios are
about the ratios of whole-run wall-clock.

    python benchmarks/critic_options_cost.py [--repeats 5] [--updates 40] [--precision auto]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OPTIONS: dict[str, dict[str, Any]] = {
    "sac": {},
    "layer_norm": {"layer_norm": True},
    "droq": {"layer_norm": True, "dropout": 0.01},
    "droq_delay20": {"layer_norm": True, "dropout": 0.01, "policy_delay": 20},
    "redq": {"num_critics": 10, "num_min": 2, "actor_q": "mean"},
    "redq_delay20": {"num_critics": 10, "num_min": 2, "actor_q": "mean", "policy_delay": 20},
    "crossq_256": {"crossq": True, "policy_delay": 3},
    "crossq_2048": {"crossq": True, "policy_delay": 3, "critic_hidden_sizes": [2048, 2048]},
}
"""Each option's agent.sac keys; ``*_delay20`` are the configs' (REDQ's and DroQ's policy_update_delay)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--updates", type=int, default=40, help="updates per measurement")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    args = parser.parse_args()

    import gymnasium as gym
    import numpy as np
    import torch

    from mbpo.agents.sac import SAC
    from mbpo.config import SACConfig
    from mbpo.data.transitions import transitions
    from mbpo.run.provenance import machine

    torch.set_num_threads(1)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (11,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    g = torch.Generator().manual_seed(0)
    b = 256
    batch = transitions(torch.randn(b, 11, generator=g), torch.rand(b, 3, generator=g) * 2 - 1,
                        torch.randn(b, generator=g), torch.randn(b, 11, generator=g), torch.rand(b, generator=g) < 0.1)
    agents = {name: SAC(SACConfig(precision=args.precision, **keys), obs_space, act_space, "cpu", seed=0)
              for name, keys in OPTIONS.items()}
    for agent in agents.values():  # warm-up: allocator, oneDNN primitives
        for _ in range(5):
            agent.update(batch)
        agent.num_updates  # noqa: B018 - reading it waits for the queued updates
    samples: dict[str, list[float]] = {name: [] for name in agents}
    for _ in range(args.repeats):
        for name, agent in agents.items():
            start = time.perf_counter()
            for _ in range(args.updates):
                agent.update(batch)
            agent.num_updates  # noqa: B018
            samples[name].append((time.perf_counter() - start) / args.updates * 1e3)
    ms = {name: round(statistics.median(v), 2) for name, v in samples.items()}
    print(json.dumps({"benchmark": "critic_options_cost", "machine": machine(), "torch_threads": 1, "batch_size": b,
                      "precision": next(iter(agents.values())).precision, "ms_per_update": ms,
                      "over_sac": {name: round(v / ms["sac"], 2) for name, v in ms.items()}}))


if __name__ == "__main__":
    main()
