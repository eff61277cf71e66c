"""The rig of one fault scenario: storage, server processes, producers, worker processes, drain,
final state, resource figures and the ledger line.

    with Rig("F1", "redis", tmp_path) as rig:
        server = rig.start_server()
        with rig.producers(2):
            ...inject faults...
        rig.finish(rig.drain_and_check())

Every process is started here (subprocess.Popen) and stopped by its own PID in `close()`;
every loop has a count or time bound; only 127.0.0.1 is contacted. Short leases keep the
scenarios short: claims expire after CLAIM_TIMEOUT seconds and both janitor passes and shard
probes run several times a second.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backends import backend_class
from pinlater.app import load_config
from pinlater.storage.ledger import LedgerBook
from pinlater.storage.sharded import ShardedBackend
from tests.faults import checker
from tests.faults.ledger import History, job_body, job_id, load
from tests.faults.ledger import report as write_ledger
from tests.faults.storage import Storage
from tests.support.server_process import REPO_ROOT, ServerProcess
from worker_sdk import Job, PinLaterClient
from worker_sdk.errors import PinLaterError, PinLaterTransportError
from worker_sdk.models import AckInfo, JobInfo, JobState

CLAIM_TIMEOUT = 1.5
JANITOR_INTERVAL = 0.25
#: the servers' `sharding.retries`: an enqueue tries at most 1 + this many shards
SHARD_RETRIES = 1
#: seconds a loaded machine may add to a bound the configuration sets (scheduling, GIL)
LOAD_SLACK = 3.0
ATTEMPTS = 5
DRAIN_SECONDS = 20.0
#: after faults and the drain, the server may hold this many threads above its baseline
THREAD_SLACK = 6
#: ... and this much more resident memory
RSS_SLACK_MB = 64
#: the prefetching broker of `broker: True` rigs: it buffers most of a scenario's queue, with
#: holds short enough for a scenario (the janitor returns a dead broker's reservations)
BROKER = {
    "default_prefetch": 40,
    "hold_seconds": 3,
    "idle_seconds": 1.5,
    "lease_seconds": 1.5,
    "renew_seconds": 0.3,
}


def outcome_of(exc: Exception) -> str:
    """`unknown` if the request may have reached the server, else `fail`."""
    if isinstance(exc, PinLaterTransportError):
        return "unknown" if exc.maybe_applied else "fail"
    return "fail"


def proc_status(pid: int) -> tuple[int, int]:
    """(resident KiB, threads) of a live process, from /proc/<pid>/status."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return int(fields["VmRSS"][0]), int(fields["Threads"][0])


class Rig:
    """Owns everything one scenario starts; `close()` stops it all by PID."""

    def __init__(
        self,
        scenario: str,
        kind: str,
        tmp_path: Path,
        *,
        instances: int = 2,
        durable: bool = True,
        proxied: bool = False,
        janitor: dict[str, Any] | None = None,
        broker: bool = False,
    ):
        """`broker`: every server of the rig runs the prefetching broker (`BROKER`)."""
        self.scenario, self.kind, self.tmp = scenario, kind, Path(tmp_path)
        self.broker = broker
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.storage = Storage(
            kind, self.tmp, instances=instances, durable=durable, proxied=proxied
        )
        self.janitor = {
            "interval_seconds": JANITOR_INTERVAL,
            "claim_timeout_seconds": CLAIM_TIMEOUT,
            **(janitor or {}),
        }
        self.queue = f"f_{re.sub('[^a-z0-9]', '_', scenario.lower())}_{uuid.uuid4().hex[:8]}"
        self.history = History(self.tmp / "test-history.jsonl", process="test")
        self.servers: list[ServerProcess] = []
        self.workers: list[WorkerProcess] = []
        self.faults: dict[str, int] = {}
        self.stale_acks_rejected = 0
        self.resources: dict[str, Any] = {}
        self._clients: list[PinLaterClient] = []

    def __enter__(self) -> Rig:
        self.storage.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        for client in self._clients:
            client.close()
        for server in self.servers:
            server.stop(timeout=5)
        self.storage.close()
        self.history.close()

    def fault(self, kind: str, n: int = 1) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + n

    # ---- servers ----

    def server_config(self, **extra: Any) -> dict[str, Any]:
        return {
            "backend": self.storage.backend_section(),
            "janitor": dict(self.janitor),
            "sharding": {"probe_interval_seconds": 0.3, "retries": SHARD_RETRIES},
            "server": {"shutdown_grace_seconds": 3.0},
            **({"broker": BROKER} if self.broker else {}),
            **extra,
        }

    def start_server(self, env: dict[str, str] | None = None, **extra: Any) -> ServerProcess:
        """A server on this rig's storage; `env` is added to its environment (e.g. faketime)."""
        server = ServerProcess(
            self.server_config(**extra), self.tmp, env=env, name=f"server{len(self.servers) + 1}"
        )
        self.servers.append(server)
        return server.start()

    def kill_server(self, server: ServerProcess) -> None:
        server.kill()
        self.fault("kill_server")

    def restart_server(self, server: ServerProcess) -> ServerProcess:
        """Start again on the same port and storage (after a kill or stop)."""
        port = server.port
        server.kill()
        server.requested_port = port
        return server.start()

    def client(
        self, source: str, servers: list[str] | None = None, **kwargs: Any
    ) -> PinLaterClient:
        options = {"connect_timeout": 0.5, "timeout": 3.0, "retries": 1, "backoff": 0.05, **kwargs}
        client = PinLaterClient(servers or self.addresses(), source=source, **options)
        self._clients.append(client)
        return client

    def enqueue_answer_bound(self) -> float:
        """The longest the server may take to answer an enqueue while shards are silent, as
        its configuration sets it: each shard it tries (retries are on other shards) fails
        within the storage's call bound."""
        return (1 + SHARD_RETRIES) * self.storage.call_bound_seconds()

    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.servers]

    def start_seeded(self, jobs: int, *, baseline: bool = True) -> ServerProcess:
        """The usual opening of a scenario: a server, the queue, `jobs` enqueued at once and
        (with `baseline`) the warmed-up resource figures."""
        server = self.start_server()
        self.create_queue()
        if jobs:
            self.enqueue(jobs)
        if baseline:
            self.baseline(server)
        return server

    def create_queue(self) -> None:
        client = self.client("setup")
        client.create_queue(self.queue)

    # ---- producers ----

    @contextlib.contextmanager
    def producers(
        self,
        n: int = 2,
        *,
        batch: int = 5,
        pause: float = 0.0,
        servers: list[str] | None = None,
        timeout: float | None = None,
    ):
        """n threads enqueueing uniquely numbered jobs until the block ends (max 60 s); their
        clients wait `timeout` seconds for an answer (default: `client()`'s)."""
        stop = threading.Event()
        options = {} if timeout is None else {"timeout": timeout}
        producers = [
            Producer(self, f"p{i + 1}", stop, batch, pause, servers, options) for i in range(n)
        ]
        for producer in producers:
            producer.thread.start()
        try:
            yield producers
        finally:
            stop.set()
            for producer in producers:
                producer.thread.join(30)
                assert not producer.thread.is_alive(), "a producer did not stop"

    def ok_enqueues(self) -> int:
        return sum(
            1 for r in self.history.records() if r["op"] == "enqueue" and r["outcome"] == "ok"
        )

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.02)

    def enqueue(self, n: int, *, source: str = "seed", attempts: int = ATTEMPTS) -> list[str]:
        """Enqueue n jobs at once (recorded); returns their descriptors."""
        client = self.client(source)
        bodies = [job_body(source, i) for i in range(n)]
        records = [self.history.invoke("enqueue", job=job_id(b)) for b in bodies]
        descriptors = client.enqueue(self.queue, [Job(b, attempts=attempts) for b in bodies])
        for record, descriptor in zip(records, descriptors, strict=True):
            self.history.complete(record, "ok", descriptor=descriptor)
        return descriptors

    # ---- workers ----

    def spawn_worker(self, source: str, **options: Any) -> WorkerProcess:
        worker = WorkerProcess(self, source, options)
        self.workers.append(worker)
        return worker.start()

    def worker_records(self) -> list[dict[str, Any]]:
        return [r for w in self.workers for r in load(w.history_path)]

    # ---- drain, final state, check ----

    def drain(self, timeout: float = DRAIN_SECONDS) -> bool:
        """Dequeue and ack everything (recorded) until nothing is pending or in progress."""
        client = self.client("drain", retries=2)
        deadline = time.monotonic() + timeout
        with contextlib.suppress(PinLaterError):
            client.create_queue(self.queue)  # repairs a shard that lost the queue itself
        while time.monotonic() < deadline:
            record = self.history.invoke("dequeue")
            try:
                jobs = client.dequeue(self.queue, 100)
            except PinLaterError as exc:
                self.history.complete(record, outcome_of(exc), error=str(exc)[:200])
                time.sleep(0.1)
                continue
            if jobs:
                self._deliver_and_ack(client, record, jobs)
            elif self.open_jobs(client) == 0 and self._still_none_open(client):
                return True
            else:
                time.sleep(0.1)
        return False

    def _still_none_open(self, client: PinLaterClient) -> bool:
        """No open job a moment later, too: the two counts of `open_jobs` are separate calls,
        and a broker's reserved job (read as PENDING) handed out between them (its hand-out
        written behind, `broker.write_behind_ms`) is in neither."""
        time.sleep(0.2)
        return self.open_jobs(client) == 0

    def _deliver_and_ack(self, client: PinLaterClient, record: dict, jobs) -> None:
        self.history.deliveries(record, jobs, "drain")
        acks = [
            self.history.invoke(
                "ack", job=job_id(j.body), descriptor=j.descriptor, claim=j.claim, result="success"
            )
            for j in jobs
        ]
        try:
            client.ack(self.queue, succeeded=jobs)
            outcome = "ok"
        except PinLaterError as exc:
            outcome = outcome_of(exc)
        for ack in acks:
            self.history.complete(ack, outcome)

    def open_jobs(self, client: PinLaterClient) -> int:
        """PENDING + IN_PROGRESS jobs. The counts are separate calls, so IN_PROGRESS is counted
        first: a job the janitor reclaims in between (IN_PROGRESS -> PENDING) is then counted
        twice rather than not at all (the other order let a drain end with jobs left)."""
        try:
            return sum(
                client.count(self.queue, state, future=future)
                for state in (JobState.IN_PROGRESS, JobState.PENDING)
                for future in (False, True)
            )
        except PinLaterError:
            return -1

    def final_state(self) -> dict[str, JobInfo]:
        """Every stored job of the queue (found by scan and by the history), with bodies."""
        client = self.client("final", retries=2)
        descriptors = {r["descriptor"] for r in self.all_records() if r.get("descriptor")}
        for state in JobState:
            for future in (False, True):
                for info in client.scan(
                    self.queue, state, future=future, limit=1000, max_jobs=100_000
                ):
                    descriptors.add(info.descriptor)
        found: dict[str, JobInfo] = {}
        ordered = sorted(descriptors)
        for i in range(0, len(ordered), 500):
            found.update(client.lookup(ordered[i : i + 500], include_body=True))
        return found

    def all_records(self) -> list[dict[str, Any]]:
        return self.history.records() + self.worker_records()

    def check(
        self, *, strict_attempts: bool = True, drain_timeout: float = DRAIN_SECONDS
    ) -> checker.Report:
        """Stop the workers, drain, look at the final state and run the checker."""
        for worker in self.workers:
            worker.stop()
        drained = self.drain(drain_timeout)
        report = checker.check(
            self.all_records(),
            self.final_state(),
            strict_attempts=strict_attempts,
            books=self.books(),
        )
        if not drained:
            report.violations.append(f"the queue did not drain within {drain_timeout}s")
        return report

    @contextlib.contextmanager
    def _raw_store(self) -> Iterator[ShardedBackend]:
        """The storage itself, without a server in between."""
        config = load_config(env={}, overrides={"backend": self.storage.backend_section()})
        backend = backend_class(config.backend.kind)(
            config.backend.options, config.storage_limits()
        )
        store = ShardedBackend(
            backend, config.backend.shards, num_priorities=config.priorities.levels, retries=3
        )
        try:
            yield store
        finally:
            store.close()

    def books(self) -> dict[str, LedgerBook]:
        """The queue's ledger on every shard, read straight from the storage (as the servers
        read it: one snapshot per shard)."""
        with self._raw_store() as store:
            return store.ledger(self.queue)

    def unreserved_pending(self, limit: int = 10_000) -> int:
        """How many of the queue's jobs storage itself would hand out now (a dry run on every
        shard and priority): reads show a broker's reservations as PENDING (S-prefetch), this
        does not count them."""
        with self._raw_store() as store:
            return sum(
                len(store.shard(name).dequeue(self.queue, priority, limit, None))
                for name in store.shard_names()
                for priority in range(1, store.num_priorities + 1)
            )

    # ---- resources ----

    def baseline(self, server: ServerProcess) -> None:
        """Resource figures of a warmed-up server (its pools and service threads started)."""
        warm = self.client("warm-up", [f"127.0.0.1:{server.port}"])
        for _ in range(3):
            with contextlib.suppress(PinLaterError):
                warm.count(self.queue)
                warm.dequeue(self.queue, 1, dry_run=True)
        time.sleep(JANITOR_INTERVAL * 2)
        rss, threads = proc_status(server.pid)
        self.resources.update(
            base_rss=rss, base_threads=threads, peak_threads=threads, peak_rss=rss
        )

    @contextlib.contextmanager
    def watch_resources(self, server: ServerProcess):
        """Sample the server's RSS and thread count every 50 ms while the block runs."""
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                with contextlib.suppress(OSError, KeyError):
                    rss, threads = proc_status(server.pid)
                    self.resources["peak_threads"] = max(self.resources["peak_threads"], threads)
                    self.resources["peak_rss"] = max(self.resources["peak_rss"], rss)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)

    def assert_resources_back(self, server: ServerProcess) -> None:
        """Threads and RSS after the faults and the drain are near the pre-fault baseline."""
        base_threads = self.resources["base_threads"]
        deadline = time.monotonic() + 5
        while True:  # connection threads of closed clients exit within a moment
            rss, threads = proc_status(server.pid)
            if threads <= base_threads + THREAD_SLACK or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.resources.update(end_rss=rss, end_threads=threads)
        assert threads <= base_threads + THREAD_SLACK, self.resources
        assert rss <= self.resources["base_rss"] + RSS_SLACK_MB * 1024, self.resources

    # ---- fencing ----

    def stale_ack_probe(self, n: int = 3) -> int:
        """Dequeue n jobs as "probe-a", let the claim expire and the janitor reclaim them,
        dequeue them again as "probe-b", then ack success AND failure with probe-a's claims:
        neither may change anything. Then probe-b acks. Returns the stale acks rejected."""
        old_client, new_client = self.client("probe-a"), self.client("probe-b")
        rec = self.history.invoke("dequeue")
        old = old_client.dequeue(self.queue, n)
        assert old, "the probe found no job to dequeue"
        self.history.deliveries(rec, old, "probe-a")
        mine = {j.descriptor for j in old}
        again = self._dequeue_again(new_client, mine)
        assert len(again) == len(old), "reclaimed probe jobs did not come back"
        old_client.ack(self.queue, succeeded=old)
        old_client.ack(self.queue, failed=[AckInfo(j.descriptor, claim=j.claim) for j in old])
        infos = new_client.lookup(list(mine))
        fresh = {j.descriptor: j for j in again}
        unchanged = [
            d
            for d, info in infos.items()
            if info.state == JobState.IN_PROGRESS
            and info.claim == fresh[d].claim
            and info.attempts_remaining == fresh[d].attempts_remaining
        ]
        assert len(unchanged) == len(old), f"a stale ack changed a job: {infos}"
        self._ack_recorded(new_client, again)
        self.stale_acks_rejected += 2 * len(old)
        return 2 * len(old)

    def _dequeue_again(self, client: PinLaterClient, mine: set[str]) -> list:
        """Dequeue as "probe-b" until the jobs `mine` come back (reclaimed), acking the other
        jobs it meets; bounded by the claim timeout plus 10 s."""
        again: list = []
        deadline = time.monotonic() + CLAIM_TIMEOUT + 10
        while len(again) < len(mine) and time.monotonic() < deadline:
            rec = self.history.invoke("dequeue")
            got = client.dequeue(self.queue, 100)
            self.history.deliveries(rec, got, "probe-b")
            again += [j for j in got if j.descriptor in mine]
            others = [j for j in got if j.descriptor not in mine]
            if others:
                self._ack_recorded(client, others)
            time.sleep(0.05)
        return again

    def _ack_recorded(self, client: PinLaterClient, jobs) -> None:
        acks = [
            self.history.invoke(
                "ack", job=job_id(j.body), descriptor=j.descriptor, claim=j.claim, result="success"
            )
            for j in jobs
        ]
        client.ack(self.queue, succeeded=jobs)
        for ack in acks:
            self.history.complete(ack, "ok")

    # ---- the ledger ----

    def finish(
        self, report: checker.Report, *, expect_loss: bool = False, note: str = ""
    ) -> dict[str, Any]:
        """Write the ledger line, then assert the invariants (or, for a negative control, that
        the checker did see loss)."""
        faults = {**self.faults, **self.storage.faults()}
        res = self.resources
        line = {
            "scenario": self.scenario,
            "backend": self.kind,
            **report.ledger_fields(),
            "stale_acks_rejected": self.stale_acks_rejected + report.stale_acks,
            "faults": faults,
            "seconds": round(time.monotonic() - self.started, 1),
            "threads": (
                f"{res['base_threads']}/{res['peak_threads']}/{res.get('end_threads', '?')}"
                if res
                else "-"
            ),
            "rss_mb": (
                f"{res['base_rss'] // 1024}/{res['end_rss'] // 1024 if 'end_rss' in res else '?'}"
                if res
                else "-"
            ),
            "delivery_histogram": report.delivery_histogram,
            "extra_stored_copies": report.stored_copies_extra,
            "misreported_acks": len(report.fail_but_applied),
            "verdict": _verdict(report, expect_loss),
            "problems": report.problems(),
            "note": note,
        }
        write_ledger(line)
        if expect_loss:
            assert report.lost, "negative control: the checker saw no loss, so it proves nothing"
        else:
            assert report.valid, report.problems()
        return line


def _verdict(report: checker.Report, expect_loss: bool) -> str:
    if expect_loss:
        return "LOSS-SEEN" if report.lost else "MISSED"
    if report.lost:
        return "LOSS"
    return "ok" if report.valid else "FAIL"


class Producer:
    """One enqueueing thread: batches of uniquely numbered jobs, every outcome recorded."""

    def __init__(
        self,
        rig: Rig,
        name: str,
        stop: threading.Event,
        batch: int,
        pause: float,
        servers: list[str] | None,
        client_options: dict[str, Any],
    ):
        self.rig, self.name, self.stop = rig, name, stop
        self.batch, self.pause = batch, pause
        self.client = rig.client(name, servers, **client_options)
        self.ok = self.failed = 0
        self.latencies: list[float] = []
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)

    def run(self) -> None:
        serial, deadline = 0, time.monotonic() + 60
        while not self.stop.is_set() and time.monotonic() < deadline:
            bodies = [job_body(self.name, serial + i) for i in range(self.batch)]
            serial += self.batch
            records = [self.rig.history.invoke("enqueue", job=job_id(b)) for b in bodies]
            started = time.monotonic()
            try:
                descriptors = self.client.enqueue(
                    self.rig.queue, [Job(b, attempts=ATTEMPTS) for b in bodies]
                )
            except PinLaterError as exc:
                self.latencies.append(time.monotonic() - started)
                for record in records:
                    self.rig.history.complete(record, outcome_of(exc), error=str(exc)[:200])
                self.failed += 1
                time.sleep(0.05)
                continue
            self.latencies.append(time.monotonic() - started)
            for record, descriptor in zip(records, descriptors, strict=True):
                self.rig.history.complete(record, "ok", descriptor=descriptor)
            self.ok += 1
            if self.pause:
                time.sleep(self.pause)


class WorkerProcess:
    """A tests.faults.fault_worker subprocess (its own session, stopped by PID)."""

    def __init__(self, rig: Rig, source: str, options: dict[str, Any]):
        self.rig, self.source = rig, source
        self.history_path = rig.tmp / f"worker-{source}.jsonl"
        self.stop_file = rig.tmp / f"worker-{source}.stop"
        self.options = {"max_seconds": 40, **options}
        self.proc: subprocess.Popen | None = None

    def start(self) -> WorkerProcess:
        servers = self.options.pop("servers", None) or self.rig.addresses()
        servers = [servers] if isinstance(servers, str) else servers
        cmd = [
            sys.executable,
            "-m",
            "tests.faults.fault_worker",
            "--queue",
            self.rig.queue,
            "--source",
            self.source,
            "--history",
            str(self.history_path),
            "--stop-file",
            str(self.stop_file),
        ]
        for server in servers:
            cmd += ["--server", server]
        for key, value in self.options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.log = open(self.rig.tmp / f"worker-{self.source}.log", "ab")
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def records(self) -> list[dict[str, Any]]:
        return load(self.history_path)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 10) -> None:
        """Ask it to stop after its current job (stop file), then kill it if it does not."""
        if self.proc is None or self.proc.poll() is not None:
            return self._close()
        self.stop_file.touch()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)  # a paused worker could never see the file
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        if getattr(self, "log", None) is not None:
            self.log.close()
            self.log = None
