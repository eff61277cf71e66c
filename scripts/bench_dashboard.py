#!/usr/bin/env python3
"""The server cost of the dashboard's overview page with many queues: one refresh of `/ui/`
(what the page's auto-refresh fetches) against `GET /api/v1/queues?series=true` (the same data
as JSON), side by side in one run.

Starts a `pinlater-server` process on throwaway SQLite storage (or --backend redis|mysql), with
`--queues` queues (1,000 by default) each holding a few jobs, waits until the queue-depth
snapshot and the rate samples cover them, logs in, then fetches each URL `--requests` times,
interleaved, one at a time over loopback. Prints per URL the median and p90 wall time per
refresh, the server process's CPU seconds per refresh (from /proc/PID/stat, so the figure is
the server's own work whatever the client costs) and the answer's size. Then the rendering
alone (in this process, on the server's own data), idle and with every queue's chart busy.

    python scripts/bench_dashboard.py                      # 1,000 queues on SQLite
    python scripts/bench_dashboard.py --queues 200 --requests 30 --backend redis
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from http.cookies import SimpleCookie
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pinlater.common.passwords import hash_password  # noqa: E402
from pinlater.idl import RequestContext  # noqa: E402
from pinlater.idl import pinlater_thrift as T  # noqa: E402, N812
from pinlater.server.dashboard import pages  # noqa: E402
from pinlater.server.dashboard.app import OVERVIEW_MAX_ROWS  # noqa: E402
from tests.support.server_process import ServerProcess, free_port  # noqa: E402
from tests.support.storage import backend_section  # noqa: E402

PASSWORD = "bench"
CTX = RequestContext(source="bench-dashboard")
#: samples a chart holds once the history is full (dashboard.rate_samples' default)
FULL = 60
URLS = {"dashboard /ui/": "/ui/", "api /api/v1/queues": "/api/v1/queues?series=true"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "redis", "mysql"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        backend = stack.enter_context(backend_section(args.backend, Path(tmp)))
        port = free_port()
        config = {
            "backend": backend,
            "janitor": {"enabled": False},
            "admin": {"password_hash": hash_password(PASSWORD, iterations=1000)},
            "metrics": {"port": port, "depth_interval_seconds": 2},
            "dashboard": {"rate_sample_seconds": 1},
        }
        proc = stack.enter_context(ServerProcess(config, Path(tmp), name="bench"))
        started = time.monotonic()
        populate(proc, args.queues)
        print(
            f"{args.queues} queues with jobs in every tenth on {args.backend}: "
            f"{time.monotonic() - started:.1f} s to create"
        )
        cookie = login(port)
        wait_for_snapshot(port, cookie, args.queues)
        run(port, cookie, proc.pid, args.requests)
        render_busy(port, cookie, args.requests)


def populate(proc: ServerProcess, queues: int, threads: int = 4) -> None:
    """`queues` queues, every tenth holding three jobs (one per priority), made by `threads`
    clients at once."""

    def make(part: int) -> None:
        client = proc.client()
        try:
            for i in range(part, queues, threads):
                name = f"queue_{i:05d}"
                client.createQueue(CTX, name)
                if i % 10 == 0:
                    jobs = [T.PinLaterJob(body=b"job", priority=1 + j) for j in range(3)]
                    client.enqueueJobs(CTX, T.PinLaterEnqueueRequest(queueName=name, jobs=jobs))
        finally:
            client.close()

    workers = [threading.Thread(target=make, args=(part,)) for part in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def request(port: int, method: str, path: str, cookie: str = "", body: bytes = b""):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Cookie": cookie} if cookie else {}
    if body:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=body or None, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read(), dict(answer.getheaders())
    finally:
        conn.close()


def login(port: int) -> str:
    status, _, headers = request(port, "POST", "/ui/login", body=f"password={PASSWORD}".encode())
    assert status == 303, status
    return "pinlater_session=" + SimpleCookie(headers["Set-Cookie"])["pinlater_session"].value


def wait_for_snapshot(port: int, cookie: str, queues: int, timeout: float = 120) -> None:
    """Until the overview shows counts (not '…') for every queue."""
    deadline = time.monotonic() + timeout
    while True:
        status, body, _ = request(port, "GET", "/ui/", cookie)
        assert status == 200, status
        if body.count(b'data-queue="') == queues and "…".encode() not in body:
            return
        if time.monotonic() > deadline:
            raise SystemExit("the queue-depth snapshot never covered every queue")
        time.sleep(0.5)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(port: int, cookie: str, pid: int, n: int) -> None:
    walls: dict[str, list[float]] = {name: [] for name in URLS}
    cpus: dict[str, list[float]] = {name: [] for name in URLS}
    sizes: dict[str, int] = {}
    for _ in range(n):
        for name, path in URLS.items():  # interleaved: a busier moment hits both alike
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            status, body, _ = request(port, "GET", path, cookie)
            walls[name].append(time.perf_counter() - t0)
            cpus[name].append(cpu_seconds(pid) - cpu0)
            assert status == 200, (name, status)
            sizes[name] = len(body)
    print(f"{n} refreshes each, one at a time (CPU from /proc at {os.sysconf('SC_CLK_TCK')} Hz)")
    print(f"{'':22} {'median ms':>10} {'p90 ms':>8} {'CPU ms/refresh':>15} {'KiB':>7}")
    for name in URLS:
        wall = sorted(walls[name])
        print(
            f"{name:22} {statistics.median(wall) * 1000:10.1f} "
            f"{wall[int(0.9 * (len(wall) - 1))] * 1000:8.1f} "
            f"{sum(cpus[name]) / n * 1000:15.1f} {sizes[name] / 1024:7.0f}"
        )
    ratio = statistics.median(walls["dashboard /ui/"]) / statistics.median(
        walls["api /api/v1/queues"]
    )
    print(f"dashboard / api (median wall): {ratio:.2f}")


def render_busy(port: int, cookie: str, n: int) -> None:
    """The page's rendering alone (in this process) on the server's own overview data: idle as
    served, and with every queue busy (random non-zero rates in each of a full history's FULL
    samples), since an idle queue's chart is a cheap flat line."""
    status, body, _ = request(port, "GET", "/api/v1/queues?series=true", cookie)
    assert status == 200, status
    data = json.loads(body)
    _, body, _ = request(port, "GET", "/api/v1/server", cookie)
    server = json.loads(body)
    rng = random.Random(1)
    busy = json.loads(json.dumps(data))
    for queue in busy["queues"]:
        for event in list(queue["series"]):
            queue["series"][event] = [round(rng.uniform(0.2, 50), 3) for _ in range(FULL)]
        for event in queue["rates"]:
            queue["rates"][event] = {"1m": rng.uniform(0, 50), "5m": rng.uniform(0, 50)}
    for name, overview in (("idle", data), ("busy", busy)):
        samples = len(next(iter(overview["queues"][0]["series"].values())))
        times = []
        for _ in range(n):
            started = time.perf_counter()
            html = pages.overview(overview, server, "", OVERVIEW_MAX_ROWS)
            times.append(time.perf_counter() - started)
        print(
            f"render only, {len(overview['queues'])} {name} queues, {samples} samples each: "
            f"median {statistics.median(times) * 1000:.1f} ms, {len(html) / 1024:.0f} KiB"
        )


if __name__ == "__main__":
    main()
