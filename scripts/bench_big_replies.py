#!/usr/bin/env python3
"""Reply frames and server memory for lookups and dequeues of many large jobs, per backend.

Starts throwaway storage and a `pinlater-server` subprocess (default config: 16 MiB frames,
1 MiB bodies) under an address-space cap (`prlimit --as`, so a runaway reply fails inside the
server instead of waking the kernel's OOM killer), then for each job count N enqueues N jobs
of 1 MiB and sends, over a plain socket:

- lookupJobs of all N descriptors with includeBody;
- dequeueJobs with limit N, then again until nothing is left;

and prints, per call, the reply frame size (or the error), the jobs it handed out, the jobs
left PENDING with their attempts, and the server's RSS a moment after the reply (VmRSS) and its
peak so far (VmHWM).

    python scripts/bench_big_replies.py --backend sqlite --counts 20,300,1500
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pinlater.idl import PinLater, RequestContext  # noqa: E402
from pinlater.idl import pinlater_thrift as t  # noqa: E402
from tests.support.server_process import (  # noqa: E402
    ConnectionClosed,
    ServerProcess,
    call_measured,
)
from tests.support.storage import backend_section  # noqa: E402

CTX = RequestContext(source="bench-big-replies")
MIB = 1024 * 1024


class CappedServer(ServerProcess):
    """The server under `prlimit --as=CAP`."""

    cap = 6 << 30

    def command(self) -> list[str]:
        return ["prlimit", f"--as={self.cap}", "--", *super().command()]


def rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of `pid` in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) // 1024
    return values["VmRSS"], values["VmHWM"]


def call(server: ServerProcess, method: str, request, timeout: float = 300.0):
    """(reply frame bytes, the result's success or None, error text or None)."""
    try:
        frame, result = call_measured(server, method, timeout, context=CTX, request=request)
    except (ConnectionClosed, OSError) as exc:
        return 0, None, f"connection lost: {exc}"
    if not isinstance(result, (PinLater.lookupJobs_result, PinLater.dequeueJobs_result)):
        return frame, None, f"TApplicationException: {result.message}"
    if result.e is not None:
        return frame, None, f"PinLaterException {result.e.errorCode}: {result.e.message}"
    return frame, result.success, None


def fill(client, queue: str, count: int, size: int) -> list[str]:
    client.createQueue(CTX, queue)
    descriptors: list[str] = []
    per_request = max(1, (8 * MIB) // size)
    for start in range(0, count, per_request):
        jobs = [
            t.PinLaterJob(body=bytes([65 + (start + i) % 26]) * size)
            for i in range(min(per_request, count - start))
        ]
        reply = client.enqueueJobs(CTX, t.PinLaterEnqueueRequest(queueName=queue, jobs=jobs))
        descriptors += reply.jobDescriptors
    return descriptors


def pending(client, queue: str) -> int:
    return client.getJobCount(CTX, t.PinLaterGetJobCountRequest(queueName=queue, jobState=0))


def show(label: str, server: ServerProcess, frame: int, jobs: int | None, error: str | None):
    time.sleep(1.0)  # let the reply's memory be freed (or not)
    now, peak = rss(server.pid) if server.is_running() else (0, 0)
    outcome = error if error else f"{jobs} jobs"
    print(
        f"  {label:<22} frame {frame / MIB:8.2f} MiB  {outcome[:90]:<40} "
        f"RSS {now:5d} MiB (peak {peak:5d})",
        flush=True,
    )


def run(server: ServerProcess, count: int, size: int) -> None:
    client = server.client(timeout=300)
    queue = f"big{count}"
    descriptors = fill(client, queue, count, size)
    client.close()
    print(f"N = {count} x {size} bytes", flush=True)
    request = t.PinLaterLookupJobRequest(jobDescriptors=descriptors, includeBody=True)
    frame, found, error = call(server, "lookupJobs", request)
    show("lookupJobs", server, frame, None if found is None else len(found), error)
    if not server.is_running():
        return
    calls = 0
    while calls < count + 1:
        calls += 1
        request = t.PinLaterDequeueRequest(queueName=queue, limit=count)
        frame, reply, error = call(server, "dequeueJobs", request)
        got = len(reply.jobs or {}) if reply is not None else None
        show(f"dequeueJobs #{calls}", server, frame, got, error)
        if error or not got or not server.is_running():
            break
    if server.is_running():
        client = server.client(timeout=300)
        left = pending(client, queue)
        scan = client.scanJobs(
            CTX, t.PinLaterScanJobsRequest(queueName=queue, jobState=0, limit=1000)
        )
        attempts = {(j.attemptsAllowed, j.attemptsRemaining) for j in scan.scannedJobs}
        print(f"  left PENDING: {left} (attempts allowed/remaining: {sorted(attempts)})")
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "redis", "mysql"))
    parser.add_argument("--counts", default="20,300,1500")
    parser.add_argument("--body-bytes", type=int, default=MIB)
    parser.add_argument("--as-cap-gib", type=float, default=6.0)
    args = parser.parse_args()
    CappedServer.cap = int(args.as_cap_gib * (1 << 30))
    with tempfile.TemporaryDirectory(prefix="big-replies-") as tmp:
        tmp_dir = Path(tmp)
        with backend_section(args.backend, tmp_dir) as backend:
            config = {"janitor": {"enabled": False}, "backend": backend}
            for count in map(int, args.counts.split(",")):
                with CappedServer(config, tmp_dir, name=f"server{count}") as server:
                    print(f"[{args.backend}] server idle RSS {rss(server.pid)[0]} MiB")
                    run(server, count, args.body_bytes)
                    if not server.is_running():
                        print("  the server died; log tail:")
                        print("    " + server.log()[-1500:].replace("\n", "\n    "))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
