"""Counters and histograms that every request updates: plain numbers on the event loop, exposed at scrape time.

prometheus_client's own Counter and Histogram lock a mutex for every increment and check the metric on every call
(a finished request's nine series were ~60 Python calls, ~30 µs on the loop); the loop is the only writer here,
so a series is a float, or a list of bucket counts and a sum. `snapshot()` copies every series into metric
families on the loop, for the registry (a collector) to write in the render thread. Same names, labels, buckets
and text as prometheus_client's (no `_created` samples: server/metrics.py disables them).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class CounterSeries:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramSeries:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf's
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # the first bound >= value: le is inclusive
        self.sum += value


class _Family:
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], Any] = {}

    def _new(self) -> Any:
        raise NotImplementedError

    def labels(self, *values: str) -> Any:
        """The series of these label values, made on first use (as prometheus_client's `labels`)."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._new()
        return child

    def remove(self, *values: str) -> None:
        """Drop one series (none: nothing to do), as prometheus_client's `remove`."""
        self._children.pop(values, None)


class PlainCounter(_Family):
    """A counter with labels, as prometheus_client's `Counter(name, documentation, labelnames)` exposes it."""

    def _new(self) -> CounterSeries:
        return CounterSeries()

    def family(self) -> Metric:
        fam = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._children.items():
            fam.add_metric(list(values), child.value)
        return fam


class PlainHistogram(_Family):
    """A histogram with labels and fixed buckets, as prometheus_client's `Histogram` exposes it."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]) -> None:
        super().__init__(name, documentation, labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]

    def _new(self) -> HistogramSeries:
        return HistogramSeries(self.bounds)

    def family(self) -> Metric:
        fam = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._children.items():
            running, buckets = 0, []
            for le, count in zip(self._les, child.counts):
                running += count
                buckets.append((le, running))
            fam.add_metric(list(values), buckets, child.sum)
        return fam


_F = TypeVar("_F", PlainCounter, PlainHistogram)


class PlainSeries:
    """The registry's collector for a set of plain counters and histograms: `snapshot()` on the loop, `collect()`
    in the render thread."""

    def __init__(self) -> None:
        self.metrics: list[PlainCounter | PlainHistogram] = []
        self._taken: list[Metric] = []

    def add(self, metric: _F) -> _F:
        self.metrics.append(metric)
        return metric

    def describe(self) -> list[Metric]:
        return []

    def snapshot(self) -> None:
        self._taken = [m.family() for m in self.metrics]

    def collect(self) -> Iterator[Metric]:
        yield from self._taken
