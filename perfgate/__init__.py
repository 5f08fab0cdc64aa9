"""perfgate: measure what torch.compile buys, per model, phase, compile variant and precision.

The measuring side (perfgate.cell and what it imports) needs torch; the data side (record, stats, baseline,
gate, report, history, cli) imports no torch so it runs on a CPU box in a second.
"""

__version__ = "0.1.0"
