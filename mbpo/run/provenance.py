"""What produced a run: the code's commit (and whether its tree had changes), the package versions and the
machine. A run records it in run.json when it starts and again at every resume, so that every figure can be
traced to the code and the CPU (whose flags decide precision) that made it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["provenance", "code_version", "package_versions", "machine", "PACKAGES", "CPU_FLAGS"]

PACKAGES = ("mbpo", "torch", "numpy", "gymnasium", "mujoco", "tensordict", "torchrl")
"""Packages whose versions every record names (None where one is not installed)."""
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The CPU flags that decide speed and precision (``precision: auto`` picks bf16 on AVX512_BF16 or AMX)."""
_ROOT = Path(__file__).resolve().parents[1]


def provenance(at_env_steps: int = 0, extra_packages: tuple[str, ...] = ()) -> dict[str, Any]:
    """One record: when, at which env step (0 at the start, the checkpoint's on a resume), the code, the package
    versions (``extra_packages`` beside :data:`PACKAGES`, e.g. stable_baselines3) and the machine.
    """
    return {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "at_env_steps": at_env_steps, "code": code_version(),
            "packages": package_versions(extra_packages), "machine": machine()}


def code_version(root: Path = _ROOT) -> dict[str, Any]:
    """The git commit of the checkout mbpo runs from, and whether tracked files differ from it (``dirty``);
    both None when the code is not a git checkout (an installed wheel: its version is in the packages).
    """
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10,
                                 check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    commit = git("rev-parse", "HEAD")
    if not commit or git("ls-files", "--error-unmatch", "--", "__init__.py") is None:
        return {"commit": None, "dirty": None}  # no repository, or one that does not track mbpo (a venv inside it)
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def package_versions(extra: tuple[str, ...] = ()) -> dict[str, str | None]:
    """``{distribution: version}``; None for one that is not installed. torch's is ``torch.__version__``, which
    names its build (``+cu130``, ``+cpu``): an image's own torch can carry a bare version in its metadata.
    """
    import torch

    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in (*PACKAGES, *extra):
        try:
            versions[name] = torch.__version__ if name == "torch" else metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine() -> dict[str, Any]:
    """CPU model, the flags of :data:`CPU_FLAGS` it has, the cores this process may use, bf16 on the CPU, and
    the GPUs torch sees.
    """
    import torch

    from mbpo.device.precision import native_bf16

    info = _cpuinfo()
    model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                 platform.processor() or platform.machine())
    flags = set(next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), []))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() \
        else []
    return {"cpu": model, "cpu_flags": sorted(flags & set(CPU_FLAGS)), "cpu_count": cores,
            "bf16_native_cpu": native_bf16("cpu")[0], "gpus": gpus, "platform": sys.platform}


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []
