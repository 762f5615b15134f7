"""The child side of test_process_backend's torn-read test (a light module: a spawned child imports it)."""

from __future__ import annotations

from multiprocessing.connection import Connection

from mbpo.runtime.shared_weights import SharedWeights


def read_snapshots(weights: SharedWeights, reads: int, conn: Connection) -> None:
    """Say ready, wait for go, read ``reads`` snapshots while the parent publishes; report how many were a mix
    (a tensor neither all zeros nor all ones, or a scalar from another publication than the tensor).
    """
    conn.send("ready")
    conn.recv()
    mixed = 0
    for _ in range(reads):
        newest = weights.read(-1)
        assert newest is not None
        w = newest[1]["actor"]["w"]
        uniform = bool((w == 0).all()) or bool((w == 1).all())
        mixed += int(not uniform or newest[1]["epsilon"] != float(w[0]))
    conn.send(mixed)
