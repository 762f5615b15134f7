"""``python -m mbpo``: see mbpo.cli."""

import sys

from mbpo.cli import main

if __name__ == "__main__":
    sys.exit(main())
