"""runtime.backend: the names the config accepts are exactly the backends make_backend builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from mbpo.config.validation import _CHOICES
from mbpo.runtime.backends import BACKENDS, make_backend

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(30)


def test_the_config_offers_exactly_the_backends_make_backend_chooses_from() -> None:
    assert _CHOICES["runtime.backend"] == BACKENDS


def test_a_name_that_is_no_backend_is_refused_naming_the_choices() -> None:
    unused: Any = None  # refused before any of these is looked at
    with pytest.raises(ValueError, match=r"runtime.backend='threads' is not a backend; expected one of thread, "
                                         r"process, ray"):
        make_backend("threads", unused, unused, unused, unused, num_collectors=1, env=unused, env_device="cpu",
                     env_seed=unused, action_seed=unused, thread_env=unused, template_snapshot=unused, ray=unused)


SCRIPT = """
import sys
sys.path.insert(0, {folder!r})
from mbpo.cli import main
if __name__ == "__main__":
    sys.exit(main(["train", "--config", "configs/pendulum_sac.yaml", "run_dir={run_dir}", "runtime.backend={backend}",
                   "env.id=ScriptsPendulum", "env.factory=scripts_env:make_env", "total_env_steps=128",
                   "agent.learning_starts=64", "agent.batch_size=32", "agent.sac.hidden_sizes=[16,16]",
                   "progress=false", "device=cpu", "runtime.num_collectors=1", "runtime.collection_batch_size=32",
                   "eval_every=10000", "checkpoint.every=10000"]))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["thread", "process", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_factory_from_a_folder_the_script_put_on_sys_path_builds_on_every_backend(
        tmp_path: Path, backend: str) -> None:
    """A script that puts its env's folder on ``sys.path`` and names the factory: a collector process has the
    trainer's path (its fork server starts with it); a Ray actor's worker had only its own, and the factory
    'cannot be imported' there. The factory's module imports one from a zip on ``PYTHONPATH``, which every
    worker keeps too.
    """
    if backend == "ray":
        pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
    folder = tmp_path / "my_envs"
    folder.mkdir()
    (folder / "scripts_env.py").write_text(
        "import envs\nimport zipped_names\n\n\ndef make_env(num_envs, device, seed):\n"
        "    return envs.make(zipped_names.ENV_ID, num_envs, device=device, seed=seed)\n")
    with zipfile.ZipFile(tmp_path / "names.zip", "w") as archive:
        archive.writestr("zipped_names.py", "ENV_ID = 'Pendulum-v1'\n")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(folder=str(folder), run_dir=tmp_path / "run", backend=backend))
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=110,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "names.zip")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["env_steps"] == 128


def test_the_workers_pythonpath_is_absolute_and_names_only_what_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray worker runs in its own working directory: a relative entry the driver inherited would name another
    folder there, and one that does not exist nothing at all.
    """
    from mbpo.runtime.backends.ray import driver_runtime_env  # plain Python: no Ray needed

    (tmp_path / "rel").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["rel", "missing.zip"]))
    entries = driver_runtime_env()["env_vars"]["PYTHONPATH"].split(os.pathsep)
    assert str(tmp_path / "rel") in entries and all(os.path.isabs(e) and os.path.exists(e) for e in entries)
    assert not any(e.endswith("missing.zip") for e in entries)
