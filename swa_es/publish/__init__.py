"""The publishing library: cache events -> ordered batches -> a durable log.

``publisher.Publisher`` owns the queue and the append task; ``config`` is its frozen
``PublisherConfig`` and the value checks; ``batching`` turns events into size-bounded batches;
``overflow`` is what a full queue does; ``metrics`` (one live dataclass) and ``errors`` are what
a caller sees. The public names are re-exported by ``swa_es``.
"""
