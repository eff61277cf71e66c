"""`pinlater` argument parsing, output formatting and the error boundary (no server needed)."""

from __future__ import annotations

import io
import json
import socket
import time

import pytest

from pinlater.cli import format as fmt
from pinlater.cli.load import Stats, format_report, percentile
from pinlater.cli.main import EXIT_CONNECTION, EXIT_USAGE, main, parse_args
from worker_sdk.models import DequeuedJob, JobInfo, JobState


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_global_options_work_before_and_after_the_subcommand():
    before = parse_args(["--port", "9100", "--json", "get_queue_names"])
    after = parse_args(["get_queue_names", "--port", "9100", "--json"])
    for args in (before, after):
        assert (args.host, args.port, args.json) == ("127.0.0.1", 9100, True)
    default = parse_args(["get_queue_names"])
    assert (default.host, default.port, default.json, default.servers) == (
        "127.0.0.1",
        9010,
        False,
        None,
    )


def test_original_underscore_flags_and_hyphenated_aliases_are_accepted():
    args = parse_args(
        [
            "enqueue",
            "--queue",
            "q",
            "--num_queries",
            "-1",
            "--batch_size",
            "100",
            "--concurrency",
            "4",
            "--duration",
            "5",
        ]
    )
    assert (args.num_queries, args.batch_size, args.concurrency, args.duration) == (-1, 100, 4, 5)
    args = parse_args(["get-job-count", "-q", "q", "--job_state", "failed", "--count_future_jobs"])
    assert args.state is JobState.FAILED and args.future
    args = parse_args(
        [
            "dequeue",
            "-q",
            "q",
            "--dequeue_success_percent",
            "30",
            "--piggyback",
            "--num-queries",
            "10",
        ]
    )
    assert (args.success_percent, args.piggyback, args.num_queries) == (30, True, 10)
    args = parse_args(["lookup", "--job_descriptor", "q:s1:p1:1", "-j", "q:s1:p1:2"])
    assert args.descriptors == ["q:s1:p1:1", "q:s1:p1:2"]


@pytest.mark.parametrize(
    "text,state",
    [
        ("0", JobState.PENDING),
        ("in_progress", JobState.IN_PROGRESS),
        ("In-Progress", JobState.IN_PROGRESS),
        ("SUCCEEDED", JobState.SUCCEEDED),
        (3, JobState.FAILED),
    ],
)
def test_job_states_parse_by_name_or_number(text, state):
    assert JobState.parse(text) is state


def test_run_after_accepts_epoch_ms_or_an_offset_from_now():
    assert (
        parse_args(["enqueue", "-q", "q", "--run-after", "1700000000000"]).run_after
        == 1700000000000
    )
    now = int(time.time() * 1000)
    later = parse_args(["enqueue", "-q", "q", "--run-after", "+2m"]).run_after
    assert now + 120_000 <= later <= now + 125_000
    assert parse_args(["enqueue", "-q", "q", "--run-after", "+250ms"]).run_after >= now + 250


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["scan"],
        ["enqueue", "-q", "q", "--run-after", "tomorrow"],
        ["dequeue", "-q", "q", "--limit", "0"],
        ["get_job_count", "-q", "q", "--job_state", "done"],
        ["delete_jobs", "-q", "q"],
        ["--port", "x", "get_queue_names"],
        ["enqueue", "-q", "q", "--num_queries", "0"],
        ["dequeue", "-q", "q", "--num_queries", "1", "--dequeue_success_percent", "101"],
    ],
)
def test_usage_errors_exit_2_with_a_one_line_message(argv):
    code, _, err = run(*argv)
    assert code == EXIT_USAGE
    assert err.startswith("pinlater: error: ") and err.count("\n") == 1


def test_help_goes_to_the_output_stream_and_exits_0():
    code, out, err = run("--help")
    assert code == 0 and "get_queue_names" in out and err == ""


def test_unreachable_server_exits_3_with_the_cause():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run("--port", str(port), "--retries", "0", "get_queue_names")
    assert code == EXIT_CONNECTION
    assert (
        err == f"pinlater: connection failed: cannot connect to 127.0.0.1:{port}: "
        "connection refused\n"
    )


def test_bad_servers_argument_is_a_usage_error(tmp_path):
    code, _, err = run("--servers", str(tmp_path / "nope"), "get_queue_names")
    assert code == EXIT_USAGE and "ServerSet file not found" in err


# ---- formatting ----


def test_table_aligns_columns_and_right_aligns_numbers():
    text = fmt.table(["NAME", "N"], [["a", 5], ["longer", 123]])
    assert text.splitlines() == ["NAME      N", "a         5", "longer  123"]


def test_bodies_are_shown_printable_and_cut():
    assert fmt.show_body(b"hello") == "hello"
    assert fmt.show_body(b"\xff\x00ok") == "\\xff\\x00ok"
    assert fmt.show_body(b"line1\nline2") == "line1\\nline2"
    assert fmt.show_body(b"x" * 100, width=10) == "xxxxxxx..."


def test_json_keeps_binary_bodies_lossless():
    job = DequeuedJob("q:s1:p1:1", b"\xff\xfe", 2, 2, "c:s")
    assert fmt.dequeued_json(job)["body_base64"] == "//4="
    assert fmt.dequeued_json(DequeuedJob("d", b"text", 2, 1, None))["body"] == "text"


def test_times_are_utc_iso_with_milliseconds():
    assert fmt.show_time(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert fmt.show_time(None) == "-"


def test_job_info_table_and_json():
    info = JobInfo("q:s1:p1:1", JobState.FAILED, 3, 0, "boom", 1000, run_after_ms=2000, body=b"b")
    text = fmt.job_infos_table([info], with_body=True)
    header, row = text.splitlines()
    assert header.split() == [
        "DESCRIPTOR",
        "STATE",
        "ATTEMPTS",
        "RUN",
        "AFTER",
        "UPDATED",
        "STATUS",
        "BODY",
    ]
    assert row.split() == [
        "q:s1:p1:1",
        "FAILED",
        "0/3",
        "1970-01-01T00:00:02.000Z",
        "-",
        "boom",
        "b",
    ]
    data = json.loads(fmt.dumps(fmt.job_info_json(info)))
    assert data["state"] == "FAILED" and data["body"] == "b" and data["attempts_allowed"] == 3


# ---- load statistics ----


def test_percentiles_use_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([], 0.5) is None


def test_summary_reports_jobs_per_second_and_latency_in_ms():
    stats = Stats()
    stats.started -= 2.0
    for i in range(100):
        stats.record(0.001 * (i + 1), jobs=10)
    stats.record_error()
    summary = stats.summary("enqueue")
    assert summary["jobs"] == 1000 and summary["requests"] == 100 and summary["errors"] == 1
    assert 450 <= summary["jobs_per_s"] <= 500
    assert (summary["p50_ms"], summary["p99_ms"]) == (50.0, 99.0)
    line = format_report(summary)
    assert line.startswith("enqueue: ") and "p50 50.0 ms, p99 99.0 ms" in line
    jobs, interval = stats.take_interval()
    assert jobs == 1000 and len(interval) == 100
    assert stats.take_interval() == (0, [])


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_load_run_issues_exactly_num_queries_across_threads_and_redraws_on_a_tty():
    from pinlater.cli.load import LoadOptions, LoadRun

    def worker(run):
        while run.claim_query():
            time.sleep(0.002)
            run.stats.record(0.002, jobs=3)

    out = _Terminal()
    options = LoadOptions(
        num_queries=300, duration=None, batch_size=3, concurrency=4, report_interval=0.1
    )
    summary = LoadRun("enqueue", options, out, io.StringIO(), as_json=False, live=True).run(worker)
    assert (summary["requests"], summary["jobs"]) == (300, 900)
    text = out.getvalue()
    assert text.startswith("\r\x1b[Kenqueue: ") and text.endswith(" 0 errors\n")
    assert text.count("\n") == 1  # progress lines are redrawn in place


def test_load_run_stops_at_the_duration_and_reports_worker_errors():
    from pinlater.cli.load import LoadOptions, LoadRun
    from pinlater.errors import QueueNotFound

    def worker(run):
        while run.claim_query():
            run.failed(QueueNotFound("q"))
            time.sleep(0.01)

    err = io.StringIO()
    started = time.monotonic()
    summary = LoadRun(
        "dequeue",
        LoadOptions(num_queries=-1, duration=0.3, batch_size=1, concurrency=2),
        io.StringIO(),
        err,
        as_json=True,
        live=False,
    ).run(worker)
    assert time.monotonic() - started < 2
    assert summary["errors"] > 0 and summary["jobs"] == 0
    assert (
        err.getvalue().splitlines()[0] == "Exception for request: QUEUE_NOT_FOUND: "
        "Queue not found: q"
    )
    assert len(err.getvalue().splitlines()) <= 5
