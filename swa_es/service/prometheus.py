"""The Prometheus text exposition format (version 0.0.4), for the ``/metrics`` endpoints."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

MetricKind = Literal["counter", "gauge"]


@dataclass(slots=True)
class Metric:
    """One metric family: a name, a kind, a help line and its labelled samples."""

    name: str
    kind: MetricKind
    help: str
    samples: list[tuple[Mapping[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> Metric:
        """Add one sample; returns ``self`` for chaining."""
        self.samples.append((labels, value))
        return self


def counter(name: str, help_text: str, value: float | None = None) -> Metric:
    """A counter family, with one unlabelled sample when ``value`` is given."""
    metric = Metric(name, "counter", help_text)
    return metric if value is None else metric.add(value)


def gauge(name: str, help_text: str, value: float | None = None) -> Metric:
    """A gauge family, with one unlabelled sample when ``value`` is given."""
    metric = Metric(name, "gauge", help_text)
    return metric if value is None else metric.add(value)


def render(metrics: Iterable[Metric]) -> str:
    """The exposition text of ``metrics``."""
    lines: list[str] = []
    for metric in metrics:
        lines.append(f"# HELP {metric.name} {_escape_help(metric.help)}")
        lines.append(f"# TYPE {metric.name} {metric.kind}")
        for labels, value in metric.samples:
            lines.append(f"{metric.name}{_labels(labels)} {_number(value)}")
    return "\n".join(lines) + "\n"


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def parse(text: str) -> dict[str, float]:
    """Samples of an exposition text as ``{'name{labels}': value}`` (for tests and probes)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        samples[key] = float(value)
    return samples
