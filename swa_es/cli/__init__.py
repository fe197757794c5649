"""The ``swa-es`` command line: ``main`` assembles one module per command.

``settings`` derives every command's options, ``SWA_ES_*`` variables, help and the table of
docs/configuration.md from the options its config class declares (``swa_es.options``), and
``shared_options`` holds those several commands take; ``demo``, ``serve``, ``follow``,
``bridge``, ``inspect``, ``route``, ``snapshot``, ``restore`` and ``bench`` each declare and run
one command; ``live_view`` and ``progress`` draw on the terminal; ``exit_codes`` are the statuses.
"""

from swa_es.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from swa_es.cli.main import UsageError, build_parser, main

__all__ = [
    "main",
    "build_parser",
    "UsageError",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERRUPTED",
]
