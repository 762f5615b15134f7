"""The async run's shutdown path: stopping and joining its workers by a deadline, and taking a consistent state
while the model thread may be mid-cycle (a fit takes minutes; a checkpoint must not hold half of one).
"""

from __future__ import annotations

import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

__all__ = ["stop_workers", "state_between_cycles", "checkpoint_between_cycles", "final_checkpoint", "Joinable",
           "CycleHolder"]


class Joinable(Protocol):
    """The collector pool, as shutdown sees it."""

    def stop(self) -> None: ...

    def join(self, deadline: float) -> list[str]: ...


class CycleHolder(Protocol):
    """The model thread, as shutdown and checkpoints see it."""

    cycle_lock: threading.Lock
    hold: threading.Event

    def join(self, timeout: float) -> bool: ...


def stop_workers(pool: Joinable, model_worker: CycleHolder | None, drain: Callable[[], Iterable[Any]],
                 ingest: Callable[[Any], None], timeout_s: float) -> None:
    """Stop every collector and the model thread, join them by ``timeout_s`` seconds from now, and ingest what
    is still queued (nothing collected is lost); say which ones are still running at the deadline.
    """
    pool.stop()
    deadline = time.monotonic() + timeout_s
    late = pool.join(deadline)
    if model_worker is not None and not model_worker.join(max(deadline - time.monotonic(), 0.0)):
        late.append("model thread")
    for item in drain():
        ingest(item)
    if late:
        print(f"[mbpo] still running after runtime.shutdown_timeout_s={timeout_s}: {', '.join(late)} (daemon "
              "threads; they end with the process)", file=sys.stderr)


def state_between_cycles(model_worker: CycleHolder | None, take: Callable[[], dict[str, Any]],
                         timeout: float) -> dict[str, Any] | None:
    """``take()``, run while the model thread is between cycles; None if a cycle still runs after ``timeout``
    seconds (0: do not wait).
    """
    if model_worker is None:
        return take()
    if not model_worker.cycle_lock.acquire(timeout=timeout):
        return None
    try:
        return take()
    finally:
        model_worker.cycle_lock.release()


def checkpoint_between_cycles(model_worker: CycleHolder | None, take: Callable[[], dict[str, Any]],
                              save: Callable[[dict[str, Any]], Any]) -> bool:
    """Write a due periodic checkpoint if the model thread is between cycles and say so; if it is mid-cycle, the
    caller tries again on its next pass (the learner keeps training meanwhile instead of waiting for the fit).
    Until the file is written the model thread starts no new cycle, which would change the model buffer (saved
    by reference on CPU) under torch.save.
    """
    if model_worker is not None:
        model_worker.hold.set()
    state = state_between_cycles(model_worker, take, 0)
    if state is None:
        return False
    save(state)
    if model_worker is not None:
        model_worker.hold.clear()
    return True


def final_checkpoint(env_steps: int, save: Callable[[], Path], announce: bool) -> None:
    """Written however the run ends (done, signal, a worker's error): nothing trained is lost. Not before the
    first env step: there is nothing to resume, and a checkpoint would stand in the way of a new start.
    """
    if env_steps == 0:
        return
    try:
        path = save()
    except Exception as exc:  # noqa: BLE001 - never mask the error that ended the run
        print(f"[mbpo] the final checkpoint could not be written: {exc}", file=sys.stderr)
    else:
        if announce:  # a stop or a failure: the run is not done
            print(f"[mbpo] final checkpoint: {path}; `python -m mbpo resume {shlex.quote(str(path.parent.parent))}` "
                  "goes on from it", file=sys.stderr)
