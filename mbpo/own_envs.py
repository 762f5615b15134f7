"""mbpo's environments are the top-level package ``envs``, installed beside ``mbpo``. A directory named ``envs``
in the working directory (many RL projects keep one: rsl_rl's, Isaac Lab's layouts, or a folder of assets) came
first on ``sys.path`` under ``python -m mbpo`` and shadowed it: every command failed with ``module 'envs' has no
attribute ...``. ``import mbpo`` puts a finder first that resolves ``envs`` to the package beside it (lazily: the
import itself stays where it was).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["ENVS_DIR", "OwnEnvsFinder", "install", "refuse_the_users_envs_module"]

ENVS_DIR = Path(__file__).resolve().parent.parent / "envs"
"""Where mbpo's ``envs`` package is: beside ``mbpo`` (a checkout, an editable install or site-packages)."""


class OwnEnvsFinder:
    """A meta path finder of ``envs`` at :data:`ENVS_DIR`; its submodules then come from there by the package's
    own path.
    """

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "envs":
            return importlib.util.spec_from_file_location("envs", ENVS_DIR / "__init__.py",
                                                          submodule_search_locations=[str(ENVS_DIR)])
        if fullname.count(".") == 1 and fullname.startswith("envs."):
            refuse_the_users_envs_module(fullname)
        return None


def refuse_the_users_envs_module(fullname: str) -> None:
    """``envs.X`` that mbpo's package lacks but an ``envs`` folder elsewhere on ``sys.path`` holds (a user's own
    package of that name): a ModuleNotFoundError naming both, where Python's says only "No module named 'envs.X'".
    Looked up on the disk as it is now (no import system caches: ``""`` is the working directory of this call).
    """
    name = fullname.split(".", 1)[1]
    if _holds(ENVS_DIR, name):
        return
    for entry in sys.path:
        if not isinstance(entry, (str, os.PathLike)):
            continue
        folder = Path(os.path.abspath(os.path.join(entry or os.getcwd(), "envs")))
        if folder.resolve() != ENVS_DIR and _holds(folder, name):
            raise ModuleNotFoundError(
                f"{fullname} is in your package {folder}, but 'envs' is mbpo's own package ({ENVS_DIR}) in "
                "a process that imports mbpo, so yours cannot be imported under that name; rename your package "
                f"(for example to my_envs) and import my_envs.{name}", name=fullname)


def _holds(folder: Path, name: str) -> bool:
    """Whether ``folder`` has a module or package ``name`` (a file with an import suffix, or a directory)."""
    return (folder / name).is_dir() or any((folder / f"{name}{suffix}").is_file()
                                           for suffix in importlib.machinery.all_suffixes())


def install() -> None:
    """Put the finder first (once). An ``envs`` imported from elsewhere before mbpo is an ImportError that says
    so, not an AttributeError at mbpo's first use of it.
    """
    if not (ENVS_DIR / "__init__.py").is_file() or any(isinstance(f, OwnEnvsFinder) for f in sys.meta_path):
        return
    loaded = sys.modules.get("envs")
    where = getattr(loaded, "__path__", None)
    if loaded is not None and (where is None or ENVS_DIR not in {Path(p).resolve() for p in where}):
        raise ImportError(f"a module named 'envs' was imported from {list(where or [])} before mbpo, which needs "
                          f"its own envs package ({ENVS_DIR}) under that name; import mbpo first, or rename "
                          "your package")
    sys.meta_path.insert(0, OwnEnvsFinder())
