"""The judging side: baselines, gate rules, the gate, change points, the A/B verdict. Imports no torch; imports
only perfgate.core."""
