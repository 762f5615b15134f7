"""``runtime.backend=ray``: collectors as Ray actors, on any node of a cluster (the ``ray`` extra).

For more simulators than one machine runs, or a GPU env on each of several
nodes feeding one learner. The learner, the model thread and the buffers stay
in the driver, on the run's device. Per collector, a proxy thread in the
driver runs the same :class:`~mbpo.runtime.collectors.CollectorLoop` as the
other backends (collectors round-robin over the cluster's nodes): the driver's
:class:`~mbpo.runtime.gate.RatioGate` grants batches, so no counter crosses the
network; each actor has at most two outstanding, the second asked for only if
the gate lets it through at once. Results come back as object refs taken with
``ray.wait`` into the bounded queue. Each published weight version is
``ray.put`` once; an actor is handed the newest ref with its next batch only
when its version is older.

``runtime.ray.address: null`` starts a private Ray bound to 127.0.0.1 (no
dashboard UI, no usage stats; Ray's minimal dashboard process for its own API
still runs, on 127.0.0.1) and shuts it down at the end, whatever other Ray runs
on the machine or ``RAY_ADDRESS`` names (Ray's own default would join that one); ``auto`` or
``ray://host:port`` joins a cluster and leaves it running. Anyone who can reach
a cluster's ports can run code on it (Ray's token authentication, on by default
in recent Ray, is all that stands in the way): open a cluster only inside a
network you trust.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mbpo.config import EnvConfig, RayConfig
from mbpo.errors import MbpoError, remote_mbpo_error
from mbpo.runtime.backends.child import ChildSpec
from mbpo.runtime.backends.ray_actor import CollectorActor, to_numpy, to_torch
from mbpo.runtime.collectors import CollectorBatch, CollectorLoop, CollectorSetup, CollectorStopped
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.handoff import check_plain
from mbpo.runtime.proc_tree import descendants, kill_and_wait, stop_all
from mbpo.runtime.queue import TransitionQueue
from mbpo.runtime.timing import POLL_S, RAY_BEAT_EVERY_S, RAY_START_TIMEOUT_S
from mbpo.runtime.weights import WeightStore

__all__ = ["RayBackend", "RayCollector", "RayCollectorError", "import_ray", "start_private_ray", "stop_private_ray"]

INSTALL = 'pip install -e ".[ray]"'
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread while it starts a private Ray: Ray's head processes (GCS,
    raylet) and the workers they start inherit the mask, so a signal to the run's whole process group (Ctrl-C
    in a terminal, a scheduler's SIGTERM) reaches the trainer alone, which stops its actors and then Ray.
    Otherwise raylet and GCS die with the signal and Ray's core worker ends the trainer (exit 1) before its
    final checkpoint. A signal that comes meanwhile is delivered once the mask is restored.
    """
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks (and no process groups to signal)
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def driver_runtime_env() -> dict[str, Any]:
    """The job's runtime env: this process's own ``sys.path`` entries (a script's directory, a folder it put on the
    path, the working directory, a zip) ahead of the ``PYTHONPATH`` it was started with, as the workers'
    ``PYTHONPATH`` (which replaces theirs), so that a factory from a module only the driver's path finds unpickles
    and imports in an actor as it does in a collector process (whose fork server starts with the trainer's
    ``sys.path``). The interpreter's own entries (stdlib, site-packages) are the workers' already.
    """
    import site

    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    own = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                          *([user] if isinstance(user, str) else []))]

    def interpreters(path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == o or real.startswith(o + os.sep) for o in own)

    inherited = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    extra = [os.path.abspath(e) for e in sys.path if isinstance(e, str)]  # absolute: a worker's cwd is its own
    entries = [p for p in extra if not interpreters(p)] + inherited
    entries = [p for p in entries if os.path.exists(p)]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(entries))}} if entries else {}


def start_private_ray(ray: Any, num_cpus: float) -> tuple[str | None, bool]:
    """Start a new local Ray whose servers listen on loopback only; returns what :func:`stop_private_ray` restores.

    ray.init turns a node address of 127.0.0.1 into this machine's reachable one, and its servers then listen on
    every interface; with cluster mode off (the switch Ray uses on macOS and Windows) the node address is loopback
    and every server binds 127.0.0.1. Set for Ray's own processes (the environment) and for this one (the
    constant Ray read when it was imported). "local": a new Ray even where RAY_ADDRESS is set or another runs here.
    """
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    saved = (os.environ.get(LOOPBACK_ENV), ray._private.ray_constants.ENABLE_RAY_CLUSTER)
    os.environ[LOOPBACK_ENV] = "0"
    ray._private.ray_constants.ENABLE_RAY_CLUSTER = False
    with stop_signals_blocked():
        ray.init(address="local", num_cpus=max(int(-(-num_cpus // 1)), 1), include_dashboard=False,
                 configure_logging=False, log_to_driver=True, runtime_env=driver_runtime_env())
    return saved


def stop_private_ray(ray: Any, saved: tuple[str | None, bool]) -> None:
    """Shut down the Ray :func:`start_private_ray` started and restore the cluster mode it changed.

    Its head processes block SIGTERM (:func:`stop_signals_blocked`), so the SIGTERM ``ray.shutdown`` sends each
    before its SIGKILL only waited out a second per process (5 s at the end of every run): they get the SIGKILL
    at once, after the driver has disconnected, as ``ray.shutdown`` orders it, and so do the agents and workers
    below them, which would otherwise outlive their raylet by seconds; all are gone when it returns.
    """
    node: Any = getattr(getattr(ray._private, "worker", None), "_global_node", None)
    kill_all = getattr(node, "kill_all_processes", None)
    if kill_all is not None:  # Node.kill_all_processes(check_alive, allow_graceful, wait), which ray.shutdown calls
        def kill_at_once(check_alive: bool = True, allow_graceful: bool = False, wait: bool = False) -> None:
            heads = {info.process.pid for infos in node.all_processes.values() for info in infos}
            try:
                stop_all(heads)  # frozen, raylet starts no worker after the look below
                kill_and_wait(descendants(heads), timeout_s=5.0)  # agents, workers: they outlive raylet by seconds
            finally:  # never leaves the heads frozen (a second Ctrl-C meanwhile)
                kill_all(check_alive=check_alive, allow_graceful=False, wait=True)

        node.kill_all_processes = kill_at_once
    ray.shutdown()
    env, constant = saved
    ray._private.ray_constants.ENABLE_RAY_CLUSTER = constant
    if env is None:
        os.environ.pop(LOOPBACK_ENV, None)
    else:
        os.environ[LOOPBACK_ENV] = env


class RayCollectorError(RuntimeError):
    """A collector actor raised (the message holds its traceback) or died (the message says why)."""


def import_ray() -> Any:
    """Ray, or an error with the one command that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise MbpoError(f"runtime.backend=ray needs Ray, which is not installed ({exc}); install it with: "
                        f"{INSTALL}") from None
    return ray


class RayCollector(CollectorLoop):
    """The driver-side half of a collector actor: creates the actor and runs its gate/queue loop."""

    killable = True
    depth = 2

    def __init__(self, collector_id: int, incarnation: int, setup: CollectorSetup,
                 queue: TransitionQueue[CollectorBatch], weights: WeightStore, gate: RatioGate,
                 backend: RayBackend, spec: ChildSpec) -> None:
        super().__init__(collector_id, incarnation, setup, queue, weights, gate)
        self.backend, self.spec = backend, spec
        self.actor: Any = None
        self.pid: int | None = None
        self.node_id: str | None = None
        self.node_ids: set[str] = set()
        """Nodes whose data this collector's batches carry (one actor, one node)."""
        self._actor_version = 0
        self._turns = 0
        """Batches asked of this incarnation's actor so far: each call carries its turn (CollectorActor.collect)."""
        self._closed = False

    # -- the Collector protocol --------------------------------------------------------
    def _launch(self) -> None:
        check_plain(self.spec, f"collector {self.collector_id}'s spec")
        self.actor = self.backend.actor_class.options(
            scheduling_strategy=self.backend.placement(self.collector_id)).remote(self.spec)

    def close(self) -> None:
        """Stop the proxy and kill the actor (a hung one included). Idempotent."""
        self.stop()
        if self._closed:
            return
        self._closed = True
        if self.actor is not None:
            self.backend.ray.kill(self.actor, no_restart=True)
        if self._thread.ident is not None:
            self._thread.join(5.0)
        self.actor = None

    # -- the proxy thread ------------------------------------------------------------------
    def _prepare(self) -> None:
        where = self._result(self.actor.where.remote(), startup=True)
        self.pid, self.node_id = where["pid"], where["node_id"]
        if self.setup.debug:
            print(f"[mbpo debug] collector {self.collector_id}.{self.incarnation} runs as pid {self.pid} on Ray node "
                  f"{self.node_id}", file=sys.stderr)
            for line in where["debug"]:  # the actor's own words, in the process backend's form
                print(f"[mbpo debug] collector {self.collector_id} (pid {self.pid}): {line}", file=sys.stderr)

    def _submit(self, first: int, granted: int) -> Any:
        """Ask the actor for a batch (it runs its batches one after another, in the order asked)."""
        version, ref = self.backend.newest_weights()
        weights = ref if version != self._actor_version else None  # only when the actor's are older
        self._actor_version = version
        turn, self._turns = self._turns, self._turns + 1
        return self.actor.collect.remote(turn, first, granted, version, weights)

    def _finish(self, ref: Any) -> CollectorBatch:
        from tensordict import TensorDict

        result = self._result(ref)
        data = to_torch(result["data"], copy=False)  # read once, by the replay buffer's copy
        td = TensorDict(data, batch_size=[next(iter(data.values())).shape[0]])
        self.node_ids.add(str(self.node_id))
        now = time.monotonic()  # the actor's clock may be another machine's: times are the driver's
        return CollectorBatch(td, self.collector_id, result["policy_version"], list(result["episode_returns"]),
                              result["env_steps"], result["dropped"], now, now - result["seconds"],
                              env_s=result["env_s"], act_s=result["act_s"], planned=result["planned"],
                              cpu_s=result["cpu_s"])

    def _result(self, ref: Any, startup: bool = False) -> Any:
        """``ray.get(ref)`` once ``ray.wait`` says it is ready; heartbeats while waiting; an actor's error or
        death raised here (a collector's MbpoError stays one: an env fault keeps its type).
        """
        ray = self.backend.ray
        deadline = time.monotonic() + RAY_START_TIMEOUT_S
        beat_ref, asked = None, 0.0
        while True:
            ready, _ = ray.wait([ref], timeout=POLL_S)
            if ready:
                try:
                    return ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    raise self._remote_error(exc) from None
                except ray.exceptions.RayActorError as exc:
                    if self.abandoned or self._closed:
                        raise CollectorStopped from None
                    raise RayCollectorError(f"collector {self.collector_id}'s actor died "
                                            f"({type(exc).__name__}): {exc}") from None
            if self.abandoned or (self._closed and self._stop.is_set()):
                raise CollectorStopped
            now = time.monotonic()
            if startup:
                if now > deadline:
                    raise RayCollectorError(f"collector {self.collector_id}'s actor did not start within "
                                            f"{RAY_START_TIMEOUT_S:.0f} s (are there free resources for it?)")
                self.beat()
                continue
            if beat_ref is not None and ray.wait([beat_ref], timeout=0)[0]:
                try:  # it last stepped that many seconds before it answered
                    self._beat = max(self._beat, time.monotonic() - ray.get(beat_ref))
                except ray.exceptions.RayError:
                    pass  # the actor died: the collect ref says so next
                beat_ref = None
            if beat_ref is None and now - asked > RAY_BEAT_EVERY_S:
                beat_ref, asked = self.actor.seconds_since_step.remote(), now

    def _remote_error(self, exc: Any) -> BaseException:
        cause = getattr(exc, "cause", None)
        headline = ":" if cause is None else f" {type(cause).__name__}: {(str(cause).splitlines() or [''])[0]}"
        pid = self.pid if self.pid is not None else getattr(exc, "pid", None)  # None: it failed before it said
        where = f"collector {self.collector_id}'s actor (pid {pid}) raised{headline}\n{exc}"
        if isinstance(cause, MbpoError):
            return remote_mbpo_error(type(cause).__name__, str(cause), where)
        return RayCollectorError(where)


def _ordered(ray: Any) -> type:
    """The actor class with ``collect`` in a concurrency group of two (the driver asks one batch ahead): the
    later call waits its turn while the earlier one runs (Ray may start it first), and the heartbeat is answered
    from the default group.
    """

    class OrderedCollectorActor(CollectorActor):
        @ray.method(concurrency_group="collect")
        def collect(self, *args: Any) -> dict[str, Any]:
            return super().collect(*args)

    return OrderedCollectorActor


class RayBackend:
    """Connects to (or starts) Ray, publishes weights into its object store, and builds collector actors."""

    name = "ray"
    uses_trainer_env = False
    """Every actor builds its own env; the trainer's first one only gave the spaces."""

    def __init__(self, setup: CollectorSetup, queue: TransitionQueue[CollectorBatch], weights: WeightStore,
                 gate: RatioGate, num_collectors: int, config: RayConfig, env: EnvConfig,
                 env_seed: Callable[[int, int], int], action_seed: Callable[[int, int], int],
                 env_factory: Callable[..., Any] | None = None) -> None:
        self.ray = import_ray()
        self.setup, self.queue, self.weights, self.gate, self.config = setup, queue, weights, gate, config
        self.env, self.env_factory = env, env_factory
        self.env_seed, self.action_seed = env_seed, action_seed
        self.started_ray = False
        self._cluster_mode: tuple[str | None, bool] = (None, True)
        if not self.ray.is_initialized():
            self._connect(num_collectors)
        elif config.address not in (None, "auto"):
            current = self.ray.get_runtime_context().gcs_address
            if config.address.removeprefix("ray://") != current:
                raise MbpoError(f"this process is already connected to the Ray at {current}, not to "
                                f"runtime.ray.address={config.address}; call ray.shutdown() first, or drop the key")
        self.actor_class = self.ray.remote(
            num_cpus=config.num_cpus_per_collector, num_gpus=config.num_gpus_per_collector, max_concurrency=2,
            concurrency_groups={"collect": RayCollector.depth}, max_restarts=0)(_ordered(self.ray))
        self._lock = threading.Lock()
        self._newest: tuple[int, Any] = (0, None)
        weights.add_mirror(self._put)

    def _connect(self, num_collectors: int) -> None:
        c = self.config
        if c.address is None:  # private, local, loopback only
            num_cpus = c.num_cpus if c.num_cpus is not None else num_collectors * c.num_cpus_per_collector + 1
            if os.environ.get("RAY_ADDRESS"):
                print(f"[mbpo] ray: RAY_ADDRESS={os.environ['RAY_ADDRESS']} is set, runtime.ray.address is not: "
                      "starting a private Ray all the same (runtime.ray.address=auto joins RAY_ADDRESS's)",
                      file=sys.stderr)
            self._cluster_mode = start_private_ray(self.ray, num_cpus)
            self.started_ray = True
        else:
            try:
                self.ray.init(address=c.address, configure_logging=False, log_to_driver=True)
            except ConnectionError as exc:  # Ray's advice names its own --address flag, not this key
                env_address = os.environ.get("RAY_ADDRESS")
                found = f"at RAY_ADDRESS={env_address}" if env_address else "(RAY_ADDRESS unset, none started on " \
                    "this machine)"
                where = f"no running Ray was found {found}" if c.address == "auto" else \
                    f"no Ray answered at {c.address!r}"
                raise MbpoError(f"runtime.ray.address={c.address}: {where}; start one first (`ray start --head` "
                                "here, `ray start --address=HEAD:6379` on the others), or leave runtime.ray.address "
                                f"unset for a private local Ray ({str(exc).splitlines()[0][:160]})") from None
        print(f"[mbpo] ray: {'started a private local Ray' if self.started_ray else 'joined ' + str(c.address)} "
              f"({self.ray.cluster_resources().get('CPU', 0):g} CPUs, "
              f"{len(self.ray.nodes())} node{'s' if len(self.ray.nodes()) != 1 else ''})", file=sys.stderr)

    def _put(self, version: int, snapshot: dict[str, Any]) -> None:
        ref = self.ray.put(to_numpy(snapshot))  # once per published version, shared by every actor
        with self._lock:
            self._newest = (version, ref)

    def placement(self, collector_id: int) -> Any:
        """Collectors round-robin over the alive nodes (by node id, so the order is stable), softly: if that
        node cannot host one (busy, or gone), Ray places it elsewhere; a replacement so avoids a dead node.
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted(n["NodeID"] for n in self.ray.nodes() if n["Alive"])
        return NodeAffinitySchedulingStrategy(nodes[collector_id % len(nodes)], soft=True)

    def newest_weights(self) -> tuple[int, Any]:
        with self._lock:
            return self._newest

    def make_collector(self, collector_id: int, incarnation: int) -> RayCollector:
        c = self.config
        env_device = c.env_device or ("cuda:0" if c.num_gpus_per_collector > 0 else "cpu")
        spec = ChildSpec(collector_id, incarnation, self.setup, self.env, env_device,
                         self.env_seed(collector_id, incarnation), self.action_seed(collector_id, incarnation),
                         trainer_pid=os.getpid(), env_factory=self.env_factory)
        return RayCollector(collector_id, incarnation, self.setup, self.queue, self.weights, self.gate, self, spec)

    def close(self) -> None:
        """Stop publishing; shut down the Ray this run started (a joined cluster is left running)."""
        self.weights.remove_mirror(self._put)
        if self.started_ray:
            stop_private_ray(self.ray, self._cluster_mode)
            self.started_ray = False
