"""Planning a run before it measures: what each cell is expected to cost, shards of equal cost, progress and ETA
lines (costs). Imports no torch; imports only perfgate.core."""
