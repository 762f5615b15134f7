"""A directory named ``envs`` where the user runs mbpo (a common RL project layout, or a folder of assets) does
not shadow mbpo's own ``envs`` package: ``python -m`` puts the working directory first on ``sys.path``, and every
command failed with ``module 'envs' has no attribute ...``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd`` with mbpo as installed (not on PYTHONPATH: a folder named envs is a namespace
    package that a regular one later on sys.path would win over, but an installed one is not on sys.path).
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=100)


@pytest.mark.parametrize("layout", ["folder", "package"])
def test_an_envs_directory_in_the_working_directory_does_not_shadow_mbpos(tmp_path: Path, layout: str) -> None:
    (tmp_path / "envs").mkdir()
    if layout == "package":
        (tmp_path / "envs" / "__init__.py").write_text("NAME = 'the user\\'s own envs'\n")
    done = run(tmp_path, "-m", "mbpo", "rollout", "--env", "CartPole-v1", "--num-envs", "2", "--steps", "3")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["env_steps"] == 6


def test_another_envs_imported_before_mbpo_is_one_import_error_naming_both(tmp_path: Path) -> None:
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("")
    done = run(tmp_path, "-c", "import envs, mbpo")
    assert done.returncode == 1
    assert re.fullmatch(re.escape(f"ImportError: a module named 'envs' was imported from {[str(tmp_path / 'envs')]} "
                                  "before mbpo, which needs its own envs package (") + r"/\S+/envs" +
                        re.escape(") under that name; import mbpo first, or rename your package"),
                        done.stderr.strip().splitlines()[-1])


def test_a_module_of_the_users_own_envs_package_is_refused_by_name_not_as_missing(tmp_path: Path) -> None:
    """After ``import mbpo``, ``envs`` is mbpo's: the user's ``envs/my_task.py`` was "No module named
    'envs.my_task'" (and for env.factory, "not on sys.path or in <the folder that holds it>").
    """
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("")
    (tmp_path / "envs" / "my_task.py").write_text("def make_env():\n    raise AssertionError('never imported')\n")
    says = (f"envs.my_task is in your package {tmp_path.resolve() / 'envs'}, but 'envs' is mbpo's own package (",
            ") in a process that imports mbpo, so yours cannot be imported under that name; rename your package "
            "(for example to my_envs) and import my_envs.my_task")
    imported = run(tmp_path, "-c", "import mbpo, envs.classic, envs.my_task")
    assert imported.returncode == 1 and imported.stderr.strip().splitlines()[-1].startswith(
        f"ModuleNotFoundError: {says[0]}") and says[1] in imported.stderr, imported.stderr
    trained = run(tmp_path, "-m", "mbpo", "train", "env.factory=envs.my_task:make_env", "env.id=MyTask",
                  f"run_dir={tmp_path / 'run'}")
    assert trained.returncode == 2, trained.stderr
    mbpos = Path(__file__).resolve().parents[1] / "envs"
    assert trained.stderr.strip().splitlines()[-1] == (
        f"error: env.factory='envs.my_task:make_env' cannot be imported: {says[0]}{mbpos}{says[1]}")
    missing = run(tmp_path, "-c", "import mbpo, envs.nowhere")
    assert missing.stderr.strip().splitlines()[-1] == "ModuleNotFoundError: No module named 'envs.nowhere'"
    other = tmp_path / "other"  # "" on sys.path is the working directory of each import, not of the first
    (other / "envs").mkdir(parents=True)
    (other / "envs" / "other_task.py").write_text("")
    moved = run(tmp_path, "-c", "import os, sys, mbpo\nsys.path.insert(0, '')\ntry:\n    import envs.my_task\n"
                                "except ModuleNotFoundError:\n    os.chdir('other')\n    import envs.other_task")
    assert moved.stderr.strip().splitlines()[-1].startswith(
        f"ModuleNotFoundError: envs.other_task is in your package {other.resolve() / 'envs'}, but"), moved.stderr
