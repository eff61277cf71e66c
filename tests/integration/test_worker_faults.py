"""Worker fault tests against real `pinlater-server` processes (SQLite backend).

Workers that must be killed, paused or signalled run as `python -m worker_sdk.worker_cli`
subprocesses with the recording handler of tests/integration/worker_handlers.py; the runs each
one made are read back from the record file. Janitor: every 0.2 s, claim timeout 2 s.
Every wait is bounded.
"""

from __future__ import annotations

import collections
import itertools
import signal
import threading
import time

import pytest

from tests.integration.worker_handlers import WorkerProcess, read_records, wait_for
from tests.support.server_process import ServerProcess
from worker_sdk import Job, JobState, PinLaterClient, Worker

CONFIG = {"janitor": {"interval_seconds": 0.2, "claim_timeout_seconds": 2}}
_names = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(CONFIG, tmp_path_factory.mktemp("worker_faults")) as running:
        yield running


@pytest.fixture
def client(server):
    with PinLaterClient([f"{server.host}:{server.port}"], source="fault-test") as c:
        yield c


@pytest.fixture
def queue(client):
    name = f"wf{next(_names)}"
    client.create_queue(name)
    return name


def servers_of(*processes) -> str:
    return ",".join(f"{p.host}:{p.port}" for p in processes)


def events(records, event):
    return [r for r in records if r["event"] == event]


def states(client, ids):
    return collections.Counter(i.state for i in client.lookup(ids).values())


def test_kill_9_mid_job_the_job_comes_back_after_the_claim_timeout(server, client, queue, tmp_path):
    ids = client.enqueue(queue, [b"sleep=0.1"] * 5)
    record = tmp_path / "runs.jsonl"
    with WorkerProcess(
        tmp_path,
        servers_of(server),
        queue,
        record,
        name="doomed",
        extra_args=("--concurrency", "2"),
        env={"WORKER_SLEEP": "30"},
    ) as doomed:
        wait_for(lambda: len(events(read_records(record), "start")) == 2, 20, what="2 starts")
        doomed.proc.kill()
        assert doomed.wait(10) == -signal.SIGKILL
    killed = {r["descriptor"] for r in read_records(record)}
    assert states(client, ids)[JobState.IN_PROGRESS] == 2  # still claimed by the dead worker
    with WorkerProcess(tmp_path, servers_of(server), queue, record, name="rescuer"):
        wait_for(lambda: states(client, ids)[JobState.SUCCEEDED] == 5, 20, what="all 5 done")
    records = read_records(record)
    ends = collections.Counter(r["descriptor"] for r in events(records, "end"))
    assert ends == {d: 1 for d in ids}
    starts = collections.Counter(r["descriptor"] for r in events(records, "start"))
    assert starts == {d: 2 if d in killed else 1 for d in ids}
    reruns = [
        r for r in events(records, "start") if r["descriptor"] in killed and r["pid"] != doomed.pid
    ]
    assert sorted(r["attempt"] for r in reruns) == [2, 2]  # the claim expiry used an attempt


def test_sigterm_finishes_and_acks_running_jobs_without_taking_new_ones(
    server, client, queue, tmp_path
):
    ids = client.enqueue(queue, [b"sleep=1.5"] * 6)
    record = tmp_path / "runs.jsonl"
    with WorkerProcess(
        tmp_path, servers_of(server), queue, record, name="first", extra_args=("--concurrency", "3")
    ) as first:
        wait_for(lambda: len(events(read_records(record), "start")) == 3, 20, what="3 starts")
        first.signal(signal.SIGTERM)
        assert first.wait(15) == 0, first.log()
    records = read_records(record)
    assert len(events(records, "end")) == 3
    assert states(client, ids) == {JobState.SUCCEEDED: 3, JobState.PENDING: 3}
    with WorkerProcess(
        tmp_path,
        servers_of(server),
        queue,
        record,
        name="second",
        extra_args=("--concurrency", "3"),
    ):
        wait_for(lambda: states(client, ids)[JobState.SUCCEEDED] == 6, 20, what="all 6 done")
    starts = collections.Counter(r["descriptor"] for r in events(read_records(record), "start"))
    assert starts == {d: 1 for d in ids}  # nothing lost, nothing run twice


def test_a_second_signal_exits_at_once(server, client, queue, tmp_path):
    [job_id] = client.enqueue(queue, [b"sleep=30"])
    record = tmp_path / "runs.jsonl"
    with WorkerProcess(tmp_path, servers_of(server), queue, record) as worker:
        wait_for(lambda: read_records(record), 20, what="the job to start")
        worker.signal(signal.SIGTERM)
        time.sleep(0.3)
        assert worker.proc.poll() is None  # graceful: still waiting for the handler
        worker.signal(signal.SIGTERM)
        assert worker.wait(3) == 128 + signal.SIGTERM
    assert client.lookup([job_id])[job_id].state is JobState.IN_PROGRESS
    wait_for(
        lambda: client.lookup([job_id])[job_id].state is JobState.PENDING,
        10,
        what="the claim to expire",
    )


def test_a_paused_worker_cannot_ack_the_job_another_worker_now_holds(
    server, client, queue, tmp_path
):
    [job_id] = client.enqueue(queue, [Job(b"sleep=1", attempts=3)])
    record = tmp_path / "runs.jsonl"
    heartbeat = ("--heartbeat", "0.5s")
    with WorkerProcess(
        tmp_path, servers_of(server), queue, record, name="paused", extra_args=heartbeat
    ) as paused:
        wait_for(lambda: read_records(record), 20, what="the first run to start")
        paused.signal(signal.SIGSTOP)
        first_claim = client.lookup([job_id])[job_id].claim
        wait_for(
            lambda: client.lookup([job_id])[job_id].state is JobState.PENDING,
            10,
            what="the janitor to take the job back",
        )
        with WorkerProcess(
            tmp_path,
            servers_of(server),
            queue,
            record,
            name="second",
            extra_args=heartbeat,
            env={"WORKER_SLEEP": "6", "WORKER_FAIL": "1"},
        ) as second:
            wait_for(
                lambda: len(events(read_records(record), "start")) == 2,
                20,
                what="the second worker to start the job",
            )
            second_claim = wait_for(lambda: client.lookup([job_id])[job_id].claim, 5)
            assert second_claim != first_claim
            paused.signal(signal.SIGCONT)
            wait_for(
                lambda: any(r["pid"] == paused.pid for r in events(read_records(record), "end")),
                10,
                what="the paused worker to finish its (stale) run",
            )
            paused.signal(signal.SIGTERM)
            assert paused.wait(15) == 0, paused.log()  # exits only after sending its ack
            info = client.lookup([job_id])[job_id]
            assert info.state is JobState.IN_PROGRESS and info.claim == second_claim
            wait_for(
                lambda: client.lookup([job_id])[job_id].state is JobState.FAILED,
                15,
                what="the second worker's FailJob",
            )
            second.signal(signal.SIGTERM)
            assert second.wait(15) == 0, second.log()
    info = client.lookup([job_id])[job_id]
    assert "FailJob: failed by the second worker" in info.custom_status
    assert len(events(read_records(record), "start")) == 2


class Recorder:
    """In-process handler counting successful runs per job."""

    def __init__(self):
        self.done: collections.Counter = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, job):
        time.sleep(0.05)
        with self.lock:
            self.done[job.descriptor] += 1


def test_worker_reconnects_by_itself_after_a_server_restart(tmp_path):
    first = ServerProcess(CONFIG, tmp_path, name="server1").start()
    try:
        port = first.port
        with PinLaterClient([f"127.0.0.1:{port}"], source="restart-test") as client:
            client.create_queue("restart_q")
            ids = client.enqueue("restart_q", [b"x"] * 20)
            handler = Recorder()
            # no prefetch: the worker holds at most `concurrency` jobs, the bound below
            worker = Worker(
                client,
                "restart_q",
                handler,
                concurrency=2,
                error_backoff=(0.05, 0.5),
                max_prefetch=0,
            )
            thread = worker.start()
            try:
                wait_for(lambda: len(handler.done) >= 5, 20, what="5 jobs done")
                first.kill()
                time.sleep(1.0)  # the worker meets a dead server for a while
                second = ServerProcess(
                    CONFIG, tmp_path, port=port, data_dir=first.data_dir, name="server2"
                ).start()
                try:
                    ids += client.enqueue("restart_q", [b"y"] * 10)
                    wait_for(
                        lambda: states(client, ids)[JobState.SUCCEEDED] == 30,
                        30,
                        what="all 30 jobs done after the restart",
                    )
                finally:
                    worker.stop()
                    thread.join(20)
                    second.stop()
            finally:
                worker.stop()
    finally:
        first.kill()
    assert not thread.is_alive()
    assert worker.stats().rpc_errors >= 1  # it did see the outage
    assert set(handler.done) == set(ids)
    # only jobs caught in flight by the kill (at most `concurrency`) may have run twice
    assert sum(n - 1 for n in handler.done.values()) <= 2


def test_client_fails_over_when_one_of_two_servers_is_killed(tmp_path):
    one = ServerProcess(CONFIG, tmp_path, name="one").start()
    two = ServerProcess(CONFIG, tmp_path, data_dir=one.data_dir, name="two").start()
    try:
        with (
            PinLaterClient(servers_of(one, two), source="failover-test") as client,
            PinLaterClient(servers_of(two), source="observer") as observer,
        ):
            client.create_queue("failover_q")
            ids = client.enqueue("failover_q", [b"x"] * 40)
            handler = Recorder()
            worker = Worker(client, "failover_q", handler, concurrency=2)
            thread = worker.start()
            try:
                wait_for(lambda: len(handler.done) >= 10, 20, what="10 jobs done")
                one.kill()
                ids += observer.enqueue("failover_q", [b"y"] * 10)
                wait_for(
                    lambda: states(observer, ids)[JobState.SUCCEEDED] == 50,
                    30,
                    what="all 50 jobs done through the surviving server",
                )
            finally:
                worker.stop()
                thread.join(20)
    finally:
        one.kill()
        two.stop()
    assert not thread.is_alive()
    assert set(handler.done) == set(ids)
    assert sum(n - 1 for n in handler.done.values()) <= 2
