"""F11: drain a shard and retire it under load, through the shard map file, and lose nothing.

Producers enqueue and a worker process works the whole time. The operator (this test) marks the
second shard `dequeue_only`, then removes it from the map while it still holds jobs: the server
must refuse (the log says so) and keep serving it, then apply the removal by itself once the
drain ends. At that moment the retired shard's own storage, read directly, must hold no
unfinished job of the queue (so nothing was left behind), and it must stay that way (nothing
writes to a shard out of the map). For the checker's final read the shard is put back
`dequeue_only`: what it reads there is the succeeded history, nothing the server could still
hand out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from backends import backend_class
from pinlater.ops.drain import unfinished_jobs
from pinlater.storage.contract import StorageLimits
from pinlater.storage.sharded import ShardedBackend

KINDS = ("sqlite", "redis", "mysql")


def _write_map(path: Path, entries: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"shards": entries}))
    tmp.replace(path)


def _unfinished_on(section: dict, entry: dict, queue: str) -> dict[str, int]:
    """Unfinished jobs of `queue` on one shard, read from its storage by this process."""
    cls = backend_class(section["kind"])
    raw = {k: v for k, v in section.items() if k not in ("kind", "shards")}
    options = cls.parse_options(raw, "backend")
    specs = cls.parse_shards([entry], options, "shards")
    store = ShardedBackend(cls(options, StorageLimits()), specs, num_priorities=3)
    try:
        held: dict[str, int] = {}
        for spec in specs:
            for name, n in unfinished_jobs(store, spec.name, cap=1_000_000).items():
                if name == queue:
                    held[spec.name] = n
        return held
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_f11_drain_and_retire_a_shard_under_load_loses_nothing(make_rig, kind):
    rig = make_rig("F11", kind)
    section = rig.storage.backend_section()
    first, second = section["shards"]
    map_file = rig.tmp / "shards.yaml"
    _write_map(map_file, [first, second])
    backend = {k: v for k, v in section.items() if k != "shards"}
    server = rig.start_server(
        backend={**backend, "shard_map_file": str(map_file)},
        sharding={
            "probe_interval_seconds": 0.2,
            "retries": 1,
            "shard_map_retry_seconds": 0.3,
            "drain_count_interval_seconds": 0.3,
        },
    )
    rig.create_queue()

    def reloads() -> int:
        return server.log().count("shard map reloaded")

    with rig.producers(2, pause=0.01):
        rig.wait_for(lambda: rig.ok_enqueues() >= 200, 30, "enqueues on both shards")
        _write_map(map_file, [first, {**second, "dequeue_only": True}])
        rig.wait_for(lambda: reloads() >= 1, 20, "the drain to start")
        rig.fault("drain")
        held = _unfinished_on(section, second, rig.queue)
        _write_map(map_file, [first])
        rig.wait_for(lambda: "not applied" in server.log(), 20, "the early retire refused")
        assert held, "the shard to retire held no job when the retire was asked (no test)"
        rig.fault("retire_refused")
        rig.spawn_worker("w1", limit=10, work_seconds=0.005)  # the drain starts now
        rig.wait_for(lambda: reloads() >= 2, 120, "the retire to apply once drained")
        rig.fault("retire")
        left = _unfinished_on(section, second, rig.queue)
        assert not left, f"retired while holding unfinished jobs: {left}"
        target = rig.ok_enqueues() + 100
        rig.wait_for(lambda: rig.ok_enqueues() >= target, 30, "enqueues after the retire")
    assert not _unfinished_on(section, second, rig.queue), "the retired shard changed"
    # the audit read: the retired shard's succeeded history, back read-only
    _write_map(map_file, [first, {**second, "dequeue_only": True}])
    rig.wait_for(lambda: reloads() >= 3, 20, "the audit map")
    report = rig.check()
    rig.finish(report, note=f"{sum(held.values())} jobs on the shard when the retire was asked")
