"""Shards that come and go while the server runs, on every backend: a shard map file edited the
way an operator would, against the real App (in-process server, admin API, metrics).

Retiring a shard is refused while it holds unfinished jobs (log line, metrics, the old map
stays) and applies by itself once the shard is drained; a shard whose storage is dead is removed
without a single call to it; a shard is added live and takes jobs. Redis and MariaDB shards run
on throwaway servers (tests/support) and "dead" means the process was killed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pinlater.cli.main import main as cli_main
from pinlater.common.passwords import hash_password
from pinlater.idl import PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.admin_http import AdminHttp
from tests.support.operating import OperatingServer, sample

PASSWORD = "lifecycle-secret"
CTX = RequestContext(source="shard-lifecycle-test")
PENDING, IN_PROGRESS = 0, 1


class Cluster:
    """Where each test's shards live: `entry(name)` is a shard map entry; `kill(name)` stops
    the storage process of that shard (networked kinds only)."""

    def __init__(self, kind: str, tmp: Path, servers: list[Any]):
        self.kind, self.tmp, self.servers = kind, tmp, servers
        self.placement: dict[str, Any] = {}

    def entry(self, name: str, server: int = 0, **flags: Any) -> dict[str, Any]:
        if self.kind == "sqlite":
            return {"name": name, **flags}
        target = self.servers[server]
        self.placement[name] = target
        if self.kind == "redis":
            return {**target.shard(name), **flags}
        return target.shard(name, database_prefix=f"p{name}", **flags)

    def kill(self, name: str) -> None:
        self.placement[name].kill()


@contextlib.contextmanager
def cluster(kind: str, tmp: Path) -> Iterator[Cluster]:
    if kind == "sqlite":
        yield Cluster(kind, tmp, [])
        return
    if kind == "redis":
        from tests.support.redis_env import running_server
    else:
        from tests.support.mysql_env import running_server  # type: ignore[assignment]
    with running_server(tmp / "one") as one, running_server(tmp / "two") as two:
        yield Cluster(kind, tmp, [one, two])


class Lifecycle:
    """The running server, its shard map file and the calls the tests make."""

    def __init__(self, srv: OperatingServer, map_file: Path, cluster: Cluster):
        self.srv, self.map_file, self.cluster = srv, map_file, cluster
        self.client = srv.client()
        self.api = AdminHttp(srv.metrics_url, basic=PASSWORD)

    def write_map(self, entries: list[dict[str, Any]]) -> None:
        tmp = self.map_file.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump({"shards": entries}))
        tmp.replace(self.map_file)

    def shard_names(self) -> list[str]:
        return self.srv.app.store.shard_names()

    def enqueue(self, queue: str, n: int) -> list[str]:
        jobs = [T.PinLaterJob(body=b"j%d" % i) for i in range(n)]
        request = T.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)
        return list(self.client.enqueueJobs(CTX, request).jobDescriptors)

    def enqueue_until_on(self, queue: str, shard: str) -> list[str]:
        """Batches until one lands on `shard` (enqueue picks a random shard per batch)."""
        descriptors: list[str] = []
        for _ in range(200):
            descriptors += self.enqueue(queue, 3)
            if any(f":s{shard}:" in d for d in descriptors):
                return descriptors
        raise AssertionError(f"no batch landed on shard {shard}")

    def drain(self, queue: str) -> int:
        """Dequeue and ack until nothing is left; returns the jobs acked."""
        done = 0
        for _ in range(200):
            reply = self.client.dequeueJobs(
                CTX, T.PinLaterDequeueRequest(queueName=queue, limit=50)
            )
            if not reply.jobs:
                return done
            acks = [T.PinLaterJobAckInfo(jobDescriptor=d) for d in reply.jobs]
            self.client.ackDequeuedJobs(
                CTX, T.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks)
            )
            done += len(acks)
        raise AssertionError("the queue did not drain")

    def count(self, queue: str, state: int = PENDING) -> int:
        request = T.PinLaterGetJobCountRequest(queueName=queue, jobState=state)
        return self.client.getJobCount(CTX, request)

    def lookup_error(self, descriptor: str) -> str:
        with pytest.raises(PinLaterException) as raised:
            self.client.lookupJobs(CTX, T.PinLaterLookupJobRequest(jobDescriptors=[descriptor]))
        return raised.value.message

    def shard_calls(self, shard: str) -> float:
        """Storage calls made to `shard` so far, answered or failed."""
        families = self.srv.scrape()
        family = "pinlater_shard_call_duration_seconds"
        return sum(
            sample(families, family, f"{family}_count", shard=shard, result=result) or 0.0
            for result in ("ok", "error")
        )

    def wait_refused(self, shard: str) -> None:
        """Until a map dropping `shard` was refused (and it is still served)."""
        wait_for(lambda: self.metric("pinlater_shard_retire_refused", shard=shard) >= 1, "refusal")
        assert shard in self.shard_names()

    def metric(self, family: str, **labels: str) -> float:
        return sample(self.srv.scrape(), family, **labels) or 0.0


def wait_for(predicate, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def lifecycle(kind: str, tmp: Path, names: tuple[str, ...]) -> Iterator[Lifecycle]:
    with cluster(kind, tmp) as where:
        map_file = tmp / "shards.yaml"
        entries = [where.entry(name, server=i % 2) for i, name in enumerate(names)]
        map_file.write_text(yaml.safe_dump({"shards": entries}))
        config = {
            "backend": {"kind": kind, "shard_map_file": str(map_file)},
            "sharding": {
                "probe_interval_seconds": 0.05,
                "shard_map_retry_seconds": 0.2,
                "drain_count_interval_seconds": 0.1,
                "unhealthy_after_failures": 1,
                "retries": 0,
            },
            "admin": {"password_hash": hash_password(PASSWORD, iterations=1000)},
            # no background fan-out besides the duties under test (a dead shard's call count
            # must only move when something asks it)
            "metrics": {"depth_interval_seconds": 3600},
        }
        with OperatingServer(tmp, config) as srv:
            yield Lifecycle(srv, map_file, where)


KINDS = ["sqlite", "redis", "mysql"]
NETWORKED = ["redis", "mysql"]


@pytest.mark.parametrize("kind", KINDS)
def test_retire_is_refused_while_jobs_remain_and_applies_once_drained(kind, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="pinlater.ops.maintenance")
    with lifecycle(kind, tmp_path, ("a", "b")) as life:
        a, b = (life.cluster.entry(n, server=i) for i, n in enumerate("ab"))
        life.client.createQueue(CTX, "q")
        held = [d for d in life.enqueue_until_on("q", "b") if ":sb:" in d]
        # dropping a shard that still takes enqueues is refused outright
        life.write_map([a])
        life.wait_refused("b")
        assert "still takes enqueues" in caplog.text
        # drain it: dequeue_only applies, then the removal is refused while jobs remain
        life.write_map([a, {**b, "dequeue_only": True}])
        wait_for(lambda: life.srv.app.store.enqueue_candidates() == ["a"], "dequeue_only b")
        caplog.clear()
        refused_before = life.metric("pinlater_config_reload_errors", file="shard_map")
        life.write_map([a])
        wait_for(
            lambda: (
                life.metric("pinlater_config_reload_errors", file="shard_map") >= refused_before + 2
            ),
            "the refused map to be retried",
        )
        assert life.shard_names() == ["a", "b"]
        assert life.metric("pinlater_shard_map_pending") == 1
        refusals = [r for r in caplog.records if "not applied" in r.getMessage()]
        assert len(refusals) == 1, "one log line per refusal, not one per retry"
        assert "shard b still holds" in refusals[0].getMessage()
        assert "q: " in refusals[0].getMessage()
        assert_drain_visible(life, "b", {"q": len(held)})
        record = life.client.lookupJobs(CTX, T.PinLaterLookupJobRequest(jobDescriptors=held))
        assert set(record) == set(held)  # the jobs are served meanwhile
        # drained: the retried map applies with no further edit
        life.drain("q")
        wait_for(lambda: life.shard_names() == ["a"], "the retire to apply once drained")
        wait_for(lambda: life.metric("pinlater_shard_map_pending") == 0, "pending cleared")
        assert life.count("q") == 0
        assert "unknown shard 'b'" in life.lookup_error(held[0])


def assert_drain_visible(life: Lifecycle, shard: str, jobs: dict[str, int]) -> None:
    """The draining shard's unfinished jobs per queue in the metrics, the admin API and the CLI."""
    for queue, n in jobs.items():
        wait_for(
            lambda queue=queue, n=n: (
                life.metric("pinlater_shard_draining_jobs", shard=shard, queue=queue) == n
            ),
            "the drain gauge",
        )
    assert life.metric("pinlater_shard_drain_remaining", shard=shard) == sum(jobs.values())
    status, body, _ = life.api.get("/api/v1/shards")
    drain = {s["name"]: s["draining"] for s in body["shards"]}
    assert status == 200 and drain[shard]["jobs"] == jobs
    assert drain[shard]["total"] == sum(jobs.values())
    assert [name for name, d in drain.items() if d is None] == ["a"]  # a is not draining
    out = io.StringIO()
    argv = ["shards", "--metrics-url", life.srv.metrics_url, "--password", PASSWORD]
    assert cli_main(argv, out, io.StringIO()) == 0
    per_queue = ", ".join(f"{q}: {n}" for q, n in sorted(jobs.items()))
    assert f"{sum(jobs.values())} ({per_queue})" in out.getvalue()


@pytest.mark.parametrize("kind", KINDS)
def test_a_shard_added_live_gets_the_queues_and_takes_jobs(kind, tmp_path):
    with lifecycle(kind, tmp_path, ("a",)) as life:
        a = life.cluster.entry("a", server=0)
        life.client.createQueue(CTX, "q1")
        life.client.createQueue(CTX, "q2")
        before = life.enqueue("q1", 5)
        life.write_map([a, life.cluster.entry("c", server=1)])
        wait_for(lambda: life.shard_names() == ["a", "c"], "shard c to be added")
        assert life.srv.app.store.call("c", lambda s: s.queue_names()) >= {"q1", "q2"}
        after = life.enqueue_until_on("q2", "c")
        assert life.count("q1") == 5 and life.count("q2") == len(after)
        assert life.drain("q1") == len(before) and life.drain("q2") == len(after)


@pytest.mark.parametrize("kind", NETWORKED)
def test_a_dead_shard_holding_jobs_is_removed_only_as_retired_and_never_asked(
    kind, tmp_path, caplog
):
    with lifecycle(kind, tmp_path, ("a", "b")) as life:
        a, b = (life.cluster.entry(n, server=i) for i, n in enumerate("ab"))
        life.client.createQueue(CTX, "q")
        enqueued = life.enqueue_until_on("q", "b")
        held = [d for d in enqueued if ":sb:" in d]
        life.cluster.kill("b")
        with pytest.raises(PinLaterException):  # fan-out reads fail while b is in the map
            life.count("q")
        wait_for(lambda: not life.srv.app.store.health.is_healthy("b"), "b marked down")
        calls = life.shard_calls("b")
        life.write_map([a])
        life.wait_refused("b")
        assert "shard b is down and was not seen drained" in caplog.text
        life.write_map([a, {**b, "retired_with_jobs": True}])
        wait_for(lambda: life.shard_names() == ["a"], "the retired map to apply")
        assert life.shard_calls("b") == calls, "the dead shard was asked something"
        assert life.count("q") == len(enqueued) - len(held)  # counts answer again, without b
        message = life.lookup_error(held[0])
        assert "'b', retired with its jobs" in message and "unknown shard" not in message
        _, body, _ = life.api.get("/api/v1/server")
        assert body["backend"]["retired_with_jobs"] == ["b"]


@pytest.mark.parametrize("kind", NETWORKED)
def test_a_drained_shard_that_died_is_removed_without_being_asked(kind, tmp_path):
    with lifecycle(kind, tmp_path, ("a", "b")) as life:
        a, b = (life.cluster.entry(n, server=i) for i, n in enumerate("ab"))
        life.client.createQueue(CTX, "q")
        total = len(life.enqueue_until_on("q", "b"))
        life.write_map([a, {**b, "dequeue_only": True}])
        wait_for(lambda: life.srv.app.store.enqueue_candidates() == ["a"], "dequeue_only b")
        assert life.drain("q") == total
        drains = life.srv.app.drain
        wait_for(lambda: getattr(drains.get("b"), "total", None) == 0, "b seen drained")
        life.cluster.kill("b")
        wait_for(lambda: not life.srv.app.store.health.is_healthy("b"), "b marked down")
        calls = life.shard_calls("b")
        life.write_map([a])
        wait_for(lambda: life.shard_names() == ["a"], "the dead drained shard to be removed")
        assert life.shard_calls("b") == calls
        assert life.count("q") == 0
