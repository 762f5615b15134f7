"""Named semaphores that say which run made them.

Under the ``spawn`` start method (the process backend's, and the default once torchrl is imported) every
multiprocessing lock, event and queue holds a named POSIX semaphore, ``/dev/shm/sem.<prefix>-<random>``,
with the prefix ``/mp`` for everyone. Renamed to ``/mp-mbpo<trainer pid>`` in the trainer and in each of its
collector processes, every such file in /dev/shm can be traced to the run that made it: a leak check (ours
in tests/runtime, or a user's) then looks at its own run's files and never at another process's.
"""

from __future__ import annotations

import multiprocessing as mp

__all__ = ["name_semaphores_after", "semaphore_files_of"]


def name_semaphores_after(run_pid: int) -> None:
    """Name the semaphores this process creates from now on after the run whose trainer has ``run_pid``.

    multiprocessing takes the prefix from the process's ``_config["semprefix"]`` (``SemLock._make_name``;
    no public setter, unchanged since Python 3.4).
    """
    mp.current_process()._config["semprefix"] = f"/mp-mbpo{run_pid}"  # type: ignore[attr-defined]


def semaphore_files_of(run_pid: int, names: set[str]) -> set[str]:
    """Of the /dev/shm entry ``names``, the semaphores of the run whose trainer has ``run_pid``."""
    return {n for n in names if n.startswith(f"sem.mp-mbpo{run_pid}-")}
