"""pinlater.common.logs: one handler, text or JSON lines, safe to call again."""

from __future__ import annotations

import io
import json
import logging

import pytest

from pinlater.common.logs import configure_logging, formatter, parse_level


@pytest.fixture
def root_restored():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_time_level_logger_message_and_extras(root_restored):
    stream = io.StringIO()
    configure_logging("INFO", "json", stream=stream)
    log = logging.getLogger("pinlater.test")
    log.info("hello %s\nsecond line", "world", extra={"queue": "emails", "obj": object()})
    log.debug("not shown")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["level"] == "INFO" and first["logger"] == "pinlater.test"
    assert first["message"] == "hello world\nsecond line" and first["queue"] == "emails"
    assert first["obj"].startswith("<object object")
    assert first["time"].endswith("Z") and first["time"][10] == "T"
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exc_info"]


def test_configuring_again_replaces_the_handler_instead_of_doubling_lines(root_restored):
    stream = io.StringIO()
    configure_logging("INFO", "text", stream=stream)
    configure_logging("WARNING", "text", stream=stream)
    log = logging.getLogger("pinlater.test")
    log.info("dropped")
    log.warning("once")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith(" WARNING pinlater.test: once")


def test_bad_levels_and_formats_are_refused():
    with pytest.raises(ValueError, match="log format must be one of text, json"):
        formatter("xml")
    with pytest.raises(ValueError, match="log level must be one of"):
        parse_level("LOUD")
    assert parse_level("debug") == logging.DEBUG
