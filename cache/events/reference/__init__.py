"""Pure-Python twins of the native core: the readable reference and the test oracle.

Nothing in the product imports this package; differential tests hold each module equal to its
native counterpart in ``cache.events``. It is never a run-time fallback.
"""
