"""mbpo.run.provenance: what a run records of the software that made it."""

from __future__ import annotations

from importlib import metadata

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
