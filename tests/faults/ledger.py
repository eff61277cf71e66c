"""The operation history of a fault run, and the one-line ledger each scenario reports.

History: one record (a dict, one JSON line on disk) per client operation, Jepsen style:

    {"op": "enqueue" | "deliver" | "ack" | "worked", "job": "<unique id from the body>",
     "process": "producer-1", "invoke": t0, "complete": t1,
     "outcome": "ok" | "fail" | "unknown", "descriptor": ..., "claim": ...}

`fail` means the operation certainly did not happen (the server answered with an error, or the
connection was refused before anything was sent); `unknown` means it may have happened (the
connection broke after the request was sent). Worker subprocesses write their own history file
with the same records, line by line, so what a kill -9 leaves on disk is exactly what the worker
had done and recorded; `load` reads those files back (a torn last line is ignored).

Ledger: `report(line)` prints one scenario's figures and appends them as a JSON line to the file
named by $PINLATER_LEDGER, which scripts/faults.py turns into the table.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

LEDGER_ENV = "PINLATER_LEDGER"


def job_body(run: str, serial: int) -> bytes:
    """A job body carrying a unique id; `job_id` gets it back."""
    return f"job:{run}:{serial}".encode()


def job_id(body: bytes | None) -> str | None:
    if body is None:
        return None
    text = body.decode(errors="replace")
    return text if text.startswith("job:") else None


class History:
    """Thread-safe append-only list of operation records, mirrored to a JSONL file if given."""

    def __init__(self, path: Path | str | None = None, process: str = "test"):
        self.process = process
        self._records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        # line-buffered: every record reaches the kernel as soon as it is complete, so it
        # survives a kill -9 of this process
        self._file = open(path, "a", buffering=1) if path is not None else None

    def invoke(self, op: str, **fields: Any) -> dict[str, Any]:
        """Start a record (not yet in the history; `complete` adds it)."""
        return {"op": op, "process": self.process, "invoke": time.time(), **fields}

    def complete(self, record: dict[str, Any], outcome: str, **fields: Any) -> dict[str, Any]:
        assert outcome in ("ok", "fail", "unknown"), outcome
        record.update(outcome=outcome, complete=time.time(), **fields)
        self.add(record)
        return record

    def add(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._records.append(record)
            if self._file is not None:
                self._file.write(json.dumps(record, sort_keys=True) + "\n")

    def deliveries(self, record: dict[str, Any], jobs, process: str | None = None) -> None:
        """A `deliver` record for each job a dequeue handed out (`record` is the dequeue's)."""
        for job in jobs:
            self.add(
                {
                    "op": "deliver",
                    "process": process or self.process,
                    "invoke": record["invoke"],
                    "complete": time.time(),
                    "outcome": "ok",
                    "job": job_id(job.body),
                    "descriptor": job.descriptor,
                    "claim": job.claim,
                    "attempts_remaining": job.attempts_remaining,
                }
            )

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._records)

    def extend(self, records: list[dict[str, Any]]) -> None:
        with self._lock:
            self._records.extend(records)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load(path: Path | str) -> list[dict[str, Any]]:
    """Records of a history file; a last line torn by a kill is skipped."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


# ---- the ledger ----

COLUMNS = [
    ("scenario", 4),
    ("backend", 7),
    ("enq_ok", 6),
    ("enq_fail", 8),
    ("enq_unknown", 11),
    ("recovered", 9),
    ("acked", 5),
    ("lost", 4),
    ("dup_deliveries", 14),
    ("max_deliveries", 14),
    ("stale_acks_rejected", 19),
    ("misreported_acks", 16),
    ("faults", 30),
    ("threads", 9),
    ("rss_mb", 9),
    ("seconds", 7),
    ("verdict", 7),
]


def report(line: dict[str, Any]) -> None:
    """Print a scenario's ledger line and append it to $PINLATER_LEDGER if set."""
    print("LEDGER " + json.dumps(line, sort_keys=True))
    path = os.environ.get(LEDGER_ENV)
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(line, sort_keys=True) + "\n")


def format_table(lines: list[dict[str, Any]]) -> str:
    """The ledger lines as a fixed-width text table (one row per scenario run)."""

    def cell(line: dict[str, Any], key: str) -> str:
        value = line.get(key, "")
        if isinstance(value, dict):
            return ",".join(f"{k}={v}" for k, v in sorted(value.items())) or "-"
        if isinstance(value, float):
            return f"{value:.1f}"
        return str(value)

    widths = {
        key: max([width, len(key)] + [len(cell(line, key)) for line in lines])
        for key, width in COLUMNS
    }
    rows = [" ".join(key.ljust(widths[key]) for key, _ in COLUMNS)]
    rows.append(" ".join("-" * widths[key] for key, _ in COLUMNS))
    for line in lines:
        rows.append(" ".join(cell(line, key).ljust(widths[key]) for key, _ in COLUMNS))
        if line.get("note"):
            rows.append("    note: " + str(line["note"]))
    return "\n".join(rows)
