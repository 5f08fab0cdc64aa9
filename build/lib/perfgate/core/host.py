"""What a machine has, read without torch: installed package versions and nvidia-smi's GPU fields. Shared by the
environment record (perfgate.measure.env) and pytest-benchmark's machine_info (perfgate.plugin.bench_sink)."""

from __future__ import annotations

import importlib.metadata
import subprocess


def package_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_query(fields: str) -> list[str]:
    """nvidia-smi's CSV line per GPU for `fields` ("name,driver_version"); [] where it is missing or fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]
