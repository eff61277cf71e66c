"""Clusters (config `clusters:`, pinlater/storage/clusters.py) on two SQLite clusters through the
real App and handler: the config checks, where queues are created and served, descriptors
routed by their shard, and a `cluster:` change that moves nothing while the queue exists."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
import yaml

from pinlater.app import App, NotDurable, load_config
from pinlater.common.sections import ConfigError
from pinlater.idl import ErrorCode, RequestContext
from pinlater.idl import pinlater_thrift as T
from pinlater.ops.queue_settings import QueueConfigWatcher, parse_queue_config
from pinlater.storage.clusters import ClusterRouter
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.models import Ack, ClaimMatch, JobState
from pinlater.storage.sharded import ShardedBackend
from tests.conformance.faults import intercepted, lost_connection
from tests.conformance.wire import loopback_client
from tests.support.readme_blocks import blocks

CTX = RequestContext(source="clusters-test")
ROOT = Path(__file__).resolve().parents[2]


def sections(tmp_path, **extra) -> dict:
    return {
        "clusters": {
            "a": {"kind": "sqlite", "data_dir": str(tmp_path / "a"), "shards": [{"name": "a1"}]},
            "b": {
                "kind": "sqlite",
                "data_dir": str(tmp_path / "b"),
                "shards": [{"name": "b1"}, {"name": "b2"}],
            },
        },
        "default_cluster": "a",
        "janitor": {"enabled": False},
        **extra,
    }


def problems(overrides: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides=overrides)
    return info.value.problems


def write_queues(path, queues: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"queues": queues}))
    tmp.replace(path)


@pytest.fixture
def app_with(tmp_path):
    apps = []

    def build(queues: dict | None = None):
        extra = {}
        if queues is not None:
            path = tmp_path / "queues.yaml"
            write_queues(path, queues)
            extra["queue_config"] = str(path)
        app = App(load_config(env={}, overrides=sections(tmp_path, **extra)))
        apps.append(app)
        return app, loopback_client(app.handler)

    yield build
    for app in apps:
        app.close()


def enqueue(client, queue: str, *bodies: bytes) -> list[str]:
    jobs = [T.PinLaterJob(body=body) for body in bodies]
    request = T.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)
    return list(client.enqueueJobs(CTX, request).jobDescriptors)


def shard_of(descriptor: str) -> str:
    return descriptor.split(":")[1][1:]


def test_a_single_backend_config_builds_the_plain_store(tmp_path):
    config = load_config(env={}, overrides={"backend": {"data_dir": str(tmp_path)}})
    assert config.clusters == {} and config.default_cluster is None
    app = App(config)
    try:
        assert not isinstance(app.store, ClusterRouter)
        assert app.store.cluster_names() == [] and app.store.cluster_of("q") is None
    finally:
        app.close()


def test_clusters_config_takes_the_default_clusters_section_as_backend(tmp_path):
    config = load_config(env={"PINLATER_DATA_DIR": str(tmp_path)}, overrides=sections(tmp_path))
    assert list(config.clusters) == ["a", "b"] and config.default_cluster == "a"
    assert [s.name for s in config.backend.shards] == ["a1"]


def test_clusters_config_problems_are_reported_with_their_key_paths(tmp_path):
    bad = sections(tmp_path)
    bad["clusters"]["b"]["shards"] = [{"name": "a1"}]
    bad["clusters"]["c"] = {"kind": "nosuch"}
    bad["clusters"]["a"]["shard_map_file"] = str(tmp_path / "map.yaml")
    (tmp_path / "map.yaml").write_text("shards: [{name: a1}]")  # a's shards come from its map
    bad["default_cluster"] = "z"
    bad["backend"] = {"kind": "sqlite"}
    found = problems(bad)
    assert any("clusters.b.shards: shard name 'a1' is also in cluster 'a'" in p for p in found)
    assert any(p.startswith("clusters.c.kind:") for p in found)
    assert any(p.startswith("default_cluster: 'z' must name one of") for p in found)
    assert any("either `backend:` or `clusters:`" in p for p in found)
    assert problems({"default_cluster": "a"}) == ["default_cluster: only with `clusters:`"]


def test_a_queue_setting_must_name_a_configured_cluster(tmp_path):
    path = tmp_path / "queues.yaml"
    write_queues(path, {"q": {"cluster": "nope"}})
    found = problems(sections(tmp_path, queue_config=str(path)))
    assert found == [
        f"queue_config {path}: queues.q.cluster: 'nope' is not a configured cluster (a, b)"
    ]
    plain = {"backend": {"data_dir": str(tmp_path)}, "queue_config": str(path)}
    assert "the server config has no `clusters:`" in problems(plain)[0]


def test_queues_are_created_and_served_on_their_cluster(app_with):
    app, client = app_with({"cold": {"cluster": "b"}})
    store = app.store
    client.createQueue(CTX, "hot")
    client.createQueue(CTX, "cold")
    assert store.clusters["a"].queue_names() == {"hot"}
    assert store.clusters["b"].queue_names() == {"cold"}
    assert set(client.getQueueNames(CTX)) == {"hot", "cold"}
    hot = enqueue(client, "hot", b"h1", b"h2")
    cold = [d for _ in range(10) for d in enqueue(client, "cold", b"c")]
    assert {shard_of(d) for d in hot} == {"a1"}
    assert {shard_of(d) for d in cold} == {"b1", "b2"}
    lookup = client.lookupJobs(CTX, T.PinLaterLookupJobRequest(jobDescriptors=hot + cold[:2]))
    assert len(lookup) == 4
    count = T.PinLaterGetJobCountRequest(queueName="cold", jobState=JobState.PENDING.value)
    assert client.getJobCount(CTX, count) == 10
    got = client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="cold", limit=20))
    assert sorted(got.jobs) == sorted(cold)
    ack = T.PinLaterJobAckInfo
    client.ackDequeuedJobs(
        CTX,
        T.PinLaterJobAckRequest(
            queueName="cold", jobsSucceeded=[ack(jobDescriptor=d) for d in cold]
        ),
    )
    done = T.PinLaterGetJobCountRequest(queueName="cold", jobState=JobState.SUCCEEDED.value)
    assert client.getJobCount(CTX, done) == 10
    assert store.cluster_of("cold") == "b" and store.cluster_of_shard("b2") == "b"


def test_a_descriptor_naming_an_unknown_shard_is_refused(app_with):
    _, client = app_with()
    client.createQueue(CTX, "hot")
    with pytest.raises(T.PinLaterException) as info:
        client.lookupJobs(CTX, T.PinLaterLookupJobRequest(jobDescriptors=["hot:s9:p1:1"]))
    assert "unknown shard '9'" in info.value.message


def test_a_setting_that_moves_an_existing_queue_moves_nothing_until_it_is_deleted(app_with):
    app, client = app_with({"jobs": {"cluster": "a"}})
    store = app.store
    client.createQueue(CTX, "jobs")
    [old] = enqueue(client, "jobs", b"old")
    store.configure({"jobs": "b"})  # as a changed queue-config file would
    assert store.moves_pending() == {"jobs": ("a", "b")}
    [still] = enqueue(client, "jobs", b"still")
    assert shard_of(still) == "a1", "served where it lives"
    got = client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="jobs", limit=5))
    assert sorted(got.jobs) == sorted([old, still])
    store.delete_queue("jobs")
    assert store.moves_pending() == {}
    client.createQueue(CTX, "jobs")
    assert shard_of(enqueue(client, "jobs", b"new")[0]) in {"b1", "b2"}
    assert store.clusters["a"].queue_names() == set()


def test_after_a_restart_a_queue_is_found_where_it_lives(app_with, tmp_path):
    app, client = app_with({"jobs": {"cluster": "a"}})
    client.createQueue(CTX, "jobs")
    [old] = enqueue(client, "jobs", b"old")
    app.close()
    app, client = app_with({"jobs": {"cluster": "b"}})  # the file changed while it was down
    assert app.store.discover() == []
    assert app.store.cluster_of("jobs") == "a"
    got = client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="jobs", limit=5))
    assert list(got.jobs) == [old]


def test_the_example_config_and_the_readme_blocks_load():
    example = load_config(ROOT / "configs" / "clusters.yaml", env={})
    assert {name: c.kind for name, c in example.clusters.items()} == {
        "hot": "redis",
        "durable": "mysql",
    }
    assert [s.name for s in example.clusters["durable"].shards] == ["m1", "m1d1"]
    readme = (ROOT / "README.md").read_text()
    [server] = blocks(readme, "clusters")
    [queues] = blocks(readme, "clusters-queues")
    raw = yaml.safe_load(server)
    assert raw.pop("queue_config") == "queues.yaml"
    config = load_config(env={}, overrides=raw)
    assert config.default_cluster == "hot" and config.backend.kind == "redis"
    assert parse_queue_config(queues, "README").clusters() == {"ledger": "durable"}


@pytest.mark.parametrize("strict", ["a", "b"])
def test_require_durable_holds_per_cluster(tmp_path, strict):
    """Cluster b runs SQLite with synchronous NORMAL (a durability warning): only b's own
    `require_durable` refuses the start."""
    overrides = sections(tmp_path, metrics={"port": 0})
    overrides["clusters"]["b"]["synchronous"] = "NORMAL"
    overrides["clusters"][strict]["require_durable"] = True
    app = App(load_config(env={}, overrides=overrides))
    try:
        if strict == "b":
            with pytest.raises(NotDurable) as info:
                app.start_background()
            assert [w.split(":")[0] for w in info.value.warnings] == ["shard b1", "shard b2"]
        else:
            app.start_background()
            assert app.store.homes() == {}
    finally:
        app.close()


def test_requests_for_a_queue_never_call_the_other_clusters_shards(app_with):
    app, client = app_with({"cold": {"cluster": "b"}})
    client.createQueue(CTX, "hot")
    client.createQueue(CTX, "cold")
    methods = ("enqueue", "dequeue", "ack", "lookup", "count", "scan")
    with contextlib.ExitStack() as stack:
        calls = [
            stack.enter_context(intercepted(app.store, m, shards=["b1", "b2"])) for m in methods
        ]
        for _ in range(5):
            [d] = enqueue(client, "hot", b"h")
            assert client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="hot", limit=1)).jobs
            acks = [T.PinLaterJobAckInfo(jobDescriptor=d)]
            client.ackDequeuedJobs(
                CTX, T.PinLaterJobAckRequest(queueName="hot", jobsSucceeded=acks)
            )
            client.lookupJobs(CTX, T.PinLaterLookupJobRequest(jobDescriptors=[d]))
            client.getJobCount(CTX, T.PinLaterGetJobCountRequest(queueName="hot", jobState=2))
            client.scanJobs(CTX, T.PinLaterScanJobsRequest(queueName="hot", jobState=2, limit=10))
    assert sum(sum(c.count.values()) for c in calls) == 0


def test_a_failing_cluster_leaves_the_other_serving(app_with):
    app, client = app_with({"cold": {"cluster": "b"}})
    client.createQueue(CTX, "hot")
    client.createQueue(CTX, "cold")
    store = app.store
    with (
        intercepted(
            store, "enqueue", fail_with=lost_connection, shards=["b1", "b2"], keep_health=True
        ),
        intercepted(
            store, "dequeue", fail_with=lost_connection, shards=["b1", "b2"], keep_health=True
        ),
    ):
        codes = []
        for _ in range(20):  # until both b shards are out
            with pytest.raises(T.PinLaterException) as info:
                enqueue(client, "cold", b"c")
            codes.append(info.value.errorCode)
            if info.value.errorCode == ErrorCode.NO_HEALTHY_SHARDS:
                break
        assert codes[-1] == ErrorCode.NO_HEALTHY_SHARDS, codes
        assert not store.health.is_healthy("b1") and not store.health.is_healthy("b2")
        assert sorted(store.health.unhealthy()) == ["b1", "b2"]
        [d] = enqueue(client, "hot", b"h")
        got = client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="hot", limit=5))
        assert list(got.jobs) == [d] and store.health.is_healthy("a1")
        assert store.enqueue_candidates() == ["a1"]
    assert sorted(store.probe_unhealthy()) == ["b1", "b2"]
    assert shard_of(enqueue(client, "cold", b"back")[0]) in {"b1", "b2"}


def test_piggy_backed_acks_from_before_a_move_do_not_fail_the_dequeue(app_with):
    """A worker acks a job of the queue's old cluster with its next dequeue, after the queue
    was deleted there and created on the new one: the ack is moot, the dequeue is served."""
    app, client = app_with({"jobs": {"cluster": "a"}})
    client.createQueue(CTX, "jobs")
    [d] = enqueue(client, "jobs", b"old")
    client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="jobs", limit=1))
    old = JobDescriptor.parse(d)
    claim = app.store.lookup([old], include_body=False)[old].claim
    app.store.configure({"jobs": "b"})
    app.store.delete_queue("jobs")
    client.createQueue(CTX, "jobs")
    [c] = enqueue(client, "jobs", b"new")
    ack = Ack(old.priority, old.local_id, ClaimMatch(source="", claim=claim))
    got = app.store.dequeue("jobs", 5, "w", acks=([("a1", ack)], []))
    assert [str(g) for g, _ in got] == [c]


#: ShardedBackend methods the router inherits as they are: they reach storage only through
#: `shard`, `call` and `_fan_out` (routed per shard) and the shared signals and empty map
INHERITED = {"ack", "checkpoint", "lookup", "jobs_may_be_due", "shift_shard_clocks"}


def test_every_public_store_method_is_routed_or_known_to_work_through_the_shards():
    """A method added to ShardedBackend must be dispatched by ClusterRouter too (or, when it
    only uses `shard`/`call`, listed in INHERITED): inherited unchanged it would read a shard
    set the router does not have."""
    public = {
        name
        for name, value in vars(ShardedBackend).items()
        if not name.startswith("_") and callable(value)
    }
    routed = {name for name in vars(ClusterRouter) if name in public}
    assert public - routed - INHERITED == set()
    assert public >= INHERITED and not INHERITED & routed


def test_a_server_that_missed_a_move_creates_the_queue_where_the_setting_says(tmp_path):
    """Two servers on the same storage; the first moves `jobs` (delete on a, create on b) while
    the second still believes it lives on a: the second's createQueue must not bring it back
    on a, and its requests follow."""
    queues = tmp_path / "queues.yaml"
    write_queues(queues, {"jobs": {"cluster": "a"}})
    config = load_config(env={}, overrides=sections(tmp_path, queue_config=str(queues)))
    one, two = App(config), App(config)
    try:
        first, second = loopback_client(one.handler), loopback_client(two.handler)
        first.createQueue(CTX, "jobs")
        two.store.discover()
        assert two.store.cluster_of("jobs") == "a"
        for app in (one, two):
            app.store.configure({"jobs": "b"})
        one.store.delete_queue("jobs")
        first.createQueue(CTX, "jobs")
        second.createQueue(CTX, "jobs")  # stale: it still thinks a holds the queue
        assert one.store.clusters["a"].queue_names() == set()
        assert shard_of(enqueue(second, "jobs", b"x")[0]) in {"b1", "b2"}
    finally:
        one.close()
        two.close()


def test_each_cluster_reloads_its_own_shard_map_and_keeps_names_unique(tmp_path):
    shard_map = tmp_path / "b-shards.yaml"
    shard_map.write_text(yaml.safe_dump({"shards": [{"name": "b1"}]}))
    overrides = sections(tmp_path, metrics={"port": 0})
    overrides["clusters"]["b"]["shard_map_file"] = str(shard_map)
    del overrides["clusters"]["b"]["shards"]
    app = App(load_config(env={}, overrides=overrides))
    try:
        store, [watcher] = app.store, app.shard_map_watchers
        store.configure({"cold": "b"})
        store.create_queue("cold")
        shard_map.write_text(yaml.safe_dump({"shards": [{"name": "b1"}, {"name": "b3"}]}))
        assert watcher.check()
        assert store.shard_names() == ["a1", "b1", "b3"] and store.cluster_of_shard("b3") == "b"
        assert store.call("b3", lambda s: s.queue_names()) == {"cold"}
        shard_map.write_text(yaml.safe_dump({"shards": [{"name": "b1"}, {"name": "a1"}]}))
        assert not watcher.check()  # a1 is cluster a's: refused, the old map stays
        assert store.shard_names() == ["a1", "b1", "b3"] and store.cluster_of_shard("a1") == "a"
        refused = app.metrics.registry.get_sample_value(
            "pinlater_config_reload_errors_total", {"file": "shard_map"}
        )
        assert refused == 1
    finally:
        app.close()


def test_a_re_read_queue_config_naming_an_unknown_cluster_keeps_the_old_one(tmp_path):
    path = tmp_path / "queues.yaml"
    write_queues(path, {"q": {"cluster": "b"}})
    applied, errors = [], []
    watcher = QueueConfigWatcher(
        str(path), None, lambda c, n: applied.append(c.clusters()), errors.append, ["a", "b"]
    )
    write_queues(path, {"q": {"cluster": "nope"}, "other": {}})
    os.utime(path, (time.time() + 5, time.time() + 5))  # a new mtime whatever the clock
    assert not watcher.check()
    assert errors == ["queue_config"] and applied == [{"q": "b"}]
    assert watcher.config.clusters() == {"q": "b"}
