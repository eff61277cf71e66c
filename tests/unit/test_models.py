"""pinlater.storage.models: the fast Ack and DequeuedJob builders equal the dataclass
constructors."""

from __future__ import annotations

import dataclasses

import pytest

from pinlater.storage.models import Ack, ClaimMatch, DequeuedJob, new_ack, new_dequeued_job


def test_new_ack_builds_the_same_frozen_value_as_the_dataclass():
    match = ClaimMatch(source="worker:1", claim="c")
    built = new_ack(2, 77, match, "done", 1000)
    expected = Ack(priority=2, local_id=77, match=match, append_status="done", retry_delay_ms=1000)
    assert type(built) is Ack
    assert built == expected
    assert hash(built) == hash(expected)
    assert repr(built) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.local_id = 5  # type: ignore[misc]


def test_new_ack_sets_every_field_in_order():
    """A field added to or moved in Ack must be handled by `new_ack` too."""
    assert Ack.__slots__ == ("priority", "local_id", "match", "append_status", "retry_delay_ms")
    assert [f.name for f in dataclasses.fields(Ack)] == list(Ack.__slots__)


def test_new_dequeued_job_builds_the_same_frozen_value_as_the_dataclass():
    for claim in ("0123456789abcdef01234567:w", None):
        built = new_dequeued_job(3, 2**40, b"\xffbody", 5, 4, claim)
        expected = DequeuedJob(
            priority=3,
            local_id=2**40,
            body=b"\xffbody",
            attempts_allowed=5,
            attempts_remaining=4,
            claim=claim,
        )
        assert type(built) is DequeuedJob
        assert built == expected and hash(built) == hash(expected)
        assert repr(built) == repr(expected)
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.claim = "other"  # type: ignore[misc]
    assert (
        [f.name for f in dataclasses.fields(DequeuedJob)]
        == list(DequeuedJob.__slots__)
        == ["priority", "local_id", "body", "attempts_allowed", "attempts_remaining", "claim"]
    )
