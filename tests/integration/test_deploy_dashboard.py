"""The Grafana dashboard (deploy/grafana/pinlater.json) shows data: a real Prometheus (Debian's
`prometheus`, installed by scripts/test) scrapes a real pinlater-server every second while a
short workload runs, and every panel query and template variable of the dashboard is evaluated
through Prometheus's HTTP API until each returns data (bounded in time)."""

from __future__ import annotations

import concurrent.futures
import json
import math
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support import unavailable
from tests.support.server_process import REPO_ROOT, ServerProcess, free_port
from worker_sdk import Job, PinLaterClient, PinLaterError

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "pinlater.json"
PROVISIONING = REPO_ROOT / "deploy" / "grafana" / "provisioning"
#: what Grafana puts for the dashboard's variables: every job and queue, a window covering the run
SUBSTITUTIONS = {"$__rate_interval": "1m", "$job": ".*", "$queue": ".*"}
DATA_TIMEOUT_S = 40.0


def _walk_panels(panels: list[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels", []))


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panel_queries(board: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, rows included."""
    return [
        (panel["title"], target["expr"])
        for panel in _walk_panels(board["panels"])
        for target in panel.get("targets", [])
    ]


def substitute(expr: str) -> str:
    for name, value in SUBSTITUTIONS.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unknown dashboard variable left in {expr!r}"
    return expr


# ---- static checks: a dashboard Grafana can provision ----


def test_the_dashboard_is_well_formed_for_provisioning():
    board = dashboard()
    assert board["uid"] == "pinlater"
    panels = list(_walk_panels(board["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
    names = {v["name"] for v in board["templating"]["list"]}
    assert names == {"datasource", "job", "queue"}
    datasources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    assert [d["type"] for d in datasources["datasources"]] == ["prometheus"]
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "pinlater.yaml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_the_dashboard_covers_what_operators_watch():
    exprs = " ".join(expr for _, expr in panel_queries(dashboard()))
    for metric in (
        "pinlater_jobs_enqueued_total",
        "pinlater_jobs_dequeued_total",
        "pinlater_acks_total",
        "pinlater_queue_jobs",
        "pinlater_request_duration_seconds_bucket",
        "pinlater_requests_total",
        "pinlater_shard_healthy",
        "pinlater_shard_call_duration_seconds_bucket",
        "pinlater_jobs_reclaimed_total",
        "pinlater_jobs_purged_total",
        "pinlater_dequeue_refused_total",
        "pinlater_admission_refused_total",
    ):
        assert metric in exprs, f"no panel shows {metric}"


# ---- a real Prometheus scraping a real server ----


class Prometheus:
    """`prometheus` on a free loopback port with a temp config and TSDB; stopped by PID."""

    def __init__(self, binary: str, tmp: Path, target: str):
        self.port = free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {"job_name": "pinlater", "static_configs": [{"targets": [target]}]}
                    ],
                }
            )
        )
        self.log_path = tmp / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def url(self, path: str, **params: str) -> str:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return f"http://127.0.0.1:{self.port}{path}{query}"

    def get(self, path: str, **params: str) -> dict:
        with urllib.request.urlopen(self.url(path, **params), timeout=5) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return body["data"]

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log_path.read_text()}"
            try:
                with urllib.request.urlopen(self.url("/-/ready"), timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready in {timeout}s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def _server_config(tmp: Path) -> dict:
    queues = tmp / "queues.yaml"
    queues.write_text(yaml.safe_dump({"queues": {"throttled": {"max_jobs_per_second": 1}}}))
    return {
        "server": {"worker_threads": 8},
        "metrics": {"port": free_port(), "depth_interval_seconds": 0.2},
        "janitor": {
            "enabled": True,
            "interval_seconds": 0.2,
            "claim_timeout_seconds": 0.5,
            "succeeded_ttl_seconds": 0,
            "failed_ttl_seconds": 0,
        },
        # small caps, so a burst of concurrent calls is refused and counted
        "admission": {"max_concurrent_requests": 2, "max_concurrent_dequeues": 2},
        "queue_config": str(queues),
    }


class Workload(threading.Thread):
    """Enqueue, dequeue and ack (success and failure), leave claims to expire (janitor
    reclaims, TTL 0 purges), hit a rate-limited queue, name an unknown queue, and send bursts
    past the admission caps, until stopped."""

    def __init__(self, servers: str):
        super().__init__(name="dashboard-workload", daemon=True)
        self.client = PinLaterClient(servers, source="dashboard-test", pool_size=8, retries=0)
        self.stopping = threading.Event()
        self.rounds = 0

    def run(self) -> None:
        for queue in ("emails", "throttled"):
            self.client.create_queue(queue)
        with concurrent.futures.ThreadPoolExecutor(8) as burst:
            while not self.stopping.is_set():
                self._round(burst)
                self.rounds += 1
                self.stopping.wait(0.1)
        self.client.close()

    def _round(self, burst: concurrent.futures.ThreadPoolExecutor) -> None:
        calls = [
            lambda: self.client.enqueue("emails", [Job(b"x", attempts=2)] * 20),
            lambda: self.client.enqueue("throttled", [b"t"] * 5),
            self._dequeue_and_ack,
            lambda: self.client.dequeue("emails", 3),  # never acked: reclaimed by the janitor
            lambda: self.client.dequeue("throttled", 5),  # over 1 job/s: refused
            lambda: self.client.count("nosuch"),  # QUEUE_NOT_FOUND
        ]
        calls += [lambda: self.client.enqueue("emails", [b"b"])] * 8  # past the admission cap
        calls += [lambda: self.client.dequeue("emails", 1)] * 4
        for future in [burst.submit(call) for call in calls]:
            try:
                future.result(10)
            except PinLaterError:
                pass  # refusals and unknown queues are the point

    def _dequeue_and_ack(self) -> None:
        jobs = self.client.dequeue("emails", 10)
        half = len(jobs) // 2
        self.client.ack("emails", succeeded=jobs[:half], failed=jobs[half:])


def _evaluate(prometheus: Prometheus, expr: str) -> list[float]:
    data = prometheus.get("/api/v1/query", query=substitute(expr))
    if data["resultType"] == "scalar":
        return [float(data["result"][1])]
    return [float(sample["value"][1]) for sample in data["result"]]


def _variable_values(prometheus: Prometheus, definition: str) -> list[str]:
    """Grafana's label_values(SELECTOR, LABEL) through the labels API, as Grafana asks it."""
    inner = definition.removeprefix("label_values(").removesuffix(")")
    selector, _, label = inner.rpartition(",")
    start = str(time.time() - 600)
    return prometheus.get(
        f"/api/v1/label/{label.strip()}/values", **{"match[]": substitute(selector), "start": start}
    )


@pytest.fixture
def prometheus_binary() -> str:
    binary = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if binary is None:
        unavailable("prometheus is not installed (scripts/test installs Debian's `prometheus`)")
    return binary


def test_every_panel_query_returns_data_from_a_real_prometheus(tmp_path, prometheus_binary):
    board = dashboard()
    queries = panel_queries(board)
    with ServerProcess(_server_config(tmp_path), tmp_path / "server") as server:
        metrics_port = server.config["metrics"]["port"]
        prometheus = Prometheus(prometheus_binary, tmp_path, f"127.0.0.1:{metrics_port}")
        workload = Workload(f"{server.host}:{server.port}")
        try:
            prometheus.wait_ready()
            workload.start()
            missing = _wait_for_data(prometheus, queries)
            variables = {
                v["name"]: _variable_values(prometheus, v["definition"])
                for v in board["templating"]["list"]
                if v["type"] == "query"
            }
        finally:
            workload.stopping.set()
            workload.join(30)
            prometheus.stop()
    assert workload.rounds > 0
    assert not missing, "panels without data:\n" + "\n".join(
        f"  {title}: {expr}" for title, expr in missing
    )
    assert variables["job"] == ["pinlater"]
    assert {"emails", "throttled"} <= set(variables["queue"])


def _wait_for_data(prometheus: Prometheus, queries: list[tuple[str, str]]) -> list:
    """Poll until every query returns at least one finite sample; the queries still without
    data when DATA_TIMEOUT_S runs out."""
    pending = list(queries)
    deadline = time.monotonic() + DATA_TIMEOUT_S
    while pending and time.monotonic() < deadline:
        pending = [
            (title, expr)
            for title, expr in pending
            if not any(math.isfinite(v) for v in _evaluate(prometheus, expr))
        ]
        if pending:
            time.sleep(1)
    return pending
