#!/usr/bin/env python3
"""Screenshots of every dashboard page, with real data, into docs/screenshots/*.png.

Starts a `pinlater-server` process on throwaway SQLite storage (two shards), gives it a few
queues with traffic (enqueues, dequeues, successes, failures, an abandoned claim the janitor
takes back, a paused queue, a rate-limited one, a hostile body), then opens each page in
headless Chromium at 1280 px (the system `chromium` and `chromedriver`, as in the browser
tests) and saves a full-page screenshot, plus the overview at phone width.

    python scripts/dashboard_screenshots.py                   # into docs/screenshots/
    python scripts/dashboard_screenshots.py --out /tmp/shots --traffic-seconds 10
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pinlater.common.passwords import hash_password  # noqa: E402
from pinlater.idl import RequestContext  # noqa: E402
from pinlater.idl import pinlater_thrift as T  # noqa: E402, N812
from tests.support.browser import chrome  # noqa: E402
from tests.support.server_process import ServerProcess, free_port  # noqa: E402

PASSWORD = "screenshots"
CTX = RequestContext(source="screenshots")
QUEUES = {  # name: (enqueues per round, share failed)
    "emails": (40, 0.05),
    "thumbnails": (25, 0.0),
    "webhooks": (15, 0.3),
    "reports": (4, 0.0),
    "billing": (8, 0.1),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--traffic-seconds", type=float, default=20.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        config = {
            "backend": {
                "kind": "sqlite",
                "data_dir": str(Path(tmp) / "data"),
                "shards": [{"name": "1"}, {"name": "2"}],
            },
            "janitor": {"enabled": True, "interval_seconds": 2, "claim_timeout_seconds": 600},
            "admin": {"password_hash": hash_password(PASSWORD, iterations=1000)},
            "metrics": {"port": free_port(), "depth_interval_seconds": 1},
            "dashboard": {"rate_sample_seconds": 1, "shard_counts_interval_seconds": 2},
        }
        with ServerProcess(config, Path(tmp), name="screenshots") as proc:
            url = f"http://127.0.0.1:{config['metrics']['port']}"
            client = proc.client()
            try:
                job = populate(client, url, args.traffic_seconds)
                shoot(url, args.out, job)
            finally:
                client.close()


def api(url: str, path: str, body: dict) -> dict:
    token = base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    request = urllib.request.Request(
        url + "/api/v1" + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def populate(client, url: str, seconds: float) -> str:
    """Traffic for `seconds`; returns the descriptor of a job worth showing."""
    rng = random.Random(14)
    for name in QUEUES:
        client.createQueue(CTX, name)
    api(url, "/queues/reports/settings", {"claim_timeout_seconds": 1})
    api(url, "/queues/billing/settings", {"max_jobs_per_second": 20})
    shown = enqueue(
        client,
        "emails",
        [
            b'{"to": "carol@example.com", "template": "welcome", '
            b'"note": "<script>alert(1)</script>"}'
        ],
        priority=1,
    )[0]
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for name, (per_round, failing) in QUEUES.items():
            bodies = [
                json.dumps({"queue": name, "n": n + i, "user": rng.randrange(10**6)}).encode()
                for i in range(rng.randrange(per_round // 2, per_round + 1))
            ]
            enqueue(client, name, bodies, priority=rng.choice((1, 1, 2, 3)), attempts=2)
            n += len(bodies)
            work(client, name, rng.randrange(per_round // 2, per_round), failing, rng)
        time.sleep(0.5)
    enqueue(client, "reports", [b"monthly-report-2026-11"], priority=2)
    client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName="reports", limit=1))  # abandoned
    enqueue(
        client,
        "emails",
        [
            json.dumps({"to": f"user{i}@example.com", "template": "digest"}).encode()
            for i in range(60)
        ],
        priority=3,
    )
    api(url, "/queues/webhooks/pause", {})
    time.sleep(4)  # the janitor takes the abandoned claim back; counts and rates refresh
    return shown


def enqueue(client, queue: str, bodies: list[bytes], priority: int = 1, attempts: int = 3):
    jobs = [T.PinLaterJob(body=b, priority=priority, numAttemptsAllowed=attempts) for b in bodies]
    return client.enqueueJobs(
        CTX, T.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)
    ).jobDescriptors


def work(client, queue: str, limit: int, failing: float, rng: random.Random) -> None:
    if limit <= 0:
        return
    taken = client.dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=limit)).jobs
    ok, bad = [], []
    for descriptor in taken:
        info = T.PinLaterJobAckInfo(jobDescriptor=descriptor)
        if rng.random() < failing:
            info.appendCustomStatus = "HTTP 503 from upstream"
            bad.append(info)
        else:
            ok.append(info)
    client.ackDequeuedJobs(
        CTX, T.PinLaterJobAckRequest(queueName=queue, jobsSucceeded=ok, jobsFailed=bad)
    )


def shoot(url: str, out: Path, job: str) -> None:
    browser = chrome(1280, 900)
    try:
        browser.get(url + "/ui/login")
        browser.find_element("id", "password").send_keys(PASSWORD)
        browser.find_element("id", "login").click()
        time.sleep(0.5)
        pages = {
            "overview": "/ui/",
            "queue": "/ui/queues/emails?limit=15",
            "confirm": "/ui/queues/webhooks/confirm?action=retry",
            "job": f"/ui/jobs/{job}",
            "shards": "/ui/shards",
            "janitor": "/ui/janitor",
        }
        for name, path in pages.items():
            save(browser, url + path, out / f"{name}.png", 1280)
        save(browser, url + "/ui/", out / "overview-phone.png", 390)
    finally:
        browser.quit()


def save(browser, page: str, path: Path, width: int) -> None:
    """The whole page at `width` CSS px (the viewport grown to the page's height)."""
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    browser.get(page)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    metrics["height"] = min(max(height, 400), 4000)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    time.sleep(0.3)
    browser.save_screenshot(str(path))
    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {page}")


if __name__ == "__main__":
    main()
