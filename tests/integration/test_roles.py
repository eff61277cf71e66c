"""Enqueue isolated from dequeue: `server.role` (`--role`, PINLATER_ROLE) splits the servers
into an enqueue pool and a dequeue pool over the same storage, and in role `all` enqueues have
handler slots of their own, so requests stuck on the dequeue path never delay them."""

from __future__ import annotations

import contextlib
import importlib
import threading
import time

import pytest

from pinlater.app import App, load_config
from pinlater.common.sections import ConfigError
from pinlater.errors import DequeueRateLimited, EnqueueRejected, PinLaterError
from pinlater.storage.models import NewJob
from tests.support.operating import OperatingServer
from tests.support.server_process import ServerProcess
from worker_sdk.client import PinLaterClient
from worker_sdk.models import AckInfo, Acks, JobState


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    """An enqueue-role server (`--role enqueue`) and a dequeue-role one (PINLATER_ROLE) on one
    SQLite data dir."""
    tmp = tmp_path_factory.mktemp("roles")
    config = {"janitor": {"enabled": False}}
    data = tmp / "data"
    with (
        ServerProcess(
            config, tmp, data_dir=data, name="enq", extra_args=("--role", "enqueue")
        ) as enqueue,
        ServerProcess(
            config, tmp, data_dir=data, name="deq", env={"PINLATER_ROLE": "dequeue"}
        ) as dequeue,
    ):
        clients = (
            PinLaterClient([f"{enqueue.host}:{enqueue.port}"], retries=0),
            PinLaterClient([f"{dequeue.host}:{dequeue.port}"], retries=0),
        )
        yield clients
        for client in clients:
            client.close()


def test_each_pool_answers_its_side_and_refuses_the_other_naming_its_role(pools):
    enqueue, dequeue = pools
    enqueue.create_queue("split")
    [d] = enqueue.enqueue("split", [b"job"])
    with pytest.raises(EnqueueRejected, match="role dequeue"):
        dequeue.enqueue("split", [b"not here"])
    with pytest.raises(DequeueRateLimited, match="role enqueue"):
        enqueue.dequeue("split", 5)
    [job] = dequeue.dequeue("split", 5)
    assert job.descriptor == d
    # reads and admin calls answer on both
    for client in pools:
        assert "split" in client.queue_names()
        assert client.lookup([d])[d].state is JobState.IN_PROGRESS
    # a refused dequeue still applies its piggy-backed acks, as any refused dequeue does
    acks = Acks(succeeded=(AckInfo(d, claim=job.claim),))
    with pytest.raises(DequeueRateLimited):
        enqueue.dequeue("split", 5, acks)
    assert dequeue.lookup([d])[d].state is JobState.SUCCEEDED


def test_an_unknown_role_is_refused_before_the_server_starts():
    with pytest.raises(ConfigError, match=r"server\.role"):
        load_config(env={"PINLATER_ROLE": "broker"})


class StuckAcks:
    """Every storage ack of `store` waits until `release()` (requests on the worker slots)."""

    def __init__(self, store) -> None:
        self.entered = threading.Semaphore(0)
        self._go = threading.Event()
        self._shards = [store.shard(name) for name in store.shard_names()]
        for shard in self._shards:
            shard.ack = self._wrap(shard.ack)

    def _wrap(self, real):
        def ack(*args, **kwargs):
            self.entered.release()
            self._go.wait(30)
            return real(*args, **kwargs)

        return ack

    def release(self) -> None:
        self._go.set()
        for shard in self._shards:
            del shard.ack


@pytest.mark.parametrize("own_slots", [8, 0])
def test_enqueues_have_slots_no_stuck_request_can_take(tmp_path, own_slots):
    """Both worker slots held by requests stuck in storage: an enqueue is still answered when
    enqueues have slots of their own, and waits for a slot when they share them."""
    settings = {"server": {"worker_threads": 2, "enqueue_worker_threads": own_slots}}
    settings["admission"] = {"max_concurrent_dequeues": 1}
    with OperatingServer(tmp_path, settings) as srv:
        address = [f"{srv.host}:{srv.port}"]
        client = PinLaterClient(address, retries=0, pool_size=4, timeout=30)
        client.create_queue("q")
        client.enqueue("q", [b"a", b"b"])
        claimed = client.dequeue("q", 2)
        stuck = StuckAcks(srv.app.store)
        acking = [
            threading.Thread(
                target=client.ack,
                args=("q",),
                kwargs={"succeeded": [AckInfo(job.descriptor, claim=job.claim)]},
            )
            for job in claimed
        ]
        for thread in acking:
            thread.start()
        for _ in acking:  # both worker slots are held now
            assert stuck.entered.acquire(timeout=10)
        done = threading.Event()
        enqueuer = threading.Thread(target=lambda: (client.enqueue("q", [b"c"]), done.set()))
        enqueuer.start()
        answered = done.wait(5)
        stuck.release()
        for thread in [*acking, enqueuer]:
            thread.join(30)
        client.close()
    assert answered is (own_slots > 0)
    assert done.is_set(), "answered once the slots were free"


def test_an_enqueue_role_server_parks_nothing_and_a_dequeue_role_one_long_polls(pools):
    enqueue, dequeue = pools
    enqueue.create_queue("lp_split")
    parked: dict = {}
    waiter = threading.Thread(
        target=lambda: parked.update(jobs=dequeue.dequeue("lp_split", 1, wait_ms=15_000))
    )
    waiter.start()
    time.sleep(0.5)
    [d] = enqueue.enqueue("lp_split", [b"across the pools"])
    waiter.join(10)
    assert [j.descriptor for j in parked["jobs"]] == [d], "the dequeue pool saw it"


def _hold_every_connection(kind: str, shard, size: int) -> contextlib.AbstractContextManager:
    """Take every pooled storage connection of `shard` (what a dequeue storm stuck in storage
    does) until the block ends."""
    stack = contextlib.ExitStack()
    for _ in range(size):
        if kind == "mysql":
            stack.enter_context(shard._connection())
        else:
            conn = shard._pool.get_connection()
            stack.callback(shard._pool.release, conn)
    return stack


@pytest.mark.parametrize("kind", ["mysql", "redis"])
@pytest.mark.parametrize("role", ["all", "enqueue"])
def test_enqueues_have_storage_connections_no_stuck_request_can_take(tmp_path, kind, role):
    """Every pooled connection of a shard held: in role all an enqueue is stored through its
    own connections; in role enqueue (one pool, as before) it gets none (MySQL waits for one,
    Redis gives up after its connect timeout)."""
    env = importlib.import_module(f"tests.support.{kind}_env")
    with env.running_server(tmp_path / kind) as storage:
        size = 2
        shard = storage.shard("s1", **({"pool_size": size} if kind == "mysql" else {}))
        if kind == "redis":
            shard["max_connections"] = size
        config = load_config(
            env={},
            overrides={"backend": {"kind": kind, "shards": [shard]}, "server": {"role": role}},
        )
        app = App(config)
        try:
            store = app.store
            store.create_queue("q")
            done = threading.Event()

            def enqueue() -> None:
                with contextlib.suppress(PinLaterError):  # no connection came: refused
                    store.enqueue("q", [NewJob(b"x")])
                    done.set()

            with _hold_every_connection(kind, store.shard("s1"), size):
                enqueuer = threading.Thread(target=enqueue, daemon=True)
                enqueuer.start()
                stored_while_held = done.wait(5)
            enqueuer.join(30)
            assert stored_while_held is (role == "all")
            store.health.forget("s1")  # a refused call may have taken the shard out a while
            store.enqueue("q", [NewJob(b"y")])  # and with the connections back, as ever
        finally:
            app.close()
