"""Body previews show every byte unambiguously: UTF-8 kept, controls, format characters,
backslashes and invalid bytes escaped, cut at a byte budget."""

from __future__ import annotations

import pytest

from pinlater.errors import InvalidRequest
from pinlater.ops.job_view import body_preview, escape_bytes, state_by_name
from pinlater.storage.models import JobState


@pytest.mark.parametrize(
    "data,shown",
    [
        (b"plain text", "plain text"),
        ("héllo wörld ✓".encode(), "héllo wörld ✓"),
        (b"<script>alert(1)</script>", "<script>alert(1)</script>"),
        (b"a\nb\tc\rd", "a\\nb\\tc\\rd"),
        (b"\x00\x01\x1b[31m\x7f", "\\x00\\x01\\x1b[31m\\x7f"),
        (b"\xff\xfe", "\\xff\\xfe"),
        (b"back\\slash", "back\\\\slash"),
        (b"\\xff", "\\\\xff"),  # the text \xff differs from the byte 0xff
        ("bidi \u202e override".encode(), "bidi \\u202e override"),
        ("zero\u200bwidth".encode(), "zero\\u200bwidth"),
        ("line\u2028sep".encode(), "line\\u2028sep"),
        (b"\xe2\x82", "\\xe2\\x82"),  # a cut multi-byte character
    ],
)
def test_escape_bytes(data, shown):
    assert escape_bytes(data) == shown


def test_escaping_is_unambiguous_over_every_byte_pair():
    seen: dict[str, bytes] = {}
    for a in range(256):
        for b in (0x00, 0x5C, 0x78, 0xC3, 0xFF):
            data = bytes([a, b])
            text = escape_bytes(data)
            assert seen.setdefault(text, data) == data, (text, data)
            assert text.isprintable()


def test_preview_is_cut_at_the_byte_budget():
    assert body_preview(b"abcdef", 4) == {"preview": "abcd", "size_bytes": 6, "truncated": True}
    assert body_preview(b"abc", 4) == {"preview": "abc", "size_bytes": 3, "truncated": False}
    assert body_preview(b"\x00", 4, full=True)["base64"] == "AA=="
    assert body_preview(None, 4) is None


def test_states_by_name():
    assert state_by_name("failed") is JobState.FAILED
    assert state_by_name("IN_PROGRESS") is JobState.IN_PROGRESS
    for bad in ("done", "", None, 3):
        with pytest.raises(InvalidRequest, match="state"):
            state_by_name(bad)
