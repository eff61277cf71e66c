"""The admin API over real HTTP against a real server (the App with SQLite shards, the accept
loop, the HTTP listener): every endpoint, its bad input, authentication, CSRF and read-only
mode. No browser: tests/support/admin_http.AdminHttp speaks HTTP the way a page's fetch()
would, cookie and CSRF header included."""

from __future__ import annotations

import base64
import time

import pytest

from pinlater import __version__
from pinlater.idl import PinLaterException
from pinlater.idl import pinlater_thrift as T
from tests.conformance.faults import intercepted, lost_connection
from tests.support.admin_http import AdminHttp, error_code
from tests.support.admin_setup import (
    CTX,
    admin_config,
    count,
    dequeue,
    enqueue,
    fail_jobs,
    new_queue,
)
from tests.support.operating import OperatingServer, sample

PASSWORD = "admin-api-secret"
ADMIN = admin_config(PASSWORD, body_preview_bytes=32)
HASH = ADMIN["admin"]["password_hash"]
GET_PATHS = [
    "/api/v1/server",
    "/api/v1/session",
    "/api/v1/queues",
    "/api/v1/queues/q",
    "/api/v1/queues/q/jobs",
    "/api/v1/jobs/q:s1:p1:1",
    "/api/v1/shards",
    "/api/v1/janitor",
]
ACTIONS = ["pause", "resume", "settings", "retry", "delete-jobs", "purge", "delete"]


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with OperatingServer(tmp_path_factory.mktemp("admin"), ADMIN) as server:
        yield server


@pytest.fixture
def api(srv) -> AdminHttp:
    return AdminHttp(srv.metrics_url, basic=PASSWORD)


@pytest.fixture
def queue(srv) -> str:
    return new_queue(srv, "aq")


# ---------------------------------------------------------------- on/off and authentication


def test_the_api_is_off_without_an_admin_password(tmp_path):
    with OperatingServer(tmp_path) as server:
        status, body, _ = AdminHttp(server.metrics_url, basic="x").get("/api/v1/queues")
        assert (status, error_code(body)) == (404, "admin_api_disabled")
        assert "admin.password_hash" in body["error"]["message"]
        assert server.get("/metrics")[0] == 200


@pytest.mark.parametrize("path", GET_PATHS)
def test_every_read_needs_credentials(srv, path):
    status, body, headers = AdminHttp(srv.metrics_url).get(path)
    assert (status, error_code(body)) == (401, "unauthorized")
    assert "basic" not in headers.get("www-authenticate", "").lower(), "no browser prompt"


@pytest.mark.parametrize("action", ACTIONS)
def test_every_action_needs_credentials(srv, queue, action):
    status, body, _ = AdminHttp(srv.metrics_url).post(f"/api/v1/queues/{queue}/{action}", {})
    assert (status, error_code(body)) == (401, "unauthorized")


def test_login_sets_a_strict_http_only_session_cookie_and_returns_the_csrf_token(srv):
    api = AdminHttp(srv.metrics_url)
    status, body, headers = api.login(PASSWORD)
    assert status == 200 and len(body["csrf_token"]) >= 32 and body["read_only"] is False
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie, "plain HTTP: a Secure cookie would never come back"
    status, session, _ = api.get("/api/v1/session")
    assert status == 200 and session == {
        "via": "session",
        "csrf_token": body["csrf_token"],
        "read_only": False,
    }
    assert api.get("/api/v1/queues")[0] == 200


def test_a_wrong_login_is_refused(srv):
    status, body, headers = AdminHttp(srv.metrics_url).login("not-the-password")
    assert (status, error_code(body)) == (401, "unauthorized")
    assert "set-cookie" not in headers


@pytest.mark.parametrize("given", [None, "", 42, ["x"]])
def test_a_login_without_a_password_text_is_refused(srv, given):
    api = AdminHttp(srv.metrics_url)
    status, body, _ = api.post("/api/v1/login", {"password": given}, auth=False)
    assert (status, error_code(body)) == (401, "unauthorized")


def test_cookie_actions_need_the_csrf_token(srv, queue):
    api = AdminHttp(srv.metrics_url)
    api.login(PASSWORD)
    path = f"/api/v1/queues/{queue}/pause"
    status, body, _ = api.post(path, {}, csrf=False)
    assert (status, error_code(body)) == (403, "csrf")
    status, body, _ = api.post(path, {}, csrf=False, headers={"X-CSRF-Token": "forged"})
    assert (status, error_code(body)) == (403, "csrf")
    assert srv.app.settings.paused(queue) is False, "nothing happened"
    status, body, _ = api.post(path, {})
    assert status == 200 and body["settings"]["paused"]["value"] is True


def test_every_post_must_be_json_from_this_origin(srv, queue):
    api = AdminHttp(srv.metrics_url, basic=PASSWORD)
    path = f"/api/v1/queues/{queue}/pause"
    status, body, _ = api.post(path, raw=b"{}", content_type="text/plain")
    assert (status, error_code(body)) == (415, "unsupported_media_type")
    status, body, _ = api.post(path, {}, headers={"Origin": "http://evil.example"})
    assert (status, error_code(body)) == (403, "forbidden_origin")
    assert srv.app.settings.paused(queue) is False
    same = f"http://{api.host}:{api.port}"
    assert api.post(path, {}, headers={"Origin": same})[0] == 200


def test_logout_ends_the_session(srv):
    api = AdminHttp(srv.metrics_url)
    api.login(PASSWORD)
    status, body, headers = api.post("/api/v1/logout", {})
    assert status == 200 and body == {"logged_out": True}
    assert "Max-Age=0" in headers["set-cookie"]
    assert api.get("/api/v1/queues")[0] == 401, "the old cookie no longer works"


def test_basic_auth_works_without_csrf_and_a_wrong_one_is_refused(srv, queue):
    status, _, _ = AdminHttp(srv.metrics_url, basic=PASSWORD).post(
        f"/api/v1/queues/{queue}/pause", {}
    )
    assert status == 200
    status, body, _ = AdminHttp(srv.metrics_url, basic="wrong").get("/api/v1/queues")
    assert (status, error_code(body)) == (401, "unauthorized")
    for header in ("Bearer abc", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode()):
        status, body, _ = AdminHttp(srv.metrics_url).get(
            "/api/v1/queues", headers={"Authorization": header}
        )
        assert (status, error_code(body)) == (401, "unauthorized"), header


def test_failed_logins_are_rate_limited_per_address_and_counted(tmp_path):
    config = {
        **ADMIN,
        "admin": {
            "password_hash": HASH,
            "password_failure_burst": 3,
            "password_failures_per_minute": 1,
            "password_checks_per_second": 1000,
        },
    }
    with OperatingServer(tmp_path, config) as server:
        api = AdminHttp(server.metrics_url)
        for _ in range(3):
            assert api.login("guess")[0] == 401
        status, body, headers = api.login("guess")
        assert (status, error_code(body)) == (429, "too_many_attempts")
        assert headers["retry-after"] == "60"
        status, body, _ = api.login(PASSWORD)  # even the right one: this address must wait
        assert (status, error_code(body)) == (429, "too_many_attempts")
        status, _, _ = AdminHttp(server.metrics_url, basic="guess").get("/api/v1/queues")
        assert status == 429, "basic auth shares the budget"
        families = server.scrape()
        assert sample(families, "pinlater_admin_logins", outcome="wrong") == 3
        assert sample(families, "pinlater_admin_logins", outcome="client_limit") == 3


def test_read_only_mode_refuses_every_action_and_serves_reads(tmp_path):
    with OperatingServer(tmp_path, {**ADMIN, "dashboard": {"read_only": True}}) as server:
        server.client().createQueue(CTX, "ro")
        api = AdminHttp(server.metrics_url)
        status, body, _ = api.login(PASSWORD)
        assert status == 200 and body["read_only"] is True
        for action in ACTIONS:
            status, body, _ = api.post(f"/api/v1/queues/ro/{action}", {"password": PASSWORD})
            assert (status, error_code(body)) == (403, "read_only"), action
        status, body, _ = api.post("/api/v1/queues", {"name": "new"})
        assert (status, error_code(body)) == (403, "read_only")
        assert "new" not in server.app.store.queue_names()
        assert server.app.settings.paused("ro") is False
        for path in GET_PATHS:
            assert api.get(path.replace("/q", "/ro"))[0] in (200, 404), path
        assert api.get("/api/v1/server")[1]["read_only"] is True
        assert api.post("/api/v1/logout", {})[0] == 200


# ---------------------------------------------------------------- reads


def test_server_info_has_no_secrets(srv, api):
    status, body, _ = api.get("/api/v1/server")
    assert status == 200
    assert body["version"] == __version__
    assert body["backend"]["kind"] == "sqlite"
    assert [s["name"] for s in body["backend"]["shards"]] == ["1", "2"]
    assert body["priorities"] == 3 and body["uptime_seconds"] >= 0
    assert body["stored_settings"]["home_shard"] == "1"
    assert body["config"]["admin"]["password_set"] is True
    raw = str(body)
    assert HASH not in raw and "password_hash" not in raw and HASH.split("$")[2] not in raw


def test_queues_overview_counts_match_get_job_count_and_show_rates(srv, api, queue):
    fail_jobs(srv, queue, 2)
    enqueue(srv, queue, b"a", b"b", b"c")
    enqueue(srv, queue, b"later", runAfterTimestampMillis=int(time.time() * 1000) + 3_600_000)
    enqueue(srv, queue, b"p2", priority=2)

    def overview():
        status, body, _ = api.get("/api/v1/queues")
        assert status == 200
        found = [q for q in body["queues"] if q["name"] == queue]
        return found[0] if found and found[0]["counts"] else None

    def settled():  # a refresh after the last enqueue (the p2 job) and a rate sample
        q = overview()
        done = q and q["totals"]["failed"] == 2 and q["counts"]["pending"]["2"] == 1
        return q if done and q["rates"]["enqueued"]["1m"] else None

    q = wait_for(settled)
    assert q, overview()
    assert q["counts"]["pending"] == {"1": count(srv, queue, 0, priority=1), "2": 1, "3": 0}
    assert q["counts"]["pending_future"]["1"] == count(srv, queue, 0, future=True) == 1
    assert q["totals"]["failed"] == count(srv, queue, 3) == 2
    assert q["rates"]["enqueued"]["5m"] > 0 and set(q["rates"]) == {
        "enqueued",
        "dequeued",
        "acked_succeeded",
        "acked_failed",
    }
    assert q["paused"] is False and q["rate_limited"] is False
    assert q["settings"]["claim_timeout_seconds"] == {
        "value": 600.0,
        "source": "default",
        "stored": None,
        "file": None,
    }
    assert "series" not in q
    status, body, _ = api.get("/api/v1/queues?series=true")
    assert status == 200
    mine = next(x for x in body["queues"] if x["name"] == queue)
    assert sum(mine["series"]["enqueued"]) > 0


def test_one_queue_counts_now_and_names_its_oldest_pending_job(srv, api, queue):
    first, _ = enqueue(srv, queue, b"old", b"new")
    time.sleep(0.01)
    enqueue(srv, queue, b"p3", priority=3)
    status, body, _ = api.get(f"/api/v1/queues/{queue}")
    assert status == 200 and body["counts_live"] is True
    assert body["totals"]["pending"] == 3 and body["counts"]["pending"]["3"] == 1
    oldest = body["oldest_pending"]
    assert oldest["priority"] == 1 and oldest["age_seconds"] >= 0
    assert oldest["descriptor"] == first, "the first of the oldest batch"
    assert set(body["series"]) == {"enqueued", "dequeued", "acked_succeeded", "acked_failed"}


def test_one_queue_bad_input(api):
    status, body, _ = api.get("/api/v1/queues/nosuch")
    assert (status, error_code(body)) == (404, "queue_not_found")
    status, body, _ = api.get("/api/v1/queues/bad-name!")
    assert (status, error_code(body)) == (400, "queue_name_invalid")
    status, body, _ = api.get("/api/v1/queues/" + "x" * 200)
    assert (status, error_code(body)) == (400, "queue_name_too_long")
    status, body, _ = api.get("/api/v1/queues/%ff")
    assert status == 400


def test_jobs_page_through_250_with_the_continuation(srv, api, queue):
    made = set()
    for start in range(0, 250, 100):
        made |= set(enqueue(srv, queue, *[b"j%d" % i for i in range(start, min(250, start + 100))]))
    seen: list[str] = []
    continuation = None
    pages = 0
    while True:
        path = f"/api/v1/queues/{queue}/jobs?state=pending&limit=100"
        if continuation:
            path += f"&continuation={continuation}"
        status, body, _ = api.get(path)
        assert status == 200, body
        seen += [job["descriptor"] for job in body["jobs"]]
        pages += 1
        continuation = body["continuation"]
        if continuation is None:
            break
    assert pages == 3 and len(seen) == 250 and set(seen) == made


def test_jobs_show_every_field_and_a_safe_escaped_truncated_body(srv, api, queue):
    hostile = b"<script>alert(1)</script>\x00\xff\\\xe2\x80\xae"
    long_body = b"x" * 100
    (d_hostile,) = enqueue(srv, queue, hostile, customStatus="<b>status</b>")
    (d_long,) = enqueue(srv, queue, long_body)
    status, body, _ = api.get(f"/api/v1/queues/{queue}/jobs")
    assert status == 200
    jobs = {job["descriptor"]: job for job in body["jobs"]}
    job = jobs[d_hostile]
    assert job["body"] == {
        "preview": "<script>alert(1)</script>\\x00\\xff\\\\\\u202e",
        "size_bytes": len(hostile),
        "truncated": False,
    }
    assert job["custom_status"] == "<b>status</b>" and job["state"] == "pending"
    assert set(job) == {
        "descriptor",
        "queue",
        "shard",
        "priority",
        "local_id",
        "state",
        "attempts_allowed",
        "attempts_remaining",
        "custom_status",
        "created_at_ms",
        "run_after_ms",
        "updated_at_ms",
        "claim",
        "body",
    }
    assert jobs[d_long]["body"] == {"preview": "x" * 32, "size_bytes": 100, "truncated": True}


def test_jobs_filter_by_state_priority_future_and_body(srv, api, queue):
    failed = set(fail_jobs(srv, queue, 2))
    (p2,) = enqueue(srv, queue, b"two", priority=2)
    (future,) = enqueue(srv, queue, b"fut", runAfterTimestampMillis=int(time.time() * 1e3) + 9e6)
    (match,) = enqueue(srv, queue, b"needle")

    def listed(query: str) -> set[str]:
        status, body, _ = api.get(f"/api/v1/queues/{queue}/jobs?{query}")
        assert status == 200, body
        return {job["descriptor"] for job in body["jobs"]}

    assert listed("state=failed") == failed
    assert listed("state=FAILED&priority=1") == failed
    assert listed("state=pending&priority=2") == {p2}
    assert listed("state=pending&future=true") == {future}
    assert listed("state=pending&body_regex=need") == {match}


@pytest.mark.parametrize(
    "query,status,code",
    [
        ("continuation=garbage", 400, "bad_continuation"),
        ("continuation=1:9:1:1", 200, None),  # well-formed: a shard we do not have is skipped
        ("limit=100000", 400, "invalid_request"),
        ("limit=501", 400, "invalid_request"),
        ("limit=0", 400, "invalid_request"),
        ("limit=-3", 400, "invalid_request"),
        ("limit=abc", 400, "invalid_request"),
        ("limit=" + "9" * 40, 400, "invalid_request"),
        ("state=bogus", 400, "invalid_request"),
        ("priority=9", 400, "priority_not_supported"),
        ("priority=x", 400, "invalid_request"),
        ("future=maybe", 400, "invalid_request"),
        ("limit=1&limit=2", 400, "invalid_request"),
        ("body_regex=(", 400, "invalid_request"),
        ("&".join(f"k{i}=1" for i in range(30)), 400, "invalid_request"),
    ],
)
def test_jobs_bad_input_is_a_clear_4xx(api, queue, query, status, code):
    got, body, _ = api.get(f"/api/v1/queues/{queue}/jobs?{query}")
    assert got == status, body
    if code:
        assert error_code(body) == code and body["error"]["message"]


def test_jobs_of_an_unknown_queue_is_404(api):
    status, body, _ = api.get("/api/v1/queues/nosuch/jobs")
    assert (status, error_code(body)) == (404, "queue_not_found")


def test_one_job_has_everything_lookup_returns_with_the_claim(srv, api, queue):
    body_bytes = b"\x00binary\xff body"
    (d,) = enqueue(srv, queue, body_bytes, customStatus="s")
    claim = dequeue(srv, queue).jobMetadata[d].claimDescriptor
    status, job, _ = api.get(f"/api/v1/jobs/{d}")
    assert status == 200
    info = srv.client().lookupJobs(
        CTX, T.PinLaterLookupJobRequest(jobDescriptors=[d], includeBody=True)
    )[d]
    assert job["claim"] == claim == info.claimDescriptor
    assert job["state"] == "in_progress" and job["attempts_remaining"] == info.attemptsRemaining
    assert job["created_at_ms"] == info.createdAtTimestampMillis
    assert job["updated_at_ms"] == info.updatedAtTimestampMillis
    assert base64.b64decode(job["body"]["base64"]) == body_bytes == info.body


@pytest.mark.parametrize(
    "descriptor,status,code",
    [
        ("garbage", 400, "invalid_request"),
        ("q:s1:p1:x", 400, "invalid_request"),
        ("q:s1:p9:1", 400, "priority_not_supported"),
        ("q:s99:p1:1", 400, "invalid_request"),  # no such shard
        ("nosuch:s1:p1:1", 404, "queue_not_found"),
        ("bad-queue:s1:p1:1", 400, "invalid_request"),
    ],
)
def test_one_job_bad_input(api, descriptor, status, code):
    got, body, _ = api.get(f"/api/v1/jobs/{descriptor}")
    assert (got, error_code(body)) == (status, code), body


def test_a_job_that_does_not_exist_is_404(api, queue):
    status, body, _ = api.get(f"/api/v1/jobs/{queue}:s1:p1:999999")
    assert (status, error_code(body)) == (404, "job_not_found")


def test_shards_show_health_latency_and_jobs_held(srv, api, queue):
    enqueue(srv, queue, b"held")

    def shards():
        body = api.get("/api/v1/shards")[1]
        held = sum(s["jobs"]["pending"] for s in body["shards"] if s["jobs"])
        return body if held >= 1 else None

    body = wait_for(shards)
    assert body, api.get("/api/v1/shards")
    by_name = {s["name"]: s for s in body["shards"]}
    assert set(by_name) == {"1", "2"}
    one = by_name["1"]
    assert one["healthy"] and one["takes_enqueues"] and not one["dequeue_only"]
    assert one["settings_home"] and not by_name["2"]["settings_home"]
    assert one["calls"] > 0 and one["latency_ms"]["samples"] > 0 and one["latency_ms"]["p50"] >= 0
    assert one["recent_errors"] == [] and one["jobs"]["total"] >= one["jobs"]["pending"]


def test_a_failing_shard_leaves_the_overview_and_queue_views_working(srv, api, queue):
    enqueue(srv, queue, b"x")
    wait_for(lambda: srv.app.depth.snapshot()[0].get((queue, "pending", 1)))
    with (
        intercepted(srv.app.store, "queue_names", fail_with=lost_connection, shards=["2"]),
        intercepted(srv.app.store, "count", fail_with=lost_connection, shards=["2"]),
        intercepted(srv.app.store, "queue_stats", fail_with=lost_connection, shards=["2"]),
        intercepted(srv.app.store, "scan", fail_with=lost_connection, shards=["2"]),
    ):
        status, body, _ = api.get("/api/v1/queues")
        assert status == 200 and queue in [q["name"] for q in body["queues"]]
        status, body, _ = api.get(f"/api/v1/queues/{queue}")
        assert status == 200 and body["counts_live"] is False, "the last background counts"
        assert body["totals"]["pending"] == 1
        status, body, _ = api.get(f"/api/v1/queues/{queue}/jobs")
        assert (status, error_code(body)) == (503, "storage_unavailable")
        assert "shard 2" in body["error"]["message"]
        shards = {s["name"]: s for s in api.get("/api/v1/shards")[1]["shards"]}
        assert "connection lost (injected)" in shards["2"]["recent_errors"][0]["message"]
        assert shards["2"]["errors"] >= 1 and shards["1"]["recent_errors"] == []


def test_settings_changes_are_refused_while_the_home_shard_cannot_be_written(srv, api, queue):
    api.post(f"/api/v1/queues/{queue}/settings", {"max_jobs_per_second": 3})
    with intercepted(srv.app.store, "write_settings", fail_with=lost_connection, shards=["1"]):
        status, body, _ = api.post(f"/api/v1/queues/{queue}/pause", {})
        assert (status, error_code(body)) == (503, "storage_unavailable")
        assert srv.app.settings.paused(queue) is False
        status, body, _ = api.post(f"/api/v1/queues/{queue}/delete", {"password": PASSWORD})
        assert status == 200 and body["deleted"] == queue, "the queue goes all the same"
        assert "stored settings could not be removed" in body["note"]
    assert queue not in srv.app.store.queue_names()
    assert srv.app.settings.effective(queue)["max_jobs_per_second"]["value"] == 3, "kept"
    srv.app.settings.forget(queue, "test")


def test_janitor_shows_its_last_passes(tmp_path):
    config = {**ADMIN, "janitor": {"enabled": True, "interval_seconds": 0.1}}
    qc = tmp_path / "queues.yaml"
    qc.write_text("queues: {jq: {claim_timeout_seconds: 0.05}}\n")
    with OperatingServer(tmp_path, {**config, "queue_config": str(qc)}) as server:
        server.client().createQueue(CTX, "jq")
        enqueue(server, "jq", b"abandoned")
        assert dequeue(server, "jq").jobs
        api = AdminHttp(server.metrics_url, basic=PASSWORD)

        def reclaimed():
            body = api.get("/api/v1/janitor")[1]
            return body if body["totals"].get("reclaimed_to_pending") else None

        body = wait_for(reclaimed)
        assert body, api.get("/api/v1/janitor")
        assert body["enabled"] and body["interval_seconds"] == 0.1 and body["passes"] >= 1
        run = next(r for r in body["runs"] if r["queues"])
        assert run["queues"]["jq"]["reclaimed_to_pending"] == 1 and run["error"] is None
        assert run["seconds"] >= 0 and run["started_at_ms"] > 0


# ---------------------------------------------------------------- actions


def test_create_queue(srv, api):
    status, body, _ = api.post("/api/v1/queues", {"name": "created_by_api"})
    assert (status, body) == (201, {"created": "created_by_api"})
    assert "created_by_api" in srv.app.store.queue_names()
    names = [q["name"] for q in api.get("/api/v1/queues")[1]["queues"]]
    assert "created_by_api" in names


@pytest.mark.parametrize(
    "body,code",
    [
        ({"name": "bad name"}, "queue_name_invalid"),
        ({}, "queue_name_invalid"),
        ({"name": "ok", "extra": 1}, "invalid_request"),
    ],
)
def test_create_queue_bad_input(api, body, code):
    status, answer, _ = api.post("/api/v1/queues", body)
    assert (status, error_code(answer)) == (400, code)


def test_retry_failed_counts_first_then_retries(srv, api, queue):
    fail_jobs(srv, queue, 3)
    status, body, _ = api.post(f"/api/v1/queues/{queue}/retry", {"dry_run": True})
    assert status == 200 and body["dry_run"] and body["matching"] == 3
    assert count(srv, queue, 3) == 3, "a dry run changes nothing"
    status, body, _ = api.post(f"/api/v1/queues/{queue}/retry", {"limit": 2, "attempts": 3})
    assert status == 200 and body["retried"] == 2 and body["by_priority"]["1"] == 2
    assert count(srv, queue, 3) == 1 and count(srv, queue, 0) == 2
    assert api.post(f"/api/v1/queues/{queue}/retry", {})[1]["retried"] == 1


def test_delete_jobs_is_a_dry_run_unless_told(srv, api, queue):
    enqueue(srv, queue, b"keep", b"drop1", b"drop2")
    path = f"/api/v1/queues/{queue}/delete-jobs"
    status, body, _ = api.post(path, {"state": "pending", "body_regex": "^drop"})
    assert status == 200 and body["dry_run"] is True and body["matching"] == 2
    assert count(srv, queue, 0) == 3
    status, body, _ = api.post(
        path, {"state": "pending", "body_regex": "^drop", "dry_run": False, "limit": 1}
    )
    assert status == 200 and body["deleted"] == 1 and count(srv, queue, 0) == 2
    status, body, _ = api.post(path, {"state": "pending", "body_regex": "^drop", "dry_run": False})
    assert body["deleted"] == 1 and count(srv, queue, 0) == 1


def test_delete_jobs_spends_its_limit_over_the_priorities_in_order(srv, api, queue):
    enqueue(srv, queue, b"a1", b"a2", priority=1)
    enqueue(srv, queue, b"b1", b"b2", priority=2)
    enqueue(srv, queue, b"c1", priority=3)
    path = f"/api/v1/queues/{queue}/delete-jobs"
    status, body, _ = api.post(path, {"state": "pending", "dry_run": False, "limit": 3})
    assert status == 200 and body["deleted"] == 3
    assert body["by_priority"] == {"1": 2, "2": 1}  # priority 3 not reached
    left = [count(srv, queue, 0, priority=p) for p in (1, 2, 3)]
    assert left == [0, 1, 1]


def test_purge_a_state(srv, api, queue):
    fail_jobs(srv, queue, 4)
    enqueue(srv, queue, b"pending")
    path = f"/api/v1/queues/{queue}/purge"
    status, body, _ = api.post(path, {"state": "failed"})
    assert status == 200 and body["dry_run"] and body["matching"] == 4
    status, body, _ = api.post(path, {"state": "failed", "dry_run": False})
    assert status == 200 and body["deleted"] == 4 and body["done"] is True
    assert count(srv, queue, 3) == 0 and count(srv, queue, 0) == 1


@pytest.mark.parametrize(
    "action,body",
    [
        ("delete-jobs", {}),
        ("delete-jobs", {"state": "nope"}),
        ("delete-jobs", {"state": "failed", "limit": 0}),
        ("delete-jobs", {"state": "failed", "limit": "10"}),
        ("delete-jobs", {"state": "failed", "dry_run": "no"}),
        ("delete-jobs", {"state": "failed", "body_regex": "("}),
        ("delete-jobs", {"state": "failed", "priority": 7}),
        ("purge", {"state": "failed", "limit": 5}),
        ("retry", {"attempts": 0}),
        ("retry", {"run_after_ms": -1}),
        ("pause", {"extra": True}),
        ("settings", {}),
        ("settings", {"max_jobs_per_second": -1}),
        ("settings", {"max_jobs_per_second": "5"}),
        ("settings", {"max_jobs_per_second": True}),
        ("settings", {"max_jobs_per_second": 1e12}),
        ("settings", {"claim_timeout_seconds": 0}),
        ("settings", {"paused": True}),
    ],
)
def test_actions_bad_input_is_400_and_changes_nothing(srv, api, queue, action, body):
    fail_jobs(srv, queue, 1)
    status, answer, _ = api.post(f"/api/v1/queues/{queue}/{action}", body)
    assert status == 400, answer
    assert answer["error"]["message"]
    assert count(srv, queue, 3) == 1
    assert srv.app.settings.effective(queue)["max_jobs_per_second"]["source"] == "default"


@pytest.mark.parametrize("action", ACTIONS)
def test_actions_on_an_unknown_queue_are_404(api, action):
    status, body, _ = api.post(f"/api/v1/queues/nosuch/{action}", {})
    assert (status, error_code(body)) == (404, "queue_not_found")


def test_pause_refuses_dequeues_and_resume_allows_them(srv, api, queue):
    enqueue(srv, queue, b"x")
    status, body, _ = api.post(f"/api/v1/queues/{queue}/pause", {})
    assert status == 200 and body["settings"]["paused"] == {"value": True, "source": "stored"}
    assert body["settings"]["updated_by"].startswith("127.0.0.1")
    with pytest.raises(PinLaterException) as refused:
        dequeue(srv, queue)
    assert refused.value.errorCode == T.ErrorCode.DEQUEUE_RATE_LIMITED
    assert "paused" in refused.value.message
    listed = next(q for q in api.get("/api/v1/queues")[1]["queues"] if q["name"] == queue)
    assert listed["paused"] is True
    status, body, _ = api.post(f"/api/v1/queues/{queue}/resume", {})
    assert status == 200 and body["settings"]["paused"]["value"] is False and "note" not in body
    assert len(dequeue(srv, queue).jobs) == 1


def test_settings_set_and_clear_rate_limit_and_claim_timeout(srv, api, queue):
    path = f"/api/v1/queues/{queue}/settings"
    status, body, _ = api.post(path, {"max_jobs_per_second": 5, "claim_timeout_seconds": 30})
    assert status == 200
    settings = body["settings"]
    assert settings["max_jobs_per_second"] == {
        "value": 5,
        "source": "stored",
        "stored": 5,
        "file": None,
    }
    assert settings["claim_timeout_seconds"]["value"] == 30
    assert settings["server_share_jobs_per_second"] == 5
    assert srv.app.limiter.shares()[queue] == 5
    assert srv.app.settings.claim_timeout_for(queue) == 30, "the janitor uses it"
    status, body, _ = api.post(path, {"max_jobs_per_second": None})
    assert body["settings"]["max_jobs_per_second"]["source"] == "default"
    assert body["settings"]["claim_timeout_seconds"]["source"] == "stored", "the other one stays"
    assert queue not in srv.app.limiter.shares()
    api.post(path, {"claim_timeout_seconds": None})
    assert srv.app.settings.effective(queue)["updated_at_ms"] is None, "nothing stored any more"


def test_stored_settings_override_the_queue_config_file(tmp_path):
    qc = tmp_path / "queues.yaml"
    qc.write_text("queues: {filed: {max_jobs_per_second: 7}, stopped: {max_jobs_per_second: 0}}\n")
    with OperatingServer(tmp_path, {**ADMIN, "queue_config": str(qc)}) as server:
        for name in ("filed", "stopped"):
            server.client().createQueue(CTX, name)
        api = AdminHttp(server.metrics_url, basic=PASSWORD)
        rate = api.get("/api/v1/queues/filed")[1]["settings"]["max_jobs_per_second"]
        assert rate == {"value": 7, "source": "file", "stored": None, "file": 7}
        body = api.post("/api/v1/queues/filed/settings", {"max_jobs_per_second": 2})[1]
        assert body["settings"]["max_jobs_per_second"] == {
            "value": 2,
            "source": "stored",
            "stored": 2,
            "file": 7,
        }
        assert server.app.limiter.shares()["filed"] == 2
        body = api.post("/api/v1/queues/filed/settings", {"max_jobs_per_second": None})[1]
        assert body["settings"]["max_jobs_per_second"]["source"] == "file"
        assert server.app.limiter.shares()["filed"] == 7
        paused = api.get("/api/v1/queues/stopped")[1]["settings"]["paused"]
        assert paused == {"value": True, "source": "file"}
        status, body, _ = api.post("/api/v1/queues/stopped/resume", {})
        assert status == 200 and body["settings"]["paused"]["value"] is True
        assert "still paused" in body["note"]
        api.post("/api/v1/queues/stopped/settings", {"max_jobs_per_second": 3})
        assert server.app.settings.paused("stopped") is False, "a stored rate overrides the 0"


def test_delete_queue_needs_the_password_again(srv, queue):
    api = AdminHttp(srv.metrics_url)
    api.login(PASSWORD)
    path = f"/api/v1/queues/{queue}/delete"
    api.post(f"/api/v1/queues/{queue}/pause", {})
    status, body, _ = api.post(path, {})
    assert (status, error_code(body)) == (400, "invalid_request")
    status, body, _ = api.post(path, {"password": "wrong"})
    assert (status, error_code(body)) == (403, "password_invalid")
    assert queue in srv.app.store.queue_names()
    status, body, _ = api.post(path, {"password": PASSWORD})
    assert (status, body) == (200, {"deleted": queue})
    assert queue not in srv.app.store.queue_names()
    assert srv.app.settings.effective(queue)["paused"]["value"] is False, "settings forgotten"
    assert api.get(f"/api/v1/queues/{queue}")[0] == 404


# ---------------------------------------------------------------- HTTP-level errors


def test_unknown_endpoints_and_methods(api):
    status, body, _ = api.get("/api/v1/nothing")
    assert (status, error_code(body)) == (404, "not_found")
    status, body, headers = api.request("DELETE", "/api/v1/queues")
    assert (status, error_code(body)) == (405, "method_not_allowed")
    assert headers["allow"] == "GET, POST"
    status, body, headers = api.request("PUT", "/api/v1/server")
    assert status == 405 and headers["content-type"] == "application/json"
    status, body, headers = api.request(
        "OPTIONS", "/api/v1/queues", headers={"Origin": "http://evil.example"}
    )
    assert (status, error_code(body)) == (405, "method_not_allowed")
    assert "access-control-allow-origin" not in headers


@pytest.mark.parametrize(
    "raw,status",
    [
        (b"{not json", 400),
        (b"[1, 2]", 400),
        (b'"text"', 400),
        (b"[" * 100_000, 413),
        (b'{"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", 400),
    ],
)
def test_bad_bodies_are_4xx_never_500(api, queue, raw, status):
    got, body, _ = api.post(f"/api/v1/queues/{queue}/pause", raw=raw)
    assert got == status, body
    assert "Traceback" not in str(body)


def test_a_chunked_body_is_refused(api, queue):
    status, _, _ = api.post(
        f"/api/v1/queues/{queue}/pause",
        raw=b"2\r\n{}\r\n0\r\n\r\n",
        headers={"Transfer-Encoding": "chunked"},
    )
    assert status == 411


def test_answers_are_not_cached_sniffed_or_framed(api):
    _, _, headers = api.get("/api/v1/queues")
    assert headers["cache-control"] == "no-store"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["content-type"] == "application/json"


HOSTILE_VALUES = [
    None,
    True,
    -1,
    0,
    2**70,
    1e308,
    "x" * 5000,
    "\u0000\u202e",
    [],
    {},
    [1],
    {"a": 1},
]
ACTION_FIELDS = {
    "retry": ["priority", "limit", "attempts", "run_after_ms", "dry_run"],
    "delete-jobs": ["state", "priority", "body_regex", "limit", "dry_run"],
    "purge": ["state", "dry_run"],
    "settings": ["max_jobs_per_second", "claim_timeout_seconds"],
    "delete": ["password"],
}


@pytest.mark.parametrize("action", sorted(ACTION_FIELDS))
def test_hostile_field_values_never_cause_a_500(srv, api, queue, action):
    enqueue(srv, queue, b"keep")
    for field in ACTION_FIELDS[action]:
        for value in HOSTILE_VALUES:
            body = {field: value}
            if action in ("delete-jobs", "purge") and field != "state":
                body["state"] = "failed"  # the hostile value lands in the other field
            status, answer, _ = api.post(f"/api/v1/queues/{queue}/{action}", body)
            assert status < 500, (action, body, answer)
            assert status in (200, 400, 403, 429), (action, body, answer)
    assert count(srv, queue, 0) == 1, "the pending job survived every attempt"
    assert queue in srv.app.store.queue_names()


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/queues/%00",
        "/api/v1/queues/%C3%A9",
        "/api/v1/queues/" + "a" * 5000,
        "/api/v1/jobs/%ff%fe",
        "/api/v1/jobs/" + "q:s1:p1:" + "9" * 30,
        "/api/v1/queues/q/jobs?limit=%00",
        "/api/v1/queues/q/jobs?state=%ff",
        "/api/v1/queues/q/jobs?continuation=" + "9" * 5000,
        "/api/v1/../../etc/passwd",
        "/api/v1/queues/q/jobs/extra",
    ],
)
def test_hostile_paths_never_cause_a_500(api, path):
    status, body, _ = api.get(path)
    assert 400 <= status < 500, (path, status, body)
