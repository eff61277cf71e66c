"""The dashboard in a real browser (headless Chromium driven by Selenium) against a real server
process with real data, once per backend (SQLite, Redis, MariaDB): log in, counts equal to
getJobCount, paging through 250 jobs, a job's page, retrying failed jobs, pausing (a dequeue is
refused) and resuming, an XSS body shown as text with no script run, a POST without the CSRF
token refused, and read-only mode (a second server on the same storage) hiding and refusing
actions.

Bounded: one server and one browser per backend, every wait at most WAIT_SECONDS. Bad input
without a browser: tests/integration/test_dashboard_http.py."""

from __future__ import annotations

import contextlib
import re

import pytest

from pinlater.common.passwords import hash_password
from pinlater.idl import PinLaterException, RequestContext
from pinlater.idl import pinlater_thrift as T
from tests.support.browser import chrome, wait_until
from tests.support.server_process import ServerProcess, free_port
from tests.support.storage import KINDS, backend_section

PASSWORD = "browser-secret"
CTX = RequestContext(source="browser-test")
XSS_BODY = b'<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
XSS_STATUS = '<img src=x onerror="window.__xss = 3"><script>window.__xss = 4</script>'


def _config(backend: dict, read_only: bool = False) -> dict:
    return {
        "backend": backend,
        "janitor": {"enabled": False},
        "admin": {
            "password_hash": hash_password(PASSWORD, iterations=1000),
            "password_checks_per_second": 100,
            "password_failure_burst": 100,
        },
        "metrics": {"port": free_port(), "depth_interval_seconds": 0.2},
        "dashboard": {"read_only": read_only, "rate_sample_seconds": 0.2},
    }


class Site:
    """A server process, its dashboard URL and a Thrift client."""

    def __init__(self, proc: ServerProcess):
        self.proc = proc
        self.url = f"http://127.0.0.1:{proc.config['metrics']['port']}"
        self.client = proc.client()

    def enqueue(self, queue: str, *bodies: bytes, **fields) -> list[str]:
        jobs = [T.PinLaterJob(body=b, **fields) for b in bodies]
        request = T.PinLaterEnqueueRequest(queueName=queue, jobs=jobs)
        return self.client.enqueueJobs(CTX, request).jobDescriptors

    def fail(self, queue: str, n: int, status: str | None = None) -> None:
        """n jobs that end FAILED (one attempt each, failure-acked); before other enqueues."""
        self.enqueue(queue, *[b"failing %d" % i for i in range(n)], numAttemptsAllowed=1)
        taken = self.client.dequeueJobs(
            CTX, T.PinLaterDequeueRequest(queueName=queue, limit=n)
        ).jobs
        acks = [T.PinLaterJobAckInfo(jobDescriptor=d, appendCustomStatus=status) for d in taken]
        self.client.ackDequeuedJobs(CTX, T.PinLaterJobAckRequest(queueName=queue, jobsFailed=acks))

    def count(self, queue: str, state: int, priority: int | None = None) -> int:
        request = T.PinLaterGetJobCountRequest(queueName=queue, jobState=state, priority=priority)
        return self.client.getJobCount(CTX, request)

    def dequeue_refused(self, queue: str) -> bool:
        request = T.PinLaterDequeueRequest(queueName=queue, limit=1, dryRun=True)
        try:
            self.client.dequeueJobs(CTX, request)
        except PinLaterException as exc:
            assert exc.errorCode == T.ErrorCode.DEQUEUE_RATE_LIMITED, exc
            return True
        return False


@pytest.fixture(scope="module", params=KINDS)
def sites(request, tmp_path_factory):
    """(the server, a read-only server on the same storage), one pair per backend."""
    tmp = tmp_path_factory.mktemp(f"browser-{request.param}")
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(backend_section(request.param, tmp))
        main = stack.enter_context(ServerProcess(_config(backend), tmp, name="rw"))
        ro = stack.enter_context(ServerProcess(_config(backend, True), tmp, name="ro"))
        pair = Site(main), Site(ro)
        yield pair
        for site in pair:
            site.client.close()


@pytest.fixture(scope="module")
def site(sites) -> Site:
    return sites[0]


@pytest.fixture(scope="module")
def browser():
    driver = chrome()
    yield driver
    driver.quit()


_names = iter(range(1_000_000))


@pytest.fixture
def queue(site) -> str:
    name = f"bq{next(_names)}"
    site.client.createQueue(CTX, name)
    return name


def by(css: str):
    from selenium.webdriver.common.by import By

    return By.CSS_SELECTOR, css


def visit(browser, site: Site, path: str) -> None:
    """Open `path`, logging in first when the dashboard asks for it."""
    browser.get(site.url + path)
    if browser.current_url.split("?")[0].endswith("/ui/login"):
        browser.find_element(*by("#password")).send_keys(PASSWORD)
        click(browser, "#login")
        assert "/ui/login" not in browser.current_url, "login"


def text_of(browser, css: str) -> str:
    """The element's text; found again if the page's auto-refresh replaced it meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(5):
        try:
            return browser.find_element(*by(css)).text
        except StaleElementReferenceException:
            continue
    return browser.find_element(*by(css)).text


def cell(browser, state: str, priority: int) -> int:
    return int(
        text_of(browser, f'tr[data-state="{state}"] td[data-priority="{priority}"]').replace(
            ",", ""
        )
    )


def click(browser, css: str) -> None:
    """Click a link or submit button and wait for the page it leads to."""
    old = browser.find_element(*by("html"))
    browser.find_element(*by(css)).click()
    wait_until(lambda: _stale(old), message="the next page")


def _stale(element) -> bool:
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.tag_name  # noqa: B018 - touching it raises once the page is gone
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        # chromedriver sometimes reports the same as an "unhandled inspector error" ("Node
        # with given id does not belong to the document") when the page went away between
        # its lookups
        if "inspector error" in str(exc) and "given id" in str(exc):
            return True
        raise
    return False


# ---------------------------------------------------------------- tests


def test_log_in_and_the_counts_match_get_job_count(browser, site, queue):
    site.fail(queue, 2)
    site.enqueue(queue, b"a", b"b", b"c", priority=1)
    site.enqueue(queue, b"d", priority=2)
    browser.delete_all_cookies()
    browser.get(site.url + "/")
    assert browser.current_url.endswith("/ui/login?next=/ui/")
    browser.find_element(*by("#password")).send_keys("wrong guess")
    click(browser, "#login")
    assert "Wrong password" in text_of(browser, "#login-error")
    browser.find_element(*by("#password")).send_keys(PASSWORD)
    click(browser, "#login")
    assert browser.current_url == site.url + "/ui/"
    cookie = browser.get_cookie("pinlater_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert browser.execute_script("return document.cookie") == "", "HttpOnly: no script sees it"

    def overview_pending() -> str:
        browser.refresh()  # the overview's counts come from a snapshot taken every 0.2 s
        rows = browser.find_elements(*by(f'tr[data-queue="{queue}"] td[data-state="pending"]'))
        return (
            text_of(browser, f'tr[data-queue="{queue}"] td[data-state="pending"]') if rows else ""
        )

    wait_until(lambda: overview_pending() == "4", message="overview pending count")
    failed = text_of(browser, f'tr[data-queue="{queue}"] td[data-state="failed"]')
    assert int(failed) == site.count(queue, T.PinLaterJobState.FAILED) == 2
    click(browser, f'tr[data-queue="{queue}"] td.qname a')
    for state, thrift_state in (
        ("pending", T.PinLaterJobState.PENDING),
        ("failed", T.PinLaterJobState.FAILED),
    ):
        for priority in (1, 2, 3):
            assert cell(browser, state, priority) == site.count(queue, thrift_state, priority)


def test_page_through_250_jobs_and_open_one(browser, site, queue):
    expected = set(site.enqueue(queue, *[b"job %d" % i for i in range(250)]))
    visit(browser, site, f"/ui/queues/{queue}")
    limit = browser.find_element(*by("#limit"))
    limit.clear()
    limit.send_keys("100")
    click(browser, "#jobs button[type=submit]")
    seen: list[str] = []
    for page in range(1, 10):
        assert text_of(browser, "#page-number").startswith(f"page {page} ")
        seen += browser.execute_script(  # read at once: an auto-refresh may replace the rows
            "return [...document.querySelectorAll('tr[data-descriptor]')]"
            ".map(row => row.dataset.descriptor)"
        )
        if not browser.find_elements(*by("a.next-page")):
            break
        click(browser, "a.next-page")
    assert page == 3 and len(seen) == 250 and set(seen) == expected
    descriptor = text_of(browser, "tr[data-descriptor] td a")
    click(browser, "tr[data-descriptor] td a")
    assert text_of(browser, "#job-state") == "pending"
    assert text_of(browser, "#job-body").startswith("job ")
    assert descriptor in browser.title


def test_retry_failed_jobs_and_see_the_counts_change(browser, site, queue):
    site.fail(queue, 3)
    visit(browser, site, f"/ui/queues/{queue}")
    assert cell(browser, "failed", 1) == 3
    click(browser, "#action-retry")
    assert text_of(browser, "#matching") == "3"
    assert site.count(queue, T.PinLaterJobState.FAILED) == 3, "the dry run changed nothing"
    click(browser, "#confirm")
    assert "Retried 3 failed job(s)" in text_of(browser, "#flash")
    assert cell(browser, "failed", 1) == 0 and cell(browser, "pending", 1) == 3
    assert site.count(queue, T.PinLaterJobState.PENDING) == 3


def test_pause_refuses_dequeues_and_resume_allows_them(browser, site, queue):
    site.enqueue(queue, b"waiting")
    visit(browser, site, f"/ui/queues/{queue}")
    click(browser, "#action-pause")
    assert "1 job(s) pending" in text_of(browser, "#dry-run")
    click(browser, "#confirm")
    assert browser.find_elements(*by("h1 .badge.paused"))
    assert site.dequeue_refused(queue)
    click(browser, "#action-resume")
    click(browser, "#confirm")
    assert browser.find_elements(*by("h1 .badge.ok"))
    assert not site.dequeue_refused(queue)


def test_an_xss_body_and_status_are_shown_as_text_and_no_script_runs(browser, site, queue):
    site.fail(queue, 1, status=XSS_STATUS)
    (descriptor,) = site.enqueue(queue, XSS_BODY)
    visit(browser, site, f"/ui/queues/{queue}")
    assert "<script>window.__xss = 1</script>" in text_of(browser, "td.body")
    visit(browser, site, f"/ui/queues/{queue}?state=failed")
    assert XSS_STATUS in text_of(browser, "td.status")
    visit(browser, site, f"/ui/jobs/{descriptor}")
    assert text_of(browser, "#job-body") == XSS_BODY.decode()
    assert browser.execute_script("return typeof window.__xss") == "undefined"
    assert not browser.find_elements(*by("main img, main script"))


def test_a_post_without_the_csrf_token_is_refused(browser, site, queue):
    visit(browser, site, f"/ui/queues/{queue}/confirm?action=pause")
    browser.execute_script("document.querySelector('#confirm').form.csrf_token.remove()")
    click(browser, "#confirm")
    assert "CSRF" in text_of(browser, "#error-message")
    assert not site.dequeue_refused(queue)


def test_read_only_mode_hides_and_refuses_actions(browser, sites, queue):
    site, ro = sites
    site.fail(queue, 1)
    visit(browser, ro, f"/ui/queues/{queue}")
    assert text_of(browser, "#read-only") == "read-only"
    assert cell(browser, "failed", 1) == 1, "reads work"
    assert not browser.find_elements(*by(".actions form, form.setting"))
    visit(browser, ro, f"/ui/queues/{queue}/confirm?action=retry")
    assert "read-only" in text_of(browser, "#error-message")
    visit(browser, ro, f"/ui/queues/{queue}")
    # a hand-made form with this session's CSRF token (from the logout form) is refused too
    old = browser.find_element(*by("html"))
    browser.execute_script(
        """const form = document.createElement('form');
        form.method = 'post'; form.action = arguments[0];
        const token = document.querySelector('#logout').form.csrf_token.cloneNode();
        form.appendChild(token); document.body.appendChild(form); form.submit();""",
        f"/ui/queues/{queue}/retry",
    )
    wait_until(lambda: _stale(old), message="the refusal page")
    assert "read-only" in text_of(browser, "#error-message")
    assert site.count(queue, T.PinLaterJobState.FAILED) == 1


def test_the_pages_fit_a_phone_width(browser, site, queue):
    site.enqueue(queue, b"x" * 300)
    browser.set_window_size(390, 844)
    try:
        for path in ("/ui/", f"/ui/queues/{queue}", "/ui/shards", "/ui/janitor"):
            visit(browser, site, path)
            overflow = browser.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 0, f"{path} is {overflow}px wider than the phone"
    finally:
        browser.set_window_size(1280, 900)


def test_auto_refresh_updates_the_counts_and_keeps_the_place(browser, site, queue):
    site.enqueue(queue, *[b"r%d" % i for i in range(120)])
    visit(browser, site, f"/ui/queues/{queue}?limit=50")
    click(browser, "a.next-page")
    url = browser.current_url
    browser.execute_script("window.scrollTo(0, 400); window.__marker = 'kept'")
    before = cell(browser, "pending", 1)
    site.enqueue(queue, b"one more")
    wait_until(
        lambda: cell(browser, "pending", 1) == before + 1,
        timeout=15,
        message="the counts refreshed in place",
    )
    assert browser.current_url == url
    assert browser.execute_script("return window.__marker") == "kept", "no reload"
    assert re.match(r"page 2 ", text_of(browser, "#page-number"))
