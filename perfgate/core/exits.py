"""The exit codes of every perfgate face, defined once (the CLI, the pytest plugin's session end, the paired
engine), and read by the verdicts that decide them (judge, ab) and the reports that show them (render): core is
the one layer all of them may import. 0 pass, 1 a regression shown, 2 unusable input, nothing to judge, or a
comparison still unsure at its budget, 3 a bug inside perfgate (never a verdict)."""

PASS = 0
REGRESSION = 1
UNUSABLE = 2  # also: unsure at the budget, which never passes
BUG = 3  # pytest's INTERNALERROR code too: the plugin's crashes exit with it


def combined(codes) -> int:
    """Several judges' or sessions' exits as one: a regression shown by any is 1, whatever else; else the worst
    (2 unsure or unusable, 3 a bug), so nothing that did not pass reads as a pass."""
    codes = list(codes)
    return REGRESSION if REGRESSION in codes else max(codes, default=PASS)
