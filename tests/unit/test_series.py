"""The per-request metrics' plain series (server/series.py) write the same Prometheus text as prometheus_client's own
Counter and Histogram given the same increments and observations: bucket bounds hit exactly, values past the last
bound, label values with quotes and newlines, series removed; and nothing a scrape writes moves while the loop
keeps counting after the snapshot."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.exposition import generate_latest

from ollama_py.server.series import PlainCounter, PlainHistogram, PlainSeries

disable_created_metrics()  # as server/metrics.py does: no `_created` samples either way

BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
LABELS = st.sampled_from(["", "smollm2:135m", 'a "quoted" name', "back\\slash", "new\nline", "ü"])
VALUES = st.one_of(st.sampled_from([*BUCKETS, 0.0, 1e9]), st.floats(min_value=0, max_value=200, allow_nan=False))
STEPS = st.lists(st.tuples(st.sampled_from(["inc", "observe", "remove"]), LABELS, LABELS, VALUES), max_size=40)


def _both(steps: list[tuple[str, str, str, float]]) -> tuple[bytes, bytes]:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counter = Counter("ollama_requests", "HTTP requests", ["endpoint", "model"], registry=theirs)
    histogram = Histogram("ollama_request_duration_seconds", "Time to last byte", ["endpoint", "model"],
                          buckets=BUCKETS, registry=theirs)
    plain = PlainSeries()
    plain_counter = PlainCounter("ollama_requests", "HTTP requests", ["endpoint", "model"])
    plain_histogram = PlainHistogram("ollama_request_duration_seconds", "Time to last byte", ["endpoint", "model"],
                                     BUCKETS)
    plain.add(plain_counter)
    plain.add(plain_histogram)
    ours.register(plain)
    for op, a, b, value in steps:
        if op == "inc":
            counter.labels(a, b).inc(value)
            plain_counter.labels(a, b).inc(value)
        elif op == "observe":
            histogram.labels(a, b).observe(value)
            plain_histogram.labels(a, b).observe(value)
        else:  # (a series never made: nothing to remove, either way)
            for metric in (counter, plain_counter, histogram, plain_histogram):
                metric.remove(a, b)
    plain.snapshot()
    return generate_latest(theirs), generate_latest(ours)


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_the_plain_series_write_prometheus_clients_text(steps: list[tuple[str, str, str, float]]) -> None:
    theirs, ours = _both(steps)
    assert ours == theirs


def test_a_value_on_a_bound_counts_in_that_bucket() -> None:
    theirs, ours = _both([("observe", "/api/generate", "m", 0.1), ("observe", "/api/generate", "m", 0.1000001),
                          ("observe", "/api/generate", "m", 500.0)])
    assert ours == theirs
    text = ours.decode()
    assert 'le="0.1",model="m"} 1.0' in text
    assert 'le="0.25",model="m"} 2.0' in text
    assert 'le="+Inf",model="m"} 3.0' in text


def test_a_scrape_writes_what_the_snapshot_took() -> None:
    plain = PlainSeries()
    counter = PlainCounter("ollama_requests", "HTTP requests", ["model"])
    plain.add(counter)
    registry = CollectorRegistry()
    registry.register(plain)
    counter.labels("m").inc()
    plain.snapshot()
    counter.labels("m").inc()  # the loop goes on counting while the render thread writes
    counter.labels("n").inc()
    text = generate_latest(registry).decode()
    assert 'ollama_requests_total{model="m"} 1.0' in text
    assert 'model="n"' not in text
    plain.snapshot()
    assert 'ollama_requests_total{model="m"} 2.0' in generate_latest(registry).decode()
