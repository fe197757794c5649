"""A Python client of a follower's routing API (``swa-es follow --http-port``), for routers.

``RoutingClient`` (blocking, one keep-alive connection of its own, replies parsed by httptools)
and ``AsyncRoutingClient`` (httpx, pooled) send prompts in the cheapest form the API reads (binary
token ids or block hashes; msgpack batches) and return typed answers: per source a
``SourceMatch`` (with what each tier holds, GPU then host memory or storage: ``tiers``, a
``TierMatch`` per medium), and an ``AsOf`` saying which log position the answer reflects::

    from swa_es.client import RoutingClient

    with RoutingClient("http://127.0.0.1:8080", timeout_s=0.5) as client:
        reply = client.match(token_ids)
        best = reply.answer.best()  # (source, SourceMatch) or None
        stale = reply.as_of.lag_records > 1000
        # ... send the request to the source chosen, then report what its engine reused:
        client.feedback([Feedback.of_answer(source, reused, reply.answer, len(token_ids))])

A follower that asks for a bearer token, over TLS: ``RoutingClient("https://host:8443",
token=..., ca_file="ca.pem")`` (``client_cert=``/``client_key=`` for mutual TLS).

This package imports nothing of the server side; it needs the ``client`` extra
(the swa-es wheel's ``client`` extra: httptools, msgpack, and httpx for the async client).
"""

from swa_es.client.answers import (
    AsOf,
    BatchReply,
    MatchAnswer,
    MatchReply,
    SourceMatch,
    SourcePosition,
    TierMatch,
)
from swa_es.client.clients import (
    AsyncRoutingClient,
    RoutingAuthError,
    RoutingClient,
    RoutingConnectionError,
    RoutingError,
    RoutingUnavailableError,
)
from swa_es.client.feedback import Feedback, FeedbackReceipt
from swa_es.client.wire import HashedPrompt, Prompt

__all__ = [
    "RoutingClient",
    "AsyncRoutingClient",
    "Prompt",
    "HashedPrompt",
    "MatchReply",
    "BatchReply",
    "MatchAnswer",
    "SourceMatch",
    "TierMatch",
    "Feedback",
    "FeedbackReceipt",
    "AsOf",
    "SourcePosition",
    "RoutingError",
    "RoutingUnavailableError",
    "RoutingAuthError",
    "RoutingConnectionError",
]
