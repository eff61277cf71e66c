"""The worker's job limit (worker_sdk/slots.py): prefetch while handlers are fast, exactly the
threads while they are slow, bounded by max_prefetch and bytes. Times are passed in: no sleeps."""

from __future__ import annotations

import pytest

from worker_sdk.slots import SlotController


def test_until_a_handler_finished_the_worker_holds_one_job_per_thread():
    slots = SlotController(4)
    assert slots.limit() == 4
    assert slots.dequeue_size(held=0, max_batch=1000) == 4
    assert slots.dequeue_size(held=3, max_batch=1000) == 1
    assert slots.dequeue_size(held=4, max_batch=1000) == 0


def test_fast_handlers_prefetch_up_to_max_prefetch_in_big_batches():
    slots = SlotController(4, max_prefetch=1000, prefetch_wait=0.05, max_dequeues=4)
    slots.handler_finished(0.00002)
    assert slots.limit() == 4 + 1000
    assert slots.dequeue_size(held=0, max_batch=1000, pipelined=False) == 1000
    # from a backlog each of the overlapping calls asks for at most half the limit
    assert slots.dequeue_size(held=0, max_batch=1000) == 502
    # threads busy, 900 held or asked for: 104 free is under limit / (2 x 4 calls) = 126, so
    # wait for a bigger batch; 126 and more are worth a call
    assert slots.dequeue_size(held=900, max_batch=1000, in_flight=1) == 0
    assert slots.dequeue_size(held=878, max_batch=1000, in_flight=1) == 126
    assert slots.dequeue_size(held=500, max_batch=100, in_flight=1) == 100


def test_up_to_max_dequeues_calls_overlap_while_prefetching_one_otherwise():
    slots = SlotController(4, max_dequeues=4)
    assert slots.dequeue_size(held=1, max_batch=1000, in_flight=0) == 3
    assert slots.dequeue_size(held=1, max_batch=1000, in_flight=1) == 0  # no prefetch: one call
    slots.handler_finished(0.00002)
    assert slots.dequeue_size(held=300, max_batch=1000, in_flight=3) == 502
    assert slots.dequeue_size(held=300, max_batch=1000, in_flight=4) == 0
    # the last call came back short (no backlog): one call at a time, for all that is free
    assert slots.dequeue_size(held=300, max_batch=1000, in_flight=1, pipelined=False) == 0
    assert slots.dequeue_size(held=300, max_batch=1000, in_flight=0, pipelined=False) == 704


def test_prefetch_is_what_the_threads_start_within_prefetch_wait():
    slots = SlotController(4, prefetch_wait=0.05)
    slots.handler_finished(0.01)  # 4 threads start 20 jobs in 50 ms
    assert slots.limit() == 4 + 20


def test_slow_handlers_get_exactly_one_job_per_thread():
    slots = SlotController(4, prefetch_wait=0.05)
    slots.handler_finished(0.5)
    assert slots.limit() == 4
    assert slots.dequeue_size(held=3, max_batch=1000) == 1


def test_a_slow_completion_stops_the_prefetch_at_once_and_it_recovers_gradually():
    slots = SlotController(4, max_prefetch=1000, prefetch_wait=0.05)
    for _ in range(50):
        slots.handler_finished(0.0001)
    assert slots.limit() == 1004
    slots.handler_finished(2.0)
    assert slots.limit() == 4
    slots.handler_finished(0.0001)  # the smoothed mean still remembers the slow one
    assert slots.limit() < 50
    for _ in range(200):
        slots.handler_finished(0.0001)
    assert slots.limit() == 1004


def test_a_group_of_completions_counts_as_its_jobs_one_by_one():
    """The Worker reports fast jobs in groups: the mean moves as far as it would have job by
    job (for equal times), and a slow job in the group stops the prefetch at once."""
    one_by_one, grouped = SlotController(4), SlotController(4)
    one_by_one.handler_finished(0.5)
    grouped.handler_finished(0.5)
    for _ in range(30):
        one_by_one.handler_finished(0.001)
    grouped.handlers_finished(30, 30 * 0.001, 0.001)
    assert grouped.handler_seconds() == pytest.approx(one_by_one.handler_seconds())
    assert grouped.limit() == one_by_one.limit() > 4
    grouped.handlers_finished(64, 63 * 0.0001 + 2.0, 2.0)
    assert grouped.limit() == 4
    grouped.handlers_finished(0, 0.0, 0.0)  # an empty group changes nothing
    assert grouped.limit() == 4


def test_a_long_running_handler_stops_the_prefetch_before_it_finishes():
    slots = SlotController(4)
    slots.handler_finished(0.0001)
    assert slots.limit(longest_running=0.0) == 1004
    assert slots.limit(longest_running=30.0) == 4
    assert slots.dequeue_size(held=4, max_batch=1000, longest_running=30.0) == 0


def test_prefetch_holds_at_most_prefetch_bytes_of_bodies():
    slots = SlotController(2, prefetch_bytes=8 * 1024 * 1024)
    slots.handler_finished(0.0001)
    slots.jobs_received(10, 10 * 1024 * 1024)  # 1 MiB bodies
    assert slots.limit() == 2 + 8


def test_max_prefetch_zero_never_holds_more_jobs_than_threads():
    slots = SlotController(3, max_prefetch=0)
    slots.handler_finished(0.0)
    assert slots.limit() == 3


@pytest.mark.parametrize(
    "options",
    [
        {"threads": 0},
        {"threads": 1, "max_prefetch": -1},
        {"threads": 1, "prefetch_wait": -0.1},
        {"threads": 1, "prefetch_bytes": -1},
        {"threads": 1, "max_dequeues": 0},
    ],
)
def test_invalid_settings_are_rejected(options):
    threads = options.pop("threads")
    with pytest.raises(ValueError):
        SlotController(threads, **options)
