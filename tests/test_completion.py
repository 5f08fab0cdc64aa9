"""`perfgate completion`: the script covers every subcommand of the parser, and bash parses it."""

from __future__ import annotations

import argparse
import shutil
import subprocess

import pytest

from perfgate.cli import build_parser, main


def command_paths(parser: argparse.ArgumentParser, path: str = "") -> list[str]:
    """Each subcommand as "/history/show", walked here apart from perfgate.completion's own walk."""
    paths = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += [f"{path}/{name}", *command_paths(sub, f"{path}/{name}")]
    return paths


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_script_names_every_subcommand_and_bash_parses_it(shell, capsys, tmp_path):
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    paths = command_paths(build_parser())
    assert {"/history/show", "/export", "/completion"} <= set(paths)  # the walk above sees nested commands
    assert [p for p in paths if f'"{p}"' not in script] == []
    if shell == "bash":
        if not shutil.which("bash"):
            pytest.skip("no bash here to parse the script")
        (tmp_path / "perfgate.bash").write_text(script)
        checked = subprocess.run(["bash", "-n", tmp_path / "perfgate.bash"], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


def test_a_shell_it_does_not_know_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["completion", "fish"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "'fish'" in error and "'bash', 'zsh'" in error
