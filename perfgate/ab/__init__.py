"""The paired comparison engine: two code states (a base revision, interpreter or environment against this
tree) measured on one runner with both sides alive, their timed rounds alternated, and judged with three
outcomes (regression, no regression, unsure). The PR gate (`--perf-against`) and `perfgate ab --paired`
compare through it. Imports no torch: the sides' worker processes do
(perfgate.measure.duet).

- sides.py     what a side is (revision, interpreter, environment) and how it is checked and checked out
- duet.py      the coordinator: two warm worker processes per cell, rounds alternated in random order
- paired.py    estimators that fit the noise, the paired bootstrap, and the three-way verdict
- verdict.py   a paired run's verdict over its cells, its exit code with the baseline gate's, its words
- face.py      `perfgate ab --paired`: one pytest run with --perf-against*

`perfgate ab` without --paired and `perfgate bisect` still alternate whole processes (perfgate.ab_run).
"""
