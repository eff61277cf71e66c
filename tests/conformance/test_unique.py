"""enqueueJobs with PinLaterJob.uniqueKey (field 100): held keys, windows, repeats, validation,
shard ownership and per-shard atomicity, on every backend through the wire."""

import threading

import pytest

from pinlater.idl import ErrorCode as E
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.shard_kit.races import run_threads
from pinlater.storage.unique_keys import DEFAULT_UNIQUE_WINDOW_SECONDS, owner_shard
from tests.conformance.api import Api
from tests.conformance.faults import full, intercepted, lost_connection
from tests.conformance.wire import loopback_client

DAY_MS = int(DEFAULT_UNIQUE_WINDOW_SECONDS * 1000)


def keyed(body: bytes, key: str, **fields) -> dict:
    return {"body": body, "uniqueKey": key, **fields}


def count_all(api, queue: str) -> int:
    return sum(api.count(queue, state) for state in range(4))


def keys_on_distinct_shards(api, queue: str) -> tuple[str, str]:
    """Two keys of `queue` owned by two different shards (needs at least two shards)."""
    names = api.store.shard_names()
    first = "key-0"
    for i in range(1, 1000):
        if owner_shard(queue, f"key-{i}", names) != owner_shard(queue, first, names):
            return first, f"key-{i}"
    raise AssertionError("no two keys on distinct shards")


@pytest.mark.rule("U-key-dedup")
def test_an_enqueue_whose_key_is_held_answers_the_holder(api, queue):
    [first] = api.enqueue(queue, keyed(b"a", "order-17", priority=2))
    [again, other] = api.enqueue(queue, keyed(b"b", "order-17", priority=1), b"plain")
    assert again == first and ":p2:" in again
    assert other != first
    assert api.job(first).body == b"a"
    assert count_all(api, queue) == 2


@pytest.mark.rule("U-key-batch")
def test_a_key_repeated_in_one_request_stores_its_first_job(api, queue):
    ds = api.enqueue(queue, keyed(b"a", "k"), b"x", keyed(b"b", "k"), keyed(b"c", "k2"))
    assert ds[0] == ds[2] and len(set(ds)) == 3
    assert api.job(ds[0]).body == b"a"
    assert count_all(api, queue) == 3


@pytest.mark.rule("U-key-window")
def test_a_key_is_held_whatever_its_job_became(api, queue):
    [d] = api.enqueue(queue, keyed(b"a", "k"))
    [got] = api.dequeue_ids(queue, 1)
    api.ack(queue, succeeded=[got])
    assert api.enqueue(queue, keyed(b"b", "k")) == [d]
    assert api.delete_jobs(queue, 2) == 1
    assert api.job(d) is None
    assert api.enqueue(queue, keyed(b"c", "k")) == [d]  # the holder is gone, the key holds
    assert count_all(api, queue) == 0


@pytest.mark.rule("U-key-window")
def test_a_key_is_free_when_its_window_ends(api, queue):
    [d] = api.enqueue(queue, keyed(b"a", "k"))
    api.advance(DAY_MS - 60_000)
    assert api.enqueue(queue, keyed(b"b", "k")) == [d]
    api.advance(61_000)
    [fresh] = api.enqueue(queue, keyed(b"c", "k"))
    assert fresh != d and api.job(fresh).body == b"c"
    assert api.job(d).body == b"a"  # the old job stays; the key is the new one's now
    assert api.enqueue(queue, keyed(b"d", "k")) == [fresh]


@pytest.mark.rule("U-key-valid")
@pytest.mark.parametrize(
    "key, problem",
    [
        ("", "must not be empty"),
        ("é", "printable ASCII"),
        ("tab\there", "printable ASCII"),
        ("x" * 257, "over the maximum of 256"),
    ],
)
def test_bad_keys_are_rejected_naming_the_field(api, queue, key, problem):
    with api.raises(E.ENQUEUE_REJECTED, "jobs[1].uniqueKey") as info:
        api.enqueue(queue, b"ok", keyed(b"x", key))
    assert problem in info.value.message
    assert count_all(api, queue) == 0


@pytest.mark.rule("U-key-valid")
def test_keys_are_byte_wise_per_queue_and_go_with_the_queue(api, queue):
    other = api.new_queue()
    [upper, lower] = api.enqueue(queue, keyed(b"a", "Key"), keyed(b"b", "key"))
    assert upper != lower
    [elsewhere] = api.enqueue(other, keyed(b"c", "Key"))
    assert elsewhere.startswith(f"{other}:")
    longest = "~ !" + "k" * 253
    assert api.enqueue(queue, keyed(b"d", longest)) == api.enqueue(queue, keyed(b"e", longest))
    api.delete_queue(queue)
    api.create(queue)
    [fresh] = api.enqueue(queue, keyed(b"f", "Key"))
    assert api.job(fresh).body == b"f"


@pytest.mark.rule("U-key-shard")
def test_a_key_always_goes_to_its_owner_shard(api, queue):
    names = api.store.shard_names()
    for i in range(20):
        key = f"k{i}"
        [d] = api.enqueue(queue, keyed(b"x", key))
        assert JobDescriptor.parse(d).shard == owner_shard(queue, key, names)


@pytest.mark.rule("U-key-shard")
def test_an_unhealthy_owner_refuses_the_enqueue_and_a_full_one_rejects_it(api, queue):
    names = api.store.shard_names()
    owner = owner_shard(queue, "k", names)
    api.store.health.mark_unhealthy(owner)
    try:
        with api.raises(E.SHARD_CONNECTION_FAILED, f"shard {owner}"):
            api.enqueue(queue, keyed(b"a", "k"), b"plain")
    finally:
        api.store.health.forget(owner)
    with intercepted(api.store, "enqueue_keyed", fail_with=full, shards=[owner]):
        with api.raises(E.ENQUEUE_REJECTED, "storage full"):
            api.enqueue(queue, keyed(b"a", "k"))
    assert count_all(api, queue) == 0


@pytest.mark.rule("U-key-retry")
def test_a_keyed_enqueue_is_retried_on_its_shard_after_a_storage_failure(api, queue):
    owner = owner_shard(queue, "k", api.store.shard_names())
    with intercepted(
        api.store, "enqueue_keyed", fail_with=lost_connection, fail_times=1, shards=[owner]
    ) as calls:
        [d] = api.enqueue(queue, keyed(b"a", "k"))
    assert calls.count[owner] == 2
    assert api.enqueue(queue, keyed(b"b", "k")) == [d]
    # with a job without a key in the same part, a failure is the client's to retry
    with intercepted(
        api.store, "enqueue_keyed", fail_with=lost_connection, fail_times=1, shards=[owner]
    ):
        with api.raises(E.SHARD_CONNECTION_FAILED):
            api.enqueue(queue, keyed(b"c", "k"), b"plain")
    assert count_all(api, queue) == 1


@pytest.mark.rule("U-key-request", "E-enqueue-all-or-nothing")
def test_a_request_is_atomic_per_owner_shard(api, queue):
    if len(api.store.shard_names()) < 2:
        [a, b] = api.enqueue(queue, keyed(b"a", "k1"), b"plain")
        assert JobDescriptor.parse(a).shard == JobDescriptor.parse(b).shard
        return
    k1, k2 = keys_on_distinct_shards(api, queue)
    names = api.store.shard_names()
    last = owner_shard(queue, k2, names)
    # the part of k2's shard, which carries the job without a key, fails: k1's part is stored,
    # the plain job is not, and sending the request again stores each keyed job once
    with intercepted(api.store, "enqueue_keyed", fail_with=lost_connection, shards=[last]):
        with api.raises(E.SHARD_CONNECTION_FAILED):
            api.enqueue(queue, keyed(b"a", k1), b"plain", keyed(b"b", k2))
    assert count_all(api, queue) == 1
    ds = api.enqueue(queue, keyed(b"a", k1), b"plain", keyed(b"b", k2))
    assert JobDescriptor.parse(ds[1]).shard == last == JobDescriptor.parse(ds[2]).shard
    assert count_all(api, queue) == 3
    assert api.enqueue(queue, keyed(b"a", k1), keyed(b"b", k2)) == [ds[0], ds[2]]


@pytest.mark.rule("X-key-once")
def test_concurrent_enqueues_of_one_key_store_one_job(api, queue):
    answers: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        mine = Api(loopback_client(api.app.handler), api.app)  # a connection per thread
        for i in range(25):
            [d] = mine.enqueue(queue, keyed(b"%d" % i, f"k{i % 5}"))
            with lock:
                answers.append(d)

    run_threads([client] * 6, timeout=60)
    assert len(answers) == 150 and len(set(answers)) == 5
    assert count_all(api, queue) == 5


@pytest.mark.rule("J-purge-keys")
def test_the_janitor_purges_expired_keys_only(api, queue):
    api.enqueue(queue, *[keyed(b"old", f"old-{i}") for i in range(5)])
    api.advance(DAY_MS + 1000)
    [young] = api.enqueue(queue, keyed(b"young", "young"))
    counts = api.janitor(batch_size=2)
    assert counts.purged_keys >= 5  # other queues' expired keys go too
    assert api.janitor().purged_keys == 0
    assert api.enqueue(queue, keyed(b"again", "young")) == [young]
