"""``python -m mbpo`` and the ``mbpo`` console script: see mbpo.cli."""

import os
import signal
import sys


def run() -> None:
    """mbpo.cli.main with what a command line needs around it: a Ctrl-C during the imports is one line, and a
    closed pipe (``--help-config | head``) ends it quietly; the console script runs this, not main alone.
    """
    try:
        from mbpo.cli import main  # seconds of imports (torch): a Ctrl-C here is one line too

        sys.exit(main())
    except KeyboardInterrupt:
        print("[mbpo] SIGINT: stopped", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    except BrokenPipeError:  # the reader has what it wanted; no traceback at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


if __name__ == "__main__":
    run()
