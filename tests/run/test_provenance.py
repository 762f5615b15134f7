"""mbpo.run.provenance: what a run records of the software that made it."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import torch

from mbpo.run import provenance


def test_torch_is_recorded_with_its_build_even_where_its_metadata_has_a_bare_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU image's own torch said 2.11.0 in its metadata and 2.11.0+cu130 as torch.__version__: the record
    must keep the build (which CUDA), so it takes torch's own version.
    """
    bare = metadata.version

    def version(name: str) -> str:
        return "2.0.0" if name == "torch" else bare(name)

    monkeypatch.setattr(provenance.metadata, "version", version)
    versions = provenance.package_versions()
    assert versions["torch"] == torch.__version__
    assert versions["numpy"] == bare("numpy")  # the others still from their distributions


def test_an_mbpo_installed_inside_another_repository_names_no_commit(tmp_path: Path) -> None:
    """A user's project repository with a venv inside it (ignored): its commit is not mbpo's. A package the
    repository tracks (a checkout of mbpo) names its commit.
    """
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    installed, checkout = tmp_path / ".venv/lib/site-packages/mbpo", tmp_path / "mbpo"
    for package in (installed, checkout):
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
    (tmp_path / ".gitignore").write_text(".venv/\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "the user's project")
    assert provenance.code_version(installed) == {"commit": None, "dirty": None}
    ours = provenance.code_version(checkout)
    assert ours["commit"] is not None and len(ours["commit"]) == 40 and ours["dirty"] is False
