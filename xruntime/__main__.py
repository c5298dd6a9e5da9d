import sys

if sys.argv[1:2] == ["serve"]:  # before the imports below: Ctrl-C stops a node cleanly
    from .support import stop_signals  # from its first moment (support.stop_signals)

    stop_signals.catch()

from .cli import main  # noqa: E402

sys.exit(main())
