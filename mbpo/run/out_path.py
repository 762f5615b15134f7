"""Where a command writes its one output file (``plot --out``, ``eval --video``): checked before any work, so a
path that cannot take the file is one line, not a traceback after the episodes are run.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["output_file_problem"]


def output_file_problem(path: Path) -> str | None:
    """What keeps ``path`` from being written as a file (it is a folder, its folder is missing, the file system
    refuses it: read-only, no permission, /proc), as the end of a sentence that starts with the path; None where it
    can be.
    """
    if path.is_dir():
        return "is a folder; expected a file path in it (e.g. " + str(path / f"out{path.suffix or '.png'}") + ")"
    folder = path.parent
    if not folder.is_dir():
        return f"the folder {str(folder)!r} does not exist; create it first or write elsewhere"
    existed = path.exists()
    try:  # opened to append, as the writer will open it to write: an existing file is left as it is
        with open(path, "ab"):
            pass
    except OSError as exc:
        return f"cannot be written ({exc.strerror}); write elsewhere"
    if not existed:
        path.unlink(missing_ok=True)
    return None
