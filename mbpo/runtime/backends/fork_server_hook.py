"""Imported by the fork server alone (``forkserver.FORKSERVER_PRELOAD``): a hook on each fork it makes.

The server keeps SIGINT and SIGTERM blocked, and a child it forks starts with its mask. SIGTERM is unblocked
in the child at once, so that it ends one again (the trainer's ``terminate()`` of a collector still importing,
a scheduler's SIGTERM to the process group), as it does a spawned child; SIGINT stays blocked until the
collector ignores it (``collector_main``), so a Ctrl-C while it imports prints no KeyboardInterrupt traceback.
Nothing else imports this module: in the trainer the hook would also run in children that other libraries fork
with Python's hooks (a subprocess with ``preexec_fn``: Ray's head processes, which must keep SIGTERM blocked).
"""

from __future__ import annotations

import os
import signal


def _takes_sigterm_again() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


os.register_at_fork(after_in_child=_takes_sigterm_again)
