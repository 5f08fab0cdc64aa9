"""`perfgate completion bash|zsh`: a shell completion script, generated from the CLI's argparse parser.

Generated, not hand-written, so a new subcommand, option or choice is completed the day it is added. argparse
has no public API to list a parser's arguments: `_actions`, `_SubParsersAction` and `_choices_actions` are
read here (and in tests/test_docs.py), as argparse-based completers (argcomplete, shtab) do; they have held
since Python 3.2. Imports no torch: the script is printed in well under a second.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
from dataclasses import dataclass

SHELLS = ("bash", "zsh")
HELP_CHARS = 70  # a zsh description past this wraps the completion menu on an 80-column terminal


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]  # ("--output", "-o")
    help: str
    takes_value: bool  # the next word is its value, not a subcommand or a positional
    choices: tuple[str, ...]  # its allowed values, if argparse knows them


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]  # () for `perfgate` itself, ("history", "show") for `perfgate history show`
    options: tuple[Option, ...]
    subcommands: tuple[tuple[str, str], ...]  # (name, help) of each subcommand
    choices: tuple[str, ...]  # the allowed values of its positionals (`completion SHELL`: bash, zsh)

    @property
    def key(self) -> str:
        """The path as the scripts match it: "" for perfgate, "/history/show"."""
        return "".join(f"/{word}" for word in self.path)


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Command]:
    """The parser and each of its subparsers, depth first."""
    options, subcommands, choices, below = [], [], [], []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                subcommands.append((name, helps.get(name, "")))
                below += commands(sub, (*path, name))
        elif action.option_strings:
            value_choices = tuple(map(str, action.choices or ()))
            options.append(Option(tuple(action.option_strings), action.help or "", action.nargs != 0, value_choices))
        else:
            choices += map(str, action.choices or ())
    return [Command(path, tuple(options), tuple(subcommands), tuple(choices)), *below]


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` (one of SHELLS)."""
    return {"bash": bash_script, "zsh": zsh_script}[shell](commands(parser), parser.prog)


def _patterns(words: list[str]) -> str:
    return "|".join(f'"{word}"' for word in words)


def _flags(command: Command, option: Option) -> str:
    """A case pattern for the option's flags after the command's path: "/export:--output"|"/export:-o"."""
    return _patterns([f"{command.key}:{flag}" for flag in option.flags])


def _value_flags(all_commands: list[Command]) -> str:
    """A case pattern for every flag that takes a value, after its command's path."""
    return "|".join(_flags(c, o) for c in all_commands for o in c.options if o.takes_value)


def _walk_words(all_commands: list[Command], first: int, last: str, after_dashes: str) -> list[str]:
    """Shell lines (bash and zsh alike) that set `cmdpath` to the subcommands typed before the cursor: an
    option's value is skipped, so `report --title compare` stays `report`; after `--` come pytest's args."""
    lines = [f"    for ((i = {first}; i < {last}; i++)); do", '        word="${words_[i]}"']
    lines.append(f'        [[ "$word" == -- ]] && {{ {after_dashes}; }}  # pytest args follow: file names')
    lines.append(f'        case "$cmdpath:$word" in {_value_flags(all_commands)}) ((i++)); continue ;; esac')
    paths = [c.key for c in all_commands if c.path]
    lines.append(f'        case "$cmdpath/$word" in {_patterns(paths)}) cmdpath="$cmdpath/$word" ;; esac')
    lines.append("    done")
    return lines


def bash_script(all_commands: list[Command], prog: str) -> str:
    lines = [
        f"# bash completion for {prog}, generated from its argparse parser: {prog} completion bash",
        f"# Use: source <({prog} completion bash), e.g. in ~/.bashrc.",
        "_perfgate() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmdpath="" word i candidates',
        '    local -a words_=("${COMP_WORDS[@]}")',
        *_walk_words(all_commands, 1, "COMP_CWORD", "return 0"),  # no candidates: -o default completes files
        '    case "$cmdpath:$prev" in',
    ]
    for command in all_commands:
        for option in (o for o in command.options if o.choices):
            words = shlex.quote(" ".join(option.choices))
            lines.append(f'        {_flags(command, option)}) COMPREPLY=($(compgen -W {words} -- "$cur")); return 0 ;;')
    # Any other option's value: no candidates, so `complete -o default` offers file names.
    lines.append(f"        {_value_flags(all_commands)}) return 0 ;;")
    lines += ["    esac", '    case "$cmdpath" in']
    for command in all_commands:
        words = [*(name for name, _ in command.subcommands), *command.choices]
        words += [f for o in command.options for f in o.flags]
        lines.append(f'        "{command.key}") candidates={shlex.quote(" ".join(words))} ;;')
    lines += [
        "    esac",
        # A word that matches nothing (a results file) falls back to file names through -o default.
        '    COMPREPLY=($(compgen -W "$candidates" -- "$cur"))',
        "}",
        f"complete -o default -F _perfgate {prog}",
        "",
    ]
    return "\n".join(lines)


def _described(word: str, help_text: str) -> str:
    """One `_describe` entry, `word:help`, quoted for zsh (a colon in the word is escaped)."""
    text = " ".join(help_text.split())
    text = text if len(text) <= HELP_CHARS else text[: HELP_CHARS - 3].rstrip() + "..."
    escaped = word.replace(":", r"\:")
    return shlex.quote(f"{escaped}:{text}")


def zsh_script(all_commands: list[Command], prog: str) -> str:
    lines = [
        f"#compdef {prog}",
        f"# zsh completion for {prog}, generated from its argparse parser: {prog} completion zsh",
        f"# Use: source <({prog} completion zsh) in ~/.zshrc after compinit, or save it as _{prog} on $fpath.",
        "_perfgate() {",
        # Not `path` (zsh ties it to $PATH) nor `words` (the completion system's own array).
        '    local cmdpath="" word i prev="${words[CURRENT-1]}"',
        '    local -a words_=("${words[@]}") subcommands options',
        *_walk_words(all_commands, 2, "CURRENT", "_files; return"),
        '    case "$cmdpath:$prev" in',
    ]
    for command in all_commands:
        for option in (o for o in command.options if o.choices):
            lines.append(
                f"        {_flags(command, option)}) compadd -- {' '.join(map(shlex.quote, option.choices))}; return ;;"
            )
    lines.append(f"        {_value_flags(all_commands)}) _files; return ;;")
    lines += ["    esac", '    case "$cmdpath" in']
    for command in all_commands:
        subs = [_described(name, text) for name, text in command.subcommands]
        subs += [_described(choice, "") for choice in command.choices]
        opts = [_described(flag, o.help) for o in command.options for flag in o.flags]
        lines.append(f'        "{command.key}") subcommands=({" ".join(subs)}); options=({" ".join(opts)}) ;;')
    lines += [
        "    esac",
        '    if [[ "${words[CURRENT]}" == -* ]]; then _describe option options; return; fi',
        "    if (( ${#subcommands} )); then _describe command subcommands; else _files; fi",
        "}",
        # Autoloaded from $fpath the file's body is the function; sourced, it registers the function.
        f'if [[ "${{zsh_eval_context[-1]}}" == loadautofunc ]]; then _perfgate "$@"; else compdef _perfgate {prog}; fi',
        "",
    ]
    return "\n".join(lines)


def cmd_completion(args: argparse.Namespace, root: argparse.ArgumentParser) -> int:
    sys.stdout.write(script(root, args.shell))
    return 0


def add_parser(sub, root: argparse.ArgumentParser) -> None:
    """`completion` on the subcommands `sub` of `root`, the whole parser, whose commands its script completes
    (handed in, as this face cannot import perfgate.cli, which imports it)."""
    comp = sub.add_parser(
        "completion", help="print a completion script for this command, e.g. source <(perfgate completion bash)"
    )
    # choices: a shell not in SHELLS is argparse's usage error, exit 2, naming the value and the valid ones.
    comp.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    comp.set_defaults(func=functools.partial(cmd_completion, root=root))
