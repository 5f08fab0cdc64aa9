"""The linter's and the formatter's verdicts are part of the test command: `ruff check` and `ruff format --check`
over the repository, with the settings pyproject.toml gives (pycodestyle, pyflakes, import order, bugbear; 120
columns)."""

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
