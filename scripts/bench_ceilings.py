#!/usr/bin/env python3
"""Each backend through the server next to its own ceiling without the server, interleaved.

    PYTHONPATH=. python scripts/bench_ceilings.py [--runs 5] [--jobs 50000]
        [--backends sqlite redis mysql] [--modes enqueue dequeue] [--client lean|cli]
        [--no-background] [--base CHECKOUT] [--json FILE]
        [--no-worker | --worker-baseline DIR]

One invocation starts, per backend, throwaway storage (SQLite files; a redis-server with the
shipped queue config and `appendfsync everysec`; a mariadbd with
innodb_flush_log_at_trx_commit=1) and one `pinlater-server` on it (janitor and queue-depth
collector on, as shipped, unless --no-background), then runs `--runs` rounds on that same
server and storage. Each round, per backend, side by side:

* enqueue: load through the server (batch 100, 4 client threads), and the ceiling
  (scripts/ceiling_direct.py: the storage driven from 4 threads of this process without the
  server: SQLite shard primitives, Redis scripts as pipelined EVALSHA, the MySQL
  shard's statements replayed with pymysql);
* dequeue+ack: load through the server (dequeue 100, then ack them) and its ceiling;
* worker: `pinlater-worker` with its default options and a no-op handler draining a queue
  filled with the same number of jobs, next to the round's raw dequeue+ack rate; its CPU per
  job is the worker process's own from its "worker started" line (imports excluded; with
  `--client cli` the load clients' figures include their start-up). The raw rate is the load
  client's through the same server (the lean client unless `--client cli`).
  `--worker-baseline DIR` also runs the worker of another checkout (e.g. a clone of main)
  each round right after, so a change to the worker is compared with its baseline in the
  same run.

The load through the server comes from scripts/lean_load.py, the same for every backend:
pre-encoded enqueue frames replayed over framed sockets (replies checked by their descriptor
count, not decoded), dequeue replies decoded and acks encoded with thriftpy2's Cython binary
protocol. `pinlater enqueue|dequeue` (`--client cli`, the worker SDK client) costs about as
much CPU per job as the server (~1.7 ms per 100 enqueued jobs against ~0.1 ms for the lean
client), and on a 2-core machine that CPU is the server's and the storage's: the ratio then
measured the client. The client's CPU is reported separately ("client") either way.

With `--base CHECKOUT` every backend gets a second server running that checkout's code on
its own storage, measured in the same rounds (labelled `<backend>-base`): before/after figures
from one run. Only that server runs the checkout's code: the `-base` ceiling drives the
storage with this checkout's code (for MySQL, replays this checkout's statements), so a
storage change shows in the server sides and the storage CPU of the two rigs, not in their
ceilings.

The two sides alternate which goes first (A/B, B/A) so that the shared machine's noise hits
both alike; the ratios (server / ceiling, worker / raw) are taken per round and their median,
min and max reported. Rounds add a new queue each and leave their finished jobs, so the
per-round trend shows whether a backend slows as work accumulates; it is printed with the CPU
per job of each round, which separates a real slowdown (more CPU per job) from the shared
machine getting busier (rates fall, CPU per job flat). CPU time per 100 jobs is
given per process (server, storage, load client, this process), less noisy than rates on a
busy machine; "cpu ratio" (ceiling side's CPU per job / server side's) is what the rate ratio
tends to when the cores are the bound (a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import lean_load  # noqa: E402
from bench_server import cpu_seconds  # noqa: E402
from ceiling_direct import BATCH, MySQLDirect, RedisDirect, SQLiteDirect  # noqa: E402

from tests.support.server_process import ServerProcess  # noqa: E402
from tests.support.storage_process import free_port  # noqa: E402
from worker_sdk import JobState, PinLaterClient  # noqa: E402

#: default number of concurrent clients (load threads; ceiling threads)
CLIENTS = 4
MODES = ("enqueue", "dequeue")


@dataclass
class Measure:
    """One load run: rate, latency percentiles and CPU ms per 100 jobs by process."""

    jobs: int
    seconds: float
    p50_ms: float | None
    p99_ms: float | None
    cpu: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.jobs / max(self.seconds, 1e-9)

    def text(self) -> str:
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in self.cpu.items())
        lat = "" if self.p50_ms is None else f"  p50 {self.p50_ms:7.2f}  p99 {self.p99_ms:7.2f}"
        return f"{self.rate:9,.0f} jobs/s{lat}  cpu ms/100 jobs: {cpu}"


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class CpuMeter:
    """CPU seconds of named processes (this process via getrusage) between start and stop."""

    def __init__(self, pids: dict[str, int | None]):
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self.before = self._read()

    def _read(self) -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        out["bench"] = usage.ru_utime + usage.ru_stime
        out["client"] = children.ru_utime + children.ru_stime
        return out

    def per_100_jobs(self, jobs: int) -> dict[str, float]:
        after = self._read()
        scale = 100_000 / max(jobs, 1)  # seconds -> ms per 100 jobs
        return {
            name: round((after[name] - self.before[name]) * scale, 3)
            for name in after
            if after[name] - self.before[name] > 0
        }


# ---------------------------------------------------------------- storage and server


@dataclass
class Rig:
    """One backend: its storage, a server on it, and its ceiling driver."""

    kind: str
    server: ServerProcess
    storage_pid: int | None
    direct: Any
    client: PinLaterClient

    @property
    def address(self) -> str:
        return f"{self.server.host}:{self.server.port}"


@contextlib.contextmanager
def storage(kind: str, tmp: Path) -> Iterator[tuple[dict, int | None, Callable[[], Any]]]:
    """(the server's backend section, the storage PID or None, a factory of the ceiling
    driver) for fresh throwaway storage of `kind`."""
    if kind == "sqlite":
        data = str(tmp / "sqlite")
        section = {"kind": "sqlite", "data_dir": data, "shards": [{"name": "1"}]}
        yield section, None, lambda: SQLiteDirect(data)
    elif kind == "redis":
        from tests.support.redis_env import running_server

        with running_server(
            tmp / "redis",
            config_file=ROOT / "configs" / "redis-queue.conf",
            extra=["--appendfsync", "everysec"],
        ) as redis_server:
            pid = redis_server.proc.pid
            section = {"kind": "redis", "shards": [redis_server.shard("r1")]}
            yield section, pid, lambda: RedisDirect(redis_server.port, pid)
    elif kind == "mysql":
        from tests.support.mysql_env import running_server as running_mariadb

        with running_mariadb(
            tmp / "mysql", flush_log_at_trx_commit=1, extra=["--innodb-buffer-pool-size=512M"]
        ) as db:
            pid = db.proc.pid
            section = {"kind": "mysql", "shards": [db.shard("m1", pool_size=2 * 16 + 8)]}
            yield section, pid, lambda: MySQLDirect(db.port, pid)
    else:
        raise SystemExit(f"unknown backend {kind}")


@contextlib.contextmanager
def rig(kind: str, tmp: Path, background: bool, base: Path | None = None) -> Iterator[Rig]:
    """A rig of backend `kind`; with `base`, its server runs that checkout's code (labelled
    "<kind>-base") while everything else (load, ceiling) is this checkout's."""
    label = kind if base is None else f"{kind}-base"
    env = None if base is None else {"PYTHONPATH": str(base.resolve())}
    with storage(kind, tmp / label) as (section, storage_pid, make_direct):
        config: dict[str, Any] = {"backend": section}
        if background:  # as shipped: janitor every 10 s, depth gauges every 15 s
            config["metrics"] = {"port": free_port()}
        else:
            config["janitor"] = {"enabled": False}
        with ServerProcess(config, tmp / label / "server", start_timeout=60, env=env) as server:
            direct = make_direct()
            client = PinLaterClient(
                f"{server.host}:{server.port}", source="bench-ceilings", pool_size=4
            )
            try:
                yield Rig(label, server, storage_pid, direct, client)
            finally:
                client.close()
                direct.close()


# ---------------------------------------------------------------- the measurements


def through_server(rig: Rig, mode: str, queue: str, args) -> Measure:
    """One load run against the rig's server, from the lean client (this process's threads;
    its CPU is reported as "client") or from `pinlater enqueue|dequeue` (`--client cli`)."""
    if args.client == "cli":
        return _through_cli(rig, mode, queue, args)
    meter = CpuMeter({"server": rig.server.pid, "storage": rig.storage_pid})
    latencies, jobs, elapsed = lean_load.run(
        rig.address, mode, queue, args.jobs // BATCH, BATCH, b"x" * args.body, args.clients
    )
    cpu = meter.per_100_jobs(jobs)
    cpu["client"] = cpu.pop("bench", 0.0)
    ms = [x * 1000 for x in latencies]
    return Measure(jobs, elapsed, percentile(ms, 0.5), percentile(ms, 0.99), cpu)


def _through_cli(rig: Rig, mode: str, queue: str, args) -> Measure:
    """One `pinlater enqueue|dequeue` load run against the rig's server."""
    cmd = [
        sys.executable,
        "-m",
        "pinlater.cli",
        "--servers",
        rig.address,
        "--json",
        mode,
        "--queue",
        queue,
        "--num_queries",
        str(args.jobs // BATCH),
        "--batch_size",
        str(BATCH),
        "--concurrency",
        str(args.clients),
    ]
    if mode == "enqueue":
        cmd += ["--body", "x" * args.body]
    meter = CpuMeter({"server": rig.server.pid, "storage": rig.storage_pid})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800, check=False
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines or lines[-1].get("errors"):
        raise RuntimeError(f"{' '.join(cmd[2:8])} failed: {done.stderr[-2000:]}")
    report = lines[-1]
    cpu = meter.per_100_jobs(report["jobs"])
    cpu.pop("bench", None)
    return Measure(report["jobs"], report["elapsed_s"], report["p50_ms"], report["p99_ms"], cpu)


def ceiling(rig: Rig, mode: str, queue: str, args) -> Measure:
    """The same load on the storage without the server, from `--clients` threads."""
    calls = args.jobs // BATCH // args.clients
    body = b"x" * args.body
    results: list[tuple[list[float], int]] = [([], 0)] * args.clients
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            if mode == "enqueue":
                results[i] = rig.direct.enqueue(queue, body, calls)
            else:
                results[i] = rig.direct.drain(queue, calls, i)
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(args.clients)]
    meter = CpuMeter({"storage": rig.storage_pid})
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    jobs = sum(r[1] for r in results)
    latencies = [x * 1000 for r in results for x in r[0]]
    cpu = meter.per_100_jobs(jobs)
    cpu.pop("client", None)
    return Measure(jobs, elapsed, percentile(latencies, 0.5), percentile(latencies, 0.99), cpu)


def fill(rig: Rig, queue: str, jobs: int, body: bytes) -> None:
    rig.client.create_queue(queue)
    for start in range(0, jobs, 1000):
        rig.client.enqueue(queue, [body] * min(1000, jobs - start))


#: the worker benchmark's no-op handler: `id(job)` returns at once (a non-string result: a plain
#: success). A builtin imports nothing, so a --worker-baseline checkout of any age can load it.
NOOP_HANDLER = "builtins:id"


def worker_drain(rig: Rig, queue: str, args, root: Path = ROOT) -> Measure:
    """`pinlater-worker` (of the checkout `root`) with default options and a no-op handler on
    a filled queue: timed from its "worker started" log line (imports excluded) until the
    server counts every job SUCCEEDED (polled every 0.2 s, the finish interpolated between the
    last two polls: a count costs the server a scan, so frequent polls would slow what they
    measure). CPU: the server's and storage's over the run, the worker's over the same span."""
    fill(rig, queue, args.jobs, b"x" * args.body)
    cmd = [
        sys.executable,
        "-m",
        "worker_sdk.worker_cli",
        "--queue",
        queue,
        "--handler",
        NOOP_HANDLER,
        "--servers",
        rig.address,
        "--no-status",
    ]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{ROOT / 'scripts'}"}
    meter = CpuMeter({"server": rig.server.pid, "storage": rig.storage_pid})
    proc = subprocess.Popen(
        cmd, cwd=ROOT / "scripts", env=env, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        for line in proc.stderr:  # type: ignore[union-attr]
            if "worker started" in line:
                break
        started, worker_cpu = time.perf_counter(), cpu_seconds(proc.pid)
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        elapsed = _until_all_succeeded(rig, queue, args.jobs, started, proc)
        worker_cpu = cpu_seconds(proc.pid) - worker_cpu
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    cpu = meter.per_100_jobs(args.jobs)
    cpu.pop("bench", None)
    cpu.pop("client", None)  # the worker's start-up and shutdown too: measured above instead
    cpu["worker"] = round(worker_cpu * 100_000 / args.jobs, 3)
    return Measure(args.jobs, elapsed, None, None, cpu)


def _until_all_succeeded(rig: Rig, queue: str, jobs: int, started: float, proc) -> float:
    """Seconds from `started` until `jobs` jobs of `queue` are SUCCEEDED (interpolated)."""
    last_t, last_n = started, 0
    deadline = time.monotonic() + 900
    while True:
        time.sleep(0.2)
        now, done = time.perf_counter(), rig.client.count(queue, JobState.SUCCEEDED)
        if done >= jobs:
            share = (jobs - last_n) / max(done - last_n, 1)
            return last_t + share * (now - last_t) - started
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"worker did not drain {queue} (exit {proc.poll()})")
        last_t, last_n = now, done


# ---------------------------------------------------------------- rounds and the report


@dataclass
class Results:
    """Measures by (backend, label) in round order; labels like "server enqueue"."""

    by_key: dict[tuple[str, str], list[Measure]] = field(default_factory=dict)

    def add(self, kind: str, label: str, measure: Measure) -> None:
        self.by_key.setdefault((kind, label), []).append(measure)

    def get(self, kind: str, label: str) -> list[Measure]:
        return self.by_key.get((kind, label), [])


def one_round(rigs: list[Rig], round_no: int, args, results: Results) -> None:
    for r in rigs:
        sides = [("server", through_server), ("ceiling", ceiling)]
        if round_no % 2:
            sides.reverse()
        for mode in args.modes:
            for side, measure in sides:
                queue = f"{side[0]}{round_no}"
                if mode == "enqueue" and side == "ceiling":
                    r.direct.create_queue(queue)
                elif mode == "enqueue":
                    r.client.create_queue(queue)
                m = measure(r, mode, queue, args)
                results.add(r.kind, f"{side} {mode}", m)
                print(f"  {r.kind:11} {side:7} {mode:7} {m.text()}", flush=True)
        if not args.no_worker:
            m = worker_drain(r, f"w{round_no}", args)
            results.add(r.kind, "worker", m)
            print(f"  {r.kind:11} worker  drain   {m.text()}", flush=True)
        if args.worker_baseline:
            m = worker_drain(r, f"b{round_no}", args, Path(args.worker_baseline))
            results.add(r.kind, "worker baseline", m)
            print(f"  {r.kind:11} baseline drain   {m.text()}", flush=True)


def ratios(top: list[Measure], bottom: list[Measure]) -> list[float]:
    return [a.rate / b.rate for a, b in zip(top, bottom, strict=False) if b.rate]


def cpu_ratios(top: list[Measure], bottom: list[Measure]) -> list[float]:
    """Per round: all CPU per job on the ceiling side / all CPU per job on the server side
    (every process, load client included). Where the machine's cores are the bound (shared
    with other work, or fewer than the processes need), the rate ratio tends to this."""
    return [
        sum(b.cpu.values()) / sum(a.cpu.values())
        for a, b in zip(top, bottom, strict=False)
        if sum(a.cpu.values())
    ]


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    med = fmt.format(statistics.median(values))
    return f"{med} [{fmt.format(min(values))}..{fmt.format(max(values))}]"


def median_of(measures: list[Measure], attr: str) -> float | None:
    values = [getattr(m, attr) for m in measures if getattr(m, attr) is not None]
    return statistics.median(values) if values else None


def summary(kinds: list[str], results: Results, runs: int, modes=MODES) -> dict[str, Any]:
    """Print the per-backend summary; return it as a dict (for --json)."""
    out: dict[str, Any] = {}
    print(f"\nmedians over {runs} rounds [min..max]; ratio = server / ceiling, taken per round")
    for kind in kinds:
        out[kind] = {
            mode: _mode_summary(
                kind,
                mode,
                results.get(kind, f"server {mode}"),
                results.get(kind, f"ceiling {mode}"),
            )
            for mode in modes
        }
        raw = results.get(kind, "server dequeue")
        for label in ("worker", "worker baseline"):
            workers = results.get(kind, label)
            if workers:
                out[kind][label.replace(" ", "_")] = {
                    "jobs_per_s": [round(m.rate) for m in workers],
                    "ratio_to_raw": [round(x, 3) for x in ratios(workers, raw)],
                    "cpu_ms_per_100": _median_cpu(workers),
                }
                print(
                    f"{kind:6} {label:15} {spread([m.rate for m in workers], '{:,.0f}')} jobs/s"
                    f"  / raw dequeue+ack: {spread(ratios(workers, raw))}"
                    f"  cpu ms/100 jobs {_median_cpu(workers)}"
                )
    return out


def _mode_summary(kind: str, mode: str, srv: list[Measure], top: list[Measure]) -> dict:
    """Print one backend's enqueue or dequeue+ack lines; return them as a dict."""
    row = {
        "server_jobs_per_s": [round(m.rate) for m in srv],
        "ceiling_jobs_per_s": [round(m.rate) for m in top],
        "ratio": [round(x, 3) for x in ratios(srv, top)],
        "server_p50_ms": median_of(srv, "p50_ms"),
        "server_p99_ms": median_of(srv, "p99_ms"),
        "ceiling_p50_ms": median_of(top, "p50_ms"),
        "ceiling_p99_ms": median_of(top, "p99_ms"),
        "server_cpu_ms_per_100": _median_cpu(srv),
        "ceiling_cpu_ms_per_100": _median_cpu(top),
        "server_cpu_by_round": [m.cpu.get("server", 0.0) for m in srv],
        "ceiling_cpu_by_round": [m.cpu.get("bench", 0.0) for m in top],
        "cpu_ratio": [round(x, 3) for x in cpu_ratios(srv, top)],
    }
    label = "dequeue+ack" if mode == "dequeue" else mode
    print(
        f"{kind:6} {label:11} server {spread([m.rate for m in srv], '{:,.0f}')} jobs/s"
        f"  ceiling {spread([m.rate for m in top], '{:,.0f}')} jobs/s"
        f"  ratio {spread(ratios(srv, top))}  cpu ratio {spread(cpu_ratios(srv, top))}"
    )
    print(
        f"{'':18} server p50 {_ms(row['server_p50_ms'])} p99 {_ms(row['server_p99_ms'])}"
        f" (p99/p50 {_tail(row['server_p99_ms'], row['server_p50_ms'])})"
        f"  | ceiling p50 {_ms(row['ceiling_p50_ms'])} p99 {_ms(row['ceiling_p99_ms'])}"
    )
    print(
        f"{'':18} cpu ms/100 jobs: server side {row['server_cpu_ms_per_100']}"
        f"  ceiling side {row['ceiling_cpu_ms_per_100']}"
    )
    print(
        f"{'':18} trend by round (server): {row['server_jobs_per_s']} jobs/s, server CPU"
        f" ms/100 jobs {row['server_cpu_by_round']}"
    )
    print(
        f"{'':18} trend by round (ceiling): {row['ceiling_jobs_per_s']} jobs/s, this"
        f" process's CPU ms/100 jobs {row['ceiling_cpu_by_round']}"
    )
    return row


def _median_cpu(measures: list[Measure]) -> dict[str, float]:
    names = sorted({name for m in measures for name in m.cpu})
    return {
        name: round(statistics.median([m.cpu.get(name, 0.0) for m in measures]), 2)
        for name in names
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _tail(p99: float | None, p50: float | None) -> str:
    return "-" if not (p99 and p50) else f"{p99 / p50:.1f}x"


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds on the same servers (5)")
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per load run (50000)")
    parser.add_argument("--clients", type=int, default=CLIENTS, help="concurrent clients (4)")
    parser.add_argument("--body", type=int, default=100, help="body size in bytes (100)")
    parser.add_argument("--backends", nargs="+", default=["sqlite", "redis", "mysql"])
    parser.add_argument(
        "--no-background",
        action="store_true",
        help="server without janitor and depth collector (isolates their cost)",
    )
    parser.add_argument("--no-worker", action="store_true", help="skip pinlater-worker runs")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--base",
        help="another checkout (e.g. a git worktree of main): each backend also gets a server "
        "running its code, measured interleaved with this one's (labelled <backend>-base)",
    )
    parser.add_argument(
        "--client",
        choices=("lean", "cli"),
        default="lean",
        help="load client through the server: pre-encoded frames (lean) or `pinlater` load",
    )
    parser.add_argument(
        "--worker-baseline",
        metavar="DIR",
        help="also run the pinlater-worker of this checkout each round (A/B in one run)",
    )
    parser.add_argument("--json", help="also write the summary as JSON to this file")
    args = parser.parse_args()
    print(
        f"batch {BATCH}, {args.clients} {args.client} clients, {args.jobs} jobs per run, "
        f"body {args.body} B, "
        f"{args.runs} rounds, backends {' '.join(args.backends)}, background duties "
        f"{'off' if args.no_background else 'on'}; load average {load_average()}",
        flush=True,
    )
    results = Results()
    with (
        tempfile.TemporaryDirectory(prefix="pinlater-ceilings-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        bases = [None] if args.base is None else [None, Path(args.base)]
        rigs = [
            stack.enter_context(rig(kind, Path(tmp), not args.no_background, base))
            for kind in args.backends
            for base in bases
        ]
        for round_no in range(args.runs):
            print(f"round {round_no + 1} (load average {load_average()})", flush=True)
            one_round(rigs, round_no, args, results)
    report = summary([r.kind for r in rigs], results, args.runs, args.modes)
    print(f"load average at the end: {load_average()}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
