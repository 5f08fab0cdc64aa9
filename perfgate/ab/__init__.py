"""The paired comparison engine: two code states (a base revision, interpreter or environment against this
tree) measured on one runner with both sides alive, their timed rounds alternated, and judged with three
outcomes (regression, no regression, unsure). The PR gate (`--perf-against`), `perfgate ab` and `perfgate
bisect`'s probes compare through it by default. Imports no torch: the sides' worker processes do
(perfgate.measure.duet).

- sides.py          what a side is (revision, interpreter, environment) and how it is checked and checked out
- pair_workers.py   the sides' warm worker processes: started, spoken to, renewed, a spare pair a side
- pair_prepare.py   a process pair to its warm state: in turn, at once, or at once but for the first compiled calls
- duet.py           the coordinator: two warm worker processes per cell, rounds alternated in random order
- paired.py         estimators that fit the noise, the paired bootstrap, and the three-way verdict
- verdict.py        a paired run's verdict over its cells, its exit code with the baseline gate's, its words
- bisect_paired.py  a bisection's probe on it: one pytest run with the good end and the step as sides

`perfgate ab --processes N` and `perfgate bisect --processes N` alternate whole processes, a pytest run per
process, where two sides cannot share a GPU or one metric's rule is wanted:

- process_env.py       the two environments of a process-alternating run, checked before any GPU time is spent
- process_run.py       `perfgate ab --processes`: A and B pytest processes alternating on one machine, resumable
- process_manifest.py  that run's manifest: written atomically, checked, a new one prepared, its processes planned
- process_verdict.py   B against A from those processes' records, with the gate's rules
- process_rules.py     those rules: the gate's plus the absolute step times, and the false-alarm rate
- process_rows.py      the verdict as data (processes, comparisons, a row per cell, the report), its notes
- process_report.py    that verdict as Markdown, JSON and HTML
- bisect_run.py        `perfgate bisect`: the range, its manifest and resume, the process engine's probe
- bisect_verdict.py    a probe's good/bad/unsure and the search over the range
- bisect_report.py     a bisection's probes and culprit as Markdown and JSON
"""
