"""A serving engine as a primary sees it, and the synthetic one the demo and tests run.

``engine.Engine`` is the interface an engine integration implements; ``workload`` generates the
deterministic chat requests; ``worker.CacheWorker`` serves one request on the cache; ``primary``
runs an engine's steps and publishes its cache. Nothing here knows the command line.
"""

from swa_es.engine.engine import CacheConfig, DeviceUnavailableError, Engine, ServedCache

__all__ = ["Engine", "ServedCache", "CacheConfig", "DeviceUnavailableError"]
