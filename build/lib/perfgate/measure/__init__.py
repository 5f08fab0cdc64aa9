"""The measuring side: runs one cell on a device (compile, timing, clocks, memory, numerics, why-artifacts,
isolation). Imports torch; imports nothing above perfgate.core."""
