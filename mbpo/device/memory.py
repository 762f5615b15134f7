"""Give freed heap memory back to the OS, so a run's resident memory follows what it holds.

torch's CPU tensors live on the C heap. A model cycle (ensemble fit, then rollouts) allocates and
frees tens of MB of temporaries while the learner and the collectors allocate in their own threads;
glibc keeps what is freed in per-thread arenas for reuse, so without a trim the resident set climbs
to the sum of every arena's high-water mark: about 0.5 GB on top of the 0.3 GB in use in the default
run (docs/notes/rollout-memory.md).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

__all__ = ["release_free_memory"]


def _glibc_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, ...): nothing to trim this way
        return None


_MALLOC_TRIM = _glibc_malloc_trim()


def release_free_memory() -> None:
    """``malloc_trim(0)``: return the free pages of every arena to the OS (glibc only; a no-op elsewhere).

    A few milliseconds on a GB-sized heap; call it after a burst of temporaries, not per step.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
