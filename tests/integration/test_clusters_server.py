"""Two clusters behind one real server process, configured as the README's example (config
`clusters:`, shards moved onto throwaway servers): a Redis cluster "hot" (the default) and a
MySQL cluster "durable", queues on each through one endpoint; the storage itself
shows where each queue's jobs are; /metrics and the admin API name the cluster; a `cluster:`
change in the queue-config file moves nothing until the queue is deleted."""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
import urllib.request

import yaml
from prometheus_client.parser import text_string_to_metric_families

from pinlater.cli.main import main as cli_main
from pinlater.common.passwords import hash_password
from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support import mysql_env, redis_env
from tests.support.admin_http import AdminHttp
from tests.support.dashboard_http import DashboardHttp
from tests.support.operating import sample
from tests.support.readme_blocks import blocks
from tests.support.server_process import REPO_ROOT, ServerProcess, free_port

CTX = RequestContext(source="clusters-server-test")
PASSWORD = "clusters-secret"


def write_queues(path, queues: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"queues": queues}))
    tmp.replace(path)


def wait_for(predicate, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def enqueue(client, queue: str, n: int) -> list[str]:
    jobs = [T.PinLaterJob(body=f"{queue}-{i}".encode()) for i in range(n)]
    request = T.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)
    return list(client.enqueueJobs(CTX, request).jobDescriptors)


def shards(descriptors) -> set[str]:
    return {d.split(":")[1][1:] for d in descriptors}


def round_trip(client, queue: str, n: int) -> set[str]:
    """Enqueue n jobs (one a batch: a batch goes to one shard), dequeue them all, ack them,
    and look them up: their shards."""
    stored = [d for _ in range(n) for d in enqueue(client, queue, 1)]
    got = client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=n + 5))
    assert sorted(got.jobs) == sorted(stored)
    acks = [T.PinLaterJobAckInfo(jobDescriptor=d) for d in stored]
    client.ackDequeuedJobs(CTX, T.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks))
    found = client.lookupJobs(CTX, T.PinLaterLookupJobRequest(jobDescriptors=stored))
    assert {info.jobState for info in found.values()} == {T.PinLaterJobState.SUCCEEDED}
    return shards(stored)


def readme_config(redis, mysql) -> tuple[dict, str]:
    """The README's cluster config with its shards on the throwaway servers (names kept), and
    its queue-config block."""
    readme = (REPO_ROOT / "README.md").read_text()
    [server] = blocks(readme, "clusters")
    [queues] = blocks(readme, "clusters-queues")
    config = yaml.safe_load(server)
    on = {"hot": redis.shard, "durable": mysql.shard}
    for name, section in config["clusters"].items():
        section["shards"] = [on[name](shard["name"]) for shard in section["shards"]]
    return config, queues


def test_one_server_serves_a_redis_and_a_mysql_cluster(tmp_path):
    metrics_port = free_port()
    with (
        redis_env.running_server(tmp_path / "redis") as redis,
        mysql_env.running_server(tmp_path / "mariadb") as mysql,
    ):
        config, queues = readme_config(redis, mysql)
        queue_config = tmp_path / config["queue_config"]
        queue_config.write_text(queues)
        config.update(
            {
                "queue_config": str(queue_config),
                "janitor": {"enabled": False},
                "metrics": {"port": metrics_port},
                "admin": {"password_hash": hash_password(PASSWORD, iterations=1000)},
                "sharding": {"placement_check_seconds": 0.2},
            }
        )
        server = ServerProcess(config, tmp_path).start()
        try:
            _exercise(server, metrics_port, queue_config, redis, mysql)
        finally:
            server.stop()


def _exercise(server, metrics_port, queue_config, redis, mysql) -> None:
    assert "cluster hot (redis) [r1, r2] default" in server.log()
    client = server.client()
    try:
        _serve(client, metrics_port, queue_config, redis, mysql)
    finally:
        client.close()


def _serve(client, metrics_port, queue_config, redis, mysql) -> None:
    client.createQueue(CTX, "clicks")
    client.createQueue(CTX, "ledger")
    assert set(client.getQueueNames(CTX)) == {"clicks", "ledger"}
    assert round_trip(client, "clicks", 20) == {"r1", "r2"}
    assert round_trip(client, "ledger", 20) == {"m1", "m2"}
    # the storage agrees: clicks only in Redis, ledger only in MariaDB
    with contextlib.closing(redis.client()) as raw:
        for shard in ("r1", "r2"):
            assert raw.hkeys(f"pl:{shard}:queues") == [b"clicks"]
        keys = {k.decode() for k in raw.keys("pl:*")}
    assert any(":q:clicks:" in k for k in keys) and not any(":q:ledger:" in k for k in keys)
    databases = {row[0] for row in mysql.query("SHOW DATABASES LIKE 'plq\\_m%'")}
    assert {"plq_m1_ledger", "plq_m2_ledger"} <= databases
    assert not any("clicks" in d for d in databases)
    _check_metrics(metrics_port)
    _check_admin(metrics_port)
    _check_cli_and_dashboard(metrics_port)
    _move(client, queue_config, metrics_port)


def _check_metrics(metrics_port: int) -> None:
    families = scrape(metrics_port)
    assert sample(families, "pinlater_shard_cluster", shard="r2", cluster="hot") == 1
    assert sample(families, "pinlater_shard_cluster", shard="m1", cluster="durable") == 1
    assert sample(families, "pinlater_queue_cluster", queue="ledger", cluster="durable") == 1
    assert sample(families, "pinlater_queue_cluster", queue="clicks", cluster="hot") == 1
    # existing series keep their names and labels
    assert sample(families, "pinlater_shard_healthy", shard="m2", dequeue_only="false") == 1


def _check_admin(metrics_port: int) -> None:
    api = AdminHttp(f"http://127.0.0.1:{metrics_port}", basic=PASSWORD)
    status, body, _ = api.get("/api/v1/shards")
    assert status == 200, body
    assert {s["name"]: s["cluster"] for s in body["shards"]} == {
        "r1": "hot",
        "r2": "hot",
        "m1": "durable",
        "m2": "durable",
    }
    status, body, _ = api.get("/api/v1/queues/ledger")
    assert status == 200 and body["cluster"] == "durable", body
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/health", timeout=5) as reply:
        health = json.loads(reply.read())
    assert {s["name"]: s["cluster"] for s in health["shards"]}["m2"] == "durable"
    status, body, _ = api.get("/api/v1/server")
    assert body["backend"]["clusters"] == {"hot": "redis", "durable": "mysql"}


def _check_cli_and_dashboard(metrics_port: int) -> None:
    ui = DashboardHttp(f"http://127.0.0.1:{metrics_port}")
    assert ui.login(PASSWORD)[0] == 303
    status, html, _ = ui.get("/ui/shards")
    row = re.search(r'<tr data-shard="m2">.*?</tr>', html, re.S)
    assert status == 200 and row and "cluster durable" in row.group()
    out = io.StringIO()
    argv = ["shards", "--metrics-url", f"http://127.0.0.1:{metrics_port}", "--password", PASSWORD]
    assert cli_main(argv, out, io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["cluster", "shard"]
    assert sorted(line.split()[:2] for line in lines[1:]) == [
        ["durable", "m1"],
        ["durable", "m2"],
        ["hot", "r1"],
        ["hot", "r2"],
    ]


def _move(client, queue_config, metrics_port: int) -> None:
    """`clicks` set to cluster durable while it holds a job: served from hot until deleted."""
    [waiting] = enqueue(client, "clicks", 1)
    write_queues(queue_config, {"ledger": {"cluster": "durable"}, "clicks": {"cluster": "durable"}})
    wait_for(
        lambda: (
            sample(
                scrape(metrics_port),
                "pinlater_queue_cluster_move_pending",
                queue="clicks",
                cluster="hot",
                configured="durable",
            )
            == 1
        ),
        "the pending move",
    )
    more = [d for _ in range(5) for d in enqueue(client, "clicks", 1)]
    assert shards(more) <= {"r1", "r2"}, "still served from hot"
    count = T.PinLaterGetJobCountRequest(queueName="clicks", jobState=T.PinLaterJobState.PENDING)
    assert client.getJobCount(CTX, count) == 6
    assert (
        waiting
        in client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="clicks", limit=9)).jobs
    )
    client.deleteQueue(CTX, "clicks", PASSWORD)
    client.createQueue(CTX, "clicks")
    # one job a batch, each to a random healthy shard: 24 all on one shard by chance: 2**-23
    spread = shards(d for _ in range(24) for d in enqueue(client, "clicks", 1))
    families = scrape(metrics_port)
    health = {s: sample(families, "pinlater_shard_healthy", shard=s) for s in ("m1", "m2")}
    assert spread == {"m1", "m2"}, f"enqueues went to {spread} only; shard health {health}"
    assert sample(families, "pinlater_queue_cluster", queue="clicks", cluster="durable") == 1
    assert sample(families, "pinlater_queue_cluster_move_pending", queue="clicks") is None
