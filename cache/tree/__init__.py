"""The SWA radix tree on torch: nodes, the shared tree state and one module per operation.

``radix_cache.SWARadixCache`` is the public face (re-exported as ``cache.SWARadixCache``);
``state`` holds what every operation shares (pools, LRU lists, the event sink); ``insert``,
``match``, ``lock``, ``evict``, ``walk`` and ``sanity`` each do one job on it.
"""
