"""Rendering: the Markdown report, the HTML page and its charts, the modes table, the A/B report. Imports no torch;
imports perfgate.core, perfgate.judge, perfgate.store and perfgate.plan."""
