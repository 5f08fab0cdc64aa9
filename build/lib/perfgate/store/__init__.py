"""Storage of runs beyond their results files: the SQLite history every run's records go into (history). Imports
no torch; imports only perfgate.core."""
