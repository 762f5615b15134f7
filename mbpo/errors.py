"""The one base class for a user's mistake (as opposed to a bug in mbpo).

The CLI prints such an error as one line, ``error: <message>``, and exits 2;
anything else keeps its traceback. Messages say what was wrong and how to fix it.
"""

from __future__ import annotations

__all__ = ["MbpoError"]


class MbpoError(Exception):
    """Something the user can fix: a config, a path, a checkpoint, a run dir."""
