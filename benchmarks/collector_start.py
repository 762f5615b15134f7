"""How long a process-backend collector takes to start: forked from the fork server against spawned (one JSON line).

Each start is timed from ``Process.start()`` to the child's first message, after it has imported what a
collector process imports (``mbpo.runtime.backends.child``, the agents) and built a Pendulum-v1 env: the part of a
run's start-up, and of each restart, that the start method decides. The first forked start also waits for the
fork server's imports (once per run) and is reported apart; the median of the ``--starts`` starts
after it is compared with the median of as many spawned ones.

    python benchmarks/collector_start.py [--starts 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import statistics
import time
from multiprocessing.connection import Connection
from typing import Any


def _child(conn: Connection) -> None:
    import mbpo.agents  # noqa: F401
    import mbpo.runtime.backends.child  # noqa: F401
    from envs import make

    make("Pendulum-v1", 1, device="cpu", seed=0).close()
    conn.send("ready")


def _start_s(ctx: Any) -> float:
    parent, child = ctx.Pipe()
    began = time.perf_counter()
    process = ctx.Process(target=_child, args=(child,))
    process.start()
    parent.recv()
    took = time.perf_counter() - began
    process.join()
    return took


def _cpu_flags() -> list[str]:
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return sorted(f for f in flags if f.startswith(("avx2", "avx512f", "avx512_bf16", "amx")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    from mbpo.runtime.backends.forkserver import ForkServerLease

    spawned = [_start_s(mp.get_context("spawn")) for _ in range(args.starts)]
    lease = ForkServerLease()  # as a process-backend run takes it
    forked_ctx = lease.context
    first_forked_s = _start_s(forked_ctx)  # the server's imports are in this one
    forked = [_start_s(forked_ctx) for _ in range(args.starts)]
    lease.release()
    print(json.dumps({
        "benchmark": "collector_start", "starts": args.starts, "start_method": forked_ctx.get_start_method(),
        "spawned_s": round(statistics.median(spawned), 3), "forked_s": round(statistics.median(forked), 3),
        "forked_over_spawned": round(statistics.median(forked) / statistics.median(spawned), 4),
        "first_forked_s": round(first_forked_s, 3), "cpu": platform.processor() or platform.machine(),
        "cpu_flags": _cpu_flags()}))


if __name__ == "__main__":
    main()
