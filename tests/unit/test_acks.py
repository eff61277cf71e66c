"""pinlater.storage.acks.group_acks: the one ack-grouping rule every backend applies."""

from __future__ import annotations

from pinlater.storage.acks import AckGroup, AckOutcome, group_acks
from pinlater.storage.models import Ack, ClaimMatch

SOURCE = "worker:1"
CLAIM = ClaimMatch(SOURCE, "c1")


def ids(groups: list[AckGroup]) -> list[tuple[int, ...]]:
    return [g.local_ids for g in groups]


def test_a_dequeued_batch_acked_with_one_claim_is_one_group():
    acks = [Ack(1, i, CLAIM) for i in range(100)]
    (group,) = group_acks(acks, [])
    assert group == AckGroup(AckOutcome.SUCCESS, 1, "", 0, CLAIM, tuple(range(100)))


def test_equal_claims_group_even_when_they_are_distinct_objects():
    (group,) = group_acks([Ack(1, 1, ClaimMatch(SOURCE, "c1")), Ack(1, 2, CLAIM)], [])
    assert group.local_ids == (1, 2)


def test_outcome_priority_status_delay_and_claim_each_split_groups():
    other_claim = ClaimMatch(SOURCE, "c2")
    succeeded = [Ack(1, 1, CLAIM), Ack(2, 2, CLAIM), Ack(1, 3, CLAIM, "done")]
    failed = [Ack(1, 4, CLAIM, retry_delay_ms=5), Ack(1, 5, other_claim, retry_delay_ms=5)]
    groups = group_acks(succeeded, failed)
    keys = [(g.outcome, g.priority, g.append_status, g.retry_delay_ms, g.match) for g in groups]
    assert keys == [
        (AckOutcome.SUCCESS, 1, "", 0, CLAIM),
        (AckOutcome.SUCCESS, 2, "", 0, CLAIM),
        (AckOutcome.SUCCESS, 1, "done", 0, CLAIM),
        (AckOutcome.FAILURE, 1, "", 5, CLAIM),
        (AckOutcome.FAILURE, 1, "", 5, other_claim),
    ]
    assert ids(groups) == [(1,), (2,), (3,), (4,), (5,)]


def test_priorities_interleaved_in_a_request_still_share_their_groups():
    acks = [Ack(1, 1, CLAIM), Ack(2, 7, CLAIM), Ack(1, 2, CLAIM), Ack(2, 8, CLAIM)]
    assert ids(group_acks(acks, [])) == [(1, 2), (7, 8)]


def test_a_job_acked_twice_keeps_its_request_order():
    """The first ack of job 1 (status "a") must be the one applied: an ack after a group with
    another key opens a new group instead of joining an earlier one."""
    acks = [Ack(1, 2, CLAIM, "b"), Ack(1, 1, CLAIM, "a"), Ack(1, 1, CLAIM, "b")]
    groups = group_acks(acks, [])
    assert [(g.append_status, g.local_ids) for g in groups] == [
        ("b", (2,)),
        ("a", (1,)),
        ("b", (1,)),
    ]


def test_negative_delays_are_zero_and_join_the_zero_delay_group():
    (group,) = group_acks([], [Ack(1, 1, CLAIM, retry_delay_ms=-5), Ack(1, 2, CLAIM)])
    assert group.retry_delay_ms == 0
    assert group.local_ids == (1, 2)


def test_no_acks_no_groups():
    assert group_acks([], []) == []
