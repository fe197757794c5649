"""The ``swa-es`` command line: ``main`` parses, ``commands`` dispatches, one module per command.

``config`` builds each command's settings from flags and ``SWA_ES_*`` variables; ``demo``,
``serve``, ``follow``, ``inspect``, ``route``, ``snapshot`` and ``bench`` run the commands;
``live_view`` draws the demo's terminal table.
"""

from swa_es.cli.main import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    build_parser,
    main,
)

__all__ = [
    "main",
    "build_parser",
    "UsageError",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERRUPTED",
]
