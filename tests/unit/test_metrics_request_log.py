"""Request log lines and their per-peer rate limit; queue labels bounded to known queues."""

from __future__ import annotations

import logging

from pinlater.handler import context
from pinlater.idl import RequestContext
from pinlater.ops import request_log
from pinlater.ops.metrics import NO_QUEUE, Metrics
from pinlater.ops.request_log import RequestLog


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def make_log(caplog, per_minute=3):
    clock = Clock()
    caplog.set_level(logging.DEBUG, logger="pinlater.requests")
    return RequestLog(per_minute, clock), clock


def test_success_is_one_debug_line_and_an_error_one_warning_with_all_fields(caplog):
    rlog, _ = make_log(caplog)
    context.set_peer("10.0.0.1:5555")
    try:
        rlog.record("enqueueJobs", RequestContext(source="w1", requestId="r-1"), "q", "ok", 0.002)
        rlog.record(
            "dequeueJobs",
            RequestContext(source="w1", requestId="r-2"),
            "q",
            "QUEUE_NOT_FOUND",
            0.001,
            "Queue not found: q",
        )
    finally:
        context.set_peer(None)
    debug, warning = caplog.records
    assert debug.levelno == logging.DEBUG and "method=enqueueJobs" in debug.getMessage()
    text = warning.getMessage()
    assert warning.levelno == logging.WARNING
    for part in (
        "request_id=r-2",
        "source=w1",
        "peer=10.0.0.1:5555",
        "method=dequeueJobs",
        "queue=q",
        "outcome=QUEUE_NOT_FOUND",
        "Queue not found: q",
    ):
        assert part in text


def test_client_supplied_text_cannot_forge_log_lines(caplog):
    rlog, _ = make_log(caplog)
    rlog.record(
        "createQueue",
        RequestContext(source="evil\nFAKE LINE"),
        "a\nb",
        "UNKNOWN",
        0.0,
        "bad\ninput",
    )
    assert "\n" not in caplog.records[0].getMessage()


def test_warnings_are_rate_limited_per_peer_and_report_what_was_dropped(caplog):
    rlog, clock = make_log(caplog, per_minute=3)
    ctx = RequestContext(source="noisy")
    for peer in ("10.0.0.1:1", "10.0.0.1:2"):  # same host, new connection: same budget
        context.set_peer(peer)
        for _ in range(5):
            rlog.record("dequeueJobs", ctx, "q", "DEQUEUE_RATE_LIMITED", 0.0)
    context.set_peer("10.0.0.2:1")  # another client is not affected
    rlog.record("dequeueJobs", ctx, "q", "DEQUEUE_RATE_LIMITED", 0.0)
    assert len(caplog.records) == 4
    clock.now += 61
    context.set_peer("10.0.0.1:3")
    rlog.record("dequeueJobs", ctx, "q", "DEQUEUE_RATE_LIMITED", 0.0)
    context.set_peer(None)
    assert "(7 earlier warnings from this client suppressed)" in caplog.records[-1].getMessage()


def test_peer_table_stays_bounded(monkeypatch, caplog):
    monkeypatch.setattr(request_log, "MAX_PEERS", 50)
    rlog, clock = make_log(caplog)
    for i in range(500):
        clock.now += 0.001
        context.set_peer(f"10.0.{i // 256}.{i % 256}:1")
        rlog.record("getQueueNames", RequestContext(source="s"), None, "UNKNOWN", 0.0)
    context.set_peer(None)
    assert len(rlog._peers) <= 50


def test_unknown_queue_names_share_one_label():
    metrics = Metrics()
    metrics.queues.replace(["real"])
    for name in ("real", "made_up_1", "made_up_2", "x" * 5000, None, 12):
        metrics.request("dequeueJobs", name, "ok", 0.01)
    queues = {s.labels["queue"] for s in metrics.requests.collect()[0].samples}
    assert queues == {"real", NO_QUEUE}
    metrics.queues.add("new_one")
    assert metrics.queues.label("new_one") == "new_one"


def test_success_with_debug_off_logs_nothing_and_builds_no_request_id(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="pinlater.requests")
    rlog = RequestLog(3, Clock())

    def no_uuid():
        raise AssertionError("a request id was generated for a line nobody logs")

    monkeypatch.setattr(request_log.uuid, "uuid4", no_uuid)
    rlog.record("getQueueNames", RequestContext(source="s"), None, "ok", 0.001)
    assert caplog.records == []
    assert rlog._peers == {}  # an ok outcome never spends a peer's warning budget


def test_success_with_debug_on_still_gets_a_generated_request_id(caplog):
    rlog, _ = make_log(caplog)
    rlog.record("getQueueNames", RequestContext(source="s"), None, "ok", 0.001)
    (line,) = caplog.records
    request_id = line.getMessage().split("request_id=", 1)[1].split(" ", 1)[0]
    assert len(request_id) == 12 and "outcome=ok" in line.getMessage()


def _samples(metrics):
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in metrics.registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    )


def test_remembered_label_children_count_exactly_like_labels():
    cached, plain = Metrics(), Metrics()
    for m in (cached, plain):
        m.queues.replace(["q"])
    calls = [
        ("q", "ok", 0.01),
        ("q", "ok", 0.3),
        ("other", "ok", 0.002),
        ("q", "QUEUE_NOT_FOUND", 0.0),
    ] * 3
    for queue, outcome, seconds in calls:
        cached.request("dequeueJobs", queue, outcome, seconds)
        cached.jobs("acked_failed", queue, 2)
        cached.jobs("enqueued", queue, 3)
        cached.shard_call("s1", seconds, outcome == "ok")
        cached.dequeue_refused(queue, "rate")
        cached.frame_rejected("malformed")
        label = plain.queues.label(queue)
        plain.requests.labels("dequeueJobs", label, outcome).inc()
        plain.request_seconds.labels("dequeueJobs", label, outcome).observe(seconds)
        plain.acks.labels(label, "failed").inc(2)
        plain.jobs_enqueued.labels(label).inc(3)
        plain.shard_seconds.labels("s1", "ok" if outcome == "ok" else "error").observe(seconds)
        plain.rate_limited.labels(label, "rate").inc()
        plain.frames_rejected.labels("malformed").inc()
    assert _samples(cached) == _samples(plain)
    assert cached._child(cached.requests, "dequeueJobs", "q", "ok") is cached.requests.labels(
        "dequeueJobs", "q", "ok"
    )


def test_a_request_id_retried_by_its_client_warns_once(caplog):
    rlog, clock = make_log(caplog, per_minute=100)
    ctx = RequestContext(source="cli", requestId="abc1")
    for _ in range(3):
        rlog.record("createQueue", ctx, "q", "SHARD_CONNECTION_FAILED", 0.0, "shard r1: down")
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in levels] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "attempt=2 (a retry)" in levels[1][1] and "attempt=3 (a retry)" in levels[2][1]
    rlog.record("createQueue", ctx, "q", "NO_HEALTHY_SHARDS", 0.0)  # another outcome: news
    clock.now += 61  # a client reusing one id for every call still warns once a minute
    rlog.record("createQueue", ctx, "q", "SHARD_CONNECTION_FAILED", 0.0)
    rlog.record("createQueue", RequestContext(source="cli"), "q", "UNKNOWN", 0.0)  # no id
    rlog.record("createQueue", RequestContext(source="cli"), "q", "UNKNOWN", 0.0)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 5


def _series_of(metrics: Metrics, queue: str) -> list[str]:
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if f'queue="{queue}"' in line]


def test_forget_queue_removes_every_series_of_the_queue_and_only_those():
    metrics = Metrics()
    for queue in ("gone", "kept"):
        metrics.queues.add(queue)
        metrics.request("enqueueJobs", queue, "ok", 0.001)
        for event in ("enqueued", "dequeued", "acked_succeeded", "acked_failed", "deleted"):
            metrics.jobs(event, queue, 2)
        metrics.janitor_queue(queue, 1, 1, 1, 1)
        metrics.dequeue_refused(queue, "rate")
        metrics.schedule_queue(queue, 1, 1, 1)
    # every metric with a queue label is covered, including any added later to Metrics
    assert {m._name for m in metrics.per_queue} >= {"pinlater_requests", "pinlater_jobs_purged"}
    assert len(_series_of(metrics, "gone")) > 20
    kept = _series_of(metrics, "kept")
    told = []
    metrics.on_forget.append(told.append)
    metrics.forget_queue("gone")
    assert _series_of(metrics, "gone") == []
    assert _series_of(metrics, "kept") == kept
    assert told == ["gone"]
    assert metrics.queues.label("gone") == NO_QUEUE  # later requests count under queue=""


def test_a_series_made_for_a_queue_forgotten_meanwhile_is_removed_again():
    """The race: a request picked the label before the delete, makes its child after it."""
    metrics = Metrics()
    metrics.queues.add("q")
    label = metrics.queues.label("q")
    metrics.forget_queue("q")
    metrics._child(metrics.jobs_enqueued, label).inc()
    assert _series_of(metrics, "q") == []


def test_past_max_queues_the_other_queues_share_one_label():
    from pinlater.ops.metrics import OTHER_QUEUES

    metrics = Metrics(max_queues=2)
    metrics.queues.replace(["c", "a", "b", "d"])
    assert [metrics.queues.label(q) for q in "abcd"] == ["a", "b", OTHER_QUEUES, OTHER_QUEUES]
    assert metrics.queues.label("nosuch") == NO_QUEUE
    for queue in "abcd":
        metrics.jobs("enqueued", queue, 1)
    assert 'pinlater_jobs_enqueued_total{queue="(other)"} 2.0' in _series_of(metrics, OTHER_QUEUES)
    metrics.queues.add("0")  # sorts first, but a queue keeps the label it has
    assert metrics.queues.label("0") == OTHER_QUEUES and metrics.queues.label("a") == "a"
    metrics.forget_queue("a")  # a label is free again: the next queue in name order takes it
    assert metrics.queues.label("0") == "0"
    assert metrics.queues.label("c") == OTHER_QUEUES
    metrics.forget_queue(OTHER_QUEUES)  # not a queue: nothing happens
    assert _series_of(metrics, OTHER_QUEUES)
