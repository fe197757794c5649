"""Integrations that run inside a serving engine's own process (``swa_es.integrations.sglang``).

Each one is off unless installed: importing this package changes nothing in any engine.
"""
