"""Run the fault-injection suite (pytest on tests/faults) and print its ledger table.

    python scripts/faults.py [--ledger FILE] [-k EXPR] [pytest args...]

Each scenario test appends one JSON line to the file named by $PINLATER_LEDGER (see
tests/faults/ledger.py); this script sets it, runs pytest, and prints every line as a table:
enqueues ok / failed / unknown, recovered, jobs acked, LOST, duplicated deliveries, stale acks
rejected, faults injected, server threads (baseline/peak/end) and RSS (baseline/end), seconds.
Scenarios that ran but wrote no line (an error before the check) show up in pytest's summary.
Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.faults.ledger import LEDGER_ENV, format_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", help="keep the ledger JSON lines in this file")
    args, pytest_args = parser.parse_known_args(argv)
    ledger = (
        Path(args.ledger)
        if args.ledger
        else Path(tempfile.mkstemp(prefix="pinlater-ledger-", suffix=".jsonl")[1])
    )
    ledger.write_text("")
    env = {
        **os.environ,
        LEDGER_ENV: str(ledger),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    started = time.monotonic()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests/faults",
        "-p",
        "no:cacheprovider",
        "-q",
        *pytest_args,
    ]
    status = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    lines = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    lines.sort(key=_order)
    print()
    print(f"fault ledger ({len(lines)} scenario runs, {time.monotonic() - started:.0f} s wall):")
    print(format_table(lines))
    lost = [
        f"{line['scenario']}/{line['backend']}"
        for line in lines
        if line.get("verdict") in ("LOSS", "FAIL", "MISSED")
    ]
    if lost:
        print("\nRUNS THAT FAILED THEIR CHECK: " + ", ".join(lost))
    if not args.ledger:
        ledger.unlink()
    return status


def _order(line: dict) -> tuple:
    """F1, F2, ... F10 in number order, then the backend in sqlite, redis, mysql order."""
    scenario = str(line.get("scenario", ""))
    digits = "".join(ch for ch in scenario.split("-", maxsplit=1)[0] if ch.isdigit())
    backends = ["sqlite", "redis", "mysql"]
    backend = line.get("backend")
    return (int(digits or 0), scenario, backends.index(backend) if backend in backends else 9)


if __name__ == "__main__":
    sys.exit(main())
