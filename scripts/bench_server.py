#!/usr/bin/env python3
"""Benchmark a PinLater server end to end with the CLI's load modes, per backend.

Starts throwaway storage (SQLite files, a redis-server with the chosen appendfsync, or a
durable mariadbd with innodb_flush_log_at_trx_commit=1) and a `pinlater-server` subprocess on
it, then runs `pinlater enqueue` and `pinlater dequeue` load modes (batch 100, concurrency 4 by
default) and prints jobs/s and p50/p99 for each. Loopback only; every process is stopped after.

    python scripts/bench_server.py --backend sqlite
    python scripts/bench_server.py --backend redis --fsync everysec
    python scripts/bench_server.py --backend mysql
    python scripts/bench_server.py --backend redis --runs 5   # median, min, max of 5 runs
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server_process import ServerProcess  # noqa: E402


@contextlib.contextmanager
def storage(kind: str, tmp: Path, fsync: str):
    """Yield (the `backend:` config section for one throwaway shard of `kind`, the storage
    process's PID or None when storage is embedded in the server)."""
    if kind == "sqlite":
        yield {"kind": "sqlite", "data_dir": str(tmp / "sqlite"), "shards": [{"name": "1"}]}, None
    elif kind == "redis":
        from tests.support.redis_env import running_server

        # the shipped queue-shard config (AOF, noeviction, index encoding), with this fsync
        with running_server(
            tmp / "redis",
            config_file=ROOT / "configs" / "redis-queue.conf",
            extra=["--appendfsync", fsync],
        ) as server:
            yield {"kind": "redis", "shards": [server.shard("r1")]}, server.proc.pid
    elif kind == "mysql":
        from tests.support.mysql_env import running_server

        with running_server(tmp / "mysql", flush_log_at_trx_commit=1) as server:
            yield {"kind": "mysql", "shards": [server.shard("m1")]}, server.proc.pid
    else:
        raise SystemExit(f"unknown backend {kind}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(server: ServerProcess, mode: str, queue: str, args, storage_pid: int | None) -> dict:
    """One CLI load run; the report gains the CPU ms that the server, the storage process and
    the load client each spent per 100 jobs (where the 2 cores go)."""
    cmd = [
        sys.executable,
        "-m",
        "pinlater.cli",
        "--host",
        server.host,
        "--port",
        str(server.port),
        "--json",
        mode,
        "--queue",
        queue,
        "--num_queries",
        str(args.jobs // args.batch),
        "--batch_size",
        str(args.batch),
        "--concurrency",
        str(args.concurrency),
    ]
    if mode == "dequeue" and args.piggyback:
        cmd.append("--piggyback")
    pids = {"server": server.pid, "storage": storage_pid}
    before = {name: cpu_seconds(pid) for name, pid in pids.items() if pid}
    started = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        cmd, check=True, capture_output=True, text=True, cwd=ROOT, timeout=600
    ).stdout
    finished = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]
    per_100 = 100_000 / max(report.get("jobs") or 1, 1)  # seconds -> ms per 100 jobs
    for name, cpu in before.items():
        report[f"cpu_{name}_ms"] = round((cpu_seconds(pids[name]) - cpu) * per_100, 2)
    client = (finished.ru_utime + finished.ru_stime) - (started.ru_utime + started.ru_stime)
    report["cpu_client_ms"] = round(client * per_100, 2)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "redis", "mysql"], default="sqlite")
    parser.add_argument(
        "--fsync", choices=["always", "everysec"], default="everysec", help="redis appendfsync"
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--piggyback",
        action="store_true",
        help="dequeue load acks on the next dequeue instead of a separate call",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="repeat on fresh storage and summarise jobs/s (median, min, max): "
        "a shared 2-core VM varies by +-20%% from run to run",
    )
    args = parser.parse_args()
    label = args.backend + (f" (appendfsync {args.fsync})" if args.backend == "redis" else "")
    print(
        f"backend {label}, batch {args.batch}, concurrency {args.concurrency}, "
        f"{args.jobs} jobs{', piggy-backed acks' if args.piggyback else ''}"
    )
    rates: dict[str, list[float]] = {"enqueue": [], "dequeue": []}
    for run in range(args.runs):
        if args.runs > 1:
            print(f"run {run + 1}")
        for mode, report in one_run(args).items():
            print(f"  {mode:8s} {_fmt(report)}")
            rates[mode].append(report["jobs_per_s"])
    if args.runs > 1:
        for mode, values in rates.items():
            print(
                f"{mode:8s} jobs/s over {args.runs} runs: median {statistics.median(values):.0f}"
                f", min {min(values):.0f}, max {max(values):.0f}"
            )
    return 0


def one_run(args) -> dict[str, dict]:
    """Fresh storage and server; the enqueue load, then the dequeue (+ack) load."""
    with tempfile.TemporaryDirectory(prefix="pinlater-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with storage(args.backend, tmp, args.fsync) as (backend, storage_pid):
            config = {"backend": backend, "janitor": {"enabled": False}}
            with ServerProcess(config, tmp / "server") as server:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pinlater.cli",
                        "--host",
                        server.host,
                        "--port",
                        str(server.port),
                        "create",
                        "--queue",
                        "bench",
                    ],
                    check=True,
                    capture_output=True,
                    cwd=ROOT,
                )
                return {
                    mode: load(server, mode, "bench", args, storage_pid)
                    for mode in ("enqueue", "dequeue")
                }


def _fmt(report: dict) -> str:
    keys = {k: report.get(k) for k in ("jobs_per_s", "p50_ms", "p99_ms", "jobs", "errors")}
    text = ", ".join(f"{k} {v}" for k, v in keys.items())
    cpu = [
        f"{name} {report[f'cpu_{name}_ms']}"
        for name in ("server", "storage", "client")
        if f"cpu_{name}_ms" in report
    ]
    return text + "\n           CPU ms per 100 jobs: " + ", ".join(cpu)


if __name__ == "__main__":
    raise SystemExit(main())
