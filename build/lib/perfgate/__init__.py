"""perfgate: measure what torch.compile buys, per model, phase, compile variant and precision.

Layers (docs/architecture.md): core (vocabulary, records, statistics), measure (runs a cell; imports torch),
judge (baselines, rules, gate), store (the SQLite history), plan (cell costs, shards, ETA), render (reports),
ab (the A/B engine: paired, process-alternating, bisect), plugin (the pytest face), and at the top the CLI. Only
measure and the plugin import torch, so `perfgate compare` and `perfgate report` run on a CPU box in a second.
"""

__version__ = "0.2.0.dev0"  # CHANGELOG.md: its top entry is this version, with the record schema it writes
