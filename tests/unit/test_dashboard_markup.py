"""The dashboard's escaping and chart helpers (pinlater/server/dashboard/markup.py, pages.py):
escaping by default, never twice, and charts made of numbers only."""

from __future__ import annotations

import re

from pinlater.server.dashboard import pages
from pinlater.server.dashboard.markup import Markup, esc, fill, join, sparkline


def test_every_value_is_escaped_unless_it_is_markup():
    hostile = '<script>alert("x")</script>&\''
    out = fill('<td title="$t">$v</td>', t=hostile, v=hostile)
    assert "<script>" not in out and out.count("&lt;script&gt;") == 2
    assert "&quot;" in out and "&#x27;" in out and "&amp;" in out
    inner = fill("<b>$x</b>", x="a<b")
    assert fill("<p>$y</p>", y=inner) == "<p><b>a&lt;b</b></p>", "markup is not escaped twice"
    assert esc(None) == "" and isinstance(join(["<", Markup("<i>")]), Markup)
    assert join(["<", Markup("<i>")]) == "&lt;<i>"


def test_a_sparkline_is_numbers_only_and_flat_when_idle():
    busy = sparkline({"enqueued": [0, 5, 10, 2], "dequeued": [1, 1, 9, 0]})
    points = re.findall(r'points="([^"]*)"', busy)
    assert len(points) == 2
    for line in points:
        assert re.fullmatch(r"(\d+,\d+ ?)+", line), line
        assert len(line.split()) == 4
    idle = sparkline({"enqueued": [0.0] * 60, "dequeued": [0.0] * 60})
    assert re.findall(r'points="([^"]*)"', idle) == ["0,270 1200,270"] * 2
    assert "no samples yet" in sparkline({"enqueued": [1.0], "dequeued": [1.0]})


def test_urls_quote_what_they_carry():
    assert pages.queue_url("q", state="failed", future=False, priority=None) == (
        "/ui/queues/q?state=failed"
    )
    assert pages.job_url("q:s1:p1:7") == "/ui/jobs/q:s1:p1:7"
    assert pages.job_url("a/b?c") == "/ui/jobs/a%2Fb%3Fc"
