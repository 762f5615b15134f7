"""``python -m mbpo``: see mbpo.cli."""

import signal
import sys

if __name__ == "__main__":
    try:
        from mbpo.cli import main  # seconds of imports (torch): a Ctrl-C here is one line too

        sys.exit(main())
    except KeyboardInterrupt:
        print("[mbpo] SIGINT: stopped", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
