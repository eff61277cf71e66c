"""pinlater/server/query_params.py: the one reader of query strings and form fields behind
the admin API and the dashboard (their HTTP tests cover the answers; here the rules)."""

from __future__ import annotations

import pytest

from pinlater.server.query_params import MAX_FIELDS, BadInput, parse_fields, whole_number, yes_no


def test_whole_numbers_are_digits_only_and_absent_or_empty_takes_the_default():
    fields = {"a": "42", "b": " 7 ", "c": "", "d": "0"}
    assert whole_number(fields, "a") == 42
    assert whole_number(fields, "b") == 7
    assert whole_number(fields, "c") is None
    assert whole_number(fields, "c", 5) == 5
    assert whole_number(fields, "missing", 3) == 3
    assert whole_number(fields, "d", 9) == 0


@pytest.mark.parametrize("text", ["-1", "+1", "1.5", "1e3", "x", "٣", "9" * 19, "1 2"])
def test_anything_else_is_refused_naming_the_field(text):
    with pytest.raises(BadInput) as caught:
        whole_number({"limit": text}, "limit")
    assert caught.value.message.startswith("limit: must be a whole number")


def test_yes_no_fields():
    for text in ("true", "TRUE", "1", "yes", "on"):
        assert yes_no({"f": text}, "f") is True
    for text in ("false", "0", "no", "off"):
        assert yes_no({"f": text}, "f", default=True) is False
    assert yes_no({"f": ""}, "f", default=True) is True
    assert yes_no({}, "f") is False
    with pytest.raises(BadInput, match="future: must be true or false"):
        yes_no({"future": "maybe"}, "future")


def test_fields_are_limited_in_number_and_never_given_twice():
    assert parse_fields("a=1&b=&c=x%20y") == {"a": "1", "b": "", "c": "x y"}
    assert len(parse_fields("&".join(f"k{i}=1" for i in range(MAX_FIELDS)))) == MAX_FIELDS
    with pytest.raises(BadInput, match=f"more than {MAX_FIELDS} query parameters"):
        parse_fields("&".join(f"k{i}=1" for i in range(MAX_FIELDS + 1)), "query parameter")
    with pytest.raises(BadInput, match="field 'a' given twice"):
        parse_fields("a=1&a=2")
