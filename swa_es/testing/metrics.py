"""Reading a Prometheus exposition in tests and probes (prometheus_client's own parser)."""

from __future__ import annotations

from typing import Final

from prometheus_client.parser import text_string_to_metric_families


def parse_samples(text: str) -> dict[str, float]:
    """Samples as ``{'name{label="v",...}': value}``, labels sorted by name."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            key = f"{sample.name}{{{labels}}}" if labels else sample.name
            samples[key] = float(sample.value)
    return samples


REFUSALS: Final = "swa_es_http_refusals_total"
"""The HTTP servers' refusal counter, as scraped."""


def refusals_by_reason(samples: dict[str, float]) -> dict[str, float]:
    """``{reason: count}`` of the HTTP refusal counter in ``parse_samples``' output."""
    prefix = REFUSALS + "{"
    return {key.split('"')[1]: value for key, value in samples.items() if key.startswith(prefix)}
