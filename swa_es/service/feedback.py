"""Prediction quality: routers' reports of what engines actually reused, against the index.

A router reports each routed request to ``POST /v1/feedback`` (bodies: ``feedback_body``): the
source it chose, the prompt tokens the engine reused there, and the prompt (matched by the
follower on arrival) or the answer it got from ``/v1/match``. ``FeedbackBook`` turns them into,
per chosen source:

- the prediction error: predicted minus reused tokens on the chosen source, where the
  prediction is ``usable_tokens`` when known (what an engine with a sliding window can reuse)
  and ``cached_tokens`` otherwise (a stream without SWA residency events); a source absent from
  the answer was predicted to hold none of the prompt (0); an offline, unknown or mismatched
  source's prediction is not known, and such a report counts as ``unpredicted``;
- whether the request was routed wrongly, as far as the index knew: the engine reused fewer
  tokens on the chosen source than the index predicted some other source could reuse;
- block-weighted sums (every block weighs its page's tokens): prompt, predicted and reused
  tokens, so hit rates are ratios of sums, not averages of ratios.

They are exported as the ``metric_table.FEEDBACK`` metrics and as JSON at ``GET /v1/quality``.
The book lives beside the service's registry (``feedback_book_of``), so every app on that
registry shares it.
"""

from __future__ import annotations

import math
import weakref
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import orjson
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from swa_es.client.feedback import FEEDBACK_PATH, QUALITY_PATH
from swa_es.service import metric_table as table
from swa_es.service.feedback_body import FeedbackReport, Prediction, parse_feedback
from swa_es.service.match_query import BadRequestError, Query, UnsupportedMediaError

FEEDBACK_ROUTE: Final = FEEDBACK_PATH
QUALITY_ROUTE: Final = QUALITY_PATH
MAX_SOURCES: Final = 1024
"""The most distinct chosen sources the book tracks (each is a label value)."""
RECENT_REPORTS: Final = 1024
"""How many of each source's latest prediction errors the percentiles of ``/v1/quality`` read."""
_BOUNDS: Final = table.FEEDBACK_ERROR_BUCKETS_TOKENS
_LE: Final = [repr(float(bound)) for bound in _BOUNDS] + ["+Inf"]
_SUMS: Final = {spec.name.split("_")[3]: spec for spec in table.FEEDBACK_TOKEN_SUMS}
"""``prompt``, ``predicted`` and ``reused`` -> the counter summing those tokens."""


class Matcher(Protocol):
    """What the book asks of the routing API: its per-source answer to a prompt."""

    def answer(self, query: Query) -> dict[str, dict[str, Any]]:
        """Per source: ``cached_tokens``, ``usable_tokens`` (ints, or None: not known)."""
        ...


@dataclass(slots=True)
class Quality:
    """What the reports of one chosen source (or of all) add up to."""

    reports: int = 0
    unpredicted: int = 0
    incorrect: int = 0
    prompt_tokens: int = 0
    predicted_tokens: int = 0
    reused_tokens: int = 0
    missed_tokens: int = 0
    """Summed over wrong routes: the best other prediction minus what was reused."""
    error_counts: list[int] = field(default_factory=lambda: [0] * (len(_BOUNDS) + 1))
    error_sum: int = 0
    recent_errors: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_REPORTS))

    def add(self, prompt: int, reused: int, predicted: int | None, best_other: int) -> bool:
        """Count one report; whether it was routed wrongly."""
        self.reports += 1
        self.prompt_tokens += prompt
        self.reused_tokens += reused
        if predicted is None:
            self.unpredicted += 1
        else:
            error = predicted - reused
            self.predicted_tokens += predicted
            self.error_counts[bisect_left(_BOUNDS, error)] += 1
            self.error_sum += error
            self.recent_errors.append(error)
        wrong = reused < best_other
        if wrong:
            self.incorrect += 1
            self.missed_tokens += best_other - reused
        return wrong

    def as_json(self) -> dict[str, Any]:
        """The ``/v1/quality`` object of these reports."""
        predicted = self.reports - self.unpredicted
        recent = sorted(self.recent_errors)
        cumulative, buckets = 0, []
        for le, count in zip([*_BOUNDS, "+Inf"], self.error_counts, strict=True):
            cumulative += count
            buckets.append({"le": le, "count": cumulative})
        return {
            "reports": self.reports,
            "unpredicted": self.unpredicted,
            "incorrect": self.incorrect,
            "incorrect_rate": _ratio(self.incorrect, self.reports),
            "prompt_tokens": self.prompt_tokens,
            "predicted_tokens": self.predicted_tokens,
            "reused_tokens": self.reused_tokens,
            "missed_tokens": self.missed_tokens,
            "reuse_rate": _ratio(self.reused_tokens, self.prompt_tokens),
            "error_tokens": {
                "count": predicted,
                "sum": self.error_sum,
                "mean": _ratio(self.error_sum, predicted),
                "exact": self.error_counts[_BOUNDS.index(0)],
                "buckets": buckets,
                "recent": {
                    "count": len(recent),
                    "p50": _percentile(recent, 0.50),
                    "p90": _percentile(recent, 0.90),
                    "p99": _percentile(recent, 0.99),
                    "min": recent[0] if recent else None,
                    "max": recent[-1] if recent else None,
                },
            },
        }


def _ratio(part: int, whole: int) -> float | None:
    return None if whole == 0 else part / whole


def _percentile(ordered: Sequence[int], share: float) -> int | None:
    """The nearest-rank percentile of ``ordered`` (None when empty)."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class Receipt:
    """What one body of reports added: reports accepted, wrongly routed, unpredicted."""

    accepted: int
    incorrect: int
    unpredicted: int


def _tokens(found: Mapping[str, Any]) -> int | None:
    return Prediction(found.get("cached_tokens"), found.get("usable_tokens")).tokens


class FeedbackBook:
    """Every report received, per chosen source; its answers to prompts come from ``matcher``."""

    def __init__(self, matcher: Matcher) -> None:
        self._matcher = matcher
        self._sources: dict[str, Quality] = {}
        self._all = Quality()

    def take(self, reports: Sequence[FeedbackReport]) -> Receipt:
        """Count ``reports`` (all or none: ``BadRequestError`` when they would name more than
        ``MAX_SOURCES`` chosen sources in all)."""
        new = {report.source for report in reports} - self._sources.keys()
        if len(self._sources) + len(new) > MAX_SOURCES:
            raise BadRequestError(
                f"the reports name {len(new)} new sources; at most {MAX_SOURCES} are tracked "
                f"and {len(self._sources)} already are"
            )
        predictions = [self._predictions(report, index) for index, report in enumerate(reports)]
        incorrect = unpredicted = 0
        for report, predicted in zip(reports, predictions, strict=True):
            mine = predicted.get(report.source, 0)
            best_other = max(
                (tokens or 0 for source, tokens in predicted.items() if source != report.source),
                default=0,
            )
            prompt = report.prompt_length()
            quality = self._sources.get(report.source)
            if quality is None:
                quality = self._sources[report.source] = Quality()
            incorrect += quality.add(prompt, report.reused_tokens, mine, best_other)
            self._all.add(prompt, report.reused_tokens, mine, best_other)
            unpredicted += mine is None
        return Receipt(len(reports), incorrect, unpredicted)

    def _predictions(self, report: FeedbackReport, index: int) -> dict[str, int | None]:
        """Per source, the tokens predicted for ``report``'s prompt (None: not known)."""
        if report.predicted is not None:
            return {source: found.tokens for source, found in report.predicted.items()}
        assert report.query is not None
        try:
            answers = self._matcher.answer(report.query)
        except ValueError as exc:
            raise BadRequestError(f"reports[{index}]: {exc}") from None
        return {source: _tokens(found) for source, found in answers.items()}

    def quality(self) -> dict[str, Any]:
        """``GET /v1/quality``: per chosen source, and over all of them."""
        return {
            "sources": {name: q.as_json() for name, q in sorted(self._sources.items())},
            "all": self._all.as_json(),
            "recent_reports": RECENT_REPORTS,
        }

    def families(self) -> list[Metric]:
        """The ``metric_table.FEEDBACK`` families now."""
        counters = {
            spec.name: CounterMetricFamily(spec.family_name, spec.help, labels=spec.labels)
            for spec in (
                table.FEEDBACK_REPORTS,
                table.FEEDBACK_UNPREDICTED,
                table.FEEDBACK_INCORRECT,
                *table.FEEDBACK_TOKEN_SUMS,
            )
        }
        spec = table.FEEDBACK_ERROR
        errors = HistogramMetricFamily(spec.family_name, spec.help, labels=spec.labels)
        for source, q in sorted(self._sources.items()):
            values = {
                table.FEEDBACK_REPORTS.name: q.reports,
                table.FEEDBACK_UNPREDICTED.name: q.unpredicted,
                table.FEEDBACK_INCORRECT.name: q.incorrect,
                _SUMS["prompt"].name: q.prompt_tokens,
                _SUMS["predicted"].name: q.predicted_tokens,
                _SUMS["reused"].name: q.reused_tokens,
            }
            for name, value in values.items():
                counters[name].add_metric([source], value)
            cumulative, buckets = 0, []
            for le, count in zip(_LE, q.error_counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            errors.add_metric([source], buckets, q.error_sum)
        return [*counters.values(), errors]


class _BookCollector(Collector):
    def __init__(self, book: FeedbackBook) -> None:
        self._book = book

    def collect(self) -> Iterator[Metric]:
        yield from self._book.families()


_BOOKS: Final[weakref.WeakKeyDictionary[CollectorRegistry, FeedbackBook]] = (
    weakref.WeakKeyDictionary()
)


def feedback_book_of(registry: CollectorRegistry, matcher: Matcher) -> FeedbackBook:
    """The feedback book of ``registry``'s service: made (and its metrics registered) on first
    use, with ``matcher`` answering the prompts reports carry."""
    book = _BOOKS.get(registry)
    if book is None:
        book = _BOOKS[registry] = FeedbackBook(matcher)
        registry.register(_BookCollector(book))
    return book


def _json(status: int, document: Any) -> Response:
    return Response(orjson.dumps(document), status, media_type="application/json")


async def _body(request: Request, limit_bytes: int) -> bytes | None:
    """The whole body, or None once it exceeds ``limit_bytes``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit_bytes:
        return None
    buffer = bytearray()
    async for chunk in request.stream():
        buffer += chunk
        if len(buffer) > limit_bytes:
            return None
    return bytes(buffer)


def feedback_routes(
    registry: CollectorRegistry,
    matcher: Matcher,
    health: Callable[[], tuple[bool, str]],
    max_request_bytes: int,
) -> list[Route]:
    """``POST /v1/feedback`` and ``GET /v1/quality`` over ``registry``'s book; ``health`` is
    the service's check (reports wait until it is healthy: 503 while restoring)."""
    book = feedback_book_of(registry, matcher)

    async def feedback(request: Request) -> Response:
        try:
            body = await _body(request, max_request_bytes)
        except ClientDisconnect:
            return Response(status_code=400)
        if body is None:
            error = {"error": f"body exceeds {max_request_bytes} bytes"}
            response = _json(413, error)
            response.headers["connection"] = "close"
            return response
        try:
            reports = parse_feedback(request.headers.get("content-type"), body)
        except BadRequestError as exc:
            return _json(400, {"error": str(exc)})
        except UnsupportedMediaError as exc:
            return _json(415, {"error": str(exc)})
        healthy, detail = health()
        if not healthy:
            return _json(503, {"error": detail})
        try:
            receipt = book.take(reports)
        except BadRequestError as exc:
            return _json(400, {"error": str(exc)})
        return _json(
            200,
            {
                "accepted": receipt.accepted,
                "incorrect": receipt.incorrect,
                "unpredicted": receipt.unpredicted,
            },
        )

    async def quality(request: Request) -> Response:
        return _json(200, book.quality())

    return [
        Route(FEEDBACK_ROUTE, feedback, methods=["POST"]),
        Route(QUALITY_ROUTE, quality, methods=["GET"]),
    ]
