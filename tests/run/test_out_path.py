"""An output path is checked without touching what the user has: a file, a link, a FIFO stay as they are."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mbpo.run.out_path import output_file_problem

pytestmark = pytest.mark.timeout(30)


def test_a_new_file_in_a_writable_folder_can_be_written_and_is_not_left_behind(tmp_path: Path) -> None:
    assert output_file_problem(tmp_path / "chart.png") is None
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "chart.png").write_bytes(b"the user's chart")
    assert output_file_problem(tmp_path / "chart.png") is None
    assert (tmp_path / "chart.png").read_bytes() == b"the user's chart"


def test_a_dangling_link_stays_a_link_and_its_target_is_not_made(tmp_path: Path) -> None:
    (tmp_path / "chart.png").symlink_to(tmp_path / "elsewhere.png")
    assert output_file_problem(tmp_path / "chart.png") is None
    assert (tmp_path / "chart.png").is_symlink() and not (tmp_path / "elsewhere.png").exists()


def test_a_fifo_is_not_opened(tmp_path: Path) -> None:
    """Opening it would block with no reader, and hand a reader an empty stream before the real write."""
    os.mkfifo(tmp_path / "chart.png")
    assert output_file_problem(tmp_path / "chart.png") is None


@pytest.mark.parametrize(("name", "why"), [
    ("a" * 300 + ".png", r"cannot be written \(File name too long\); write elsewhere"),
    ("missing/chart.png", r"the folder '.*missing' does not exist"),
    ("folder.png", r"is a folder; expected a file path in it"),
])
def test_a_path_that_cannot_be_a_file_says_why(tmp_path: Path, name: str, why: str) -> None:
    (tmp_path / "folder.png").mkdir()
    problem = output_file_problem(tmp_path / name)
    assert problem is not None and re.search(why, problem), problem


def test_a_file_system_that_refuses_the_file_says_so() -> None:
    problem = output_file_problem(Path("/proc/chart.png"))  # a folder that exists, where no file can be made
    assert problem is not None and problem.startswith("cannot be written (") and problem.endswith("; write elsewhere")
