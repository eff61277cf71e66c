"""Replies fit one frame: the config refuses a frame that cannot hold one job, the handler's
reply sizing (pinlater/handler/reply_room.py), and the dispatcher's last line of defence."""

from __future__ import annotations

import pytest

from pinlater.app import load_config
from pinlater.common.sections import ConfigError
from pinlater.errors import EnqueueRejected, InvalidRequest
from pinlater.handler.reply_room import ReplyRoom
from pinlater.idl import PinLater
from pinlater.idl import pinlater_thrift as t
from pinlater.server.transport import Dispatcher
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import JobRecord, JobState
from tests.support.server_process import decode_reply, encode_call

MIB = 1024 * 1024


def record(local_id: int, status: str = "", body: bytes | None = None, size: int | None = None):
    return JobRecord(1, local_id, JobState.PENDING, 2, 2, status, 1, 2, 3, None, body, size)


def test_the_config_refuses_a_frame_that_cannot_hold_one_job_at_the_caps():
    with pytest.raises(ConfigError) as refused:
        load_config(env={}, overrides={"server": {"max_frame_bytes": MIB}})
    (problem,) = refused.value.problems
    assert problem.startswith("server.max_frame_bytes: 1048576 cannot hold")
    assert "limits.body_max_bytes (1048576)" in problem and "needs 10" in problem
    smaller_body = {"server": {"max_frame_bytes": MIB}, "limits": {"body_max_bytes": MIB // 2}}
    assert load_config(env={}, overrides=smaller_body).server.max_frame_bytes == MIB
    assert load_config(env={}).limits.body_max_bytes == MIB  # the defaults fit


def test_a_lookup_that_fits_passes_and_one_over_the_frame_names_the_cap():
    room = ReplyRoom(64 * 1024, 3)
    fits = [(f"q:s1:p1:{i}", record(i, body=b"x" * 1000)) for i in range(10)]
    room.check_lookup(fits)
    over = [(f"q:s1:p1:{i}", record(i, body=None, size=10_000)) for i in range(10)]
    with pytest.raises(InvalidRequest) as refused:
        room.check_lookup(over)
    message = refused.value.message
    assert "server.max_frame_bytes of 65536" in message and "includeBody=false" in message
    assert int(message.split("would take ")[1].split(" bytes")[0]) > 100_000


def test_statuses_count_in_a_lookup_reply():
    room = ReplyRoom(64 * 1024, 3)
    wide = [(f"q:s1:p1:{i}", record(i, status="\u00e9" * 5000)) for i in range(7)]
    with pytest.raises(InvalidRequest):
        room.check_lookup(wide)  # 7 x 10,000 bytes of status, no body at all


def test_a_scan_page_over_the_frame_is_cut_with_a_continuation_after_its_last_job():
    room = ReplyRoom(64 * 1024, 3)
    rows = [(JobDescriptor("q", "1", 1, i), record(i, status="s" * 5000)) for i in range(20)]
    kept, continuation = room.scan_page(rows, "-1")
    assert 0 < len(kept) < 20 and kept == rows[: len(kept)]
    last = kept[-1][1]
    assert continuation == f"{last.run_after_ms}:1:1:{last.local_id}"
    small = rows[:3]
    assert room.scan_page(small, "-1") == (small, "-1")


def test_a_dequeue_budget_leaves_room_for_the_longest_descriptor_and_the_claim():
    room = ReplyRoom(16 * MIB, 3)
    budget = room.dequeue("emails", ["1", "22"], "worker:host", dry_run=False)
    dry = room.dequeue("emails", ["1", "22"], "worker:host", dry_run=True)
    longest = len("emails:s22:p3:") + 19
    assert budget.per_job == 2 * (4 + longest) + 4 + 15 + 3 + 4 + 25 + len("worker:host")
    assert dry.per_job == budget.per_job - (3 + 4 + 25 + len("worker:host"))
    assert 16 * MIB - 100 < budget.max_bytes < 16 * MIB
    assert budget.fitting([MIB] * 20) == 15


class BigReplies:
    def getQueueNames(self, context):
        return {f"queue_{i:06d}_" + "x" * 80 for i in range(2000)}


def test_the_dispatcher_answers_an_internal_error_for_a_reply_over_the_cap():
    dispatcher = Dispatcher(PinLater, BigReplies(), max_reply_bytes=64 * 1024)
    request = encode_call(
        "getQueueNames", PinLater.getQueueNames_args(context=t.RequestContext(source="s"))
    )
    name, reply = dispatcher.dispatch(request)
    _, _, _, body = decode_reply(reply)
    assert name == "getQueueNames" and len(reply) < 1000
    assert "over max_frame_bytes" in body.message
    unbounded = Dispatcher(PinLater, BigReplies())
    assert len(unbounded.dispatch(request)[1]) > 64 * 1024


def test_an_enqueue_whose_descriptors_could_not_fit_a_reply_is_rejected_before_storing():
    room = ReplyRoom(64 * 1024, 3)
    room.check_enqueue("emails", ["1", "2"], 1000)  # 1,000 x ~40 bytes
    with pytest.raises(EnqueueRejected) as refused:
        room.check_enqueue("emails", ["1", "2"], 2000)
    assert "server.max_frame_bytes (65536)" in refused.value.message
    assert "2000 jobs" in refused.value.message
