"""The `pinlater` CLI against a real `pinlater-server` process (SQLite backend)."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys

import pytest

from pinlater.cli.main import EXIT_OK, EXIT_SERVER, main
from tests.support.server_process import ADMIN_PASSWORD, REPO_ROOT

_names = itertools.count()


@pytest.fixture
def server(admin_server):
    return admin_server


@pytest.fixture
def cli(server):
    def run(*argv, expect=EXIT_OK):
        out, err = io.StringIO(), io.StringIO()
        code = main(["--port", str(server.port), *argv], out, err)
        assert code == expect, f"exit {code}; stderr: {err.getvalue()}"
        return out.getvalue(), err.getvalue()

    return run


@pytest.fixture
def queue(cli):
    name = f"cli_q{next(_names)}"
    assert cli("create", "--queue", name)[0] == f"Created queue: {name}\n"
    return name


def as_json(text: str):
    return json.loads(text)


def count(cli, queue, state="pending"):
    return as_json(cli("get_job_count", "-q", queue, "--job_state", state, "--json")[0])["count"]


def test_enqueue_dequeue_ack_lookup_round_trip(cli, queue):
    ids = as_json(
        cli("enqueue", "-q", queue, "-b", "one", "-b", "two", "--attempts", "3", "--json")[0]
    )["enqueued"]
    assert len(ids) == 2
    assert as_json(cli("check_dequeue", "-q", queue, "--json")[0]) == {"available": True}
    data = as_json(cli("dequeue", "-q", queue, "--limit", "5", "--ack", "success", "--json")[0])
    assert sorted(j["body"] for j in data["jobs"]) == ["one", "two"]
    assert data["acked"] == "success" and all(j["claim"] for j in data["jobs"])
    assert count(cli, queue, "succeeded") == 2
    found = as_json(cli("lookup", "-j", ids[0], "--json")[0])
    assert found["jobs"][0]["state"] == "SUCCEEDED" and found["jobs"][0]["body"] == "one"
    claim = next(j["claim"] for j in data["jobs"] if j["descriptor"] == ids[0])
    assert found["jobs"][0]["claim"] == claim
    text = cli("lookup", ids[0], ids[1])[0]  # positional descriptors, one block each
    first, second = text.split("\n\n")
    lines = first.splitlines()
    assert lines[0] == ids[0] and second.splitlines()[0] == ids[1]
    fields = dict(line.strip().split(None, 1) for line in lines[1:] if "  " in line.strip())
    assert fields["state"] == "SUCCEEDED" and fields["claim"] == claim
    assert fields["attempts"] == "3 of 3 left" and fields["body"] == "one"


def test_dequeue_without_ack_leaves_jobs_claimed(cli, queue):
    cli("enqueue", "-q", queue, "-b", "x")
    out, _ = cli("dequeue", "-q", queue)
    assert "x" in out.splitlines()[1]
    assert count(cli, queue, "in_progress") == 1
    assert cli("dequeue", "-q", queue)[0] == "No jobs dequeued.\n"


def test_failure_ack_then_retry_failed_and_delete_jobs(cli, queue):
    cli("enqueue", "-q", queue, "-b", "f", "--attempts", "1")
    cli("dequeue", "-q", queue, "--ack", "failure")
    assert count(cli, queue, "failed") == 1
    assert cli("retry_failed", "-q", queue)[0] == "Retried 1 failed jobs\n"
    assert count(cli, queue, "pending") == 1
    assert cli("delete_jobs", "-q", queue, "--job_state", "pending")[0] == "Deleted 1 jobs\n"
    assert count(cli, queue, "pending") == 0


def test_scan_lists_jobs_across_pages(cli, queue):
    ids = as_json(cli("enqueue", "-q", queue, "-b", "a", "--count", "5", "--json")[0])
    jobs = as_json(cli("scan", "-q", queue, "--page-size", "2", "--json")[0])["jobs"]
    assert sorted(j["descriptor"] for j in jobs) == sorted(ids["enqueued"])
    assert {j["state"] for j in jobs} == {"PENDING"}
    assert len(cli("scan", "-q", queue, "--max", "3")[0].splitlines()) == 4


def test_checkpoint_moves_a_job_back_to_pending(cli, queue):
    cli("enqueue", "-q", queue, "-b", "cp")
    [job] = as_json(cli("dequeue", "-q", queue, "--json")[0])["jobs"]
    cli(
        "checkpoint",
        "-q",
        queue,
        "-j",
        job["descriptor"],
        "--claim",
        job["claim"],
        "--move-to-pending",
        "--new-body",
        "changed",
    )
    [again] = as_json(cli("dequeue", "-q", queue, "--dry-run", "--json")[0])["jobs"]
    assert again["body"] == "changed"


def test_server_errors_exit_1_naming_the_error_code(cli):
    _, err = cli("get_job_count", "-q", "cli_no_such_queue", expect=EXIT_SERVER)
    assert err == "pinlater: server error: QUEUE_NOT_FOUND: Queue not found: cli_no_such_queue\n"
    _, err = cli("create", "-q", "bad-name!", expect=EXIT_SERVER)
    assert "QUEUE_NAME_INVALID" in err


def test_delete_queue_checks_the_admin_password(cli, queue):
    _, err = cli("delete", "-q", queue, "--password", "nope", expect=EXIT_SERVER)
    assert "PASSWORD_INVALID" in err
    cli("delete", "-q", queue, "--password", ADMIN_PASSWORD)
    assert queue not in as_json(cli("get_queue_names", "--json")[0])["queues"]


def test_enqueue_load_mode_reports_a_summary(cli, queue):
    out, _ = cli(
        "enqueue",
        "-q",
        queue,
        "--num_queries",
        "20",
        "--batch_size",
        "10",
        "--concurrency",
        "2",
        "--json",
    )
    summary = as_json(out.splitlines()[-1])
    assert summary["event"] == "summary" and summary["errors"] == 0
    assert (summary["jobs"], summary["requests"]) == (200, 20)
    assert summary["jobs_per_s"] > 0 and summary["p50_ms"] <= summary["p99_ms"]
    assert count(cli, queue) == 200


@pytest.mark.parametrize("piggyback", [False, True])
def test_dequeue_load_mode_acks_every_job_it_counts(cli, queue, piggyback):
    cli("enqueue", "-q", queue, "--num_queries", "10", "--batch_size", "10")
    extra = ["--piggyback"] if piggyback else []
    out, _ = cli(
        "dequeue",
        "-q",
        queue,
        "--num_queries",
        "12",
        "--batch_size",
        "10",
        "--concurrency",
        "2",
        "--json",
        *extra,
    )
    summary = as_json(out.splitlines()[-1])
    assert summary["jobs"] == 100 and summary["errors"] == 0
    assert count(cli, queue, "succeeded") == 100
    assert count(cli, queue, "in_progress") == 0


def test_dequeue_load_mode_with_zero_success_fails_jobs_back_to_pending(cli, queue):
    cli("enqueue", "-q", queue, "--num_queries", "1", "--batch_size", "10")
    cli(
        "dequeue",
        "-q",
        queue,
        "--num_queries",
        "1",
        "--batch_size",
        "10",
        "--dequeue_success_percent",
        "0",
    )
    assert count(cli, queue, "pending") == 10
    assert count(cli, queue, "succeeded") == 0


def test_load_mode_runs_for_a_duration_and_prints_progress(cli, queue):
    out, _ = cli(
        "enqueue", "-q", queue, "--num_queries", "-1", "--duration", "1.5", "--batch_size", "5"
    )
    lines = out.splitlines()
    assert lines[0].startswith("enqueue: ") and "jobs/s" in lines[0]
    assert "| total" in lines[-1] and ", 0 errors" in lines[-1]
    assert len(lines) >= 2


def test_console_entry_point_reads_bodies_from_stdin(server, queue):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pinlater.cli",
            "--port",
            str(server.port),
            "enqueue",
            "-q",
            queue,
            "--json",
        ],
        input=b"line one\nline two\n",
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["enqueued"]) == 2
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pinlater.cli",
            "--port",
            str(server.port),
            "get_job_count",
            "-q",
            "cli_missing_q",
        ],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1 and b"QUEUE_NOT_FOUND" in done.stderr


def test_counts_say_what_they_counted(cli, queue):
    cli("enqueue", "-q", queue, "-b", "a", "-b", "b")
    cli("enqueue", "-q", queue, "-b", "later", "--run-after", "+1h", "--priority", "2")
    assert cli("get_job_count", "-q", queue)[0] == "2 pending\n"
    assert cli("get_job_count", "-q", queue, "--future")[0] == "1 pending (future)\n"
    assert cli("get_job_count", "-q", queue, "--state", "2")[0] == "0 succeeded\n"
    out = cli("get_job_count", "-q", queue, "--future", "--priority", "2")[0]
    assert out == "1 pending (future) (priority 2)\n"
    out = cli("dequeue", "-q", queue, "--limit", "5", "--ack", "success")[0]
    assert out.splitlines()[-1] == "Acked 2 job(s) as success."


def test_retry_failed_and_delete_jobs_cover_every_priority_by_default(cli, queue):
    for priority in ("1", "2", "3"):
        cli(
            "enqueue",
            "-q",
            queue,
            "-b",
            "f",
            "--count",
            "2",
            "--attempts",
            "1",
            "--priority",
            priority,
        )
    cli("dequeue", "-q", queue, "--limit", "10", "--ack", "failure")
    assert count(cli, queue, "failed") == 6
    data = as_json(cli("retry_failed", "-q", queue, "--limit", "5", "--json")[0])
    assert data == {"retried": 5, "by_priority": {"1": 2, "2": 2, "3": 1}}
    assert cli("retry_failed", "-q", queue)[0] == "Retried 1 failed jobs\n"
    assert count(cli, queue, "pending") == 6
    assert cli("delete_jobs", "-q", queue, "--state", "pending", "--priority", "3")[0] == (
        "Deleted 2 jobs\n"
    )
    assert cli("delete_jobs", "-q", queue, "--state", "PENDING")[0] == "Deleted 4 jobs\n"
    assert count(cli, queue, "pending") == 0


def test_enqueue_with_unique_keys_stores_one_job_per_key(cli, queue):
    first = as_json(cli("enqueue", "-q", queue, "-b", "a", "--unique-key", "k1", "--json")[0])
    again = as_json(
        cli(
            "enqueue",
            "-q",
            queue,
            "-b",
            "b",
            "-b",
            "c",
            "--unique-key",
            "k1",
            "--unique-key",
            "k2",
            "--json",
        )[0]
    )
    assert again["enqueued"][0] == first["enqueued"][0] != again["enqueued"][1]
    assert count(cli, queue) == 2
    _, err = cli("enqueue", "-q", queue, "-b", "a", "-b", "b", "--unique-key", "k", expect=2)
    assert "--unique-key given 1 time(s) for 2 job(s)" in err
    _, err = cli("enqueue", "-q", queue, "-b", "a", "--unique-key", "é", expect=EXIT_SERVER)
    assert "ENQUEUE_REJECTED" in err and "jobs[0].uniqueKey" in err


def test_schedules_lists_what_the_server_runs(cli):
    assert cli("schedules")[0] == "(no schedules)\n"
    assert as_json(cli("schedules", "--json")[0]) == {"schedules": []}
