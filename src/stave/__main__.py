"""``python -m stave``: the same as the ``stave`` console script."""

import sys

from stave.cli import main

if __name__ == "__main__":
    sys.exit(main())
