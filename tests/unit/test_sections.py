"""Typed settings sections: YAML/env values coerced to the annotated type, every problem named."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pinlater.common.sections import _INVALID, build_section, coerce, field_range


@pytest.mark.parametrize(
    ("value", "hint", "expected"),
    [
        (True, bool, True),
        (" Yes ", bool, True),
        ("on", bool, True),
        ("0", bool, False),
        ("OFF", bool, False),
        (7, int, 7),
        (" -12 ", int, -12),
        ("3", float, 3.0),
        (2, float, 2.0),
        ("1.5", float, 1.5),
        (5, str, "5"),
        ("x", str, "x"),
        ("", int | None, None),
        (None, str | None, None),
        ("8", int | None, 8),
    ],
)
def test_values_coerce_to_the_annotated_type(value, hint, expected):
    problems: list[str] = []
    got = coerce(value, hint, "s.k", problems, None)
    assert (got, type(got), problems) == (expected, type(expected), [])


@pytest.mark.parametrize(
    ("value", "hint", "message"),
    [
        ("maybe", bool, "s.k: expected bool, got 'maybe'"),
        (True, int, "s.k: expected int, got True"),
        ("٣", int, "s.k: expected int, got '٣'"),  # int() would take Unicode digits
        ("1_000", int, "s.k: expected int, got '1_000'"),
        ("1.5", int, "s.k: expected int, got '1.5'"),
        (False, float, "s.k: expected float, got False"),
        ("１.5", float, "s.k: expected float, got '１.5'"),
        ("fast", float, "s.k: expected float, got 'fast'"),
        ({"a": 1}, str, "s.k: expected str, got {'a': 1}"),
        ([1], str, "s.k: expected str, got [1]"),
        (None, int, "s.k: must not be empty"),
        (b"x", bytes, "s.k: expected bytes, got b'x'"),  # no converter for the type
    ],
)
def test_bad_values_are_problems_naming_the_key(value, hint, message):
    problems: list[str] = []
    assert coerce(value, hint, "s.k", problems, None) is _INVALID
    assert problems == [message]


def test_bounds_and_unknown_keys_are_reported_together():
    @dataclass(frozen=True)
    class Section:
        rate: float = field(default=1.0, metadata=field_range(0, 10))
        name: str = "n"

    problems: list[str] = []
    built = build_section(Section, {"rate": "11", "nme": "x"}, "sec", problems)
    assert built == Section()
    assert problems == [
        "sec.nme: unknown key (expected one of rate, name)",
        "sec.rate: 11.0 is outside 0..10",
    ]
