"""Where collectors run (``runtime.backend``), chosen by name here and nowhere else: :func:`make_backend`.

Every backend builds :class:`~mbpo.runtime.collectors.Collector` objects; the
trainer, the gate, the queue and the supervisor do not know which backend made
them. ``thread`` (mbpo.runtime.backends.thread) is the default; ``process``
(mbpo.runtime.backends.process) starts a process per collector; ``ray``
(mbpo.runtime.backends.ray) runs each as a Ray actor, on any node of a cluster.
Process and Ray collectors build their envs from the run's env config (plain
data: an env id, or an ``env.factory`` name the child imports).

Reached only through this factory (an import-linter contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from mbpo.runtime.collectors import Collector

if TYPE_CHECKING:
    import envs
    from mbpo.config import EnvConfig, RayConfig
    from mbpo.runtime.collectors import CollectorBatch, CollectorSetup
    from mbpo.runtime.gate import RatioGate
    from mbpo.runtime.queue import TransitionQueue
    from mbpo.runtime.weights import WeightStore

__all__ = ["Backend", "BACKENDS", "make_backend"]

BACKENDS = ("thread", "process", "ray")


class Backend(Protocol):
    name: str
    uses_trainer_env: bool
    """Whether collector 0 steps the env the trainer built at start-up (else the trainer closes it)."""

    def make_collector(self, collector_id: int, incarnation: int) -> Collector:
        """Collector ``collector_id``'s ``incarnation``-th start (0 first, +1 per restart); not started yet."""

    def close(self) -> None:
        """Release what the backend shares between its collectors (after they are closed)."""


def make_backend(
    name: str,
    setup: CollectorSetup,
    queue: TransitionQueue[CollectorBatch],
    weights: WeightStore,
    gate: RatioGate,
    *,
    num_collectors: int,
    env: EnvConfig,
    env_device: str,
    env_seed: Callable[[int, int], int],
    action_seed: Callable[[int, int], int],
    thread_env: Callable[[int, int], envs.VecEnv],
    template_snapshot: Callable[[], dict[str, Any]],
    ray: RayConfig,
    env_factory: Callable[[int, int, int], Any] | None = None,
) -> Backend:
    """The backend ``name`` (``runtime.backend``) names, wired to the trainer's queue, weights and gate.

    ``thread_env(collector_id, incarnation)`` gives a thread collector its env (built in the trainer's
    process); process and Ray collectors build theirs from ``env`` on ``env_device`` (Ray: the actor's own,
    ``ray.env_device``), seeded by ``env_seed(collector_id, incarnation)``, or with ``env_factory`` (a
    module-level callable, pickled by reference) when given. ``template_snapshot()`` sizes the process
    backend's shared weights.
    """
    if name == "thread":
        from mbpo.agents import make_agent
        from mbpo.runtime.backends.thread import ThreadBackend

        return ThreadBackend(setup, queue, weights, gate, thread_env, action_seed, make_agent)
    if name == "process":
        from mbpo.runtime.backends.process import ProcessBackend

        return ProcessBackend(setup, queue, weights, gate, num_collectors, env, env_device, env_seed, action_seed,
                              template_snapshot(), env_factory)
    if name == "ray":
        from mbpo.runtime.backends.ray import RayBackend

        return RayBackend(setup, queue, weights, gate, num_collectors, ray, env, env_seed, action_seed, env_factory)
    raise ValueError(f"runtime.backend={name!r} is not a backend; expected one of {', '.join(BACKENDS)}")
