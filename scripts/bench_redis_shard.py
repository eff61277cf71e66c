"""Rates of the Redis shard primitives with 100-job batches, on throwaway redis-servers.

    PYTHONPATH=. python scripts/bench_redis_shard.py [--jobs 20000] [--threads 1 4]

For each fsync policy (AOF everysec, AOF always) and client thread count, prints enqueue
jobs/s and dequeue+ack jobs/s (dequeue 100, then one ack call for the 100) as the client sees
them, and the time Redis spent inside the script per call (INFO commandstats), which does not
depend on client-side load. Never touches the system Redis.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.redis_backend import RedisBackend, RedisShardSpec
from pinlater.storage.claims import new_claim
from pinlater.storage.contract import StorageLimits
from pinlater.storage.models import Ack, ClaimMatch, NewJob
from tests.support.redis_env import RedisServer

BATCH = 100


def run_threads(threads: int, work) -> float:
    """Run work(i) on `threads` threads; return elapsed seconds."""
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - started


def server_usec_per_call(client) -> float:
    """Mean time Redis spent inside EVALSHA since the last reset (the script work alone)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    client.config_resetstat()
    return float(stats.get("usec_per_call", 0.0))


def bench(shard, client, jobs: int, threads: int) -> tuple[float, float, float, float]:
    queue = f"bench{threads}"
    shard.create_queue(queue)
    body = b"x" * 100
    per_thread = jobs // threads // BATCH

    def enqueue(_):
        for _ in range(per_thread):
            shard.enqueue(queue, [NewJob(body=body)] * BATCH)

    def drain(i):
        source = f"bench-{i}"
        for _ in range(per_thread * 2):  # bounded
            got = shard.dequeue(queue, 1, BATCH, new_claim(source))
            if not got:
                return
            shard.ack(queue, [Ack(1, j.local_id, ClaimMatch(source, j.claim)) for j in got], [])

    total = per_thread * threads * BATCH
    server_usec_per_call(client)
    enqueue_rate = total / run_threads(threads, enqueue)
    enqueue_usec = server_usec_per_call(client)
    drain_rate = total / run_threads(threads, drain)
    drain_usec = server_usec_per_call(client)  # mean of a dequeue call and an ack call
    shard.delete_queue(queue)
    return enqueue_rate, drain_rate, enqueue_usec, drain_usec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args(argv)
    print("client-observed jobs/s, and the time Redis spent per script call of 100 jobs")
    print(
        f"{'fsync':10} {'threads':>7} {'enqueue/s':>10} {'deq+ack/s':>10} "
        f"{'enq us/call':>12} {'deq|ack us/call':>16}"
    )
    for fsync in ("everysec", "always"):
        with tempfile.TemporaryDirectory() as tmp:
            server = RedisServer(Path(tmp), appendonly=True, appendfsync=fsync).start()
            backend = RedisBackend({}, StorageLimits())
            try:
                shard = backend.open_shard(RedisShardSpec(name="bench", port=server.port))
                for threads in args.threads:
                    enq, drain, enq_us, drain_us = bench(shard, server.client(), args.jobs, threads)
                    print(
                        f"{fsync:10} {threads:>7} {enq:>10,.0f} {drain:>10,.0f} "
                        f"{enq_us:>12,.0f} {drain_us:>16,.0f}"
                    )
                shard.close()
            finally:
                backend.close()
                server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
