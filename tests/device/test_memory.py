"""release_free_memory: the heap memory a burst of temporaries leaves behind goes back to the OS."""

from __future__ import annotations

import sys

import pytest
import torch

from mbpo.device import memory

pytestmark = pytest.mark.timeout(60)


def resident_mib() -> int:
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024


@pytest.mark.skipif(not sys.platform.startswith("linux") or memory._MALLOC_TRIM is None, reason="needs glibc")
def test_freed_heap_memory_leaves_the_resident_set() -> None:
    blocks = [torch.ones(16_000) for _ in range(3_000)]  # 64 KB each, below glibc's mmap threshold: 183 MiB of heap
    last = blocks.pop()  # still in use, at the top of the heap: free() alone cannot give back what lies below it
    grown = resident_mib()
    del blocks
    assert resident_mib() > grown - 50  # freed, but still resident
    memory.release_free_memory()
    assert resident_mib() < grown - 150
    assert float(last.sum()) == 16_000
