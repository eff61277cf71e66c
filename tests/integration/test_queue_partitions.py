"""`partitions: k` in the queue-config file, through the real App: the queue's jobs land on its
k shards only, the setting follows the file when it changes (old jobs still served), and a bad
value is refused like any bad queue-config file (the old one stays, the error is counted)."""

from __future__ import annotations

import time

import yaml

from pinlater.common.passwords import hash_password
from pinlater.idl import RequestContext
from pinlater.idl import pinlater_thrift as T
from pinlater.storage.placement import rendezvous
from tests.support.admin_http import AdminHttp
from tests.support.operating import OperatingServer, sample

CTX = RequestContext(source="partitions-test")
SHARDS = ("1", "2", "3", "4")
PASSWORD = "partitions-secret"


def wait_for(predicate, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def write(path, partitions) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"queues": {"thumbs": {"partitions": partitions}}}))
    tmp.replace(path)


def shards_of(client, n: int) -> set[str]:
    shards = set()
    for _ in range(n):
        request = T.PinLaterEnqueueRequest(queueName="thumbs", jobs=[T.PinLaterJob(body=b"x")])
        [descriptor] = client.enqueueJobs(CTX, request).jobDescriptors
        shards.add(descriptor.split(":")[1][1:])
    return shards


def placement(api: AdminHttp) -> dict:
    status, body, _ = api.get("/api/v1/queues/thumbs")
    assert status == 200, body
    return body["placement"]


def test_partitions_from_the_queue_config_place_the_queue_and_follow_the_file(tmp_path):
    queue_config = tmp_path / "queues.yaml"
    write(queue_config, 1)
    config = {
        "queue_config": str(queue_config),
        "sharding": {"placement_check_seconds": 0.1},
        "admin": {"password_hash": hash_password(PASSWORD, iterations=1000)},
    }
    with OperatingServer(tmp_path, config, shards=SHARDS) as srv:
        client = srv.client()
        client.createQueue(CTX, "thumbs")
        assert shards_of(client, 30) == set(rendezvous("thumbs", list(SHARDS), 1))
        [one] = rendezvous("thumbs", list(SHARDS), 1)
        api = AdminHttp(srv.metrics_url, basic=PASSWORD)
        wait_for(lambda: placement(api)["draining"] == [], "the first check")
        assert placement(api)["shards"] == [one]
        write(queue_config, 2)
        two = set(rendezvous("thumbs", list(SHARDS), 2))
        wait_for(lambda: set(srv.app.store.placement.targets("thumbs")) == two, "k=2")
        assert shards_of(client, 40) == two
        write(queue_config, 1)  # the second partition leaves: read until it is drained
        wait_for(lambda: placement(api)["shards"] == [one], "k=1 again")
        [other] = two - {one}
        assert placement(api)["draining_open"] == [other]
        write(queue_config, 2)
        wait_for(lambda: set(srv.app.store.placement.targets("thumbs")) == two, "k=2 again")
        write(queue_config, 0)  # refused: the file keeps k=2
        wait_for(
            lambda: (
                (sample(srv.scrape(), "pinlater_config_reload_errors", file="queue_config") or 0)
                >= 1
            ),
            "the refusal",
        )
        assert set(srv.app.store.placement.targets("thumbs")) == two
        request = T.PinLaterGetJobCountRequest(queueName="thumbs", jobState=0)
        assert client.getJobCount(CTX, request) == 70
