"""Pure-Python twins of the native core: the readable reference and the test oracle.

``codec``, ``digest``, ``hashing``, ``replica`` and ``swa_rule`` are the twins of the native
pieces behind ``cache.events``; ``sink`` is the twin of the tree's native event recorder
(``cache.tree.sink``). Differential tests hold each equal to its native counterpart. They live
with the tests, outside the four shipped packages: nothing in the product imports them (an
import-linter contract in pyproject.toml forbids it), no wheel carries them, and they are never
a run-time fallback.
"""
