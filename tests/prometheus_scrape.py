"""A parsed /metrics exposition, for the metrics tests (unit and live)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One parsed /metrics exposition."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]

    def value(self, name: str, /, **labels: str) -> float:
        """The sum of the samples called `name` whose labels include `labels` (0 when none)."""
        return sum(s.value for s in self.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def series(self, name: str) -> list[dict[str, str]]:
        return [s.labels for s in self.samples if s.name == name]
