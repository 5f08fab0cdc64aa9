"""The judging side: baselines, gate rules, the gate, history, change points, cell costs, the A/B verdict. Imports no torch; imports only perfgate.core."""
