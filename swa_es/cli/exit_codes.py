"""The exit statuses of ``swa-es`` (defined here only)."""

from typing import Final

EXIT_OK: Final = 0
"""The command did what it was asked."""
EXIT_FAILED: Final = 1
"""A run or a verification failed, or a log is corrupt or unreachable."""
EXIT_USAGE: Final = 2
"""Bad usage or a bad value (a flag, a ``SWA_ES_*`` variable, a log URL)."""
EXIT_INTERRUPTED: Final = 130
"""Interrupted (SIGINT)."""
