"""The per-queue ledger (docs/semantics.md `A-...`): what each request counts, the balance
after every kind of removal, the reset with the queue, and a job removed behind the server's
back reported as an imbalance, on every backend through the wire."""

import pytest

from pinlater.storage.ledger import COUNTERS
from tests.support.raw_storage import delete_job_behind_the_server


def totals(api, queue: str) -> dict[str, int]:
    """The queue's counters summed over its shards (non-zero ones)."""
    books = api.store.ledger(queue).values()
    summed = {name: sum(b.counters[name] for b in books) for name in COUNTERS}
    return {k: v for k, v in summed.items() if v}


def imbalance(api, queue: str) -> int:
    return sum(b.imbalance for b in api.store.ledger(queue).values())


@pytest.mark.rule("A-ledger-counts")
def test_each_request_counts_in_its_counter(api, queue):
    api.enqueue(queue, b"a", b"b", b"c", numAttemptsAllowed=2)
    api.enqueue(queue, {"body": b"last", "numAttemptsAllowed": 1})
    api.dequeue(queue, 10, dryRun=True)
    assert totals(api, queue) == {"enqueued": 4}
    got = api.dequeue_ids(queue, 10)
    assert len(got) == 4
    by_body = {api.job(d).body: d for d in got}
    api.ack(queue, succeeded=[by_body[b"a"]], failed=[by_body[b"b"], by_body[b"last"]])
    api.ack(queue, succeeded=[by_body[b"a"]])  # resent: a no-op counts nothing
    assert totals(api, queue) == {
        "enqueued": 4,
        "dequeued": 4,
        "succeeded": 1,
        "failed": 1,
        "retried": 1,
    }
    api.advance(3_600_000)
    api.janitor(claim_timeout_seconds=60, succeeded_ttl_seconds=60, failed_ttl_seconds=10**7)
    assert totals(api, queue) == {
        "enqueued": 4,
        "dequeued": 4,
        "succeeded": 1,
        "failed": 1,
        "retried": 1,
        "reclaimed": 1,  # c, never acked
        "purged": 1,  # a, succeeded an hour ago
    }
    assert api.delete_jobs(queue, 0) == 2  # b (retried) and c (reclaimed)
    assert totals(api, queue)["deleted"] == 2
    assert imbalance(api, queue) == 0


@pytest.mark.rule("A-ledger-counts", "A-books-balance")
def test_held_unique_keys_count_as_deduplicated_not_enqueued(api, queue):
    api.enqueue(queue, {"body": b"a", "uniqueKey": "k"}, b"plain")
    api.enqueue(queue, {"body": b"b", "uniqueKey": "k"}, {"body": b"c", "uniqueKey": "k"})
    assert totals(api, queue) == {"enqueued": 2, "deduplicated": 2}
    assert imbalance(api, queue) == 0


@pytest.mark.rule("A-books-balance")
def test_a_job_removed_behind_the_servers_back_is_an_imbalance(api, queue):
    ds = api.enqueue(queue, b"a", b"b", b"c")
    assert imbalance(api, queue) == 0
    delete_job_behind_the_server(api.store, ds[1])
    books = api.store.ledger(queue)
    assert sum(b.imbalance for b in books.values()) == 1
    (shard,) = [name for name, b in books.items() if not b.balanced]
    assert f":s{shard}:" in ds[1]


@pytest.mark.rule("A-ledger-reset")
def test_deleting_the_queue_resets_its_books(api, queue):
    api.enqueue(queue, b"a", b"b")
    api.delete_jobs(queue, 0)
    api.delete_queue(queue)
    api.create(queue)
    assert totals(api, queue) == {}
    api.enqueue(queue, b"c")
    assert totals(api, queue) == {"enqueued": 1}
    assert imbalance(api, queue) == 0
