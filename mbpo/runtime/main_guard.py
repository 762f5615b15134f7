"""A collector process imports the user's script again: the missing ``__main__`` guard, and what it cannot find.

A spawned collector process imports the script that started the run (as ``__mp_main__``) before it runs its
own code; a script that builds and runs a trainer at its top level, with no ``if __name__ == "__main__":``,
would build another trainer there. Python's own check fires only once that child starts a process itself, so
the child would instead fail on something else (the run dir in use) and the trainer would see a collector
that "exited with code 1", restart it three times and give up. The child exits with :data:`UNGUARDED_MAIN_EXIT`
instead, and the trainer reads that code as this mistake.
"""

from __future__ import annotations

import ast
import functools
import inspect
import multiprocessing as mp
import os
import sys
from pathlib import Path
from typing import Any

from mbpo.errors import MbpoError

__all__ = [
    "COLLECTOR_PROCESS_PREFIX", "UNGUARDED_MAIN_EXIT", "UnguardedMainError", "exit_if_a_child_imports_main",
    "MainNotImportableError", "check_children_can_import_main",
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


class MainNotImportableError(MbpoError):
    """What a process-backend collector would import from the parent's ``__main__`` is not there for it."""


def check_children_can_import_main(env_factory: Any = None) -> None:
    """Before a process-backend run starts a child: a child runs the parent's script again by its path (as
    ``__mp_main__``, its ``if __name__ == "__main__":`` block skipped) and looks up there what its spec names in
    ``__main__``. A script read from stdin cannot be run again, and an ``env_factory`` defined in the guarded
    block, or in an interactive ``__main__`` (``python -c``, a REPL, a notebook), is not found: each child failed
    with the same AttributeError or FileNotFoundError until the restart budget was spent, a message naming
    ``runtime.max_restarts``. Refused here, with what to do instead.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    path = getattr(main, "__file__", None)
    if getattr(spec, "name", None) is None and path is not None and not os.path.isfile(path):  # what a child runs
        raise MainNotImportableError(
            f"runtime.backend=process: this program runs from {path}, which each collector process runs again "
            "by its path and cannot; run it from a file (python script.py), or use runtime.backend=thread")
    target = env_factory
    while isinstance(target, functools.partial):
        target = target.func
    if target is not None and not (inspect.isfunction(target) or inspect.isclass(target)):
        target = type(target)  # an instance: its class is what the child imports
    qualname = str(getattr(target, "__qualname__", ""))
    if target is None or getattr(target, "__module__", None) != "__main__" or "<" in qualname:
        return  # a lambda or a local function: check_plain names it when the spec is sent
    name = f"env_factory {qualname}"
    run_as = str(getattr(spec, "name", None) or "")
    if run_as == "__main__" or run_as.endswith(".__main__"):  # python -m pkg, python dir/, a zip app
        raise MainNotImportableError(
            f"runtime.backend=process: {name} is defined in {run_as}, the __main__ module of a package run as a "
            "program, which a collector process never imports (multiprocessing's rule); define it in another "
            "module of the package and import it from there, or use runtime.backend=thread")
    if path is None:
        raise MainNotImportableError(
            f"runtime.backend=process: {name} is defined in an interactive __main__ (python -c, a REPL, a "
            "notebook), which a collector process cannot import; define it in a module file and import it from "
            "there, or use runtime.backend=thread")
    top = qualname.split(".")[0]
    if not os.path.isfile(path):  # imported by its module name (python -m, a zip app): cannot read it here
        return
    try:
        defined = _names_a_child_defines(ast.parse(Path(path).read_text(encoding="utf-8")).body)
    except (OSError, SyntaxError, UnicodeDecodeError):  # cannot tell: the child will say
        return
    if top not in defined:
        raise MainNotImportableError(
            f"runtime.backend=process: {name} is defined in {path} under `if __name__ == \"__main__\":` (or "
            "where importing the script does not reach), which a collector process skips when it imports the "
            "script; define it at the script's top level, or use runtime.backend=thread")


def _names_a_child_defines(body: list[ast.stmt]) -> set[str]:
    """The names the statements ``body`` bind when the script is imported as ``__mp_main__``: those of every
    block (if, try, with, for, match) but the ``__name__ == "__main__"`` one (its else branch runs).
    """
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
            continue
        for target in _targets(node):
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        for field, value in ast.iter_fields(node):
            if isinstance(node, ast.If) and field == "body" and _is_main_guard(node.test):
                continue
            blocks = value if isinstance(value, list) else []
            for item in blocks:
                if isinstance(item, ast.stmt):
                    names |= _names_a_child_defines([item])
                elif isinstance(item, (ast.ExceptHandler, ast.match_case)):
                    names |= _names_a_child_defines(item.body)
    return names


def _targets(node: ast.stmt) -> list[ast.AST]:
    """What an assignment-like statement binds: ``x = ``, ``x: T = ``, ``x += ``, ``for x in``, ``with ... as x``."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        return [node.target]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))
