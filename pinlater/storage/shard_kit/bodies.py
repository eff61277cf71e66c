"""Bodies and custom statuses: bytes come back identical up to the size cap, text is data never
code, and the status cap counts characters and keeps the newest (acks append, checkpoints
prepend)."""

from __future__ import annotations

from pinlater.storage.contract import StorageLimits
from pinlater.storage.models import Ack, Checkpoint
from pinlater.storage.shard_kit.kit import QUEUE, Kit, by_source, held
from pinlater.storage.shard_kit.registry import check


@check(rule="B-body-bytes")
def body_bytes_come_back_identical(kit: Kit) -> None:
    bodies = [
        b"",
        b"\x00\xff\xfe",
        "h\u00e9llo".encode("latin-1"),
        "é€😀".encode(),
        bytes(range(256)) * 40,
    ]
    ids = kit.enqueue(*bodies)
    assert [r.body for r in kit.shard.lookup(QUEUE, [(1, i) for i in ids], True)] == bodies
    assert [j.body for j in kit.dry_run()] == bodies
    assert [j.body for j in kit.dequeue()] == bodies


@check(rule="B-body-cap")
def body_at_the_size_cap_round_trips(kit: Kit) -> None:
    body = bytes(range(256)) * (StorageLimits().body_cap // 256)
    assert len(body) == StorageLimits().body_cap
    (local_id,) = kit.enqueue(body)
    assert kit.record(local_id).body == body
    (job,) = kit.dequeue(1)
    assert job.body == body
    reversed_body = body[::-1]
    assert kit.checkpoint(Checkpoint(1, local_id, held(job), new_body=reversed_body)) == 1
    assert kit.record(local_id).body == reversed_body


@check
def body_and_status_text_are_data_never_code(kit: Kit) -> None:
    nasty = "x'); DROP DATABASE mysql; -- %s %(now)s {table} ]] redis.call('FLUSHALL') --[["
    (local_id,) = kit.enqueue(nasty.encode(), custom_status=nasty[:20])
    record = kit.record(local_id)
    assert record.body == nasty.encode() and record.custom_status == nasty[:20]
    assert kit.shard.queue_names() == {QUEUE}


@check(rule="B-status-cap")
def status_ack_appends_keeping_the_newest_characters(kit: Kit) -> None:
    kit.enqueue(b"a", custom_status="0123456789")
    kit.dequeue()
    assert kit.ack([Ack(1, 1, by_source(), "abcdefghijklmno")]) == 1
    assert kit.record(1).custom_status == "56789abcdefghijklmno"


@check(rule="B-status-cap")
def status_checkpoint_prepends_keeping_the_newest_characters(kit: Kit) -> None:
    kit.enqueue(b"a", custom_status="0123456789")
    kit.dequeue()
    assert kit.checkpoint(Checkpoint(1, 1, by_source(), prepend_status="abcdefghijklmno")) == 1
    assert kit.record(1).custom_status == "abcdefghijklmno01234"


@check(rule="B-status-cap")
def status_cap_counts_characters_not_bytes(kit: Kit) -> None:
    (local_id,) = kit.enqueue(b"x", custom_status="é" * 30)
    assert kit.record(local_id).custom_status == "é" * 20
    kit.dequeue()
    assert kit.checkpoint(Checkpoint(1, local_id, by_source(), prepend_status="€😀")) == 1
    assert kit.record(local_id).custom_status == "€😀" + "é" * 18  # prepend keeps the first
    assert kit.ack([Ack(1, local_id, by_source(), append_status="a😀" * 3)]) == 1
    assert kit.record(local_id).custom_status == "é" * 14 + "a😀" * 3  # append keeps the last
    (other,) = kit.enqueue(b"y", custom_status="ab")
    kit.dequeue()
    assert kit.ack(failed=[Ack(1, other, by_source(), "é" * 25)]) == 1
    assert kit.record(other).custom_status == "é" * 20
