"""`perfgate bisect`: the first bad step of a range of commits or environments, each probe an A/B run against
the good end (perfgate.ab.bisect_run; docs/bisect.md). Imports no torch.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from perfgate.core import exits
from perfgate.core.output import OutputError


def cmd_bisect(args: argparse.Namespace) -> int:
    from perfgate.ab import bisect_paired, bisect_report, bisect_run, process_manifest, process_report, process_run
    from perfgate.ab.bisect_verdict import PAIRED, PROCESSES, BadRule, BisectError
    from perfgate.ab.process_env import ABError

    def progress(message: str) -> None:
        print(f"[perfgate bisect] {message}", flush=True)

    out = Path(args.resume or args.out or process_run.default_out("bisect"))
    range_given = args.good or args.bad or args.step_python or args.step_path or args.step_pip
    try:
        if args.resume:
            if range_given or args.pytest_args:
                raise BisectError(
                    "--resume DIR carries on the bisection as its bisect.json says: give no range or pytest args"
                )
            manifest = None
        else:
            rule = BadRule.parse(args.rule)
            steps = bisect_run.steps_from(
                Path.cwd(),
                out,
                # absolute: a probe's side starts in its own checkout, where a relative path would not resolve
                os.path.abspath(args.python) if args.python else sys.executable,
                args.good,
                args.bad,
                [os.path.abspath(p) if p.strip() else p for p in args.step_python],
                args.step_path,
                args.step_pip,
            )
            # Paired unless a process count is given. `is None`, not `or`: --processes 0 became 3 and ran (ab had
            # fixed it), now new_manifest refuses it.
            paired = args.processes is None and args.max_processes is None
            processes = 3 if args.processes is None else args.processes
            manifest = bisect_run.new_manifest(
                out,
                steps,
                args.pytest_args,
                rule,
                processes,
                max(processes, 5) if args.max_processes is None else args.max_processes,
                shlex.split(args.pip_args or ""),
                Path.cwd().resolve(),
                PAIRED if paired else PROCESSES,
            )
        if manifest is None:
            manifest = bisect_run.load(out)
        if args.html and manifest.get("engine") == PAIRED:  # a new bisection or a resumed one
            raise BisectError(
                "--html draws the process engine's A/B report (--processes N); a paired probe's report.md is in "
                "its directory"
            )
        prober = bisect_paired.probe if manifest.get("engine") == PAIRED else bisect_run.probe
        manifest = bisect_run.run_bisect(out, progress, manifest=manifest, prober=prober)
        if args.html and manifest["outcome"]["first_bad"] is not None:
            probe_dir = out / manifest["probes"][str(manifest["outcome"]["first_bad"])]["dir"]
            process_report.html(
                process_run.verdict(
                    process_manifest.load_manifest(probe_dir), probe_dir, BadRule.parse(manifest["rule"]).rules()
                ),
                args.html,
            )
        sys.stdout.write(bisect_report.write(manifest, out, args.markdown, args.json))
    except (BisectError, ABError, OutputError) as err:
        print(f"perfgate bisect: cannot bisect: {err}", file=sys.stderr)
        return exits.UNUSABLE
    except KeyboardInterrupt:
        print(
            f"perfgate bisect: stopped; what was measured is in {out}: perfgate bisect --resume {out} carries on",
            file=sys.stderr,
        )
        return exits.UNUSABLE
    return bisect_report.EXIT_CODES[manifest["outcome"]["outcome"]]


def add_parser(sub) -> None:
    bis = sub.add_parser(
        "bisect",
        help="find the first bad step of a range of commits or environments, each "
        "probe an A/B run against the good end; exit 1 found, 0 no bad step, "
        "2 cannot say (docs/bisect.md)",
        description="Pytest args after -- select the cells, as for perfgate ab, e.g. "
        '-- perftests -m "gpu and pr" --perf-models gpt2 -k infer -p no:randomly',
    )
    bis.add_argument("--good", metavar="REV", help="the last good commit of this repository (the range's start)")
    bis.add_argument("--bad", metavar="REV", help="a bad commit, after --good (the range's end)")
    bis.add_argument(
        "--step-python",
        metavar="PY",
        action="append",
        default=[],
        help="an interpreter (a venv's bin/python) as a step, repeated in order: good first, bad last",
    )
    bis.add_argument(
        "--step-path",
        metavar="DIR",
        action="append",
        default=[],
        help="a directory put first on PYTHONPATH as a step (e.g. pip install --target), in order",
    )
    bis.add_argument(
        "--step-pip",
        metavar="REQS",
        action="append",
        default=[],
        help='a pip requirement set as a step, e.g. "transformers==4.57.1", installed with --no-deps '
        "into DIR/envs/NN when probed, in order",
    )
    bis.add_argument(
        "--pip-args",
        metavar="ARGS",
        help='extra pip install args for --step-pip, one shell-quoted string, e.g. "--no-index --find-links wheels"',
    )
    bis.add_argument("--python", metavar="PY", help="the interpreter of commit, path and pip steps (default: this one)")
    bis.add_argument(
        "--rule",
        default="gate",
        metavar="RULE",
        help="what makes a step bad: gate (any of the gate's rules, default), METRIC or METRIC:PCT, "
        "e.g. device_speedup:2.5 or speedup (the nightly's change points are on speedup)",
    )
    bis.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="probe by N whole processes a side, alternating (at least 2), where two sides cannot share a GPU or "
        "--rule names one metric; default: paired probes, the PR gate's engine",
    )
    bis.add_argument(
        "--max-processes",
        type=int,
        metavar="M",
        help="an unsure probe is measured again with 2 more a side, up to M (default max(N, 5))",
    )
    bis.add_argument("--out", metavar="DIR", help="the bisection's directory (default: .perfgate/bisect-<UTC time>)")
    bis.add_argument("--resume", metavar="DIR", help="carry on the bisection in DIR")
    bis.add_argument("--markdown", metavar="FILE", help="also write the Markdown report here")
    bis.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    bis.add_argument("--html", metavar="OUT.html", help="the HTML A/B report of the probe that read the first bad step")
    bis.add_argument(
        "pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="pytest args for every process (after --)"
    )
    bis.set_defaults(func=cmd_bisect)
