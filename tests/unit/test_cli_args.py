"""`pinlater` argument parsing, output formatting and the error boundary (no server needed)."""

from __future__ import annotations

import io
import json
import socket
import time

import pytest

from pinlater.cli import format as fmt
from pinlater.cli import parser as parser_module
from pinlater.cli import stats as cli_stats
from pinlater.cli.load import Stats, format_report, percentile
from pinlater.cli.main import EXIT_CONNECTION, EXIT_USAGE, HANDLERS, main, parse_args
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


def test_connection_options_are_shown_once_at_the_top_not_per_command():
    _, top, _ = run("--help")
    assert "--tls-ca" in top and "--servers" in top
    _, scan_help, _ = run("scan", "--help")
    assert "--tls-ca" not in scan_help and "--host" not in scan_help and "--json" in scan_help
    assert parse_args(["scan", "-q", "q", "--tls-ca", "ca.pem"]).tls_ca == "ca.pem"  # old style


def test_hash_password_takes_no_connection_options():
    code, _, err = run("hash-password", "--port", "9011", "--password", "x")
    assert code == EXIT_USAGE and "unrecognized arguments: --port 9011" in err
    _, help_text, _ = run("hash-password", "--help")
    assert "--host" not in help_text


def test_every_subcommand_help_ends_with_examples_of_itself():
    assert set(parser_module.EXAMPLES) == set(HANDLERS)
    for name in HANDLERS:
        code, text, _ = run(name, "--help")
        examples = text.split("examples:\n", 1)[1]
        assert code == 0 and f"pinlater {name}" in examples, name


def test_servers_default_from_the_environment_unless_host_or_port_is_given(monkeypatch):
    monkeypatch.setenv("PINLATER_SERVERS", "10.0.0.1:9011,10.0.0.2:9011")
    assert parse_args(["get_queue_names"]).servers == "10.0.0.1:9011,10.0.0.2:9011"
    assert parse_args(["--port", "9012", "get_queue_names"]).servers is None
    assert parse_args(["get_queue_names", "--host", "h"]).servers is None
    assert parse_args(["--servers", "a:1", "get_queue_names"]).servers == "a:1"


def test_bulk_commands_default_to_every_priority():
    for argv in (
        ["get_job_count", "-q", "q"],
        ["scan", "-q", "q"],
        ["retry_failed", "-q", "q"],
        ["delete_jobs", "-q", "q", "--state", "failed"],
    ):
        assert parse_args(argv).priority is None, argv
    assert parse_args(["retry_failed", "-q", "q", "--priority", "2"]).priority == 2


@pytest.mark.parametrize(
    "flag,text,state",
    [
        ("--state", "failed", JobState.FAILED),
        ("--job_state", "SUCCEEDED", JobState.SUCCEEDED),
        ("--job-state", "In-Progress", JobState.IN_PROGRESS),
        ("--state", "0", JobState.PENDING),
    ],
)
def test_job_states_are_accepted_by_name_in_any_case_or_by_number(flag, text, state):
    assert parse_args(["get_job_count", "-q", "q", flag, text]).state is state
    assert parse_args(["delete_jobs", "-q", "q", flag, text]).state is state


@pytest.mark.parametrize("text", ["done", "7", "-1"])
def test_a_bad_job_state_lists_the_names(text):
    code, _, err = run("scan", "-q", "q", "--state", text)
    assert code == EXIT_USAGE
    assert f"unknown job state {text!r}: use one of pending, in_progress, succeeded, failed" in err
    assert "0=pending" in err and "invalid parse value" not in err


def test_ack_outcomes_are_case_insensitive():
    assert parse_args(["dequeue", "-q", "q", "--ack", "SUCCESS"]).ack == "success"


def test_lookup_takes_descriptors_as_arguments_or_options():
    args = parse_args(["lookup", "q:s1:p1:1", "-j", "q:s1:p1:2"])
    assert args.descriptors + args.positional == ["q:s1:p1:2", "q:s1:p1:1"]
    code, _, err = run("lookup")
    assert code == EXIT_USAGE and "give job descriptors" in err


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
        ["no_such_command"],
        ["--port", "x", "get_queue_names"],
        ["enqueue", "-q", "q", "--num_queries", "0"],
        ["dequeue", "-q", "q", "--num_queries", "1", "--dequeue_success_percent", "101"],
    ],
)
def test_usage_errors_exit_2_with_a_one_line_message(argv):
    code, _, err = run(*argv)
    assert code == EXIT_USAGE
    assert err.startswith("pinlater: error: ") and err.count("\n") == 1
    assert err.count("pinlater") == 1, "the program is named once"


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


# ---- stats: where the metrics are, counters and rates ----


@pytest.mark.parametrize(
    "argv,env,url",
    [
        ([], {}, "http://127.0.0.1:9999"),
        ([], {"PINLATER_METRICS_PORT": "9100"}, "http://127.0.0.1:9100"),
        (["--metrics-port", "9200"], {"PINLATER_METRICS_PORT": "9100"}, "http://127.0.0.1:9200"),
        (["--metrics-port", "0"], {}, None),
        (["--metrics-url", "http://m:1/"], {}, "http://m:1"),
    ],
)
def test_stats_finds_the_metrics_endpoint(argv, env, url):
    args = parse_args(["--host", "127.0.0.1", "stats", *argv])
    assert cli_stats.metrics_url(args, env) == url


def test_stats_metrics_host_is_the_first_server():
    args = parse_args(["--servers", "10.0.0.7:9010,10.0.0.8:9010", "stats"])
    assert cli_stats.metrics_url(args, {}) == "http://10.0.0.7:9999"


PAGE = """# TYPE pinlater_jobs_enqueued_total counter
pinlater_jobs_enqueued_total{queue="a"} 100.0
pinlater_jobs_enqueued_total{queue="b"} 7.0
# TYPE pinlater_jobs_dequeued_total counter
pinlater_jobs_dequeued_total{queue="a"} 40.0
# TYPE pinlater_acks_total counter
pinlater_acks_total{queue="a",result="succeeded"} 30.0
pinlater_acks_total{queue="a",result="failed"} 5.0
pinlater_acks_total{queue="",result="failed"} 9.0
# TYPE pinlater_requests_total counter
pinlater_requests_total{method="x",queue="a",outcome="ok"} 3.0
"""


def test_stats_reads_the_job_counters_and_turns_two_samples_into_rates():
    counters = cli_stats.parse_counters(PAGE)
    assert counters == {
        ("a", "enqueued"): 100.0,
        ("b", "enqueued"): 7.0,
        ("a", "dequeued"): 40.0,
        ("a", "acked_succeeded"): 30.0,
        ("a", "acked_failed"): 5.0,
    }
    before = cli_stats.Sample(10.0, counters)
    after = cli_stats.Sample(12.0, {**counters, ("a", "enqueued"): 160.0, ("b", "enqueued"): 3.0})
    rates = cli_stats.rates(before, after)
    assert rates["a"] == {
        "enqueued": 30.0,
        "dequeued": 0.0,
        "acked_succeeded": 0.0,
        "acked_failed": 0.0,
    }
    assert rates["b"]["enqueued"] == 1.5  # the counter went down: the server restarted
    assert cli_stats.rates(None, after) is None and cli_stats.rates(after, before) is None
