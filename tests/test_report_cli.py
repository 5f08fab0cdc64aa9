"""perfgate.render.report and the `perfgate` CLI: Markdown/JSON output, exit codes 0/1/2, and the no-torch rule."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.cli import ADVISED_RUNS, main
from perfgate.judge import gate
from perfgate.judge.baseline import baseline_path, build_baseline, write_baseline
from perfgate.render import report

import synthetic as syn

KEY = (syn.H100, "pr")
RESNET = "resnet50-train-inductor_default-amp_bf16"
REPO = Path(__file__).resolve().parents[1]
QUIET = {"noise": 0.005, "run_noise": 0.002}  # no speedup trip from noise mixes into what these tests check


def slower(cid, factor):
    return {cid: {"speedup": syn.PROFILE[cid.split("-")[0]][1] * factor}}


@pytest.fixture(scope="module")
def base():
    return build_baseline(syn.runs(3, first_seed=21, **QUIET))[KEY]


@pytest.fixture(scope="module")
def mixed(base):
    """A report with a regression, an improvement, a failed, a missing and a new cell."""
    cells = syn.cells()
    overrides = {
        **slower(RESNET, 0.85),
        **slower("gpt2-train-inductor_default-amp_bf16", 1.2),
        cells[2].id: syn.failed(cells[2], "CUDA out of memory"),
    }
    run = syn.run(
        5, cell_list=cells[:-1] + syn.cells(models=["llama_tiny"], phases=["train"]), overrides=overrides, **QUIET
    )
    return gate.compare(run, base)


def test_markdown_order_and_verdict(mixed):
    text = report.markdown(mixed)
    lines = text.splitlines()
    assert lines[0].startswith("**perfgate FAIL**") and f"{syn.H100}, tier pr" in lines[0]
    assert lines[2].startswith("Geomean speedup ") and "vs baseline" in lines[2]
    order = [
        text.index(h)
        for h in ("#### Regressions", "#### Improvements", "#### Missing", "#### New", "#### Failed", "#### All cells")
    ]
    assert order == sorted(order)
    assert "CUDA out of memory" in text
    clocks, rest = [line for line in lines if line.startswith("| cell |")]
    assert clocks.count("|") == len(report.CLOCK_COLUMNS) + 1 and rest.count("|") == len(report.COLUMNS) + 1
    assert "device speedup" in clocks and "host ms eager → compiled" in clocks and "busy" in clocks
    table = lines[lines.index(clocks) + 2 :]
    row = next(r for r in mixed.rows if r.cell == RESNET)
    # Which rule tripped, the wall line and noise, and why the wall clock is shaky here: host-bound.
    assert table[0].startswith(f"| `{RESNET}`") and table[0].endswith("| **regression** (wall) |")
    assert f"| {row.threshold:.1%} | {row.noise:.1%} |" in table[0] and row.threshold <= 0.05
    assert f"| host-bound {100 * row.busy_compiled:.0f} % |" in table[0] and row.busy_compiled < 0.9
    assert f"- `{RESNET}` (wall clock) wall speedup" in text
    assert _line(text, "vit_b16-train-inductor_default-amp_bf16").endswith("| **regression** (status) |")


def test_markdown_pass_has_no_sections(base):
    text = report.markdown(gate.compare(syn.run(5, **QUIET), base))
    assert text.startswith("**perfgate PASS**: 0 regression(s), 0 improvement(s) in 10 cell(s)")
    assert "#### Regressions" not in text and text.count("\n| ") == 22  # two tables of a header and 10 rows


def _line(text, cell):
    """The cell's line in the clocks table (the first of the two)."""
    return next(line for line in text.splitlines() if line.startswith(f"| `{cell}` |"))


def test_markdown_marks_noise_limited_thresholds(base):
    noisy = json.loads(json.dumps(base))
    noisy["cells"][RESNET]["speedup_spread"] = 0.04  # 4 % run-to-run: 2 sds of the drop are past 5 %
    result = gate.compare(syn.run(5, **QUIET), noisy)
    row = next(r for r in result.rows if r.cell == RESNET)
    assert row.noise_limited and row.threshold > 0.08
    text = report.markdown(result)
    assert f"| {row.threshold:.1%}* | {row.noise:.1%} |" in _line(text, RESNET)
    assert "1 noise-limited cell(s)" in text and RESNET in text.split("noise-limited cell(s)")[1]
    other = "gpt2-train-inductor_default-amp_bf16"
    assert "*" not in _line(text, other).split("|")[5]


def test_markdown_marks_unknown_run_to_run_noise():
    single = build_baseline([syn.run(22, **QUIET)])[KEY]
    text = report.markdown(gate.compare(syn.run(5, **QUIET), single))
    assert "run-to-run noise is unknown" in text
    assert _line(text, RESNET).split("|")[6].strip().endswith("%?")


def test_markdown_names_the_clock_that_tripped_and_its_line(base):
    run = syn.run(5, overrides={"bert_base-infer-inductor_default-amp_bf16": {"host_growth": 1.3}}, **QUIET)
    result = gate.compare(run, base)
    text = report.markdown(result)
    line = _line(text, "bert_base-infer-inductor_default-amp_bf16")
    host = next(r for r in result.rows if r.cell.startswith("bert_base-infer")).clock("host_speedup")
    cols = [c.strip() for c in line.split("|")]
    assert cols[-2] == "**regression** (host)" and cols[-3].startswith("device-bound 9")
    assert cols[11] == f"{host.change:+.1%}" and cols[12] == f"{host.threshold:.1%}" and host.change > 0.2
    assert "(host clock) compiled host time per step relative to eager +" in text


def test_advisories_have_their_own_section_and_never_fail(base):
    run = syn.run(5, environment=syn.env(cpu_model=syn.EPYC), overrides=slower(RESNET, 0.85), **QUIET)
    result = gate.compare(run, base)
    text = report.markdown(result)
    assert text.startswith("**perfgate PASS**: 0 regression(s), 0 improvement(s), 1 advisory(ies)")
    section = text.split("#### Advisories (reported only: never fail the gate, not re-measured)")[1]
    assert section.lstrip().startswith(f"- `{RESNET}`") and syn.EPYC in section.split("####")[0]
    assert _line(text, RESNET).endswith("| advisory (wall) |")
    assert json.loads(json.dumps(report.to_json(result)))["advisories"][0]["kind"] == "advisory"


def test_markdown_fits_a_comment(mixed):
    full = report.markdown(mixed)
    short = report.markdown(mixed, max_chars=len(full) - 1)
    assert len(short) < len(full) and "unchanged cell(s) omitted" in short
    assert RESNET in short.split("#### Cells")[1]  # the regression stays in the table
    assert len(report.markdown(mixed, max_chars=500)) <= 500


def test_to_json(mixed):
    data = json.loads(json.dumps(report.to_json(mixed)))
    assert (data["passed"], data["exit_code"]) == (False, 1)
    assert [f["cell"] for f in data["regressions"]] == [r.cell for r in mixed.regressions]
    assert len(data["rows"]) == len(mixed.rows) and data["missing"] == mixed.missing


# ------------------------------------------------------------------------------------------------ CLI


def write_runs(directory, n, first_seed=100, **kwargs):
    return [syn.write_run(directory / f"run{i}.jsonl", syn.run(first_seed + i, **kwargs)) for i in range(n)]


def test_update_then_compare_round_trip(tmp_path, capsys):
    runs = write_runs(tmp_path, 3)
    assert main(["baseline", "update", *runs, "--dir", str(tmp_path / "baselines")]) == 0
    expected = baseline_path(tmp_path / "baselines", *KEY)
    assert f"wrote {expected}: 10 cell(s), 10 ok, from 3 run(s)" in capsys.readouterr().out

    clean = syn.write_run(tmp_path / "clean.jsonl", syn.run(7))
    assert main(["compare", clean, "--baseline", str(tmp_path / "baselines")]) == 0
    assert capsys.readouterr().out.startswith("**perfgate PASS**")

    slow = syn.write_run(tmp_path / "slow.jsonl", syn.run(8, overrides=slower(RESNET, 0.9)))
    md, js = tmp_path / "out/report.md", tmp_path / "out/report.json"
    assert main(["compare", slow, "--baseline", str(expected), "--markdown", str(md), "--json", str(js)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("**perfgate FAIL**") and md.read_text() == out
    data = json.loads(js.read_text())
    assert data["exit_code"] == 1 and data["reports"][0]["regressions"][0]["cell"] == RESNET


def _paired(record: dict, outcome: str) -> dict:
    """`record` as a paired run writes it: its clocks judged B against A on its runner (the record's `paired`)."""
    rule = {"rule": "compiled_ms", "clock": "wall", "side": "compiled", "threshold": 0.05, "change": 0.0}
    rule |= {"lo": -0.02, "hi": 0.02 if outcome == "ok" else 0.08, "outcome": outcome, "pairs": 12}
    return {**record, "paired": {"against": "origin/main", "outcome": outcome, "duets": 1, "looks": 1, "rules": [rule]}}


@pytest.mark.parametrize("unsure, code", [(False, 0), (True, 2)], ids=["paired-ok", "paired-unsure"])
def test_compare_of_a_paired_run_judges_its_clocks_by_its_paired_verdict(tmp_path, capsys, unsure, code):
    """A paired run's records, in the shards of a run dealt over several GPUs: `perfgate compare` gives the live
    gate's verdict. resnet50 train's wall speedup 15 % under the committed baseline's is no finding (the clocks
    were judged beside the base on the runner, and read ok); an unsure paired cell exits 2."""
    assert main(["baseline", "update", *write_runs(tmp_path, 3), "--dir", str(tmp_path / "baselines")]) == 0
    capsys.readouterr()
    run = syn.run(9, overrides=slower(RESNET, 0.85))
    run = [_paired(r, "unsure" if unsure and r["cell"] == RESNET else "ok") for r in run]
    shards = [syn.write_run(tmp_path / f"results-{k}.jsonl", run[k::2]) for k in range(2)]
    md = tmp_path / "report.md"
    assert main(["compare", *shards, "--baseline", str(tmp_path / "baselines"), "--markdown", str(md)]) == code
    text = md.read_text()
    assert "## Paired timing: " + ("**UNSURE**" if unsure else "PASS") in text and RESNET in text
    assert "perfgate FAIL" not in text  # the committed baseline judged no clock


def test_compare_of_a_paired_run_fails_on_its_red_without_a_baseline_and_reads_no_side_a(tmp_path, capsys):
    """A paired run on a runner the committed baseline does not cover (another GPU: cannot compare) still fails
    on a paired regression (exit 1), as the live gate does; side A's records beside the results are skipped."""
    run = [_paired(r, "regression" if r["cell"] == RESNET else "ok") for r in syn.run(9)]
    results = syn.write_run(tmp_path / "results.jsonl", run)
    against = syn.write_run(tmp_path / "results.against.jsonl", syn.run(10))
    (tmp_path / "none").mkdir()
    assert main(["compare", results, against, "--baseline", str(tmp_path / "none")]) == 1
    captured = capsys.readouterr()
    assert f"skipped {against}: side A's records" in captured.out and "cannot compare" in captured.err


def test_update_with_few_runs_warns(tmp_path, capsys):
    assert main(["baseline", "update", *write_runs(tmp_path, ADVISED_RUNS - 1), "--dir", str(tmp_path)]) == 0
    assert f"fewer than {ADVISED_RUNS} runs" in capsys.readouterr().out
    assert main(["baseline", "update", *write_runs(tmp_path / "five", ADVISED_RUNS), "--dir", str(tmp_path)]) == 0
    assert "fewer than" not in capsys.readouterr().out


def test_update_warns_of_runs_that_disagree_on_a_peak(tmp_path, capsys):
    runs = write_runs(tmp_path, ADVISED_RUNS)
    odd = syn.write_run(tmp_path / "odd.jsonl", syn.run(99, overrides={RESNET: dict(peak_mem_compiled_mb=9e4)}))
    assert main(["baseline", "update", *runs, odd, "--dir", str(tmp_path)]) == 0
    assert f"warning: pr {RESNET}: runs disagree on peak_mem_compiled_mb" in capsys.readouterr().out


def test_update_groups_runs_by_run_id(tmp_path, capsys):
    # Session a ran on two xdist workers (two files); sessions b and c were appended to one file; the last
    # file has no run ids and counts as one run on its own.
    cells = syn.cells()
    a = syn.run(1, run_id="a")
    files = [syn.write_run(tmp_path / "a-gw0.jsonl", a[:5]), syn.write_run(tmp_path / "a-gw1.jsonl", a[5:])]
    both = tmp_path / "bc.jsonl"
    syn.write_run(both, syn.run(2, run_id="b"))
    files += [syn.write_run(both, syn.run(3, run_id="c")), syn.write_run(tmp_path / "old.jsonl", syn.run(4))]
    assert main(["baseline", "update", *files, "--dir", str(tmp_path / "b")]) == 0
    assert "10 ok, from 4 run(s)" in capsys.readouterr().out
    cell = json.loads(baseline_path(tmp_path / "b", *KEY).read_text())["cells"][cells[0].id]
    assert cell["runs_ok"] == 4 and len(cell["speedup_runs"]) == 4


def test_compare_each_tier(tmp_path, capsys):
    both = syn.cells() + syn.cells(models=["gpt2"], tier="nightly")
    runs = write_runs(tmp_path, 2, cell_list=both)
    assert main(["baseline", "update", *runs, "--dir", str(tmp_path / "b")]) == 0
    assert (
        main(
            [
                "compare",
                syn.write_run(tmp_path / "now.jsonl", syn.run(9, cell_list=both)),
                "--baseline",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "tier pr)" in out and "tier nightly)" in out


def _foreign(path):
    write_baseline(path, {**build_baseline([syn.run(1, environment=syn.env(syn.A100))])[(syn.A100, "pr")]})
    return path


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: d, ["no baseline at", "perfgate baseline update", "--perf-save-baseline"]),
        (lambda d: (baseline_path(d, *KEY).write_text("{not json"), d)[1], ["not valid JSON"]),
        (lambda d: _foreign(d / "a100.json"), [syn.A100]),
    ],
)
def test_cannot_compare_exits_2_naming_the_expected_file(tmp_path, capsys, make, words):
    results = syn.write_run(tmp_path / "r.jsonl", syn.run(3))
    (tmp_path / "b").mkdir()
    assert main(["compare", results, "--baseline", str(make(tmp_path / "b"))]) == 2
    err = capsys.readouterr().err
    for word in [str(baseline_path(tmp_path / "b", *KEY)), *words]:
        assert word in err


@pytest.mark.parametrize("content, words", [("{oops\n", ["r.jsonl:1", "not a JSON record"]), ("", ["no records"])])
def test_unreadable_results_exit_2(tmp_path, capsys, content, words):
    (tmp_path / "r.jsonl").write_text(content)
    assert main(["compare", str(tmp_path / "r.jsonl"), "--baseline", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert main(["results", str(tmp_path / "missing.jsonl")]) == 2


def test_results_table(tmp_path, capsys):
    cells = syn.cells(models=["gpt2"])
    path = syn.write_run(
        tmp_path / "r.jsonl", syn.run(3, cell_list=cells, overrides={cells[1].id: syn.failed(cells[1], "boom")})
    )
    assert main(["results", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["cell", "status", "eager"] and len(lines) == 3
    assert "failed" in lines[1] and "boom" in lines[1] and "ok" in lines[2]


# The packages that import no torch (docs/architecture.md): the data side, and the A/B engine, whose sides' own
# processes import torch (perfgate/ab/__init__.py); perfgate's faces are walked too.
TORCH_FREE = ("core", "judge", "store", "plan", "render", "ab", "faces")


def torch_free_modules() -> list[str]:
    """The data side, found by walking it: every module of the data-side packages, the A/B engine, the faces
    (perfgate/faces/ and perfgate's top level, the CLI), and every other module whose docstring says it imports no
    torch (a claim, so tested)."""
    pkg = REPO / "perfgate"
    found = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        walked = len(parts) == 2 and path.parent == pkg or (len(parts) > 1 and parts[1] in TORCH_FREE)
        claimed = "Imports no torch" in (ast.get_docstring(ast.parse(path.read_text())) or "")
        if walked or claimed:
            found.append(".".join(parts))
    return found


def test_data_side_imports_no_torch():
    modules = torch_free_modules()
    walked = {
        "perfgate.cli",
        "perfgate.faces.ab",
        "perfgate.judge.gate",
        "perfgate.render.html_report",
        "perfgate.ab.process_run",
        "perfgate.ab.process_manifest",
    }
    assert walked <= set(modules)
    code = (
        "import importlib, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('imported torch')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError as e:\n"
        "        print(name, e)\n"
        "import perfgate.render.html_report as h\n"
        "h.render_html(h.build([]))  # jinja2 too\n"
        "assert 'torch' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stdout, proc.stdout + proc.stderr


def test_baseline_update_with_nothing_to_fold_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["baseline", "update", str(empty), "--dir", str(tmp_path / "b")]) == 2
    assert "no records in" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_compare_and_report_judge_a_gated_run_as_the_gate_did(tmp_path, capsys, base):
    """A gated run's results file holds its first round, its confirm round and a why-artifacts re-measure made
    after the verdict. Read as one record per cell, the confirm round's records would be judged alone: a
    clock that tripped only there would fail, and the why-artifacts record (a profiled run) would be gated.
    `perfgate compare` and `perfgate report` give the gate's own verdicts instead."""
    baseline = baseline_path(tmp_path / "b", *KEY)
    write_baseline(baseline, base)
    gpt2 = "gpt2-infer-inductor_default-amp_bf16"
    first = syn.run(42, overrides={**slower(RESNET, 0.9), **slower(gpt2, 0.9)}, **QUIET)
    again = syn.run(43, overrides=slower(gpt2, 0.9), **QUIET)  # resnet50 cleared, gpt2 infer repeated
    confirm = [{**r, "remeasure": "confirm"} for r in again if r["cell"] in (RESNET, gpt2)]
    vit = "vit_b16-train-inductor_default-amp_bf16"  # slow only in a profiled re-measure after the verdict
    why = [{**r, "remeasure": "why-artifacts"} for r in syn.run(44, overrides=slower(vit, 0.8), **QUIET)]
    results = syn.write_run(tmp_path / "results.jsonl", first + confirm + [r for r in why if r["cell"] == vit])

    outcome = gate.gate_run(first, baseline, lambda ids: [r for r in confirm if r["cell"] in ids])
    assert sorted(f.cell for r in outcome.reports for f in r.regressions) == [gpt2]
    assert main(["compare", results, "--baseline", str(baseline)]) == outcome.exit_code == 1
    out = capsys.readouterr().out
    assert f"cleared for {RESNET}" in out and vit not in out.split("## ")[0]
    md = tmp_path / "digest.md"
    assert main(["report", results, "--baseline", str(baseline), "--markdown", str(md)]) == 0
    digest = md.read_text()
    assert f"regression {gpt2}" in digest and f"regression {RESNET}" not in digest
    assert f"regression {vit}" not in digest
