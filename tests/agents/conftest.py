"""Fixtures shared by the agent tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def one_intra_op_thread() -> Iterator[None]:
    """torch on one intra-op thread for the test: comparisons of two learners' numbers bit for bit do not depend on
    how a matmul is split over threads.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
