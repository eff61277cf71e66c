"""Framework overhead: the Worker draining a pre-filled queue with a no-op handler, next to the
CLI's raw dequeue+ack load loop on the same server and data, per backend.

    PYTHONPATH=. python scripts/bench_worker.py [--backend sqlite|redis|mysql] [--jobs 50000]
        [--concurrency 100] [--modes cli cli-piggyback class process defaults]

Starts a throwaway `pinlater-server` on throwaway storage (SQLite in a temp dir, or the
redis-server / mariadbd instances of tests/support), and for each mode fills a fresh
queue with `--jobs` jobs (100-byte bodies, enqueued in batches of 1000), then drains it:
* cli:           `pinlater dequeue --num_queries jobs/100 --batch_size 100 --concurrency 4`
                 (dequeue 100, then one ack call), in its own process;
* cli-piggyback: the same with --piggyback (acks ride on the next dequeue, as the Worker's do);
* class:         `Worker(client, queue, noop, concurrency=C)` in this process, timed from
                 run() until every ack was sent;
* process:       `pinlater-worker --handler bench_worker:noop -c C` in its own process, timed
                 from spawn until the server counts every job SUCCEEDED (polled every 0.2 s);
* defaults:      the same with no tuning options at all (what users run; -c 4, prefetch).
Prints jobs/s per mode and checks that every job ended SUCCEEDED.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.server_process import ServerProcess  # noqa: E402
from tests.support.storage import KINDS, backend_section  # noqa: E402
from worker_sdk import JobState, PinLaterClient, Worker  # noqa: E402

BODY = b"x" * 100


def noop(job) -> None:
    """The benchmark handler: does nothing, succeeds."""


def fill(client: PinLaterClient, queue: str, jobs: int) -> None:
    client.create_queue(queue)
    for start in range(0, jobs, 1000):
        client.enqueue(queue, [BODY] * min(1000, jobs - start))


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def run_cli(servers: str, queue: str, jobs: int, piggyback: bool) -> float:
    cmd = [
        sys.executable,
        "-m",
        "pinlater.cli",
        "dequeue",
        "--servers",
        servers,
        "--queue",
        queue,
        "--num_queries",
        str(jobs // 100),
        "--batch_size",
        "100",
        "--concurrency",
        "4",
        "--json",
    ] + (["--piggyback"] if piggyback else [])
    out = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=900)
    summary = [
        json.loads(line)
        for line in out.stdout.splitlines()
        if line.startswith("{") and '"summary"' in line
    ]
    if out.returncode != 0 or not summary:
        raise RuntimeError(f"CLI failed ({out.returncode}): {out.stderr[-2000:]}")
    return summary[-1]["jobs_per_s"]


def run_class(client: PinLaterClient, queue: str, jobs: int, concurrency: int) -> float:
    worker = Worker(client, queue, noop, concurrency=concurrency, max_batch=concurrency)
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    started = time.perf_counter()
    thread.start()
    deadline = time.monotonic() + 900
    while worker.stats().acks_sent < jobs and time.monotonic() < deadline:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    worker.stop()
    thread.join(60)
    return worker.stats().acks_sent / elapsed


def run_process(
    client: PinLaterClient, servers: str, queue: str, jobs: int, concurrency: int | None
) -> float:
    """`concurrency` None: pinlater-worker's defaults."""
    tuning = (
        [] if concurrency is None else ["-c", str(concurrency), "--max-batch", str(concurrency)]
    )
    cmd = [
        sys.executable,
        "-m",
        "worker_sdk.worker_cli",
        "--queue",
        queue,
        "--handler",
        "bench_worker:noop",
        "--servers",
        servers,
        *tuning,
        "--no-status",
        "--log-level",
        "WARNING",
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=Path(__file__).parent, env=env())
    try:
        deadline = time.monotonic() + 900
        while client.count(queue, JobState.SUCCEEDED) < jobs and time.monotonic() < deadline:
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return jobs / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=KINDS, default="sqlite")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument(
        "--modes", nargs="+", default=["cli", "cli-piggyback", "class", "process", "defaults"]
    )
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        backend_section(args.backend, Path(tmp)) as backend,
        ServerProcess({"janitor": {"enabled": False}, "backend": backend}, Path(tmp)) as server,
    ):
        servers = f"{server.host}:{server.port}"
        with PinLaterClient(servers, source="bench-worker", pool_size=8) as client:
            results = {}
            for mode in args.modes:
                queue = f"bench_{mode.replace('-', '_')}"
                fill(client, queue, args.jobs)
                if mode.startswith("cli"):
                    rate = run_cli(servers, queue, args.jobs, mode == "cli-piggyback")
                elif mode == "class":
                    rate = run_class(client, queue, args.jobs, args.concurrency)
                else:
                    threads = None if mode == "defaults" else args.concurrency
                    rate = run_process(client, servers, queue, args.jobs, threads)
                done = client.count(queue, JobState.SUCCEEDED)
                results[mode] = rate
                print(f"{mode:14s} {rate:9.0f} jobs/s  ({done}/{args.jobs} SUCCEEDED)", flush=True)
    print(
        json.dumps(
            {
                "backend": args.backend,
                "jobs": args.jobs,
                "concurrency": args.concurrency,
                "jobs_per_s": {k: round(v) for k, v in results.items()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
