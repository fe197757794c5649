"""``python -m swa_es.integrations.sglang.launch_server ARGS...``: sglang's own launcher
(``python -m sglang.launch_server``, same arguments) with ``install()`` done first.

``install()`` runs when this module is imported, not only when it is run: sglang starts its
scheduler processes with multiprocessing's ``spawn``, which imports the launching module (this
one) in every child before it builds its cache, so each scheduler's cache is hooked too.
"""

from __future__ import annotations

import runpy
import sys

from swa_es.integrations.sglang import install

install()


def main(argv: list[str] | None = None) -> None:
    """Run sglang's launcher as ``python -m sglang.launch_server`` would, with ``argv``."""
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    # alter_sys=False: __main__ stays this module, so spawned children import it (and install).
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=False)


if __name__ == "__main__":
    main()
