#!/usr/bin/env python3
"""What many queues cost a server (issue 12, item 11): idle CPU, RSS and /metrics size with N
queues, and one worker's dequeue+ack latency while the depth collector and the janitor run.

Per backend, one real server process on throwaway storage (janitor and depth refresh every
--interval seconds, as in the report: 2 s): first one worker on one queue alone (the quiet
figures), then, for each count of --queues, that many more queues are created (empty), one
interval is let pass, and the server is watched idle for --seconds (CPU from /proc, RSS, one
/metrics scrape) and then under the worker for --seconds (p50/p99 of dequeue+ack). Printed side
by side per backend with the ratio to the quiet figures.

    python scripts/bench_many_queues.py                         # sqlite, 1000 and 2000 queues
    python scripts/bench_many_queues.py --backends sqlite,redis,mysql --queues 1000 --seconds 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pinlater.idl import RequestContext  # noqa: E402
from pinlater.idl import pinlater_thrift as t  # noqa: E402
from tests.support import ddl_load  # noqa: E402
from tests.support.server_process import ServerProcess, free_port  # noqa: E402

CTX = RequestContext(source="bench-many-queues")
TICKS = os.sysconf("SC_CLK_TCK")
MAX_QUEUES = 5000
MAX_SECONDS = 120.0
#: jobs put in the worker's queue ahead of a latency phase (refilled when it runs dry)
BACKLOG = 2000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape(server: ServerProcess) -> tuple[int, float]:
    """(/metrics bytes, seconds the scrape took)."""
    started = time.perf_counter()
    url = f"http://127.0.0.1:{server.config['metrics']['port']}/metrics"
    with urllib.request.urlopen(url, timeout=60) as response:
        size = len(response.read())
    return size, time.perf_counter() - started


def idle(server: ServerProcess, seconds: float) -> dict[str, float]:
    pid = server.pid
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    cores = (cpu_seconds(pid) - cpu0) / (time.monotonic() - wall0)
    size, took = scrape(server)
    return {"idle_cores": cores, "rss_mb": rss_mb(pid), "metrics_mb": size / 1e6, "scrape_s": took}


def worker(server: ServerProcess, queue: str, seconds: float) -> dict[str, float]:
    """One worker: dequeue one job, ack it, again; latency of each dequeue+ack pair."""
    client = server.client()
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            reply = client.dequeueJobs(CTX, t.PinLaterDequeueRequest(queueName=queue, limit=1))
            if not reply.jobs:
                client.enqueueJobs(CTX, ddl_load.enqueue_request(queue, BACKLOG, b"job"))
                continue
            acks = [t.PinLaterJobAckInfo(jobDescriptor=d) for d in reply.jobs]
            client.ackDequeuedJobs(
                CTX, t.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=acks)
            )
            latencies.append(time.perf_counter() - started)
    finally:
        client.close()
    latencies.sort()
    return {
        "pairs_per_s": len(latencies) / seconds,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


def create_queues(server: ServerProcess, names: list[str]) -> float:
    """Create `names` with 4 clients; return the seconds it took."""
    started = time.monotonic()
    chunks = [names[i::4] for i in range(4)]

    def create(chunk: list[str]) -> None:
        client = server.client(timeout=60)
        try:
            for name in chunk:
                client.createQueue(CTX, name)
        finally:
            client.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, chunks))
    return time.monotonic() - started


def run_backend(kind: str, counts: list[int], seconds: float, interval: float) -> list[dict]:
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix=f"bench-many-{kind}-") as tmp,
        ddl_load.one_shard(kind, Path(tmp)) as backend,
    ):
        config = ddl_load.ddl_config(backend)
        config["janitor"] = {"enabled": True, "interval_seconds": interval}
        config["metrics"] = {"port": free_port(), "depth_interval_seconds": interval}
        with ServerProcess(config, Path(tmp), start_timeout=60) as server:
            client = server.client()
            client.createQueue(CTX, "work")
            client.enqueueJobs(CTX, ddl_load.enqueue_request("work", BACKLOG, b"job"))
            client.close()
            time.sleep(interval)
            rows.append({"queues": 1, **idle(server, seconds), **worker(server, "work", seconds)})
            made = 0
            for count in counts:
                took = create_queues(server, [f"many{i}" for i in range(made, count)])
                made = count
                time.sleep(interval)
                row = {"queues": count + 1, "create_s": took, **idle(server, seconds)}
                row.update(worker(server, "work", seconds))
                rows.append(row)
    return rows


def show(kind: str, rows: list[dict]) -> None:
    quiet = rows[0]
    print(f"\n{kind}:")
    print(
        f"  {'queues':>6} {'idle cores':>10} {'RSS MB':>7} {'/metrics MB':>11} {'scrape s':>8} "
        f"{'pairs/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'p99 x quiet':>11}"
    )
    for row in rows:
        print(
            f"  {row['queues']:>6} {row['idle_cores']:>10.3f} {row['rss_mb']:>7.1f} "
            f"{row['metrics_mb']:>11.2f} {row['scrape_s']:>8.3f} {row['pairs_per_s']:>8.0f} "
            f"{row['p50_ms']:>7.2f} {row['p99_ms']:>7.2f} "
            f"{row['p99_ms'] / max(quiet['p99_ms'], 1e-9):>11.2f}"
            + (f"   (created in {row['create_s']:.1f} s)" if "create_s" in row else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite", help="comma list: sqlite,redis,mysql")
    parser.add_argument("--queues", default="1000,2000", help="comma list of queue counts")
    parser.add_argument("--seconds", type=float, default=10.0, help="each idle / worker phase")
    parser.add_argument("--interval", type=float, default=2.0, help="janitor and depth interval")
    args = parser.parse_args()
    counts = sorted(int(c) for c in args.queues.split(","))
    if not counts or counts[0] < 1 or counts[-1] > MAX_QUEUES:
        parser.error(f"--queues: counts from 1 to {MAX_QUEUES}")
    if not 0 < args.seconds <= MAX_SECONDS:
        parser.error(f"--seconds: more than 0, at most {MAX_SECONDS}")
    print(
        f"bench_many_queues: {args.seconds:g} s per phase, janitor and depth every "
        f"{args.interval:g} s, source {ROOT}"
    )
    for kind in args.backends.split(","):
        show(kind, run_backend(kind, counts, args.seconds, args.interval))


if __name__ == "__main__":
    main()
