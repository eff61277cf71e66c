"""ClusterRouter: one store over several clusters (config `clusters:`), each a ShardedBackend of
its own backend kind (e.g. Redis for hot queues, MySQL for large durable ones), so one endpoint
serves every queue. It is the ShardedBackend API the handler and the background duties use,
dispatching per queue, and per shard for what names a shard.

Shard names are unique across clusters (checked at config load), so a job descriptor's shard
names its cluster: acks, lookups and every per-shard call go to that shard's cluster.

Where a queue lives: in the cluster that holds it. The router learns that by listing every
cluster's queues (`discover`: at start, periodically, and from every getQueueNames) and from
this server's createQueue/deleteQueue; a queue no cluster holds goes to its `cluster:` setting,
else to the default cluster. A setting naming another cluster than the one holding the queue
moves nothing: the queue (all its jobs) is served where it is, reported as a pending move
(`moves_pending`, logged once), until it is deleted there; a createQueue after that creates it
on the configured cluster. So a queue's jobs are always in one cluster, and every count, scan,
dequeue and lookup sees all of them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pinlater.common.sections import ConfigError
from pinlater.errors import InvalidRequest, PinLaterError, QueueNotFound
from pinlater.storage.contract import Backend, BodyFilter, ByteBudget, Shard, ShardSpec
from pinlater.storage.descriptors import JobDescriptor
from pinlater.storage.health import ShardHealth
from pinlater.storage.ledger import LedgerBook
from pinlater.storage.models import Ack, DequeuedJob, JobRecord, JobState, NewJob
from pinlater.storage.placement import Placement, QueuePlacement
from pinlater.storage.sharded import KeyedEnqueue, ShardedBackend

log = logging.getLogger(__name__)
T = TypeVar("T")


class ClusterRouter(ShardedBackend):
    """Several ShardedBackends (one per cluster) as one. Overrides every public method of
    ShardedBackend that reads its own shard set; the rest (ack, checkpoint, lookup,
    jobs_may_be_due, shift_shard_clocks) work unchanged through `shard` and `call`."""

    def __init__(self, clusters: Mapping[str, ShardedBackend], default: str):
        """`clusters` were built with one shared `signals` and `empty` (parked dequeues wait on
        one set of signals); no super().__init__: the clusters hold the shards."""
        self.clusters = dict(clusters)
        self.default = default
        self.cluster = None
        first = self.clusters[default]
        self.num_priorities = first.num_priorities
        self.signals, self.empty = first.signals, first.empty
        self.enqueue_backend = None
        self._owner: dict[str, str] = {}
        self._map_owners()
        for name, store in self.clusters.items():  # a cluster's shard map file may change
            store.reload_check = functools.partial(self._check_names, name)
            store.on_reloaded = self._map_owners
        self._lock = threading.Lock()
        self._homes: dict[str, str] = {}  # queue -> the cluster found holding it
        self._settings: dict[str, str] = {}  # queue -> its `cluster:` setting
        self._partitions: dict[str, int] = {}
        self._warned: set[tuple[str, str]] = set()
        self._epoch = 0  # +1 on every createQueue/deleteQueue: a listing taken before is stale
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="cluster-fanout")
        self.health = ClusterHealth(self)
        self.placement = ClusterPlacement(self)
        self.fifo = first.fifo  # one set of FIFO queues, whatever cluster serves each
        for store in self.clusters.values():
            store.fifo = self.fifo
        self.backend = ClusterBackends(self)

    # ---------------------------------------------------------------- routing

    def _map_owners(self) -> None:
        self._owner = {
            shard: name
            for name, store in self.clusters.items()
            for shard in [*store.shard_names(), *store.retired_shards()]
        }

    def _check_names(self, cluster: str, specs: Sequence[ShardSpec], retired: frozenset[str]):
        """A cluster's new shard map may not name another cluster's shards (a descriptor's
        shard must name one cluster); raises ConfigError, which refuses the map."""
        taken = [
            f"{name!r} (cluster {self._owner[name]})"
            for name in [*(s.name for s in specs), *sorted(retired)]
            if self._owner.get(name, cluster) != cluster
        ]
        if taken:
            raise ConfigError([f"shard names must be unique across clusters: {', '.join(taken)}"])

    def cluster_names(self) -> list[str]:
        return list(self.clusters)

    def cluster_of_shard(self, name: str) -> str | None:
        return self._owner.get(name)

    def cluster_of(self, queue: str) -> str:
        """The cluster holding `queue`, else the one its setting names, else the default."""
        home = self._homes.get(queue)
        return home if home is not None else self._settings.get(queue, self.default)

    def for_queue(self, queue: str) -> ShardedBackend:
        return self.clusters[self.cluster_of(queue)]

    def for_shard(self, name: str) -> ShardedBackend:
        cluster = self._owner.get(name)
        if cluster is None:
            raise InvalidRequest(f"job descriptor names unknown shard {name!r}")
        return self.clusters[cluster]

    def configure(self, settings: Mapping[str, str]) -> None:
        """Set every queue's `cluster:` (queues not named go to the default cluster)."""
        with self._lock:
            self._settings = dict(settings)
            self._warned.clear()
        self._apply_partitions()
        self._warn_moves()

    def homes(self) -> dict[str, str]:
        """queue -> the cluster found holding it (queues this server knows of)."""
        return dict(self._homes)

    def moves_pending(self) -> dict[str, tuple[str, str]]:
        """queue -> (cluster holding it, cluster its setting names) where the two differ."""
        homes, settings = dict(self._homes), self._settings
        return {
            queue: (home, settings.get(queue, self.default))
            for queue, home in sorted(homes.items())
            if home != settings.get(queue, self.default)
        }

    def discover(self) -> list[str]:
        """List every cluster's queues and learn where each queue lives; returns the clusters
        that did not answer (their queues keep what was known)."""
        found: dict[str, set[str]] = {}
        failed = []
        epoch = self._epoch
        for name, store in self.clusters.items():
            try:
                found[name] = store.queue_names()
            except PinLaterError as exc:  # a shard down: its queues keep what was known
                log.warning("cluster %s did not list its queues: %s", name, exc)
                failed.append(name)
        self._learn(found, epoch, complete=not failed)
        return failed

    def _learn(self, found: Mapping[str, set[str]], epoch: int, complete: bool) -> None:
        """Record where the listed queues live; with `complete` (every cluster answered),
        forget the queues none holds. Ignored when a queue was created or deleted since the
        listing began (`epoch`): it could bring back a deleted queue's old home."""
        holders: dict[str, list[str]] = {}
        for cluster, queues in found.items():
            for queue in queues:
                holders.setdefault(queue, []).append(cluster)
        with self._lock:
            if epoch != self._epoch:
                return
            before = dict(self._homes)
            if complete:
                self._homes = {}
            for queue, clusters in holders.items():
                self._homes[queue] = self._preferred(queue, clusters)
            changed = self._homes != before
        if changed:
            self._apply_partitions()
        self._warn_moves()

    def _preferred(self, queue: str, clusters: list[str]) -> str:
        """The home of a queue found in `clusters` (more than one only by accident: logged)."""
        if len(clusters) == 1:
            return clusters[0]
        wanted = self._settings.get(queue, self.default)
        home = wanted if wanted in clusters else sorted(clusters)[0]
        log.warning(
            "queue %s exists in clusters %s; served from %s (delete it from the others)",
            queue,
            ", ".join(sorted(clusters)),
            home,
        )
        return home

    def _warn_moves(self) -> None:
        for queue, (home, wanted) in self.moves_pending().items():
            if (queue, wanted) not in self._warned:
                self._warned.add((queue, wanted))
                log.warning(
                    "queue %s: its setting names cluster %s, but it lives in %s; it is served "
                    "from %s until it is deleted there (createQueue then places it on %s)",
                    queue,
                    wanted,
                    home,
                    home,
                    wanted,
                )

    def _apply_partitions(self) -> None:
        for name, store in self.clusters.items():
            store.placement.configure(
                {q: k for q, k in self._partitions.items() if self.cluster_of(q) == name}
            )

    # ---------------------------------------------------------------- shard set

    def shard_names(self) -> list[str]:
        return [name for store in self.clusters.values() for name in store.shard_names()]

    def shard_specs(self) -> list[ShardSpec]:
        return [spec for store in self.clusters.values() for spec in store.shard_specs()]

    def shard(self, name: str, for_enqueue: bool = False) -> Shard:
        return self.for_shard(name).shard(name, for_enqueue)

    def enqueue_candidates(self, queue: str | None = None) -> list[str]:
        if queue is not None:
            return self.for_queue(queue).enqueue_candidates(queue)
        return [n for store in self.clusters.values() for n in store.enqueue_candidates()]

    def read_shards(self, queue: str) -> list[str]:
        return self.for_queue(queue).read_shards(queue)

    def reload(self, specs: Sequence[ShardSpec], retired: Iterable[str] = ()) -> None:
        raise NotImplementedError("each cluster reloads its own shard map (its store's reload)")

    def retired_shards(self) -> frozenset[str]:
        return frozenset().union(*(s.retired_shards() for s in self.clusters.values()))

    def probe_unhealthy(self) -> list[str]:
        return [name for store in self.clusters.values() for name in store.probe_unhealthy()]

    def shift_clock(self, delta_ms: int) -> None:
        for store in self.clusters.values():
            store.shift_clock(delta_ms)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for store in self.clusters.values():
            store.close()

    @property
    def call_observer(self) -> Callable[[str, float, bool], None] | None:
        return self.clusters[self.default].call_observer

    @call_observer.setter
    def call_observer(self, observer: Callable[[str, float, bool], None] | None) -> None:
        for store in self.clusters.values():
            store.call_observer = observer

    @property
    def failure_observer(self) -> Callable[[str, Exception], None] | None:
        return self.clusters[self.default].failure_observer

    @failure_observer.setter
    def failure_observer(self, observer: Callable[[str, Exception], None] | None) -> None:
        for store in self.clusters.values():
            store.failure_observer = observer

    def call(
        self,
        name: str,
        op: Callable[[Shard], T],
        *,
        retries: int | None = None,
        for_enqueue: bool = False,
    ) -> T:
        return self.for_shard(name).call(name, op, retries=retries, for_enqueue=for_enqueue)

    # ---------------------------------------------------------------- queues

    def create_queue(self, queue: str) -> None:
        """In the cluster holding the queue; but a home that differs from the setting is
        checked first: another server may have moved the queue meanwhile (deleted it there and
        created it on the configured cluster), and creating it again in the old home would
        split it over two clusters."""
        cluster = self.cluster_of(queue)
        wanted = self._settings.get(queue, self.default)
        if cluster != wanted and queue not in self.clusters[cluster].queue_names():
            cluster = wanted
        self.clusters[cluster].create_queue(queue)
        with self._lock:
            self._homes[queue] = cluster
            self._epoch += 1

    def delete_queue(self, queue: str) -> None:
        self.for_queue(queue).delete_queue(queue)
        with self._lock:
            self._homes.pop(queue, None)
            self._epoch += 1

    def queue_names(self) -> set[str]:
        epoch = self._epoch
        found = {name: store.queue_names() for name, store in self.clusters.items()}
        self._learn(found, epoch, complete=True)
        return set().union(*found.values())

    def ledger(self, queue: str, shards: Iterable[str] | None = None) -> dict[str, LedgerBook]:
        if shards is None:
            return self.for_queue(queue).ledger(queue)
        books: dict[str, LedgerBook] = {}
        for name in shards:
            books.update(self.for_shard(name).ledger(queue, [name]))
        return books

    # ---------------------------------------------------------------- jobs

    def enqueue(self, queue: str, jobs: Sequence[NewJob]) -> list[JobDescriptor]:
        return self.for_queue(queue).enqueue(queue, jobs)

    def enqueue_keyed(
        self, queue: str, jobs: Sequence[NewJob], unique_window_ms: int
    ) -> KeyedEnqueue:
        return self.for_queue(queue).enqueue_keyed(queue, jobs, unique_window_ms)

    def dequeue(
        self,
        queue: str,
        limit: int,
        source: str,
        *,
        dry_run: bool = False,
        coverage: float = 1.0,
        acks: tuple[Sequence[tuple[str, Ack]], Sequence[tuple[str, Ack]]] | None = None,
        budget: ByteBudget | None = None,
    ) -> list[tuple[JobDescriptor, DequeuedJob]]:
        """On the queue's cluster; acks of another cluster's shards (the queue was deleted
        there and created here meanwhile) are applied on their own first, and where the queue
        is gone they are moot (its jobs went with it), not an error of this dequeue."""
        store = self.for_queue(queue)
        if acks is not None and not self._all_on(store, acks):
            with contextlib.suppress(QueueNotFound):
                self.ack(queue, *acks)
            acks = None
        return store.dequeue(
            queue, limit, source, dry_run=dry_run, coverage=coverage, acks=acks, budget=budget
        )

    def _all_on(self, store: ShardedBackend, acks) -> bool:
        names = {name for part in acks for name, _ in part}
        return all(self._owner.get(name) == store.cluster for name in names)

    def count(
        self,
        queue: str,
        state: JobState,
        priority: int | None,
        future: bool,
        cap: int,
        body_filter: BodyFilter | None,
    ) -> int:
        return self.for_queue(queue).count(queue, state, priority, future, cap, body_filter)

    def scan(
        self,
        queue: str,
        state: JobState,
        priority: int | None,
        future: bool,
        continuation: str,
        limit: int,
        body_filter: BodyFilter | None,
    ) -> tuple[list[tuple[JobDescriptor, JobRecord]], str]:
        store = self.for_queue(queue)
        return store.scan(queue, state, priority, future, continuation, limit, body_filter)

    def retry_failed(
        self, queue: str, priority: int, attempts: int, run_after_ms: int | None, limit: int
    ) -> int:
        return self.for_queue(queue).retry_failed(queue, priority, attempts, run_after_ms, limit)

    def delete_jobs(
        self, queue: str, state: JobState, priority: int, limit: int, body_filter: BodyFilter | None
    ) -> int:
        return self.for_queue(queue).delete_jobs(queue, state, priority, limit, body_filter)


class ClusterHealth(ShardHealth):
    """The health of every cluster's shards, each kept by its own cluster."""

    def __init__(self, router: ClusterRouter):
        super().__init__(1)
        self._router = router

    def _of(self, shard: str) -> ShardHealth:
        cluster = self._router.cluster_of_shard(shard)
        return self._router.clusters[cluster or self._router.default].health

    def is_healthy(self, shard: str) -> bool:
        return self._of(shard).is_healthy(shard)

    def record_success(self, shard: str) -> None:
        self._of(shard).record_success(shard)

    def record_failure(self, shard: str) -> None:
        self._of(shard).record_failure(shard)

    def mark_unhealthy(self, shard: str) -> None:
        self._of(shard).mark_unhealthy(shard)

    def unhealthy(self) -> list[str]:
        return [n for store in self._router.clusters.values() for n in store.health.unhealthy()]

    def forget(self, shard: str) -> None:
        self._of(shard).forget(shard)


class ClusterPlacement(Placement):
    """Each queue's partitions, kept by the placement of the cluster that serves it."""

    def __init__(self, router: ClusterRouter):
        super().__init__()
        self._router = router

    def _of(self, queue: str) -> Placement:
        return self._router.for_queue(queue).placement

    def shards_changed(self, specs: Sequence[ShardSpec]) -> None:
        raise NotImplementedError("each cluster's placement follows its own shard map")

    def configure(self, partitions: Mapping[str, int]) -> None:
        self._router._partitions = dict(partitions)
        self._router._apply_partitions()

    def observed(
        self,
        queue: str,
        generation: int,
        active: Iterable[str],
        held: Iterable[str],
        unknown: Iterable[str],
    ) -> bool:
        return self._of(queue).observed(queue, generation, active, held, unknown)

    def reopened(self, queue: str) -> None:
        self._of(queue).reopened(queue)

    def targets(self, queue: str) -> tuple[str, ...] | None:
        return self._of(queue).targets(queue)

    def dequeue_shards(self, queue: str) -> tuple[str, ...] | None:
        return self._of(queue).dequeue_shards(queue)

    def read_shards(self, queue: str) -> tuple[str, ...] | None:
        return self._of(queue).read_shards(queue)

    def to_check(self) -> list[tuple[str, int, tuple[str, ...]]]:
        return [c for s in self._router.clusters.values() for c in s.placement.to_check()]

    def snapshot(self) -> dict[str, QueuePlacement]:
        out: dict[str, QueuePlacement] = {}
        for store in self._router.clusters.values():
            out.update(store.placement.snapshot())
        return out


class ClusterBackends(Backend):
    """The clusters' backends as one, for what asks the store's `backend` (queue name limit)."""

    kind = "clusters"

    def __init__(self, router: ClusterRouter):
        default = router.clusters[router.default].backend
        super().__init__({}, default.limits)
        self._router = router

    @classmethod
    def parse_shards(cls, raw: Any, options: Mapping[str, Any], path: str) -> list[ShardSpec]:
        raise NotImplementedError("each cluster's backend parses its own shards")

    def open_shard(self, spec: ShardSpec) -> Shard:
        return self._router.for_shard(spec.name).backend.open_shard(spec)

    def queue_name_limit(self, shard_names: Sequence[str]) -> int | None:
        """The tightest limit of any cluster (a queue may be placed on any of them)."""
        limits = [
            store.backend.queue_name_limit(store.shard_names())
            for store in self._router.clusters.values()
        ]
        return min((limit for limit in limits if limit is not None), default=None)
