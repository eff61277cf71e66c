"""F9: clock skew of a server and its janitor (libfaketime). Eligibility and claim expiry are
decided by the storage's clock (MySQL NOW(3), Redis TIME), so a server whose clock runs ten
minutes ahead must not reclaim the healthy claims of workers served by another server.

SQLite has no server clock: it uses the server process's clock, so the same skew there does
reclaim healthy claims. That run is the negative control showing the scenario can fail; it is
why several servers sharing one SQLite data directory must share one host clock (README).
"""

from __future__ import annotations

import time
from pathlib import Path

import libfaketime
import pytest

SKEW = "+600s"  # far past the claim timeout


def skewed_env() -> dict[str, str]:
    """LD_PRELOAD of the libfaketime that the `libfaketime` test dependency builds and ships
    (no system package needed), shifting wall-clock time by SKEW and leaving monotonic time."""
    _, env = libfaketime.get_reload_information()
    library = Path(env["LD_LIBRARY_PATH"]) / env["LD_PRELOAD"]
    assert library.is_file(), f"libfaketime did not install its library at {library}"
    return {
        "LD_PRELOAD": str(library),
        "FAKETIME": SKEW,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


def run_skewed(make_rig, kind: str, **options):
    rig = make_rig(
        "F9", kind, janitor={"interval_seconds": 0.05, "claim_timeout_seconds": 2.0}, **options
    )
    first = rig.start_server()
    rig.start_server(env=skewed_env())  # same storage, clock ten minutes ahead, busy janitor
    rig.fault("clock_skew")
    rig.create_queue()
    rig.enqueue(120)
    rig.baseline(first)
    rig.spawn_worker("healthy", limit=3, work_seconds=0.2, servers=[f"{first.host}:{first.port}"])
    with rig.watch_resources(first):
        time.sleep(5)
    for worker in rig.workers:
        worker.stop()
    report = rig.check(strict_attempts=False)
    deliveries = sum(1 for r in rig.all_records() if r["op"] == "deliver")
    return rig, report, deliveries - report.attempted


@pytest.mark.parametrize("kind", ["redis", "mysql"])
def test_f9_a_server_with_a_skewed_clock_reclaims_no_healthy_claim(make_rig, kind):
    rig, report, reclaimed = run_skewed(make_rig, kind)
    rig.finish(
        report,
        note=f"server clock {SKEW}: {reclaimed} healthy claims reclaimed "
        "(storage clock authoritative)",
    )
    assert reclaimed == 0, f"{reclaimed} healthy claims were reclaimed by the skewed janitor"


def test_f9_negative_control_sqlite_follows_the_process_clock(make_rig):
    # never with the broker: a skewed SQLite janitor also returns reservations early, so the
    # jobs' attempts say nothing about the claims it broke (an unsupported setup either way)
    rig, report, reclaimed = run_skewed(make_rig, "sqlite", broker=False)
    rig.finish(
        report,
        note=f"server clock {SKEW}: {reclaimed} healthy claims reclaimed "
        "(SQLite uses the process clock: expected)",
    )
    assert reclaimed > 0, "the skewed SQLite janitor should have reclaimed healthy claims"
