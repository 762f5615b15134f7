"""Where a command writes its one output file (``plot --out``, ``eval --video``): checked before any work, so a
path that cannot take the file is one line, not a traceback after the episodes are run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["output_file_problem"]


def output_file_problem(path: Path) -> str | None:
    """What keeps ``path`` from being written as a file (it is a folder, its folder is missing, the file system
    refuses it: read-only, no permission, /proc, a name too long), as the end of a sentence that starts with the
    path; None where it can be. Nothing the user has is touched: an existing path is only looked at (a FIFO, a
    device or a link is left to the writer), and a new one is created exclusively, to be removed at once.
    """
    try:
        if path.is_dir():
            return "is a folder; expected a file path in it (e.g. " + str(path / f"out{path.suffix or '.png'}") + ")"
        folder = path.parent
        if not folder.is_dir():
            return f"the folder {str(folder)!r} does not exist; create it first or write elsewhere"
        if os.path.lexists(path):
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode) and not os.access(path, os.W_OK):
                return "cannot be written (the file is read-only); write elsewhere"
            return None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        return f"cannot be written ({exc.strerror or exc}); write elsewhere"
    os.close(fd)
    path.unlink()
    return None
