"""The prefetching broker across real server processes (issue 15 item 3): a broker killed with
kill -9 loses no job and uses no attempt of the jobs it had buffered (the janitor of another
server gives them back after the hold), SIGTERM gives them back at once, a job handed out from a
buffer stays an ordinary claim, and two servers split a queue's partitions evenly and take
over the partitions of one that dies. Leases are read from the storage itself."""

from __future__ import annotations

import contextlib
import importlib
import time

import pytest

from backends import backend_class
from pinlater.app import load_config
from pinlater.storage.contract import Shard
from tests.support.server_process import ServerProcess
from worker_sdk.client import PinLaterClient
from worker_sdk.models import JobState

SHARDS = ["1", "2", "3", "4"]
#: short holds and leases so that the tests wait seconds, not minutes
BROKER = {
    "default_prefetch": 50,
    "hold_seconds": 4,
    "idle_seconds": 2,
    "lease_seconds": 1.5,
    "renew_seconds": 0.3,
}
KINDS = ("sqlite", "redis", "mysql")


@pytest.fixture(params=KINDS)
def storage(request, tmp_path):
    """A backend section with the 4 shards of SHARDS on fresh storage of each kind."""
    kind = request.param
    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            section = {
                "kind": kind,
                "data_dir": str(tmp_path / "sqlite"),
                "shards": [{"name": name} for name in SHARDS],
            }
        else:
            env = importlib.import_module(f"tests.support.{kind}_env")
            running = stack.enter_context(env.running_server(tmp_path / kind))
            section = {"kind": kind, "shards": [running.shard(name) for name in SHARDS]}
        if not has_prefetch(section):
            pytest.skip(f"the {kind} backend has no prefetch primitives (Shard.prefetch) yet")
        yield section


def has_prefetch(section: dict) -> bool:
    config = load_config(env={}, overrides={"backend": section})
    return all(cls.prefetch is not Shard.prefetch for cls in _shard_classes(config))


def _shard_classes(config) -> list[type]:
    backend = backend_class(config.backend.kind)(config.backend.options, config.storage_limits())
    try:
        shards = [backend.open_shard(spec) for spec in config.backend.shards[:1]]
        for shard in shards:
            shard.close()
        return [type(shard) for shard in shards]
    finally:
        backend.close()


def start(stack, section: dict, tmp, name: str, *, broker=True, janitor=False) -> ServerProcess:
    config = {
        "backend": section,
        "janitor": {"enabled": janitor, "interval_seconds": 0.2},
        "broker": BROKER if broker else {},
    }
    return stack.enter_context(ServerProcess(config, tmp, name=name))


def client_of(server: ServerProcess) -> PinLaterClient:
    return PinLaterClient([f"{server.host}:{server.port}"], timeout=10)


@contextlib.contextmanager
def leases(section: dict):
    """`read(prefix)`: {(shard, name): owner} of the live leases on every shard."""
    config = load_config(env={}, overrides={"backend": section})
    backend = backend_class(config.backend.kind)(config.backend.options, config.storage_limits())
    shards = [backend.open_shard(spec) for spec in config.backend.shards]

    def read(prefix: str) -> dict[tuple[str, str], str]:
        return {
            (shard.name, name): owner
            for shard in shards
            for name, owner in shard.live_leases(prefix).items()
        }

    try:
        yield read
    finally:
        for shard in shards:
            shard.close()
        backend.close()


@contextlib.contextmanager
def unreserved(section: dict):
    """`take(queue)`: how many PENDING jobs of the queue storage itself would hand out (a dry
    run on every shard, straight to storage): reserved jobs read as PENDING (S-prefetch), so
    this is how a test tells them apart."""
    config = load_config(env={}, overrides={"backend": section})
    backend = backend_class(config.backend.kind)(config.backend.options, config.storage_limits())
    shards = [backend.open_shard(spec) for spec in config.backend.shards]

    def take(queue: str) -> int:
        return sum(len(shard.dequeue(queue, 1, 100, None)) for shard in shards)

    try:
        yield take
    finally:
        for shard in shards:
            shard.close()
        backend.close()


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def buffered_queue(server: ServerProcess, jobs: int, section: dict) -> tuple[str, list[str], str]:
    """A queue of `jobs` jobs with all but two reserved by `server`'s broker, one of those
    two dequeued before the broker owned anything (from storage) and one served from the
    buffer: (queue, descriptors, the buffered one's descriptor)."""
    queue = f"q{time.monotonic_ns()}"
    with client_of(server) as client:
        client.create_queue(queue)
        descriptors = client.enqueue(queue, [b"job-%d" % i for i in range(jobs)])
        assert client.dequeue(queue, 1), "the first dequeue is answered (from storage)"
        with unreserved(section) as take:
            wait_for(lambda: take(queue) == 0, 5, "the broker reserves every other job")
        served = client.dequeue(queue, 1)
        assert len(served) == 1
        time.sleep(0.3)  # its hand-out is written behind (5 ms)
    return queue, descriptors, served[0].descriptor


def attempts_untouched(client: PinLaterClient, descriptors: list[str], but: set[str]) -> None:
    infos = client.lookup(descriptors)
    for descriptor, info in infos.items():
        if descriptor in but:
            continue
        assert info.state == JobState.PENDING, (descriptor, info)
        assert info.attempts_remaining == info.attempts_allowed, (descriptor, info)


def test_kill_9_loses_nothing_and_uses_no_attempt(storage, tmp_path):
    with contextlib.ExitStack() as stack:
        broker = start(stack, storage, tmp_path, "broker")
        queue, descriptors, served = buffered_queue(broker, 12, storage)
        broker.kill()
        other = start(stack, storage, tmp_path, "janitor", broker=False, janitor=True)
        with client_of(other) as client, unreserved(storage) as take:
            handed = {d for d, i in client.lookup(descriptors).items() if i.state != 0}
            assert len(handed) == 2, "reserved jobs read as PENDING, handed-out ones not"
            assert take(queue) == 0, "the dead broker's jobs are still reserved"
            wait_for(
                lambda: take(queue) == 10,
                BROKER["hold_seconds"] + 5,
                "the janitor gives the buffered jobs back after the hold",
            )
            infos = client.lookup(descriptors)
            in_progress = {d for d, i in infos.items() if i.state == JobState.IN_PROGRESS}
            assert served in in_progress, "a handed-out job is an ordinary claim"
            assert len(in_progress) == 2
            attempts_untouched(client, descriptors, in_progress)
            assert len(client.dequeue(queue, 100)) == 10, "every job is there to dequeue"


def test_sigterm_gives_buffered_jobs_back_at_once(storage, tmp_path):
    with contextlib.ExitStack() as stack:
        broker = start(stack, storage, tmp_path, "broker")
        queue, descriptors, served = buffered_queue(broker, 12, storage)
        stopped_at = time.monotonic()
        assert broker.stop() == 0
        other = start(stack, storage, tmp_path, "reader", broker=False)  # no janitor anywhere
        with client_of(other) as client, unreserved(storage) as take:
            assert client.count(queue, JobState.PENDING) == 10
            assert take(queue) == 10, "released: storage hands them out again"
            assert time.monotonic() - stopped_at < BROKER["hold_seconds"], "before any hold"
            infos = client.lookup(descriptors)
            assert infos[served].state == JobState.IN_PROGRESS
            in_progress = {d for d, i in infos.items() if i.state == JobState.IN_PROGRESS}
            attempts_untouched(client, descriptors, in_progress)


def owners_by_server(read) -> dict[str, int]:
    counts: dict[str, int] = {}
    for owner in read("partition/").values():
        counts[owner] = counts.get(owner, 0) + 1
    return counts


def test_two_servers_split_partitions_and_one_takes_over(storage, tmp_path):
    with contextlib.ExitStack() as stack:
        a = start(stack, storage, tmp_path, "a")
        b = start(stack, storage, tmp_path, "b")
        read = stack.enter_context(leases(storage))
        queue = f"q{time.monotonic_ns()}"
        clients = [stack.enter_context(client_of(server)) for server in (a, b)]
        clients[0].create_queue(queue)

        def demand_and_split() -> dict[str, int] | None:
            for client in clients:
                client.dequeue(queue, 1)  # dequeues reach both servers: demand on each
            counts = owners_by_server(read)
            return counts if sorted(counts.values()) == [2, 2] else None

        split = wait_for(demand_and_split, 10, "4 partitions split 2 and 2")
        servers = set(read("server/").values())
        assert set(split) == servers and len(servers) == 2
        b.kill()

        def taken_over() -> bool:
            clients[0].dequeue(queue, 1)
            counts = owners_by_server(read)
            return len(counts) == 1 and sum(counts.values()) == len(SHARDS)

        wait_for(taken_over, BROKER["lease_seconds"] * 2 + 5, "a owns all 4 partitions")
        assert set(owners_by_server(read)) == set(read("server/").values()), "a, the live one"
        assert set(read("server/").values()) < servers
