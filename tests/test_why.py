"""What set_logs turns on for a cell's why-artifacts goes to its file, not to the terminal."""

from __future__ import annotations

import logging

import torch

from perfgate.measure import why


def test_compile_logs_reach_the_file_and_not_stderr(tmp_path, capfd):
    hints = torch._logging.getArtifactLogger("torch._inductor.codegen.simd", "perf_hints")
    log = tmp_path / "compile.log"
    with why.compile_logs(log):
        hints.debug("possibly bad tiling: %s", "planted")
        logging.getLogger("torch._inductor").warning("a warning still shows")
    hints.debug("after the block: off again")
    err = capfd.readouterr().err
    assert "possibly bad tiling" not in err
    assert "a warning still shows" in err
    text = log.read_text()
    assert "possibly bad tiling: planted" in text
    assert "off again" not in text


def test_torch_handlers_are_known_by_the_set_as_well_as_the_marker():
    """torch 2.11 tracks its handlers in a WeakSet only; 2.14 also sets a marker attribute."""
    import types
    import weakref

    bare = logging.StreamHandler()
    older = types.SimpleNamespace(handlers=weakref.WeakSet([bare]))
    assert why._is_torch_handler(older, bare)
    assert not why._is_torch_handler(older, logging.StreamHandler())
    marked = logging.StreamHandler()
    marked._torch_logging_internal_handler = True
    assert why._is_torch_handler(types.SimpleNamespace(), marked)
