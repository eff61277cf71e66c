"""Queues on a shard: create is idempotent and case-sensitive and adds the priority levels a
larger configuration needs; delete removes every job, of a big queue too, and leaves nothing
half freed; a queue created anew starts empty, as every handle sees."""

from __future__ import annotations

from pinlater.storage.contract import DELETE_STEP, StorageLimits
from pinlater.storage.errors import QueueNotFound
from pinlater.storage.models import JobState
from pinlater.storage.shard_kit.kit import HOUR_MS, PENDING, QUEUE, Kit, raises
from pinlater.storage.shard_kit.registry import check


@check(rule=("Q-create", "Q-case"))
def queue_create_is_idempotent_and_names_are_case_sensitive(kit: Kit) -> None:
    shard = kit.shard
    for name in ("Foo", "foo", "foo"):
        shard.create_queue(name)
    kit.enqueue(b"upper", queue="Foo")
    shard.create_queue("Foo")  # again, with a job in it: the job stays
    assert shard.queue_names() == {QUEUE, "Foo", "foo"}
    assert shard.count("foo", PENDING, [1], False, 10, None) == 0
    assert shard.count("Foo", PENDING, [1], False, 10, None) == 1


@check(rule="Q-delete")
def queue_delete_removes_every_job_and_is_idempotent(kit: Kit) -> None:
    shard = kit.shard
    kit.enqueue(*[b"%d" % i for i in range(6)], attempts_allowed=1)
    kit.enqueue(b"p3", priority=3)
    kit.enqueue(b"later", run_after_ms=shard.now_ms() + HOUR_MS)
    jobs = kit.dequeue(5)
    kit.ack_jobs(jobs[:2])
    kit.fail_for_good(jobs[2:4])
    shard.delete_queue(QUEUE)
    shard.delete_queue(QUEUE)
    assert QUEUE not in shard.queue_names()
    raises(QueueNotFound, kit.count)
    shard.create_queue(QUEUE)
    for state in JobState:
        for future in (False, True):
            assert kit.count(state, (1, 2, 3), future) == 0
    assert kit.enqueue(b"again") == [1]  # ids start again in a queue created anew


@check(rule="Q-delete")
def queue_recreated_is_seen_through_another_handle(kit: Kit) -> None:
    a, b = kit.shard, kit.open()
    a.create_queue("x")
    kit.enqueue(b"old", queue="x", shard=b)
    a.delete_queue("x")
    a.create_queue("x")
    assert kit.enqueue(b"new", queue="x", shard=b) == [1]
    assert [j.body for j in b.dequeue("x", 1, 10, None)] == [b"new"]
    a.delete_queue("x")
    raises(QueueNotFound, lambda: kit.enqueue(b"gone", queue="x", shard=b))


@check
def queue_create_adds_missing_priority_levels(kit: Kit) -> None:
    kit.open(limits=StorageLimits(num_priorities=1, status_cap=20)).create_queue("grow")
    big = kit.open(limits=StorageLimits(num_priorities=4, status_cap=20))
    big.create_queue("grow")
    assert kit.enqueue(b"p4", queue="grow", shard=big, priority=4) == [1]
    assert [j.body for j in big.dequeue("grow", 4, 10, None)] == [b"p4"]


@check(rule=("Q-delete", "Q-delete-steps"))
def queue_delete_of_a_queue_bigger_than_many_steps_frees_it_all(kit: Kit) -> None:
    other = kit.open()
    other.create_queue("neighbour")
    for start in range(0, 3 * DELETE_STEP + 500, 1000):  # several steps of every backend
        kit.enqueue(*[b"%d" % i for i in range(start, start + 1000)])
    kit.enqueue(b"p2", b"p2", priority=2)
    kit.enqueue(b"n", queue="neighbour", shard=other)
    kit.shard.delete_queue(QUEUE)
    assert kit.shard.queue_names() == other.queue_names() == {"neighbour"}
    raises(QueueNotFound, kit.count)
    assert kit.shard.finish_deletes() == 0  # nothing was left half freed
    kit.shard.create_queue(QUEUE)
    assert kit.count(priorities=(1, 2, 3)) == 0
    assert kit.enqueue(b"fresh") == [1]
    assert other.count("neighbour", PENDING, [1], False, 10, None) == 1
