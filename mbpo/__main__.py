"""``python -m mbpo``: see mbpo.cli."""

import sys

from mbpo.cli import main

sys.exit(main())
