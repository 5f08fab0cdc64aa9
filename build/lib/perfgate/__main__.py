"""`python -m perfgate`: the `perfgate` command, for a python whose scripts directory is not on PATH."""

import sys

from perfgate.cli import main

if __name__ == "__main__":  # imported (the no-torch walk imports every module), it runs nothing
    sys.exit(main())
