"""The docs are kept true by tests, not by hand: every page (README.md and docs/*.md, whoever adds one) is checked
for links and anchors that resolve, `--perf-*` options and `perfgate` commands and flags that exist, code paths
and Python names that exist, and measured tables that say their device and date. docs/options.md lists the
plugin's options and values, and docs/architecture.md every module: both are checked against the code.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import re
from pathlib import Path

import pytest

from perfgate.cli import build_parser
from perfgate.core import matrix

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
IDS = [str(p.relative_to(REPO)) for p in PAGES]
pages = pytest.mark.parametrize("page", PAGES, ids=IDS)

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The page without its fenced code blocks (a link or heading inside one is code, not Markdown)."""
    return FENCE.sub("", text)


def code(text: str) -> list[str]:
    """The page's code: each line of its fenced blocks, and each inline code span."""
    lines = [line for block in FENCE.findall(text) for line in block.splitlines()[1:-1]]
    return lines + INLINE.findall(prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, Markdown marks and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page has; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for _, title in HEADING.findall(prose(page.read_text())):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


@pages
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto: are the web's to keep
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, broken


def plugin_options() -> set[str]:
    """The --perf-* options the plugin declares (from its source, as tests/test_workflows.py reads them)."""
    source = (REPO / "perfgate" / "plugin" / "options.py").read_text()
    return set(re.findall(r'addoption\(\s*"(--perf-[a-z0-9-]+)"', source))


@pages
def test_every_perf_option_named_exists(page):
    named = set(re.findall(r"--perf-[a-z0-9]+(?:-[a-z0-9]+)*", page.read_text()))
    assert named <= plugin_options(), f"options the plugin does not have: {sorted(named - plugin_options())}"


def cli_commands() -> dict[tuple[str, ...], set[str]]:
    """Each `perfgate` command (("compare",), ("history", "show"), ...) and the flags it takes."""
    out = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        out[path] = {flag for action in parser._actions for flag in action.option_strings}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return out


def perfgate_calls(text: str) -> list[list[str]]:
    """Every `perfgate ...` command line in the page's code, as words up to pytest's own arguments (after --)."""
    calls = []
    for line in code(text):
        for match in re.finditer(r"(?:^|[\s(;&|$])perfgate\s+([a-z][^`#]*)", line):
            words = match.group(1).split()
            calls.append(list(itertools.takewhile(lambda w: w != "--", words)))
    return calls


@pages
def test_every_perfgate_command_and_flag_named_exists(page):
    commands = cli_commands()
    wrong = []
    for words in perfgate_calls(page.read_text()):
        path = ()
        for word in words:
            if (*path, word) in commands:
                path = (*path, word)
            elif not word.startswith("-"):
                break
        if not path:
            wrong.append(f"perfgate {words[0]}: no such command")
            continue
        for word in words:
            flag = word.split("=")[0]
            if re.fullmatch(r"--[a-z][a-z0-9-]*", flag) and flag not in commands[path]:
                wrong.append(f"perfgate {' '.join(path)} {flag}: no such flag")
    assert not wrong, wrong


ROOTS = (
    "perfgate/",
    "tests/",
    "fixtures/",
    "perftests/",
    "baselines/",
    "docs/",
    ".ci/",
    ".github/",
    "conftest.py",
    "pyproject.toml",
)


def expand(pattern: str) -> list[str]:
    """`a/{b,c}.py` as a/b.py and a/c.py (brace expansion, as the docs write several files at once)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    return [
        p for alt in match.group(1).split(",") for p in expand(pattern[: match.start()] + alt + pattern[match.end() :])
    ]


def missing_path(span: str) -> str | None:
    """What a code span that names a path in this repository lacks, if anything: the file, or the test in it."""
    path, _, test = span.partition("::")
    for one in expand(path):
        if not glob.glob(str(REPO / one)) and not glob.glob(f"{REPO / one}*"):  # or a name's stem: `runs/…-pr-X`
            return f"{one}: no such path"
        name = re.escape(test).replace(r"\*", r"\w*")  # test_impossible_figures_*: any test of that name
        if test and not any(
            re.search(rf"^\s*(async )?def {name}\b", Path(f).read_text(), re.M) for f in glob.glob(str(REPO / one))
        ):
            return f"{span}: no such test"
    return None


@pages
def test_every_code_path_named_exists(page):
    spans = [s.strip() for s in INLINE.findall(prose(page.read_text()))]
    paths = [s for s in spans if s.startswith(ROOTS) and not re.search(r"[\s<…]", s)]
    missing = [m for s in paths if (m := missing_path(s.rstrip("/.,")))]
    assert not missing, missing


def python_name_missing(dotted: str) -> str | None:
    """`perfgate.measure.pipeline.StageClock`: the longest prefix that is a module, then a name defined in it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[cut:]
            if rest and not re.search(rf"^\s*(def|class)\s+{rest[0]}\b|^{rest[0]}\b\s*[:=]", module.read_text(), re.M):
                return f"{dotted}: {module.relative_to(REPO)} defines no {rest[0]}"
            return None
    return f"{dotted}: no such module"


@pages
def test_every_python_name_named_exists(page):
    names = {
        m
        for s in INLINE.findall(prose(page.read_text()))
        for m in re.findall(r"\b(?:perfgate|fixtures)(?:\.[A-Za-z_]\w*)+", s)
    }
    missing = [m for name in sorted(names) if (m := python_name_missing(name))]
    assert not missing, missing


def tables(text: str) -> list[tuple[int, list[str]]]:
    """Each Markdown table in the page's prose: the line it starts on and its lines."""
    lines = prose(text).splitlines()
    found, start = [], None
    for i, line in enumerate([*lines, ""]):
        if line.startswith("|") and start is None:
            start = i
        elif not line.startswith("|") and start is not None:
            found.append((start, lines[start:i]))
            start = None
    return found


# A measured figure: a speedup (2.24×), a time in ms or a size in MiB.
FIGURE = re.compile(r"\d(?:\.\d+)?\s?(?:×|ms\b|MiB\b)")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b20\d\d[01]\d[0-3]\d\b")  # 2026-11-24, or a run file's h100-20261124
DEVICE = re.compile(r"H100|H200|A100|L4\b|L40|B200|MI\d{3}|\bCPU\b|CUDA|synthetic", re.I)


@pages
def test_every_measured_table_says_its_device_and_date(page):
    """A table of measured figures says where and when they were measured: in the text above it back to its
    section's heading (## or #), the page's title or its own header. Synthetic figures say so instead."""
    text = prose(page.read_text())
    lines = text.splitlines()
    bare = []
    for start, table in tables(text):
        if sum(bool(FIGURE.search(row)) for row in table[2:]) < 2:
            continue  # a table of options or rules, not of figures
        section = next((i for i in range(start, -1, -1) if re.match(r"#{1,2}\s", lines[i])), 0)
        context = "\n".join([lines[0], *lines[section:start], table[0]])
        has_device = bool(DEVICE.search(context))
        if not (DATE.search(context) or "synthetic" in context.lower()) or not has_device:
            bare.append(f"line {start + 1}: {table[0][:80]}")
    assert not bare, f"measured tables that do not say their device and date: {bare}"


def table_values(page: str, row: str) -> set[str]:
    """The code spans in the value column of a docs/options.md row whose first column is `row`."""
    for line in (REPO / page).read_text().splitlines():
        if line.startswith(f"| `{row}`"):
            return {span for span in INLINE.findall(line.split("|")[2]) if re.fullmatch(r"\w+", span)}
    raise AssertionError(f"{page} has no row for {row}")


def test_options_page_lists_every_option():
    listed = set(re.findall(r"--perf-[a-z0-9-]+", (REPO / "docs" / "options.md").read_text()))
    assert plugin_options() <= listed, f"options docs/options.md leaves out: {sorted(plugin_options() - listed)}"


@pytest.mark.parametrize(
    ("option", "valid"),
    [
        ("--perf-variants", lambda: set(matrix.VARIANTS)),
        ("--perf-precisions", lambda: set(matrix.PRECISIONS)),
        ("--perf-models", lambda: set(__import__("fixtures").REGISTRY)),
    ],
    ids=["variants", "precisions", "models"],
)
def test_options_page_lists_exactly_the_valid_values(option, valid):
    assert table_values("docs/options.md", option) == valid()


def modules() -> set[str]:
    """Every module of the package, as a path under perfgate/ (`measure/pipeline.py`), packages' __init__ left out."""
    root = REPO / "perfgate"
    return {str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "__init__.py"}


def test_architecture_names_every_module_with_its_job():
    """docs/architecture.md's module map: one row per module, `| \\`measure/pipeline.py\\` | its job |`."""
    rows = re.findall(r"^\| `([\w/]+\.py)` \| ([^|]*\S[^|]*) \|", (REPO / "docs" / "architecture.md").read_text(), re.M)
    named = {path for path, _ in rows}
    assert not modules() - named, f"modules docs/architecture.md leaves out: {sorted(modules() - named)}"
    assert not named - modules(), f"docs/architecture.md names modules that do not exist: {sorted(named - modules())}"
