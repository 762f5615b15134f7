"""Where collectors run (``runtime.backend``), chosen by name here and nowhere else.

Every backend builds :class:`~mbpo.runtime.collectors.Collector` objects; the
trainer, the gate, the queue and the supervisor do not know which backend made
them. ``thread`` (mbpo.runtime.backends.thread) is the default; ``process``
(mbpo.runtime.backends.process) spawns a process per collector; ``ray``
(mbpo.runtime.backends.ray) runs each as a Ray actor, on any node of a cluster.
"""

from __future__ import annotations

from typing import Protocol

from mbpo.runtime.collectors import Collector

__all__ = ["Backend", "BACKENDS"]

BACKENDS = ("thread", "process", "ray")


class Backend(Protocol):
    name: str
    uses_trainer_env: bool
    """Whether collector 0 steps the env the trainer built at start-up (else the trainer closes it)."""

    def make_collector(self, collector_id: int, incarnation: int) -> Collector:
        """Collector ``collector_id``'s ``incarnation``-th start (0 first, +1 per restart); not started yet."""

    def close(self) -> None:
        """Release what the backend shares between its collectors (after they are closed)."""
