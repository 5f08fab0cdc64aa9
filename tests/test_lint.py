"""The linter's, the formatter's and the type checker's verdicts are part of the test command: `ruff check` and
`ruff format --check` over the repository, with the settings pyproject.toml gives (pycodestyle, pyflakes, import
order, bugbear; 120 columns), and mypy on the packages its [tool.mypy] names (the torch-free ones)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "command", [["check", "--no-cache", "--output-format", "concise"], ["format", "--check"]], ids=["lint", "format"]
)
def test_ruff_finds_nothing(command):
    pytest.importorskip("ruff", reason="ruff comes with the test extra: pip install -e '.[test]'")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command, str(REPO)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing():
    pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install -e '.[test]'")
    # No arguments: pyproject.toml's [tool.mypy] `files` says what is checked, so the test and a person agree.
    # About 5 s without its cache (.mypy_cache), a fraction of a second with it.
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
