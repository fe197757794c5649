"""``python -m swa_es.cli``: the same as the ``swa-es`` command."""

import sys

from swa_es.cli.main import main

sys.exit(main())
