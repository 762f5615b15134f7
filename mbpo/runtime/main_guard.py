"""A trainer built while a collector process imports the user's script: the missing ``__main__`` guard.

A spawned collector process imports the script that started the run (as ``__mp_main__``) before it runs its
own code; a script that builds and runs a trainer at its top level, with no ``if __name__ == "__main__":``,
would build another trainer there. Python's own check fires only once that child starts a process itself, so
the child would instead fail on something else (the run dir in use) and the trainer would see a collector
that "exited with code 1", restart it three times and give up. The child exits with :data:`UNGUARDED_MAIN_EXIT`
instead, and the trainer reads that code as this mistake.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys

from mbpo.errors import MbpoError

__all__ = [
    "COLLECTOR_PROCESS_PREFIX", "UNGUARDED_MAIN_EXIT", "UnguardedMainError", "exit_if_a_child_imports_main",
]

UNGUARDED_MAIN_EXIT = 78
"""sysexits' EX_CONFIG: the child's exit code when it found a trainer built while it imported the script."""


class UnguardedMainError(MbpoError):
    """The script that started a process-backend run builds a trainer at its top level."""

    def __init__(self) -> None:
        super().__init__(
            "runtime.backend=process starts each collector by importing your script again, and that import built "
            "another trainer: the script builds and runs its trainer at its top level. Put that code under "
            '`if __name__ == "__main__":` (Python\'s rule for the spawn and forkserver start methods), or use '
            "runtime.backend=thread")


COLLECTOR_PROCESS_PREFIX = "mbpo-collector-"
"""How the process backend names its children (``mbpo-collector-<id>.<incarnation>``)."""


def exit_if_a_child_imports_main() -> None:
    """In a collector process that is still importing the parent's ``__main__``, end the process with
    :data:`UNGUARDED_MAIN_EXIT` (a clean exit: the parent names the mistake); elsewhere, nothing. Another
    library's spawned child (a process pool's) is left to Python's own message about the missing guard.
    """
    child = mp.current_process()  # spawn names it, and sets _inheriting, before it imports __main__
    if getattr(child, "_inheriting", False) and child.name.startswith(COLLECTOR_PROCESS_PREFIX):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(UNGUARDED_MAIN_EXIT)  # not SystemExit: a fork server's child ends any exception with code 1
