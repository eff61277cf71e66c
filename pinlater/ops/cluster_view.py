"""What the metrics say about clusters (config `clusters:`, pinlater/storage/clusters.py): which
cluster each shard and each queue belongs to, as info gauges, so existing series keep their
labels and a query joins on `shard` or `queue` to group by cluster."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

from pinlater.ops.metrics import GaugeCollector
from pinlater.storage.clusters import ClusterRouter


def cluster_gauges(router: ClusterRouter, max_queues: int) -> GaugeCollector:
    """Read at scrape time from the router's memory (no storage call): shard -> cluster,
    queue -> cluster (of at most `max_queues` queues by name; 0: no cap) and the queues whose
    `cluster:` setting names another cluster than the one holding them."""

    def read() -> list[GaugeMetricFamily]:
        shards = GaugeMetricFamily(
            "pinlater_shard_cluster", "1 for the cluster of each shard", labels=["shard", "cluster"]
        )
        for name in router.shard_names():
            shards.add_metric([name, router.cluster_of_shard(name) or ""], 1.0)
        queues = GaugeMetricFamily(
            "pinlater_queue_cluster",
            "1 for the cluster serving each known queue",
            labels=["queue", "cluster"],
        )
        for queue, cluster in sorted(router.homes().items())[: max_queues or None]:
            queues.add_metric([queue, cluster], 1.0)
        moves = GaugeMetricFamily(
            "pinlater_queue_cluster_move_pending",
            "1 for a queue whose `cluster:` setting names another cluster than the one holding "
            "it (it is served there until deleted)",
            labels=["queue", "cluster", "configured"],
        )
        for queue, (home, wanted) in router.moves_pending().items():
            moves.add_metric([queue, home, wanted], 1.0)
        return [shards, queues, moves]

    return GaugeCollector(read)
