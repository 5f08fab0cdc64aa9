"""perfgate.render.html_report and `perfgate report`: the page's content, the Markdown digest, and what a person sees
when a real headless browser renders the page (skipped, with the reason, where no Chromium is installed)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.core.records_file import iter_records, load_records
from perfgate.judge import gate
from perfgate.judge.baseline import baseline_path, build_baseline, write_baseline
from perfgate.render import html_report
from perfgate.store import history

import synthetic as syn

REPO = Path(__file__).resolve().parents[1]
# The H100 records these tests' expectations were worked out on (later runs in that folder add cells).
RUNS = [
    REPO / "baselines" / "runs" / name
    for name in (
        "h100-20261122-aa-gated.jsonl",
        "h100-20261122-captioner-strategies.jsonl",
        "h100-20261122-nightly-vit_b16-infer-fp16.jsonl",
        "h100-20261122-planted-slow1ms.jsonl",
        "h100-20261122-pr-run1.jsonl",
        "h100-20261122-pr-run1b.jsonl",
        "h100-20261122-pr-run2.jsonl",
        "h100-20261122-pr-run3.jsonl",
        "h100-20261122-profiled-graph-break.jsonl",
        "h100-20261122-regional-compiled-optimizer.jsonl",
    )
]
WINDOW = (1400, 2000)  # px: the width the page is laid out for
BAR_RGB = (0x4C, 0x78, 0xA8)  # --bar in the template


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The H100 records (a later record of a cell wins) and a history db of the 7 runs, in the order they ran."""
    db = tmp_path_factory.mktemp("real") / "history.sqlite"
    for path in RUNS:
        history.append(db, iter_records(path))
    return load_records(RUNS), db


@pytest.fixture(scope="module")
def runs23_baseline(tmp_path_factory) -> Path:
    """The baseline the planted slowdown was gated against (runs 2 and 3), not whatever baselines/ holds now."""
    base_dir = tmp_path_factory.mktemp("base")
    runs = [list(iter_records(REPO / "baselines" / "runs" / f"h100-20261122-pr-run{n}.jsonl")) for n in (2, 3)]
    for key, baseline in build_baseline(runs).items():
        write_baseline(baseline_path(base_dir, *key), baseline)
    return base_dir


def step_history(tmp_path, days: int = 10, drop_from: int = 6, clock: str = "speedup") -> tuple[list[dict], Path]:
    """Nightlies of gpt2 and vit_b16 (quiet: 0.5 % noise); gpt2 training loses 10 % of `clock`'s ratio from day
    `drop_from` on."""
    db = tmp_path / "steps.sqlite"
    latest = []
    for day in range(1, days + 1):
        records = syn.run(day, cell_list=syn.cells(models=["gpt2", "vit_b16"]), noise=0.005, run_noise=0.003)
        for r in records:
            r.update(run_id=f"night{day}", started_at=f"2026-11-{day:02d}T02:00:00+00:00")
            if r["cell"].startswith("gpt2-train") and day >= drop_from:
                r.update({k: r[k] * 0.9 for k in (clock, f"{clock}_lo", f"{clock}_hi")})
        history.append(db, records, commit=f"{day:02d}abcdef")
        latest = records
    return latest, db


class Elements(HTMLParser):
    """Every start tag as (tag, attrs); the text of text.value elements in bar charts."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.values: list[tuple[str, str]] = []
        self._value_cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "text" and attrs.get("class") == "value":
            self._value_cell = attrs.get("data-cell")

    def handle_data(self, data):
        if self._value_cell is not None:
            self.values.append((self._value_cell, data))
            self._value_cell = None


def parse(page: str) -> Elements:
    parser = Elements()
    parser.feed(page)
    return parser


# ---------------------------------------------------------------------------------------------- content


def test_page_is_self_contained_and_has_every_chart(real, runs23_baseline):
    records, db = real
    page = html_report.render_html(html_report.build(records, db_path=db, baseline=runs23_baseline))
    assert "<script" not in page and "<link" not in page and "url(" not in page
    assert not [tag for tag, attrs in parse(page).tags if attrs.get("src") or attrs.get("href")]
    assert re.findall(r"https?://[^\s\"']+", page) == ["http://www.w3.org/2000/svg"] * page.count("<svg")
    labels = [a["aria-label"] for t, a in parse(page).tags if t == "svg"]
    assert labels[:4] == ["speedup train", "speedup infer", "compile seconds", "memory ratio"]
    assert len([label for label in labels if label.startswith("speedup history")]) == 10


def test_bars_and_their_numbers_match_the_records(real):
    records, db = real
    parsed = parse(html_report.render_html(html_report.build(records, db_path=db)))
    bars = [a for t, a in parsed.tags if t == "rect" and a.get("class", "").startswith("bar")]
    ok = [r for r in records if r["status"] == "ok"]
    assert len(bars) == 3 * len(ok)  # speedup, compile time, memory ratio
    speedups = {a["data-cell"]: float(a["data-value"]) for a in bars[: len(ok)]}
    assert speedups == {r["cell"]: pytest.approx(r["speedup"], rel=1e-5) for r in ok}
    texts = dict(parsed.values[: len(ok)])
    for r in ok:
        assert texts[r["cell"]] == f"{r['speedup']:.3f}× [{r['speedup_lo']:.3f}, {r['speedup_hi']:.3f}]"
    memory = {a["data-cell"]: float(a["data-value"]) for a in bars[2 * len(ok) :]}
    assert memory == {
        r["cell"]: pytest.approx(r["peak_mem_compiled_mb"] / r["peak_mem_eager_mb"], rel=1e-5) for r in ok
    }


def test_compile_bars_name_the_compiles_again_in_process_and_from_artifacts():
    cells = syn.cells(models=["gpt2"])
    records = syn.run(1, cell_list=cells, overrides={cells[0].id: {"compile_artifacts_s": 12.3}})
    texts = [text for _cell, text in parse(html_report.render_html(html_report.build(records))).values]
    assert texts.count("40.0 s (warm 6.0 s, from artifacts 12.3 s)") == 1
    assert texts.count("40.0 s (warm 6.0 s)") == len(cells) - 1


def test_failed_cells_are_listed_with_their_reason_escaped(tmp_path):
    cells = syn.cells(models=["gpt2"])
    records = syn.run(1, cell_list=cells, overrides={cells[0].id: syn.failed(cells[0], "OOM <script>x</script>")})
    report = html_report.build(records)
    page = html_report.render_html(report)
    assert "<script>x" not in page and "OOM &lt;script&gt;x&lt;/script&gt;" in page
    assert [a["data-cell"] for t, a in parse(page).tags if t == "rect" and a["class"].split()[0] == "bar"][0] == cells[
        1
    ].id
    assert f"- failed `{cells[0].id}`: OOM &lt;script>x&lt;/script>" in html_report.render_markdown(report)


def test_change_points_and_gate_marks_in_page_and_digest(tmp_path):
    latest, db = step_history(tmp_path)
    report = html_report.build(latest, db_path=db, caption="synthetic nightlies")
    gpt2 = next(t for s in report.sections for t in s.trends if t.cell.startswith("gpt2-train"))
    assert len(gpt2.changes) == 1 and gpt2.changes[0].endswith("regression")
    assert re.match(r"-(9\.[5-9]|10\.[0-5])% at 11-06 \(06abcde\)", gpt2.changes[0])
    others = [t for s in report.sections for t in s.trends if t is not gpt2]
    assert len(others) == 3 and not any(t.changes for t in others)
    lines = html_report.render_markdown(report).splitlines()
    row = next(line for line in lines if line.startswith("| `gpt2-train"))
    assert row.count("|") == 10 and "% at 11-06" in row and re.search(r"\| [▁-█]{10} \|", row)
    assert lines[2] == "synthetic nightlies"


def test_the_device_speedup_has_its_own_trends_and_change_points_beside_the_wall(tmp_path):
    """A GPU loss the wall speedup hides (a host-bound step): the device trend finds it, the wall trend does not."""
    latest, db = step_history(tmp_path, clock="device_speedup")
    report = html_report.build(latest, db_path=db)
    (section,) = report.sections
    assert not any(t.changes for t in section.trends) and len(section.device_trends) == 4
    gpt2 = next(t for t in section.device_trends if t.cell.startswith("gpt2-train"))
    assert gpt2.metric == "device_speedup" and len(gpt2.changes) == 1
    assert re.match(r"device speedup -(9\.[5-9]|10\.[0-5])% at 11-06 \(06abcde\).*regression$", gpt2.changes[0])
    assert "--rule device_speedup" in gpt2.bisects[0]
    page, digest = html_report.render_html(report), html_report.render_markdown(report)
    assert 'data-metric="device_speedup"' in page and "Device speedup history per cell" in page
    assert "change point device speedup -" in digest


def test_a_count_that_grew_is_a_change_point_in_the_report_with_its_bisection(tmp_path):
    """One more GPU kernel a compiled step on gpt2 train from night 6 (+0.5 %, past the 0.5 % band; speedups
    unmoved): the page and the digest list it as more work, with the bisect command under the gate's rules,
    and no other count or cell moved."""
    db = tmp_path / "counts.sqlite"
    for day in range(1, 11):
        records = syn.run(day, cell_list=syn.cells(models=["gpt2"]), noise=0.005, run_noise=0.003)
        for r in records:
            r.update(run_id=f"night{day}", started_at=f"2026-11-{day:02d}T02:00:00+00:00", compiled_kernels=187.0)
            if r["cell"].startswith("gpt2-train") and day >= 6:
                r["compiled_kernels"] = 188.0
        history.append(db, records, commit=f"{day:02d}abcdef")
    report = html_report.build(records, db_path=db)
    (section,) = report.sections
    (text,) = section.count_changes
    assert text.startswith("gpt2-train") and "compiled GPU kernels +0.5% at 11-06 (06abcde): 187 → 188" in text
    assert text.endswith("more work") and "--rule gate" in section.count_bisects[0]
    page, digest = html_report.render_html(report), html_report.render_markdown(report)
    assert 'ul class="counts"' in page and "compiled GPU kernels +0.5%" in page
    assert "count change point gpt2-train" in digest


RESNET = "resnet50-train-inductor_default-amp_bf16"


def quiet_baseline(tmp_path) -> Path:
    """A baseline directory of 3 quiet runs (0.5 % noise per round, 0.2 % per run)."""
    base_dir = tmp_path / "baselines"
    for key, baseline in build_baseline(syn.runs(3, first_seed=21, noise=0.005, run_noise=0.002)).items():
        write_baseline(baseline_path(base_dir, *key), baseline)
    return base_dir


def test_gate_verdicts_colour_the_bars(tmp_path):
    base_dir = quiet_baseline(tmp_path)
    resnet = RESNET
    records = syn.run(7, noise=0.005, run_noise=0.002, overrides={resnet: {"speedup": 2.3 * 0.8}})
    report = html_report.build(records, baseline=base_dir)
    assert report.gate_failed and report.gate_lines[0].startswith("FAIL")
    page = html_report.render_html(report)
    red = [a["data-cell"] for t, a in parse(page).tags if t == "rect" and "verdict-regression" in a.get("class", "")]
    assert red == [resnet]
    assert 'class="gate fail"' in page


def test_a_paired_runs_report_judges_as_the_paired_gate_did(tmp_path):
    """`perfgate report` on a paired run's records (pr-gate.yml's digest and PR comment): the clocks were the
    pair's to judge, so a wall speedup 20 % under the baseline's (other machines') is no regression there, as
    it was none in the gate; and each cell's verdict carries its paired outcome."""
    base_dir = quiet_baseline(tmp_path)
    slower = {"speedup": 2.3 * 0.8, "paired": {"outcome": "unsure", "rules": []}}
    records = syn.run(7, noise=0.005, run_noise=0.002, overrides={RESNET: slower})
    records = [r if r["cell"] == RESNET else {**r, "paired": {"outcome": "ok", "rules": []}} for r in records]
    digest = tmp_path / "digest.md"
    run = syn.write_run(tmp_path / "results.jsonl", records)
    assert main(["report", run, "--baseline", str(base_dir), "--markdown", str(digest)]) == 0
    text = digest.read_text()
    (row,) = [line for line in text.splitlines() if line.startswith(f"| `{RESNET}`")]
    assert "paired: unsure" in row and "regression" not in row
    assert "FAIL" not in text and text.count("paired: ok") == len(records) - 1
    unpaired = html_report.build([{k: v for k, v in r.items() if k != "paired"} for r in records], baseline=base_dir)
    assert unpaired.gate_failed  # the same records, unpaired: the wall rule judges them against the baseline


def test_a_custom_threshold_reaches_the_html_verdict(tmp_path, capsys):
    """resnet50 3 % slower passes the default wall rule (5 %). A stricter threshold fails it in the page as in
    `perfgate compare`: the model record's own (a fixture's speedup_threshold, which the plugin and compare
    read from the record), or a stricter rule set handed to the report as to gate.gate_run."""
    base_dir = quiet_baseline(tmp_path)
    slower = {"speedup": 2.3 * 0.97}
    plain = syn.run(7, noise=0.005, run_noise=0.002, overrides={RESNET: slower})
    own = syn.write_run(
        tmp_path / "own.jsonl",
        syn.run(7, noise=0.005, run_noise=0.002, overrides={RESNET: {**slower, "gate": {"speedup_threshold": 0.02}}}),
    )
    assert main(["compare", syn.write_run(tmp_path / "plain.jsonl", plain), "--baseline", str(base_dir)]) == 0
    assert main(["compare", own, "--baseline", str(base_dir)]) == 1
    capsys.readouterr()
    assert not html_report.build(plain, baseline=base_dir).gate_failed
    strict = gate.default_rules(speedup=0.02)
    assert gate.gate_run(plain, base_dir, rules=strict).exit_code == 1
    for report in (
        html_report.build(load_records([own]), baseline=base_dir),
        html_report.build(plain, baseline=base_dir, rules=strict),
    ):
        assert report.gate_failed and report.gate_lines[0].startswith(f"FAIL {syn.H100} (pr): 1 regression(s)")
        verdicts = {row["cell"]: row["verdict"] for section in report.sections for row in section.table}
        assert verdicts.pop(RESNET) == "regression" and set(verdicts.values()) == {"ok"}


def test_unfit_records_get_no_verdict_as_compare_refuses_them(tmp_path):
    records = [{**r, "unfit": "2 xdist workers shared 2 CPU cores"} for r in syn.run(7, noise=0.005)]
    report = html_report.build(records, baseline=quiet_baseline(tmp_path))
    assert report.gate_lines == [] and not report.gate_failed
    assert any(f"no verdicts for {syn.H100} (pr): 10 record(s) are unfit for a timing gate" in n for n in report.notes)


def test_a_custom_rule_set_marks_the_trend_points(tmp_path):
    base_dir, db = quiet_baseline(tmp_path), tmp_path / "h.sqlite"
    history.append(db, syn.run(6, noise=0.005, run_noise=0.002), date="2026-11-01")
    latest = syn.run(7, noise=0.005, run_noise=0.002, overrides={RESNET: {"speedup": 2.3 * 0.97}})
    history.append(db, latest, date="2026-11-02")

    def marked(**rules) -> list[str]:
        report = html_report.build(latest, db_path=db, baseline=base_dir, rules=gate.default_rules(**rules))
        return [text for section in report.sections for t in section.trends for text in t.marked]

    assert marked() == []
    assert len(marked(speedup=0.02)) == 1 and marked(speedup=0.02)[0].startswith(f"{RESNET} at 11-02")


def test_verdicts_stay_with_their_environment(tmp_path):
    """The same cell on two GPUs: only the H100's record has a baseline, and only it gets a verdict."""
    base_dir = tmp_path / "baselines"
    for key, baseline in build_baseline(syn.runs(2, first_seed=3, noise=0.005, run_noise=0.002)).items():
        write_baseline(baseline_path(base_dir, *key), baseline)
    h100 = syn.run(9, noise=0.005, run_noise=0.002)
    a100 = [{**r, "env": syn.env(syn.A100, "NVIDIA A100")} for r in h100]
    no_env = [{**h100[0], "cell": "odd-cell", "env": {}}]
    report = html_report.build(h100 + a100 + no_env, baseline=base_dir)
    by_fp = {s.fingerprint: s for s in report.sections}
    assert all(row["verdict"] == "ok" for row in by_fp[syn.H100].table)
    assert all(row["verdict"] == "" for row in by_fp[syn.A100].table + by_fp["unknown"].table)
    assert any("1 record(s) without env.fingerprint" in n for n in report.notes)
    assert any(f"no verdicts for {syn.A100} (pr)" in n for n in report.notes)
    # The BaselineError's message whole, with how to make the missing baseline.
    assert any(
        f"no verdicts for {syn.A100} (pr): no baseline at" in n and "perfgate baseline update" in n
        for n in report.notes
    )


def test_cli_report_writes_both_files(tmp_path, capsys):
    latest, db = step_history(tmp_path)
    results = syn.write_run(tmp_path / "latest.jsonl", latest)
    out_html, out_md = tmp_path / "out" / "report.html", tmp_path / "out" / "report.md"
    assert (
        main(
            [
                "report",
                results,
                "--db",
                str(db),
                "--html",
                str(out_html),
                "--markdown",
                str(out_md),
                "--caption",
                "a caption",
            ]
        )
        == 0
    )
    assert "a caption" in out_html.read_text() and out_md.read_text().startswith("## perfgate report")
    assert main(["report", results]) == 2
    assert "--html" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "none.jsonl"), "--html", str(out_html)]) == 2
    assert main(["report", results, "--db", str(tmp_path / "none.sqlite"), "--markdown", str(out_md)]) == 0
    assert "no history database" in out_md.read_text()


def test_template_is_packaged():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "templates/*.j2" in config["tool"]["setuptools"]["package-data"]["perfgate.render"]
    assert any(dep.lower().startswith("jinja2") for dep in config["project"]["dependencies"])


# ---------------------------------------------------------------------------------------------- browser


def chromium() -> str | None:
    for name in (
        os.environ.get("PERFGATE_CHROMIUM"),
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


needs_browser = pytest.mark.skipif(
    chromium() is None,
    reason="no Chromium or Chrome on PATH (set PERFGATE_CHROMIUM, or `apt-get install chromium`; .ci/run installs it)",
)

# Appended to a copy of the page: measures what the browser laid out and writes it into the DOM, which
# --dump-dom then prints. The page itself has no script.
PROBE = """<pre id="probe"></pre><script>
const box = e => e.getBoundingClientRect();
const chart = e => e.closest('svg').getAttribute('aria-label');
document.getElementById('probe').textContent = JSON.stringify({
  scrollWidth: document.documentElement.scrollWidth,
  text: document.body.innerText,
  charts: [...document.querySelectorAll('svg.chart')].map(s => ({label: s.getAttribute('aria-label'),
           left: box(s).left, right: box(s).right, width: box(s).width, height: box(s).height})),
  bars: [...document.querySelectorAll('svg.bars rect.bar')].map(r => ({chart: chart(r), cell: r.dataset.cell,
         value: +r.dataset.value, left: box(r).left, width: box(r).width, height: box(r).height})),
  values: [...document.querySelectorAll('svg.bars text.value')].map(t => ({chart: chart(t),
           cell: t.dataset.cell, text: t.textContent, width: box(t).width})),
  trends: [...document.querySelectorAll('.trend-card[data-metric="speedup"]')].map(c => ({cell: c.dataset.cell,
           points: [...c.querySelectorAll('g.pt')].map(g => ({index: +g.dataset.index, value: +g.dataset.value,
                    y: box(g.querySelector('circle')).top, x: box(g.querySelector('circle')).left,
                    cls: g.querySelector('circle').getAttribute('class')})),
           changes: [...c.querySelectorAll('line.cp')].map(l => ({index: +l.dataset.index,
                     shift: +l.dataset.shift, cls: l.getAttribute('class'), x: box(l).left}))})),
});
</script>"""


def browser(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ]
    proc = subprocess.run([chromium(), *flags, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def rendered(page: str, tmp_path: Path) -> dict:
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = browser(["--dump-dom", probed.as_uri()], tmp_path).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found and found.group(1), "the probe did not run: " + dom[-500:]
    return json.loads(html.unescape(found.group(1)))


def proportional(bars: list[dict], records: dict[str, float]) -> None:
    """Bars start at one x and their drawn lengths are proportional to the records' numbers (0.5 px)."""
    assert sorted(b["cell"] for b in bars) == sorted(records)
    px_per_unit = max(b["width"] for b in bars) / max(records.values())
    for bar in bars:
        assert bar["left"] == pytest.approx(bars[0]["left"], abs=0.5)
        assert bar["width"] == pytest.approx(records[bar["cell"]] * px_per_unit, abs=0.5)


@needs_browser
def test_browser_shows_the_records(real, runs23_baseline, tmp_path):
    records, db = real
    page = html_report.render_html(
        html_report.build(records, db_path=db, baseline=runs23_baseline, caption="seven H100 runs of one day")
    )
    seen = rendered(page, tmp_path)
    assert seen["scrollWidth"] <= WINDOW[0] and "seven H100 runs of one day" in seen["text"]
    for chart in seen["charts"]:
        assert chart["width"] > 300 and chart["height"] > 100 and chart["right"] <= WINDOW[0], chart
    ok = [r for r in records if r["status"] == "ok"]
    for phase in ("train", "infer"):
        mine = {r["cell"]: r["speedup"] for r in ok if r["phase"] == phase}
        proportional([b for b in seen["bars"] if b["chart"] == f"speedup {phase}"], mine)
    proportional([b for b in seen["bars"] if b["chart"] == "compile seconds"], {r["cell"]: r["compile_s"] for r in ok})
    proportional(
        [b for b in seen["bars"] if b["chart"] == "memory ratio"],
        {r["cell"]: r["peak_mem_compiled_mb"] / r["peak_mem_eager_mb"] for r in ok},
    )
    shown = {v["cell"]: v["text"] for v in seen["values"] if v["chart"].startswith("speedup ")}
    assert shown == {r["cell"]: f"{r['speedup']:.3f}× [{r['speedup_lo']:.3f}, {r['speedup_hi']:.3f}]" for r in ok}
    assert all(v["width"] > 20 for v in seen["values"])  # the numbers are drawn, not clipped away
    trends = {t["cell"]: t for t in seen["trends"]}
    for cell, trend in trends.items():
        series = [p["speedup"] for p in history.series(db, cell) if p["status"] == "ok"]
        assert [p["value"] for p in trend["points"]] == pytest.approx(series, rel=1e-5)
        ranked = sorted(trend["points"], key=lambda p: p["value"])
        assert [p["y"] for p in ranked] == sorted((p["y"] for p in ranked), reverse=True)  # higher is up
    # The planted 1 ms slowdown (baselines/runs/README.md) shows as a red point on the inference trends.
    for cell in ("gpt2-infer-inductor_default-amp_bf16", "vit_b16-infer-inductor_default-amp_bf16"):
        marked = [p for p in trends[cell]["points"] if "mark-regression" in p["cls"]]
        assert [p["value"] for p in marked] == pytest.approx([2.8076 if "gpt2" in cell else 1.0975])


@needs_browser
def test_browser_draws_change_points_where_the_level_moved(tmp_path):
    latest, db = step_history(tmp_path)
    seen = rendered(html_report.render_html(html_report.build(latest, db_path=db)), tmp_path)
    trends = {t["cell"]: t for t in seen["trends"]}
    gpt2 = trends["gpt2-train-inductor_default-amp_bf16"]
    assert [(c["index"], c["cls"]) for c in gpt2["changes"]] == [(5, "cp cp-regression")]
    before, after = gpt2["points"][4]["x"], gpt2["points"][5]["x"]
    assert before < gpt2["changes"][0]["x"] < after  # the line is drawn between day 5 and day 6
    assert gpt2["changes"][0]["shift"] == pytest.approx(-0.1, abs=0.01)
    assert re.search(r"change point -(9\.[5-9]|10\.[0-5])% at 11-06", seen["text"])
    assert not any(t["changes"] for cell, t in trends.items() if cell != gpt2["cell"])


@needs_browser
def test_browser_screenshot_shows_the_charts(real, tmp_path):
    records, db = real
    page = tmp_path / "report.html"
    html_report.write(html_report.build(records, db_path=db), page, None)
    shot = tmp_path / "shot.png"
    browser([f"--screenshot={shot}", page.as_uri()], tmp_path)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == WINDOW
    image = pytest.importorskip("PIL.Image", reason="Pillow is needed to count pixels").open(shot).convert("RGB")
    bar_px = sum(n for n, rgb in image.getcolors(WINDOW[0] * WINDOW[1]) if rgb == BAR_RGB)
    assert bar_px > 0.01 * WINDOW[0] * WINDOW[1]  # the bars are painted, in their colour
