"""Which perfgate modules one cell's record passes through, from pytest to its line in the results file (issue 55:
at most 12). In pytest's process only: an isolated child's or a paired worker's side of the pipe is not seen.

usage: python tools/probes/cell_path.py [PYTEST ARGS...]
       (default: the CPU tier's vit_b16 infer cell, aot_eager, in this process)

A module is on the path where it is on the call stack while the record is built or written: at every call into
perfgate.measure.record_builder (the one module that sets record fields) and into
perfgate.core.records_file.append_record (the one writer). Prints the modules, outermost first, with how often
each was on such a stack, and each stack's shape once.
"""

from __future__ import annotations

import collections
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("perfgate/measure/record_builder", "perfgate/core/records_file")
DEFAULT = [
    "perftests",
    "-m",
    "cpu",
    "-q",
    "-p",
    "no:randomly",
    "-k",
    "test_infer_step and vit_b16",
    "-p",
    "no:cacheprovider",
]


def module_of(filename: str) -> str | None:
    """perfgate.x.y for a file of this checkout's perfgate package, else None."""
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if rel.parts[0] != "perfgate" or rel.suffix != ".py":
        return None
    return ".".join(rel.with_suffix("").parts).removesuffix(".__init__")


def main(args: list[str]) -> int:
    seen: collections.Counter[str] = collections.Counter()
    shapes: dict[tuple[str, ...], int] = {}
    first: dict[str, int] = {}

    def hook(frame, event, _arg):
        if event != "call" or not frame.f_code.co_filename.endswith(tuple(t + ".py" for t in TARGETS)):
            return
        if not frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # an import's module or class body: no write
            return
        chain: list[str] = []
        f = frame
        while f is not None:
            name = module_of(f.f_code.co_filename)
            if name and (not chain or chain[-1] != name):
                chain.append(name)
            f = f.f_back
        if not chain:  # perfgate imported from outside this checkout: nothing to name
            return
        chain.reverse()
        chain[-1] += f".{frame.f_code.co_name}"  # the function called: a merge, a checkpoint, an append
        shapes[tuple(chain)] = shapes.get(tuple(chain), 0) + 1
        for i, name in enumerate(chain[:-1] + [chain[-1].rsplit(".", 1)[0]]):
            seen[name] += 1
            first.setdefault(name, i)

    sys.setprofile(hook)
    try:
        code = pytest.main(args or DEFAULT)
    finally:
        sys.setprofile(None)
    print(f"\n{len(seen)} modules on the record's path (pytest exit {int(code)}):")
    for name in sorted(seen, key=lambda n: (first[n], n)):
        print(f"  {name}  ({seen[name]} stack(s))")
    print(f"\n{len(shapes)} stack shapes:")
    for shape, n in sorted(shapes.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d}x  " + " > ".join(s.removeprefix("perfgate.") for s in shape))
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
