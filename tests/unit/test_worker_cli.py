"""pinlater-worker command line: parsing, handler loading, status line, usage errors."""

from __future__ import annotations

import io
import logging

import pytest

from worker_sdk.worker import WorkerStats
from worker_sdk.worker_cli import (
    EXIT_USAGE,
    StatusLine,
    _StatusAwareHandler,
    build_parser,
    format_status,
    load_handler,
    main,
)


def test_defaults_and_options():
    args = build_parser().parse_args(["--queue", "q", "--handler", "m:f"])
    assert (args.concurrency, args.servers, args.heartbeat, args.shutdown_timeout) == (
        4,
        "127.0.0.1:9010",
        None,
        30.0,
    )
    args = build_parser().parse_args(
        [
            "-q",
            "q",
            "--handler",
            "m:f",
            "-c",
            "16",
            "--heartbeat",
            "30s",
            "--shutdown-timeout",
            "2m",
            "--servers",
            "a:1,b:2",
        ]
    )
    assert (args.concurrency, args.heartbeat, args.shutdown_timeout, args.servers) == (
        16,
        30.0,
        120.0,
        "a:1,b:2",
    )


def test_load_handler_resolves_module_and_attribute_path():
    assert load_handler("worker_sdk.examples.example_job:resize").__name__ == "resize"
    assert load_handler("os.path:join") is __import__("os").path.join


@pytest.mark.parametrize(
    "spec,message",
    [
        ("no_colon", "must be module:function"),
        ("no_such_module_xyz:f", "cannot import"),
        ("os:no_such_function", "has no attribute"),
        ("os:sep", "not callable"),
    ],
)
def test_bad_handlers_are_usage_errors(spec, message):
    err = io.StringIO()
    assert main(["--queue", "q", "--handler", spec], err=err) == EXIT_USAGE
    assert message in err.getvalue()


@pytest.mark.parametrize(
    "argv", [["--retry", "linear:x=1"], ["--concurrency", "0"], ["--log-level", "LOUD"]]
)
def test_bad_options_are_usage_errors(argv):
    err = io.StringIO()
    code = main(["--queue", "q", "--handler", "os.path:join", *argv], err=err)
    assert code == EXIT_USAGE and "pinlater-worker: error:" in err.getvalue()


def test_status_line_text():
    stats = WorkerStats(succeeded=10, failed=2, in_flight=3, acks_pending=1)
    assert format_status(stats, 12.345) == (
        "12.3 jobs/s | 10 successes | 2 failures | 3 in flight | 1 acks pending"
    )


def test_log_records_print_above_the_status_line():
    stream = io.StringIO()
    status = StatusLine(stream, worker=None)
    status.draw("5.0 jobs/s")
    handler = _StatusAwareHandler(stream)
    handler.status = status
    handler.emit(logging.LogRecord("x", logging.INFO, "", 0, "hello", None, None))
    assert stream.getvalue() == "\r\x1b[K5.0 jobs/s\r\x1b[Khello\n5.0 jobs/s"


def test_log_format_wait_for_queue_and_servers_from_the_environment(monkeypatch):
    args = build_parser().parse_args(["-q", "q", "--handler", "m:f"])
    assert (args.log_format, args.wait_for_queue) == ("text", False)
    args = build_parser().parse_args(
        ["-q", "q", "--handler", "m:f", "--log-format", "json", "--wait-for-queue"]
    )
    assert (args.log_format, args.wait_for_queue) == ("json", True)
    monkeypatch.setenv("PINLATER_SERVERS", "10.0.0.1:9010")
    assert build_parser().parse_args(["-q", "q", "--handler", "m:f"]).servers == "10.0.0.1:9010"
