"""The ledger audit: reads each queue's books on each shard in the background and exports
`pinlater_ledger_imbalance_jobs{queue}`, never on a request.

Work per pass is bounded: a pass reads at most `per_pass` (queue, shard) books (on SQL storage
a book counts the queue's jobs by state, in one snapshot), taking the pairs in turn, so every
book is read again after (queues x shards) / per_pass passes. The gauge of a queue is the sum
of the last imbalance read on each of its shards; a book that fails to read keeps its last
value (and `pinlater_ledger_audit_errors_total` grows); a queue that is gone drops out.
"""

from __future__ import annotations

import collections
import logging

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from pinlater.ops.metrics import GaugeCollector, Metrics
from pinlater.storage.errors import QueueNotFound
from pinlater.storage.ledger import LedgerBook

log = logging.getLogger(__name__)


class LedgerAudit:
    """`run_once()` reads the next `per_pass` books; the gauges read the last ones."""

    def __init__(self, store, metrics: Metrics, per_pass: int):
        self.store = store
        self.metrics = metrics
        self.per_pass = per_pass
        self._books: dict[tuple[str, str], LedgerBook] = {}
        self._todo: collections.deque[tuple[str, str]] = collections.deque()
        self.errors = Counter(
            "pinlater_ledger_audit_errors",
            "ledger audits that failed (last values kept)",
            registry=metrics.registry,
        )
        metrics.registry.register(GaugeCollector(self._families))

    def run_once(self) -> int:
        """Read up to `per_pass` books; starts a new round (the queues and shards that exist
        now) when the last one is done. Returns how many books it read."""
        if not self._todo and not self._new_round():
            return 0
        read = 0
        for _ in range(min(self.per_pass, len(self._todo))):
            queue, shard = self._todo.popleft()
            try:
                books = self.store.ledger(queue, [shard])
            except QueueNotFound:
                self._books.pop((queue, shard), None)
                continue
            except Exception as exc:  # noqa: BLE001 - a dead shard must not stop the audit
                self.errors.inc()
                log.debug("ledger of %s on shard %s not read: %s", queue, shard, exc)
                continue
            self._books[(queue, shard)] = books[shard]
            read += 1
        return read

    def _new_round(self) -> bool:
        try:
            queues = sorted(self.store.queue_names())
        except Exception as exc:  # noqa: BLE001
            self.errors.inc()
            log.warning("ledger audit: cannot list queues: %s", exc)
            return False
        store = self.store  # with clusters: the shards of each queue's cluster only
        pairs = [
            (q, s)
            for q in queues
            for s in store.shard_names()
            if store.cluster_of_shard(s) == store.cluster_of(q)
        ]
        for gone in set(self._books) - set(pairs):
            self._books.pop(gone, None)
        self._todo.extend(pairs)
        return bool(pairs)

    def imbalances(self) -> dict[str, int]:
        """queue -> the sum of the last imbalance read on each of its shards."""
        out: dict[str, int] = collections.defaultdict(int)
        for (queue, _), book in list(self._books.items()):
            out[queue] += book.imbalance
        return dict(out)

    def _families(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "pinlater_ledger_imbalance_jobs",
            "enqueued - deleted - purged minus the jobs present, summed over the queue's "
            "shards as last audited (0: the books balance; > 0: jobs missing)",
            labels=["queue"],
        )
        by_label: dict[str, int] = collections.defaultdict(int)
        for queue, value in self.imbalances().items():
            by_label[self.metrics.queues.label(queue)] += value
        for label, value in sorted(by_label.items()):
            family.add_metric([label], value)
        return [family]
