"""The ZMQ stream out: the log's batches republished in an engine's own wire format."""
