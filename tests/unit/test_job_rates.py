"""The admin API's per-queue rates: running totals moved into fixed rings by each sample."""

from __future__ import annotations

from pinlater.ops.rates import EVENTS, JobRates


def test_rates_over_the_windows_and_the_series():
    rates = JobRates(sample_seconds=5.0, samples=60)
    assert rates.rates("q")["enqueued"] == {"1m": 0.0, "5m": 0.0}, "nothing sampled yet"
    rates.record("enqueued", "q", 50)
    rates.record("acked_failed", "q", 5)
    rates.record("retried", "q", 7)  # not an event the rates show
    rates.sample()
    got = rates.rates("q")
    assert got["enqueued"] == {"1m": 10.0, "5m": 10.0}, "50 jobs in one 5 s sample so far"
    assert got["acked_failed"]["1m"] == 1.0 and got["dequeued"]["1m"] == 0.0
    for _ in range(11):
        rates.sample()
    assert rates.rates("q")["enqueued"]["1m"] == round(50 / 60, 3)
    series = rates.series("q")
    assert set(series) == set(EVENTS) and len(series["enqueued"]) == 12
    assert series["enqueued"][0] == 10.0 and sum(series["enqueued"][1:]) == 0


def test_the_ring_forgets_old_samples():
    rates = JobRates(sample_seconds=1.0, samples=12)
    rates.record("dequeued", "q", 12)
    rates.sample()
    for _ in range(12):
        rates.sample()
    assert rates.rates("q")["dequeued"] == {"1m": 0.0, "5m": 0.0}
    assert len(rates.series("q")["dequeued"]) == 12


def test_deleted_queues_are_forgotten_once_idle_but_unlisted_busy_ones_are_kept():
    rates = JobRates(sample_seconds=1.0, samples=12)
    rates.record("enqueued", "gone", 1)
    rates.sample()
    rates.record("enqueued", "new", 3)  # not listed yet (created after the last queue listing)
    rates.sample(known_queues=["other"])
    rates.sample(known_queues=["other"])
    assert rates.rates("new")["enqueued"]["1m"] == round(3 / 3, 3), "kept while it has history"
    for _ in range(12):
        rates.sample(known_queues=["other"])
    assert rates.tracked() == set(), "both forgotten once their history is all zeros"
