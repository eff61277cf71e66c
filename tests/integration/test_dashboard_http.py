"""The dashboard (/ui/) over real HTTP against a real server (the App with SQLite shards), no
browser: every page renders real data, escaped; the login, the session cookie, CSRF, origin and
read-only rules; the actions change what the Thrift API then sees; bad input in a page's path or
query (unknown queue, bad descriptor, bad continuation, huge page size) is a clear 4xx page.
The same flows in a real browser: tests/browser/test_dashboard_browser.py."""

from __future__ import annotations

import html
import re
import time

import pytest

from pinlater.common.tls import client_context
from pinlater.config import TlsConfig
from pinlater.idl import PinLaterException
from pinlater.idl import pinlater_thrift as T
from pinlater.server.dashboard.app import CSP
from tests.fuzz.certs import OPENSSL, make_certs
from tests.support.admin_setup import CTX, admin_config, count, enqueue, fail_jobs, new_queue
from tests.support.dashboard_http import DashboardHttp
from tests.support.operating import OperatingServer, sample

PASSWORD = "dashboard-secret"
CONFIG = admin_config(PASSWORD)
HASH = CONFIG["admin"]["password_hash"]
PAGES = ["/ui/", "/ui/queues/{q}", "/ui/jobs", "/ui/jobs/{d}", "/ui/shards", "/ui/janitor"]
XSS = b"<script>window.__xss = 1</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with OperatingServer(tmp_path_factory.mktemp("dashboard"), CONFIG) as server:
        yield server


@pytest.fixture(scope="module")
def ui(srv) -> DashboardHttp:
    client = DashboardHttp(srv.metrics_url)
    assert client.login(PASSWORD)[0] == 303
    assert client.csrf
    return client


@pytest.fixture
def queue(srv) -> str:
    return new_queue(srv, "dq")


def wait_for(get, check, timeout: float = 5.0):
    """get() until check(value) holds (the overview's counts come from a background
    snapshot refreshed every 0.2 s here); the last value."""
    deadline = time.monotonic() + timeout
    value = get()
    while not check(value):
        assert time.monotonic() < deadline, value
        time.sleep(0.05)
        value = get()
    return value


def cell(page: str, state: str, priority: int) -> int:
    """A count from the queue page's state x priority table."""
    row = re.search(rf'<tr data-state="{state}">(.*?)</tr>', page, re.S)
    assert row, state
    value = re.search(rf'data-priority="{priority}">([0-9,]+)<', row.group(1))
    assert value, (state, priority)
    return int(value.group(1).replace(",", ""))


# ---------------------------------------------------------------- on/off and login


def test_the_dashboard_is_off_without_an_admin_password(tmp_path):
    with OperatingServer(tmp_path) as server:
        ui = DashboardHttp(server.metrics_url)
        for path in ("/", "/ui/", "/ui/login", "/ui/static/app.css"):
            status, text, _ = ui.get(path)
            assert status == 404 and "admin.password_hash" in text, path


def test_pages_need_a_login_and_come_back_after_it(srv):
    anonymous = DashboardHttp(srv.metrics_url)
    assert anonymous.get("/")[2]["location"] == "/ui/"
    for path in ("/ui/", "/ui/shards", "/ui/queues/x?state=failed"):
        status, _, headers = anonymous.get(path)
        assert status == 303 and headers["location"].startswith("/ui/login?next=/ui/"), path
    status, text, headers = anonymous.get("/ui/login?next=/ui/shards")
    assert status == 200 and 'type="password"' in text
    assert headers["content-security-policy"] == CSP
    status, _, headers = anonymous.login(PASSWORD, next_page="/ui/shards")
    assert (status, headers["location"]) == (303, "/ui/shards")


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/ui/",
        "https://evil.example/",
        "/metrics",
        "/ui\\..\\x",
        "/ui//evil.example/",
        "/ui/\\evil.example",
        "/ui/\r\nSet-Cookie: x=1",
        "/ui/ x",
        "",
    ],
)
def test_the_login_redirects_only_inside_the_dashboard(srv, target):
    status, _, headers = DashboardHttp(srv.metrics_url).login(PASSWORD, next_page=target)
    assert (status, headers["location"]) == (303, "/ui/")


def test_the_session_cookie_is_http_only_and_strict(srv):
    _, _, headers = DashboardHttp(srv.metrics_url).login(PASSWORD)
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie, "plain HTTP: a Secure cookie would never come back"


def test_a_wrong_password_is_refused_and_counted(srv):
    before = sample(srv.scrape(), "pinlater_admin_logins", outcome="wrong") or 0
    status, text, headers = DashboardHttp(srv.metrics_url).login("guess")
    assert status == 401 and "Wrong password" in text and "set-cookie" not in headers
    assert sample(srv.scrape(), "pinlater_admin_logins", outcome="wrong") == before + 1


def test_failed_logins_are_rate_limited_and_counted(tmp_path):
    config = {
        **CONFIG,
        "admin": {
            "password_hash": HASH,
            "password_failure_burst": 2,
            "password_failures_per_minute": 1,
            "password_checks_per_second": 1000,
        },
    }
    with OperatingServer(tmp_path, config) as server:
        ui = DashboardHttp(server.metrics_url)
        assert [ui.login("guess")[0] for _ in range(2)] == [401, 401]
        status, text, _ = ui.login("guess")
        assert status == 429 and "Too many attempts" in text
        assert ui.login(PASSWORD)[0] == 429, "this address must wait, even with the password"
        families = server.scrape()
        assert sample(families, "pinlater_admin_logins", outcome="wrong") == 2
        assert sample(families, "pinlater_admin_logins", outcome="client_limit") == 2


def test_a_dashboard_session_works_for_the_api_and_logout_ends_both(srv):
    ui = DashboardHttp(srv.metrics_url)
    ui.login(PASSWORD)
    status, body, _ = ui.http.get("/api/v1/session")
    assert status == 200 and body["csrf_token"] == ui.csrf
    assert ui.post("/ui/logout", csrf=False)[0] == 403
    status, _, headers = ui.post("/ui/logout")
    assert status == 303 and "Max-Age=0" in headers["set-cookie"]
    assert ui.get("/ui/")[0] == 303
    assert ui.http.get("/api/v1/session")[0] == 401


@pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command line")
def test_with_tls_the_dashboard_is_https_and_the_cookie_secure(tmp_path):
    certs = make_certs(tmp_path / "certs")
    tls = TlsConfig(enabled=True, cert_file=certs.server_cert, key_file=certs.server_key)
    with OperatingServer(tmp_path, {**CONFIG, "server": {"tls": tls.__dict__}}) as server:
        port = server.app.metrics_server.address[1]
        ui = DashboardHttp(f"https://127.0.0.1:{port}", context=client_context(certs.ca))
        status, _, headers = ui.login(PASSWORD)
        assert status == 303 and "; Secure" in headers["set-cookie"]
        assert ui.get("/ui/shards")[0] == 200


# ---------------------------------------------------------------- pages


def test_every_page_renders_with_a_strict_csp_and_no_inline_script(srv, ui, queue):
    (descriptor,) = enqueue(srv, queue, b"hello")
    for template in PAGES:
        path = template.format(q=queue, d=descriptor)
        status, text, headers = ui.get(path)
        assert status == 200, (path, text[:500])
        assert headers["content-type"] == "text/html; charset=utf-8"
        assert headers["content-security-policy"] == CSP
        assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
        assert headers["x-frame-options"] == "DENY"
        assert re.findall(r"<script[^>]*>", text) == ['<script src="/ui/static/app.js" defer>']
        assert " style=" not in text and "<style" not in text, path
        assert re.search(r"<[^>]*\son[a-z]+\s*=", text) is None, "no inline event handler"
    status, css, headers = ui.get("/ui/static/app.css")
    assert status == 200 and headers["content-type"].startswith("text/css") and "body" in css
    assert ui.get("/ui/static/app.js")[2]["content-type"].startswith("text/javascript")
    assert ui.get("/ui/static/nope.js")[0] == 404


def test_overview_lists_every_queue_with_counts_badges_rates_and_a_chart(srv, ui, queue):
    fail_jobs(srv, queue, 2)
    enqueue(srv, queue, b"a", b"b", b"c")
    ui.post(f"/ui/queues/{queue}/pause")

    def row() -> str:
        text = ui.get("/ui/")[1]
        found = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', text, re.S)
        return found.group(1) if found else ""

    text = wait_for(row, lambda r: '<td class="num" data-state="pending">3<' in r)
    assert '<td class="num" data-state="failed">2<' in text
    assert 'class="badge paused"' in text
    assert "<svg" in text or "no samples yet" in text
    ui.post(f"/ui/queues/{queue}/resume")
    assert 'class="badge ok"' in row()
    assert queue in ui.get(f"/ui/?filter={queue}")[1]
    assert f'data-queue="{queue}"' not in ui.get("/ui/?filter=zz-no-such")[1]


def test_queue_page_counts_match_get_job_count(srv, ui, queue):
    fail_jobs(srv, queue, 3)
    enqueue(srv, queue, b"p1", b"p1b", priority=1)
    enqueue(srv, queue, b"p2", priority=2)
    text = ui.get(f"/ui/queues/{queue}")[1]
    assert cell(text, "pending", 1) == 2 and cell(text, "pending", 2) == 1
    assert cell(text, "failed", 1) == count(srv, queue, T.PinLaterJobState.FAILED) == 3
    assert "Oldest runnable job" in text and f"{queue}:s" in text
    assert 'data-setting="claim_timeout_seconds"' in text and "default" in text


def test_the_job_browser_pages_through_250_jobs_with_the_continuation(srv, ui, queue):
    expected = set(enqueue(srv, queue, *[b"j%d" % i for i in range(250)]))
    seen: list[str] = []
    path = f"/ui/queues/{queue}?limit=100"
    pages = 0
    while path:
        status, text, _ = ui.get(path)
        assert status == 200
        pages += 1
        assert f'id="page-number">page {pages} ' in text
        seen += re.findall(r'<tr data-descriptor="([^"]+)">', text)
        found = re.search(r'<a href="([^"]+)" class="button next-page">', text)
        path = html.unescape(found.group(1)) if found else ""
    assert pages == 3 and len(seen) == 250 and set(seen) == expected


def test_bodies_and_statuses_are_escaped_and_truncated(srv, ui, queue):
    fail_jobs(srv, queue, 1, status="<script>window.__xss = 2</script>")
    enqueue(srv, queue, XSS + b"x" * 400)
    for query in ("", "?state=failed"):
        text = ui.get(f"/ui/queues/{queue}{query}")[1]
        assert "<script>window" not in text and "<img src=x" not in text
        assert "&lt;script&gt;window.__xss" in text
    text = ui.get(f"/ui/queues/{queue}")[1]
    assert "x" * 200 not in text and "…" in text, "a long body is cut in the list"
    (descriptor,) = re.findall(r'<tr data-descriptor="([^"]+)">', text)
    job = ui.get(f"/ui/jobs/{descriptor}")[1]
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in job and "<img src=x" not in job


def test_the_job_page_shows_every_field_and_the_lookup_form_finds_it(srv, ui, queue):
    (descriptor,) = enqueue(srv, queue, b"line1\nline2\xff")
    srv.client().dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=1))
    status, _, headers = ui.get(f"/ui/jobs?descriptor={descriptor}")
    assert status == 303 and headers["location"] == f"/ui/jobs/{descriptor}"
    text = ui.get(headers["location"])[1]
    assert 'id="job-state">in_progress<' in text
    assert "line1\\nline2\\xff" in text, "the body shown escaped"
    claim = ui.http.get(f"/api/v1/jobs/{descriptor}")[1]["claim"]
    assert claim and f"<tr><th>Claim</th><td>{html.escape(claim)}</td></tr>" in text


def test_shards_and_janitor_pages(srv, ui):
    text = ui.get("/ui/shards")[1]
    assert 'data-shard="1"' in text and 'data-shard="2"' in text and "settings home" in text
    text = ui.get("/ui/janitor")[1]
    assert "claim timeout seconds" in text and "Last passes" in text


# ---------------------------------------------------------------- actions


def test_actions_need_the_csrf_token_and_this_origin(srv, ui, queue):
    for fields in ({}, {"csrf_token": "wrong"}):
        status, text, _ = ui.post(f"/ui/queues/{queue}/pause", fields, csrf=False)
        assert status == 403 and "CSRF" in text
    status, _, _ = ui.post(f"/ui/queues/{queue}/pause", headers={"Origin": "http://evil.example"})
    assert status == 403
    assert srv.app.settings.paused(queue) is False


def test_pause_refuses_dequeues_and_resume_allows_them(srv, ui, queue):
    enqueue(srv, queue, b"x")
    text = ui.get(f"/ui/queues/{queue}/confirm?action=pause")[1]
    assert 'id="dry-run"' in text and 'action="/ui/queues/' in text
    status, _, headers = ui.post(f"/ui/queues/{queue}/pause")
    assert status == 303 and headers["location"] == f"/ui/queues/{queue}"
    text = ui.get(f"/ui/queues/{queue}")[1]
    assert 'id="flash">Paused' in text and 'class="badge paused"' in text
    with pytest.raises(PinLaterException) as refused:
        srv.client().dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=1))
    assert "paused" in refused.value.message
    ui.post(f"/ui/queues/{queue}/resume")
    reply = srv.client().dequeueJobs(CTX, T.PinLaterDequeueRequest(queueName=queue, limit=1))
    assert len(reply.jobs) == 1


def test_retry_shows_a_dry_run_count_then_retries(srv, ui, queue):
    fail_jobs(srv, queue, 4)
    text = ui.get(f"/ui/queues/{queue}/confirm?action=retry")[1]
    assert 'id="matching">4<' in text and 'id="would-change">4<' in text
    assert count(srv, queue, T.PinLaterJobState.FAILED) == 4, "the dry run changed nothing"
    assert ui.post(f"/ui/queues/{queue}/retry", {"limit": "3"})[0] == 303
    assert count(srv, queue, T.PinLaterJobState.FAILED) == 1
    assert count(srv, queue, T.PinLaterJobState.PENDING) == 3
    assert "Retried 3 failed job(s)" in ui.get(f"/ui/queues/{queue}")[1]


def test_delete_jobs_counts_first_then_deletes(srv, ui, queue):
    fail_jobs(srv, queue, 2)
    enqueue(srv, queue, b"keep")
    text = ui.get(f"/ui/queues/{queue}/confirm?action=delete-jobs&state=failed&priority=")[1]
    assert 'id="matching">2<' in text and 'name="state" value="failed"' in text
    assert ui.post(f"/ui/queues/{queue}/delete-jobs", {"state": "failed"})[0] == 303
    assert count(srv, queue, T.PinLaterJobState.FAILED) == 0
    assert count(srv, queue, T.PinLaterJobState.PENDING) == 1


def test_settings_are_set_shown_with_their_source_and_cleared(srv, ui, queue):
    fields = {"setting": "max_jobs_per_second", "value": "25"}
    assert ui.post(f"/ui/queues/{queue}/settings", fields)[0] == 303
    text = ui.get(f"/ui/queues/{queue}")[1]
    row = re.search(r'<tr data-setting="max_jobs_per_second">(.*?)</tr>', text, re.S).group(1)
    assert "<td>25</td>" in row and ">stored<" in row and "limited 25/s" in text
    ui.post(f"/ui/queues/{queue}/settings", {"setting": "max_jobs_per_second", "value": ""})
    assert srv.app.settings.effective(queue)["max_jobs_per_second"]["source"] == "default"
    status, text, _ = ui.post(f"/ui/queues/{queue}/settings", {"setting": "x", "value": "1"})
    assert status == 400


def test_read_only_mode_hides_and_refuses_actions(tmp_path):
    config = {**CONFIG, "dashboard": {"read_only": True}}
    with OperatingServer(tmp_path, config) as server:
        server.client().createQueue(CTX, "ro")
        ui = DashboardHttp(server.metrics_url)
        ui.login(PASSWORD)
        text = ui.get("/ui/queues/ro")[1]
        assert 'id="read-only"' in text
        assert "/confirm" not in text and 'name="setting"' not in text
        assert ui.get("/ui/queues/ro/confirm?action=pause")[0] == 403
        for action in ("pause", "retry", "delete-jobs", "settings"):
            status, text, _ = ui.post(f"/ui/queues/ro/{action}", {"state": "failed"})
            assert status == 403 and "read-only" in text, action
        assert server.app.settings.paused("ro") is False
        assert ui.post("/ui/logout")[0] == 303


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/ui/queues/no_such_queue", 404, "no_such_queue"),
        ("/ui/queues/bad%20name", 400, "queue"),
        ("/ui/queues/{q}?continuation=nonsense", 400, "continuation"),
        ("/ui/queues/{q}?limit=100000", 400, "limit"),
        ("/ui/queues/{q}?limit=-1", 400, "limit"),
        ("/ui/queues/{q}?priority=9", 400, "priority"),
        ("/ui/queues/{q}?state=lost", 400, "state"),
        ("/ui/queues/{q}?future=maybe", 400, "future"),
        ("/ui/queues/{q}?page=x", 400, "page"),
        ("/ui/queues/{q}?state=a&state=b", 400, "twice"),
        ("/ui/queues/{q}/confirm?action=explode", 400, "action"),
        ("/ui/queues/no_such_queue/confirm?action=pause", 404, "no_such_queue"),
        ("/ui/jobs/not-a-descriptor", 400, "descriptor"),
        ("/ui/jobs/{q}:s9:p1:1", 400, "shard"),
        ("/ui/jobs/{q}:s1:p1:999999", 404, "no job"),
        ("/ui/jobs/%ff", 400, "UTF-8"),
        ("/ui/nowhere", 404, "no such page"),
    ],
)
def test_bad_input_is_a_clear_4xx_page(ui, queue, path, status, message):
    got, text, headers = ui.get(path.format(q=queue))
    assert got == status, text[:800]
    found = re.search(r'id="error-message">(.*?)</p>', text, re.S)
    assert found and message.lower() in html.unescape(found.group(1)).lower()
    assert headers["content-security-policy"] == CSP


def test_bad_action_posts_are_4xx_and_change_nothing(srv, ui, queue):
    fail_jobs(srv, queue, 1)
    cases = [
        (f"/ui/queues/{queue}/explode", {}, 400),
        (f"/ui/queues/{queue}/retry", {"limit": "lots"}, 400),
        (f"/ui/queues/{queue}/delete-jobs", {"state": "nope"}, 400),
        (f"/ui/queues/{queue}/settings", {"setting": "max_jobs_per_second", "value": "-1"}, 400),
        ("/ui/queues/no_such_queue/pause", {}, 404),
        ("/ui/shards", {}, 405),
    ]
    for path, fields, status in cases:
        assert ui.post(path, fields)[0] == status, path
    assert count(srv, queue, T.PinLaterJobState.FAILED) == 1
    assert srv.app.settings.paused(queue) is False
