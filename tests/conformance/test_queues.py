"""createQueue / deleteQueue / getQueueNames and queue-name validation; deletes of big queues
and of queues in use."""

import threading
from collections import Counter

import pytest

from pinlater.idl import ErrorCode as E
from pinlater.idl import pinlater_thrift as t
from tests.conformance.api import ADMIN_PASSWORD
from tests.conformance.test_races import own_api


@pytest.mark.rule("Q-create")
def test_created_queue_is_listed(api, queue):
    assert queue in api.queue_names()


@pytest.mark.rule("Q-create")
def test_create_queue_is_idempotent_and_keeps_jobs(api, queue):
    [d] = api.enqueue(queue, b"kept")
    api.create(queue)
    assert api.job(d).body == b"kept"


@pytest.mark.rule("Q-delete")
def test_delete_queue_removes_it_and_every_job(api, queue):
    pending, running, done = api.enqueue(queue, b"a", b"b", b"c")
    api.dequeue(queue, 2)
    api.delete_queue(queue)
    assert queue not in api.queue_names()
    with api.raises(E.QUEUE_NOT_FOUND):
        api.lookup([pending, running, done])


@pytest.mark.rule("Q-delete")
def test_delete_queue_twice_is_fine(api, queue):
    api.delete_queue(queue)
    api.delete_queue(queue)


@pytest.mark.rule("Q-delete")
def test_recreated_queue_starts_empty(api, queue):
    api.enqueue(queue, b"old")
    api.delete_queue(queue)
    api.create(queue)
    assert api.count(queue, 0) == 0


@pytest.mark.rule("E-password-invalid")
def test_delete_queue_with_wrong_password_is_refused_and_keeps_queue(api, queue):
    with api.raises(E.PASSWORD_INVALID):
        api.delete_queue(queue, password="wrong")
    with api.raises(E.PASSWORD_INVALID):
        api.delete_queue(queue, password=ADMIN_PASSWORD + "x")
    assert queue in api.queue_names()


@pytest.mark.rule("E-queue-name-invalid")
@pytest.mark.parametrize(
    "name",
    [
        "",
        "has space",
        "dash-name",
        "colon:name",
        "ｑｕｅｕｅ",
        "queue\n",
        "naïve",
        "a.b",
        "*",
        "x" * 3 + "\x00",
    ],
)
def test_invalid_queue_names_are_rejected(api, name):
    with api.raises(E.QUEUE_NAME_INVALID):
        api.create(name)


@pytest.mark.rule("E-queue-name-invalid")
def test_non_text_queue_name_is_rejected(api):
    with api.raises(E.QUEUE_NAME_INVALID):
        api.client.createQueue(api.ctx(), None)


@pytest.mark.rule("E-queue-name-too-long")
def test_too_long_queue_name_is_rejected_up_front(api):
    with api.raises(E.QUEUE_NAME_TOO_LONG):
        api.create("q" * 300)
    assert not any(n.startswith("qqqq") for n in api.queue_names())


@pytest.mark.rule("Q-case")
def test_mixed_case_queue_names_are_distinct(api):
    lower = api.new_queue("case")
    upper = lower.upper()
    api.create(upper)
    api.enqueue(lower, b"lower")
    assert api.count(upper, 0) == 0
    assert api.count(lower, 0) == 1


@pytest.mark.rule("E-queue-not-found")
@pytest.mark.parametrize(
    "call",
    ["enqueue", "dequeue", "ack", "checkpoint", "lookup", "count", "scan", "retry", "delete"],
)
def test_every_call_on_an_unknown_queue_answers_queue_not_found(api, call):
    q = "never_created_queue_x9"
    d = f"{q}:s{api.store.shard_names()[0]}:p1:1"
    calls = {
        "enqueue": lambda: api.enqueue(q, b"x"),
        "dequeue": lambda: api.dequeue(q, 1),
        "ack": lambda: api.ack(q, succeeded=[d]),
        "checkpoint": lambda: api.checkpoint(q, d),
        "lookup": lambda: api.lookup([d]),
        "count": lambda: api.count(q, 0),
        "scan": lambda: api.scan(q, 0),
        "retry": lambda: api.retry_failed(q),
        "delete": lambda: api.delete_jobs(q, 0),
    }
    with api.raises(E.QUEUE_NOT_FOUND, match=q):
        calls[call]()


STEP = 2000  # pinlater.storage.contract.DELETE_STEP: jobs per storage transaction of a delete


def enqueue_many(api, queue, count: int) -> None:
    for start in range(0, count, 2000):
        api.enqueue(queue, *[b"j"] * min(2000, count - start))


@pytest.mark.rule("Q-delete-steps")
def test_big_deletes_span_steps_and_remove_exactly_what_they_say(api, queue):
    other = api.new_queue()
    [kept] = api.enqueue(other, b"neighbour")
    enqueue_many(api, queue, 2 * STEP + 100)
    assert api.delete_jobs(queue, 0, limit=STEP + 1) == STEP + 1
    assert api.count(queue, 0) == STEP + 99
    api.delete_queue(queue)
    with api.raises(E.QUEUE_NOT_FOUND):
        api.count(queue, 0)
    api.create(queue)
    assert api.count(queue, 0) == 0
    assert api.job(kept).body == b"neighbour"


def _churn_outcome(call) -> str:
    try:
        call()
    except t.PinLaterException as exc:
        return E._VALUES_TO_NAMES[exc.errorCode]
    return "ok"


@pytest.mark.rule("Q-delete-concurrent")
def test_calls_on_a_queue_deleted_and_recreated_meanwhile_answer_only_queue_not_found(api, queue):
    other = api.new_queue()
    stop = threading.Event()
    outcomes: dict[str, Counter] = {queue: Counter(), other: Counter(), "ddl": Counter()}
    lock = threading.Lock()

    def churn():
        admin = own_api(api)
        try:
            for _ in range(10):
                outcomes["ddl"][_churn_outcome(lambda: admin.delete_queue(queue))] += 1
                outcomes["ddl"][_churn_outcome(lambda: admin.create(queue))] += 1
        finally:
            stop.set()

    def work(name):
        mine = own_api(api)
        while not stop.is_set():
            for call in (
                lambda: mine.enqueue(name, b"a", b"b"),
                lambda: mine.ack(name, succeeded=list(mine.dequeue(name, 2).jobs or {})),
                lambda: mine.count(name, 0),
            ):
                got = _churn_outcome(call)
                with lock:
                    outcomes[name][got] += 1

    threads = [threading.Thread(target=churn)]
    threads += [threading.Thread(target=work, args=(q,)) for q in (queue, queue, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert outcomes["ddl"] == Counter(ok=20), outcomes["ddl"]
    assert set(outcomes[queue]) <= {"ok", "QUEUE_NOT_FOUND"}, outcomes[queue]
    assert set(outcomes[other]) == {"ok"}, outcomes[other]
    assert not api.store.health.unhealthy()
