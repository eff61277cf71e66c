"""pinlater.storage.descriptors: the hot path's split accepts exactly what JobDescriptor.parse
does."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from pinlater.errors import InvalidRequest
from pinlater.storage.descriptors import JobDescriptor, split_local_id, split_prefix

TEXTS = [
    "q:sr1:p1:100",
    "a_B9:sX9:p123:0",
    "q:s" + "a" * 32 + ":p1:1",
    "q:s" + "a" * 33 + ":p1:1",
    "q:sr1:p1234:1",
    "q:sr1:p:1",
    "q:sr1:p1:",
    "q:sr1:p1:9223372036854775807",
    "q:sr1:p1:9223372036854775808",
    "q:sr1:p1:" + "0" * 18 + "7",
    "q:sr1:p1:" + "0" * 19 + "7",
    "q:sr1:p1:1:2",
    "q:sr1:p1:+1",
    "q:sr1:p1:-1",
    "q:sr1:p1: 1",
    "q:sr1:p1:1\n",
    "q:sr1:p1:1_0",
    "q:sr1:p1:١٢",
    "q:sr1:p1:²",
    "q:sr1:p١:1",
    "é:sr1:p1:1",
    "q:sé:p1:1",
    ":sr1:p1:1",
    "q:r1:p1:1",
    "q:sr1:1:1",
    "q:s:p1:1",
    "q:sr_1:p1:1",
    "q::sr1:p1:1",
    "q:sr1:p1::1",
    "",
    ":",
    "1",
    "q:sr1",
    "q-x:sr1:p1:1",
    "q:sr1:p01:00",
]


def split_both(text):
    """The hot path's parse: local id split, then the prefix split."""
    split = split_local_id(text)
    where = None if split is None else split_prefix(split[0])
    return None if where is None else (*where, split[1])


@pytest.mark.parametrize("text", TEXTS)
def test_the_two_splits_accept_exactly_what_parse_accepts(text):
    try:
        parsed = JobDescriptor.parse(text)
    except InvalidRequest:
        assert split_both(text) is None
        return
    assert split_both(text) == (parsed.queue, parsed.shard, parsed.priority, parsed.local_id)


@pytest.mark.parametrize("value", [None, b"q:sr1:p1:1", 5, ["q:sr1:p1:1"]])
def test_non_strings_are_not_split(value):
    assert split_local_id(value) is None
    assert split_both(value) is None


def test_a_descriptor_is_a_frozen_hashable_value():
    built = JobDescriptor("q", "r1", 2, 77)
    assert built == JobDescriptor("q", "r1", 2, 77) != JobDescriptor("q", "r1", 2, 78)
    assert hash(built) == hash(JobDescriptor("q", "r1", 2, 77))
    assert repr(built) == "JobDescriptor(queue='q', shard='r1', priority=2, local_id=77)"
    assert str(built) == "q:sr1:p2:77"
    assert JobDescriptor.parse(str(built)) == built
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.queue = "other"  # type: ignore[misc]


def test_the_hand_written_init_takes_every_field_in_order():
    """A field added to JobDescriptor must be added to its `__init__` too."""
    names = [f.name for f in dataclasses.fields(JobDescriptor)]
    assert list(inspect.signature(JobDescriptor.__init__).parameters)[1:] == names
    built = JobDescriptor(*(f"v{i}" for i in range(len(names))))
    assert [getattr(built, name) for name in names] == [f"v{i}" for i in range(len(names))]
