"""The live web view a follower serves on its routing API's port: ``GET /ui`` and what it reads.

The page (``ui_static/``: ``index.html``, ``app.js``, ``style.css`` and uPlot, a chart library
vendored with its licence, version in ``ui_static/README.md``) is shipped in the package and
served from memory as it is: nothing is built at install time. Every second or so it reads
``GET /v1/ui/state``, one JSON document made here from the routing backend and the service's
HTTP metrics:

- ``health``: ``{"ok", "detail"}``, as ``/healthz`` answers (``detail`` ``"restoring"`` while the
  follower restores);
- ``as_of``: the follower's position in the log and its lag in records (while restoring too:
  the position is how far the replay has come);
- ``sources``: per source as ``GET /v1/sources`` answers it (state, last heard, blocks per tier,
  tombstones, lag in records and seconds, ...); ``null`` while restoring;
- ``http``: the routing API's answers so far (routes under ``/v1/`` but this one): ``requests``
  by route, the duration histogram summed over those routes (``bounds_s``, cumulative
  ``buckets`` with ``+Inf`` last, ``count``, ``sum_s``), and ``refusals`` by reason. Counters
  only: the page turns two readings into a rate and p50/p99 over the interval between them;
- ``readiness``: what ``/readyz`` answers (recovery progress: records to go, rate, time left;
  the live sources caught up), ``null`` for a service that judges no readiness;
- ``quality_route``: ``/v1/quality`` when the app serves it (the page then reads it too, and
  shows the prediction quality routers reported to ``/v1/feedback``), else ``null``.

If the API asks for a bearer token, the page takes it from its URL's fragment
(``/ui#token=...``) and sends it on every read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

import orjson
from prometheus_client.core import Metric
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from swa_es.service.errors import ServiceError
from swa_es.service.feedback import QUALITY_ROUTE
from swa_es.service.http_metrics import HttpMetrics
from swa_es.service.metric_table import HTTP_DURATION, HTTP_REFUSALS, HTTP_REQUESTS

if TYPE_CHECKING:
    from swa_es.service.http_app import RoutingBackend

UI_PATH: Final = "/ui"
"""Where the page is: ``/ui`` redirects to ``/ui/``, so its relative links work behind a proxy
that serves the API under a prefix."""
UI_STATE_PATH: Final = "/v1/ui/state"
"""The JSON document the page polls."""
ROUTING_API_PREFIX: Final = "/v1/"
"""The routes whose answers the page charts (the routing API's), ``UI_STATE_PATH`` excepted."""

ASSETS: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "uPlot.LICENSE": "text/plain; charset=utf-8",
}
"""Every file of the page (in ``ui_static/``) and its media type; nothing else is served."""
INDEX: Final = "index.html"

CheckHealth = Callable[[], tuple[bool, str]]
CheckReadiness = Callable[[], tuple[bool, dict[str, Any]]]


class UiAssetError(ServiceError):
    """A file of the web view is missing from the installed package: ``path`` names it."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"the web view's file {path} is missing from the installed swa_es")


def load_assets() -> dict[str, bytes]:
    """Every file of ``ASSETS``, read from the package."""
    folder = resources.files("swa_es.service").joinpath("ui_static")
    assets = {}
    for name in ASSETS:
        file = folder.joinpath(name)
        try:
            assets[name] = file.read_bytes()
        except FileNotFoundError:
            raise UiAssetError(str(file)) from None
    return assets


def http_summary(families: Iterable[Metric]) -> dict[str, Any]:
    """The routing API's answers so far, from the HTTP metrics' ``families`` (see the module
    docstring's ``http``)."""
    requests: dict[str, int] = {}
    buckets: dict[str, int] = {}
    count, sum_s = 0, 0.0
    refusals: dict[str, int] = {}
    bucket_name, sum_name, count_name = HTTP_DURATION.series_names
    for family in families:
        for sample in family.samples:
            name, labels = sample.name, sample.labels
            if name == HTTP_REFUSALS.name:
                refusals[labels["reason"]] = int(sample.value)
                continue
            route = labels.get("route", "")
            if not route.startswith(ROUTING_API_PREFIX) or route == UI_STATE_PATH:
                continue
            if name == HTTP_REQUESTS.name:
                requests[route] = requests.get(route, 0) + int(sample.value)
            elif name == bucket_name:
                le = labels["le"]
                buckets[le] = buckets.get(le, 0) + int(sample.value)
            elif name == count_name:
                count += int(sample.value)
            elif name == sum_name:
                sum_s += sample.value
    bounds = [le for le in buckets if le != "+Inf"]
    bounds.sort(key=float)
    return {
        "requests": requests,
        "bounds_s": [float(le) for le in bounds],
        "buckets": [buckets[le] for le in bounds] + [buckets.get("+Inf", 0)],
        "count": count,
        "sum_s": sum_s,
        "refusals": refusals,
    }


def ui_state(
    health: CheckHealth,
    routing: RoutingBackend,
    metrics: HttpMetrics,
    readiness: CheckReadiness | None = None,
    paths: Iterable[str] = (),
) -> dict[str, Any]:
    """The document of ``GET /v1/ui/state`` (see the module docstring); ``paths``: the routes
    the app serves."""
    healthy, detail = health()
    return {
        "health": {"ok": healthy, "detail": detail},
        "as_of": routing.as_of(),
        "sources": routing.sources() if healthy else None,
        "http": http_summary(metrics.families()),
        "readiness": None if readiness is None else readiness()[1],
        "quality_route": QUALITY_ROUTE if QUALITY_ROUTE in paths else None,
    }


def ui_routes(
    health: CheckHealth,
    routing: RoutingBackend,
    metrics: HttpMetrics,
    readiness: CheckReadiness | None = None,
) -> list[Route]:
    """The routes of the web view: the page, its files and ``GET /v1/ui/state``."""
    assets = load_assets()

    async def page(request: Request) -> Response:
        return RedirectResponse("ui/", status_code=307)

    async def asset(request: Request) -> Response:
        name = request.path_params.get("name") or INDEX
        body = assets.get(name)
        if body is None:
            return Response(b"no such file\n", 404, media_type="text/plain")
        return Response(body, media_type=ASSETS[name], headers={"cache-control": "no-cache"})

    async def state(request: Request) -> Response:
        paths = _paths(request.app.routes)
        document = ui_state(health, routing, metrics, readiness, paths)
        return Response(orjson.dumps(document), media_type="application/json", headers=_NO_STORE)

    return [
        Route(UI_PATH, page, methods=["GET"]),
        Route(f"{UI_PATH}/", asset, methods=["GET"]),
        Route(f"{UI_PATH}/{{name}}", asset, methods=["GET"]),
        Route(UI_STATE_PATH, state, methods=["GET"]),
    ]


_NO_STORE: Final = {"cache-control": "no-store"}


def _paths(routes: Iterable[BaseRoute]) -> set[str]:
    """The paths of the app's routes."""
    return {path for route in routes if isinstance(path := getattr(route, "path", None), str)}
