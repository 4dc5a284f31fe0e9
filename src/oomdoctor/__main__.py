"""`python -m oomdoctor` is the same as the `oomdoctor` console script."""

import sys

from oomdoctor.cli import main

if __name__ == "__main__":
    sys.exit(main())
