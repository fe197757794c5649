"""Prediction quality over real HTTP: reports posted to ``/v1/feedback`` by the Python clients
(binary) and as JSON become per-source error histograms, wrong-route counts and token sums, at
``/metrics`` (each family declared in the metric table) and ``GET /v1/quality``; bad bodies are
refused with a reason and counted as refusals."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from consumers import Follower
from log import MemoryLog
from swa_es.client import AsyncRoutingClient, Feedback, FeedbackReceipt, RoutingClient
from swa_es.service.feedback import MAX_SOURCES, FeedbackBook
from swa_es.service.feedback_body import FeedbackReport, Prediction
from swa_es.service.http_app import AppParts, build_app
from swa_es.service.http_server import HttpServer
from swa_es.service.match_query import BadRequestError, Query, TokenQuery
from swa_es.service.routing import FollowerRouting
from swa_es.service.service_metrics import registry_of
from swa_es.service.views import StandardViews
from swa_es.testing.metrics import parse_samples, refusals_by_reason
from tests.consumers.primary_model import PrimaryModel, record
from tests.service.test_service_metrics import assert_declared

PROMPT = list(range(1, 41))
"""40 tokens: w0 holds the first 32 of them, w1 the first 16 (pages of 4)."""


async def _followed() -> tuple[Follower, StandardViews]:
    log = MemoryLog()
    batches = []
    for source, held in (("w0", 32), ("w1", 16)):
        model = PrimaryModel(source, page_size=4)
        batches += [model.start_epoch("e1"), model.batch(model.store(PROMPT[:held]))]
    await log.append_batch([record(b) for b in batches])
    views = StandardViews.create()
    follower = Follower(log, views.all)
    await follower.catch_up()
    return follower, views


class _Answers:
    """A fixed routing answer (the book's arithmetic, apart from any index)."""

    def __init__(self, answers: dict[str, dict[str, Any]]) -> None:
        self.answers = answers

    def answer(self, query: Query) -> dict[str, dict[str, Any]]:
        return self.answers


def test_the_book_compares_the_chosen_source_with_the_best_other() -> None:
    """Error = predicted (usable where known, else cached) minus reused on the chosen source;
    wrong when reused falls short of another source's prediction; absent sources predicted
    0; an unknown prediction counts as unpredicted; sums are block-weighted."""
    book = FeedbackBook(
        _Answers(
            {
                "w0": {"cached_tokens": 48, "usable_tokens": 32},
                "w1": {"cached_tokens": 16, "usable_tokens": None},
                "w2": {"cached_tokens": None, "usable_tokens": None, "state": "offline"},
            }
        )
    )
    prompt = TokenQuery(PROMPT)
    receipt = book.take(
        [
            FeedbackReport("w0", 32, prompt),  # exact, right
            FeedbackReport("w0", 16, prompt),  # over-predicted by 16, still >= w1's 16: right
            FeedbackReport("w1", 16, prompt),  # exact but w0 would have given 32: wrong
            FeedbackReport("w2", 0, prompt),  # offline: unpredicted; w0 predicted 32: wrong
            FeedbackReport("w3", 8, prompt),  # absent: predicted 0, reused 8 (error -8): wrong
        ]
    )
    assert receipt.accepted == 5 and receipt.incorrect == 3 and receipt.unpredicted == 1
    quality = book.quality()
    w0, w1, w2, w3 = (quality["sources"][name] for name in ("w0", "w1", "w2", "w3"))
    assert (w0["reports"], w0["incorrect"], w0["incorrect_rate"]) == (2, 0, 0.0)
    assert (w0["predicted_tokens"], w0["reused_tokens"], w0["prompt_tokens"]) == (64, 48, 80)
    assert w0["error_tokens"]["sum"] == 16 and w0["error_tokens"]["exact"] == 1
    assert w0["error_tokens"]["recent"] == {
        "count": 2,
        "p50": 0,
        "p90": 16,
        "p99": 16,
        "min": 0,
        "max": 16,
    }
    assert (w1["incorrect"], w1["missed_tokens"], w1["error_tokens"]["sum"]) == (1, 16, 0)
    assert (w2["unpredicted"], w2["incorrect"], w2["error_tokens"]["count"]) == (1, 1, 0)
    assert (w3["predicted_tokens"], w3["error_tokens"]["sum"], w3["incorrect"]) == (0, -8, 1)
    everything = quality["all"]
    assert (everything["reports"], everything["incorrect"]) == (5, 3)
    assert everything["incorrect_rate"] == 0.6
    assert everything["reuse_rate"] == (32 + 16 + 16 + 0 + 8) / (5 * 40)
    buckets = {b["le"]: b["count"] for b in everything["error_tokens"]["buckets"]}
    assert (buckets[-16], buckets[-1], buckets[0], buckets[15], buckets[63]) == (0, 1, 3, 3, 4)
    assert buckets["+Inf"] == 4


def test_the_answer_a_router_got_is_the_prediction_when_it_sends_one() -> None:
    book = FeedbackBook(_Answers({}))
    predicted = {"w0": Prediction(32, None), "w1": Prediction(64, 48)}
    receipt = book.take([FeedbackReport("w0", 32, None, predicted, 100)])
    assert (receipt.incorrect, book.quality()["sources"]["w0"]["missed_tokens"]) == (1, 16)


def test_the_sources_tracked_are_bounded() -> None:
    """Each chosen source is a label value: a body naming more than ``MAX_SOURCES`` in all is
    refused whole."""
    book = FeedbackBook(_Answers({}))
    reports = [FeedbackReport(f"w{n}", 0, None, {}, 1) for n in range(MAX_SOURCES - 1)]
    book.take(reports)
    with pytest.raises(BadRequestError, match="at most 1024 are tracked"):
        book.take([FeedbackReport("a", 0, None, {}, 1), FeedbackReport("b", 0, None, {}, 1)])
    assert book.quality()["all"]["reports"] == MAX_SOURCES - 1
    book.take([FeedbackReport("w0", 0, None, {}, 1), FeedbackReport("a", 0, None, {}, 1)])


async def test_reports_over_http_become_metrics_and_quality() -> None:
    """Both clients post binary reports (the prompt, matched by the follower on arrival, and
    the answer a router got), JSON too; ``/v1/quality`` and ``/metrics`` agree with them."""
    follower, views = await _followed()
    app = build_app(
        AppParts(registry_of(list), lambda: (True, "ok"), FollowerRouting(follower, views))
    )
    async with HttpServer(app) as server, AsyncRoutingClient(server.url) as client:
        reply = await client.match(PROMPT)
        assert reply.sources["w0"].usable_tokens == 32
        receipt = await client.feedback(
            [
                Feedback.of_prompt("w1", 16, PROMPT),  # w0 would have given 32: wrong
                Feedback.of_answer("w0", 32, reply.answer, len(PROMPT)),
            ]
        )
        assert receipt == FeedbackReceipt(2, 1, 0)

        def blocking() -> FeedbackReceipt:
            with RoutingClient(server.url) as sync:
                return sync.feedback([Feedback.of_prompt("w0", 24, PROMPT)])

        assert await anyio.to_thread.run_sync(blocking) == FeedbackReceipt(1, 0, 0)
        async with httpx.AsyncClient() as plain:
            body = {"reports": [{"source": "w0", "reused_tokens": 32, "token_ids": PROMPT}]}
            answered = await plain.post(f"{server.url}/v1/feedback", json=body)
            assert answered.status_code == 200
            assert answered.json() == {"accepted": 1, "incorrect": 0, "unpredicted": 0}
            text = (await plain.get(f"{server.url}/metrics")).text
        quality = await client.quality()
    w0, w1 = quality["sources"]["w0"], quality["sources"]["w1"]
    assert (w0["reports"], w0["incorrect"], w0["error_tokens"]["sum"]) == (3, 0, 8)
    assert (w1["reports"], w1["incorrect"], w1["missed_tokens"]) == (1, 1, 16)
    assert quality["all"]["incorrect_rate"] == 0.25
    assert_declared(text)
    samples = parse_samples(text)
    assert samples['swa_es_feedback_reports_total{source="w0"}'] == 3
    assert samples['swa_es_feedback_incorrect_routes_total{source="w1"}'] == 1
    assert samples['swa_es_feedback_incorrect_routes_total{source="w0"}'] == 0
    assert samples['swa_es_feedback_predicted_tokens_total{source="w0"}'] == 96
    assert samples['swa_es_feedback_reused_tokens_total{source="w0"}'] == 88
    assert samples['swa_es_feedback_prompt_tokens_total{source="w0"}'] == 120
    exact = 'swa_es_feedback_prediction_error_tokens_bucket{le="0.0",source="w0"}'
    assert samples[exact] == 2
    assert samples['swa_es_feedback_prediction_error_tokens_bucket{le="15.0",source="w0"}'] == 3
    assert samples['swa_es_feedback_prediction_error_tokens_bucket{le="+Inf",source="w0"}'] == 3
    # a histogram with negative buckets has no _sum or _count (OpenMetrics): the +Inf bucket
    # is the count, /v1/quality has the sum
    assert "swa_es_feedback_prediction_error_tokens_sum" not in text


async def test_bad_reports_are_refused_with_a_reason_and_counted() -> None:
    """400 (with the reason), 415, 413, 405 and 503 while restoring; each a refusal by reason,
    each a request of route /v1/feedback; nothing refused is counted as a report."""
    follower, views = await _followed()
    state = {"ready": True}

    def health() -> tuple[bool, str]:
        return (True, "ok") if state["ready"] else (False, "restoring")

    routing = FollowerRouting(follower, views)
    app = build_app(AppParts(registry_of(list), health, routing, max_request_bytes=1024))
    async with HttpServer(app) as server, httpx.AsyncClient() as client:
        url = f"{server.url}/v1/feedback"
        bad = await client.post(url, json={"reports": [{"source": "w0", "token_ids": [1]}]})
        assert bad.status_code == 400
        assert bad.json() == {
            "error": "reports[0].reused_tokens is required (what the engine reused)"
        }
        binary = {"content-type": "application/octet-stream"}
        damaged = await client.post(url, content=b"SWFB\x01", headers=binary)
        assert damaged.status_code == 400 and "the header" in damaged.json()["error"]
        text_type = {"content-type": "text/plain"}
        assert (await client.post(url, content=b"x", headers=text_type)).status_code == 415
        assert (await client.post(url, content=b"x" * 2048)).status_code == 413
        assert (await client.get(url)).status_code == 405
        state["ready"] = False
        report = {"reports": [{"source": "w0", "reused_tokens": 0, "token_ids": [1]}]}
        assert (await client.post(url, json=report)).status_code == 503
        state["ready"] = True
        quality = (await client.get(f"{server.url}/v1/quality")).json()
        text = (await client.get(f"{server.url}/metrics")).text
    assert quality["all"]["reports"] == 0 and quality["sources"] == {}
    samples = parse_samples(text)

    def requests(code: int) -> float:
        return samples.get(f'swa_es_http_requests_total{{code="{code}",route="/v1/feedback"}}', 0)

    assert [requests(code) for code in (400, 405, 413, 415, 503)] == [2, 1, 1, 1, 1]
    assert samples['swa_es_http_requests_total{code="200",route="/v1/quality"}'] == 1
    refusals = refusals_by_reason(samples)
    assert refusals == {
        "bad_body": 2,
        "unsupported_type": 1,
        "too_large": 1,
        "wrong_method": 1,
        "restoring": 1,
    }
