"""Wires the perfgate plugin in; nothing else."""

pytest_plugins = ["perfgate.plugin"]
