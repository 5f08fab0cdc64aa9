"""The layers of perfgate import one way (docs/architecture.md): a test, so that an arrow back up fails CI."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "perfgate"
FACES = "faces"  # perfgate/faces/ (a module per command), and at perfgate's top the CLI and __main__
# What each layer may import from perfgate (itself included).
ALLOWED = {
    "core": {"core"},
    "measure": {"core", "measure"},
    "judge": {"core", "judge"},
    "store": {"core", "store"},
    "plan": {"core", "plan"},
    "render": {"core", "judge", "store", "plan", "render"},
    "ab": {"core", "judge", "store", "plan", "render", "ab"},
    "plugin": {"core", "measure", "judge", "store", "plan", "render", "ab", "plugin"},
    FACES: {"core", "judge", "store", "plan", "render", "ab", FACES},
}
# The one arrow up, and only inside a function (a lazy import): a judge Finding's `message` reads its words from
# render's wording, which imports core alone, so it cannot close a cycle (docs/architecture.md, "The layers").
LAZY_UP = {("perfgate.judge.finding", "perfgate.render.wording")}


def layer_of(module: str) -> str:
    """perfgate.judge.gate -> judge; perfgate.faces.ab, perfgate.cli -> faces; perfgate.plugin -> plugin."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ALLOWED:
        return parts[1]
    return "plugin" if parts[1:2] == ["plugin"] else FACES


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_only: bool = False) -> set[str]:
    """Every perfgate module a file imports, at its top or inside a function (`top_only`: at its top)."""
    found = set()
    tree = ast.parse(path.read_text())
    for node in tree.body if top_only else ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("perfgate"):
            found |= {f"{node.module}.{a.name}" if node.module in PACKAGES else node.module for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("perfgate")}
    return {m for m in found if m in MODULES or m in PACKAGES}


FILES = sorted(PKG.rglob("*.py"))
MODULES = {module_name(p) for p in FILES}
PACKAGES = {module_name(p) for p in FILES if p.name == "__init__.py"}
GRAPH = {module_name(p): imports(p) - {module_name(p)} for p in FILES}
TOP = {module_name(p): imports(p, top_only=True) for p in FILES}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "perfgate"))
def test_imports_run_down_the_layers(module):
    layer = layer_of(module)
    lazy = {m for m in GRAPH[module] if (module, m) in LAZY_UP and m not in TOP[module]}
    wrong = sorted(m for m in GRAPH[module] - lazy if m != "perfgate" and layer_of(m) not in ALLOWED[layer])
    assert not wrong, f"{module} ({layer}) imports {wrong}: {layer} may import only {sorted(ALLOWED[layer])}"


def test_no_module_imports_itself_back():
    """No cycle between modules, lazy (in-function) imports included."""
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in GRAPH.get(m, ()):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(n) :] + [n]))
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])


def test_every_module_has_a_layer():
    top = {p.stem for p in PKG.glob("*.py")} - {"__init__"}
    assert top == {"cli", "__main__"}, f"modules at perfgate's top belong in a layer: {sorted(top)}"


def test_the_faces_package_and_the_cli_are_one_layer():
    """perfgate/faces/ (a module per command) is the faces layer with the CLI that assembles it."""
    faces = sorted(m for m in MODULES if m.split(".")[1:2] == ["faces"])
    assert "perfgate.faces.compare" in faces
    assert {layer_of(m) for m in [*faces, "perfgate.cli", "perfgate.__main__"]} == {FACES}


@pytest.mark.parametrize("low, high", sorted(LAZY_UP))
def test_the_one_arrow_up_reaches_a_module_that_imports_core_alone(low, high):
    assert high in MODULES and high not in TOP[low], f"{low} may import {high} lazily only"
    assert {layer_of(m) for m in GRAPH[high] if m != "perfgate"} <= {"core"}, (
        f"{high} is read lazily by {low}: it may import perfgate.core only, or a cycle can close through it"
    )


# Every module that opens a file to append to it, and what it appends: a results file (records, which the
# gate and every reader judge) has one writer, perfgate.core.records_file.append_record (crash-safe, one
# os.write a line, a torn last line mended), which the session, an isolated child's checkpoints, the xdist
# merge and the paired base side call.
APPENDERS = {
    "perfgate.core.records_file": "results files, through append_record",
    "perfgate.measure.child": "a job's events file (progress, checkpoints, the record), read by its launcher",
    "perfgate.measure.precompile": "a precompile share's lines (no records: results.precompile.json's input)",
    "perfgate.ab.pair_workers": "a paired worker's stderr log",
}


def _appends(path: Path) -> bool:
    """Whether the module opens a file in an append mode, or with os.O_APPEND."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "O_APPEND":
            return True
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "open":
            # open(path, mode), path.open(mode)
            given = node.args[1:2] if isinstance(node.func, ast.Name) else node.args[:1]
            modes = [a for a in given if isinstance(a, ast.Constant)]
            modes += [k.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
            if any(re.fullmatch(r"[rwxbt+]*a[rwxbt+]*", str(m.value)) for m in modes):  # a mode, not a name
                return True
    return False


def test_results_files_have_one_writer():
    appenders = {module_name(p) for p in FILES if _appends(p)}
    assert appenders == set(APPENDERS), f"appends to files: {sorted(appenders)}; known: {sorted(APPENDERS)}"


# Who writes a cell's record: perfgate.measure.record_builder (and its data-parallel half) merges what the stages
# and probes return. A record is the dict new_record made, whatever holds it: `record`, `record_a`/`record_b`
# (a paired cell's sides), `rec`, `partial` (a checkpoint's copy), or an object's `.record` (a CellRun's).
RECORD_NAMES = re.compile(r"rec|record|record_[ab]|partial")
RECORD_WRITERS = {
    "perfgate.measure.record_builder": "the one module that sets a measured cell's fields",
    "perfgate.measure.record_builder_ddp": "the record builder's data-parallel fields, split off for length",
    "perfgate.core.record": "the constructor: new_record gives every field its default and the cell's identity",
}
# Modules of the data side that build a changed copy of a stored record for a reader, never the record a cell
# measured: exempt by name, each with what its copy is.
RECORD_VIEWS = {
    "perfgate.ab.process_report": "a report's copy of each side's chosen record, its env named for the side",
    "perfgate.store.history": "the JSON the history stores, without the per-tensor numerics checks",
}
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _is_record(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return RECORD_NAMES.fullmatch(node.id) is not None
    return isinstance(node, ast.Attribute) and node.attr == "record"


def _record_writes(path: Path) -> list[int]:
    """Lines that write to a record: an item assigned, augmented or deleted (`record[k] = v`, in a tuple
    target too), a mutating method called on one (`record.update(...)`, `run.record.pop(k)`, `record |= d`), or
    a copy with fields set (`{**record, "k": v}`, `dict(record, k=v)`, `record | {...}`)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict) and any(k is None and _is_record(v) for k, v in zip(node.keys, node.values)):
            if any(k is not None for k in node.keys):  # {**record} alone is a copy, not a write
                lines.append(node.lineno)
            continue
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict" and node.args and node.keywords:
            if _is_record(node.args[0]):
                lines.append(node.lineno)
            continue
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.BitOr):
            if _is_record(node.left if isinstance(node, ast.BinOp) else node.target):
                lines.append(node.lineno)
            continue
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [ast.Subscript(value=node.func.value, slice=ast.Constant(None))]
        for target in targets:
            for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(item, ast.Subscript) and _is_record(item.value):
                    lines.append(node.lineno)
    return lines


def test_records_have_one_writer():
    writers = {
        f"{module_name(p)}:{line}"
        for p in FILES
        if module_name(p) not in {**RECORD_WRITERS, **RECORD_VIEWS}
        for line in _record_writes(p)
    }
    assert not writers, f"writes to a record outside perfgate.measure.record_builder: {sorted(writers)}"


def test_the_record_writer_check_sees_each_kind_of_write(tmp_path):
    """A test that cannot fail is a bug: each way of writing a record is caught, and a read or another dict is not."""
    writes = [
        "record['a'] = 1",
        "run.record['a'] += 1",
        "record['a'], x = 1, 2",
        "del partial['a']",
        "record_b.update(a=1)",
        "rec.setdefault('a', 1)",
        "run.record.pop('a')",
        "record |= {'a': 1}",
        "x = {**partial, 'a': 1}",
        "x = dict(run.record, a=1)",
        "x = record | {'a': 1}",
    ]
    for line in writes:
        (tmp_path / "m.py").write_text(line + "\n")
        assert _record_writes(tmp_path / "m.py") == [1], line
    (tmp_path / "m.py").write_text(
        "x = record['a']\nline['a'] = 1\nrecords.update(a=1)\nrecord.get('a')\nx = {**record}\n"
    )
    assert _record_writes(tmp_path / "m.py") == []
