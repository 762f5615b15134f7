"""``python -m mbpo``: see mbpo.cli."""

import os
import signal
import sys

if __name__ == "__main__":
    try:
        from mbpo.cli import main  # seconds of imports (torch): a Ctrl-C here is one line too

        sys.exit(main())
    except KeyboardInterrupt:
        print("[mbpo] SIGINT: stopped", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    except BrokenPipeError:  # `--help-config | head`: the reader has what it wanted; no traceback at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
