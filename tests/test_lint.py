"""The linter's verdict is part of the test command: `ruff check` over the repository, with the rules pyproject.toml
sets (pycodestyle, pyflakes, import order, bugbear; 120 columns)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    pytest.importorskip("ruff", reason="ruff comes with the test extra: pip install -e '.[test]'")
    command = [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", str(REPO)]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
