"""Shared fixtures and marker handling for the mbpo test suite."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests skip cleanly, with the reason, on a machine without CUDA."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; torch.cuda.is_available() is False here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cuda_device() -> str:
    """The first CUDA device, as a string (gpu-marked tests only)."""
    return "cuda:0"


@pytest.fixture(autouse=True)
def one_torch_thread() -> None:
    """Tests share 2 cores with whatever else runs: oversubscribed intra-op pools are 100x slower."""
    torch.set_num_threads(1)
