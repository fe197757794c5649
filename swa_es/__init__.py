"""swa-es: an event-sourced sliding-window-attention radix KV cache.

The public face: ``Publisher`` (cache events -> ordered batches -> durable log) with its
``PublisherConfig``, overflow policies and metrics. The cache lives in ``cache``, logs in
``log``, followers and views in ``consumers``. Importing this package does not import torch.
"""

from cache.errors import SwaEsError
from swa_es.publish.batching import PublishedCache
from swa_es.publish.config import PublisherConfig
from swa_es.publish.errors import PublisherClosedError, PublisherError, PublisherFailedError
from swa_es.publish.metrics import PublisherMetrics
from swa_es.publish.overflow import Backpressure, OverflowPolicy
from swa_es.publish.publisher import Publisher

__all__ = [
    "SwaEsError",
    "Publisher",
    "PublisherConfig",
    "PublishedCache",
    "Backpressure",
    "OverflowPolicy",
    "PublisherMetrics",
    "PublisherError",
    "PublisherFailedError",
    "PublisherClosedError",
]
