"""The bridge: an engine's ZMQ KV-event stream (sglang or vLLM) appended to our log.

``wire`` holds the ZMQ framing, ``formats`` decodes the engines' msgpack batches, ``mirror``
translates engine block hashes into ours, ``sequencer`` decides what each engine seq means
(in order, duplicate, gap, restart), and ``service.Bridge`` ties them to sockets and a
``Publisher``.
"""
