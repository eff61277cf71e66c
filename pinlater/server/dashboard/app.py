"""The dashboard's HTTP side: routes under /ui/, sessions, CSRF, actions and the security
headers. Pages are built from the admin API's own reads and actions (`AdminReads`,
`AdminActions`), logged in with the admin API's sessions (`AdminAuth`: one password, one
failed-login budget and metric, one cookie valid for both).

Security, in one place:
- off unless `admin.password_hash` is configured (the routes then answer 404);
- every page but the login needs a session; a page asked without one redirects to the login;
- every POST (logout, actions) needs the session's CSRF token as the form field `csrf_token`
  (compared in constant time) and, when the browser sends `Origin`, this server's origin;
- `dashboard.read_only` hides every action and refuses its POST with 403;
- every value is escaped (`markup.fill`), and every page carries a strict
  Content-Security-Policy: scripts and styles from this server's /ui/static/ only, no inline
  script or style, no framing, forms posting only here.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

from pinlater import __version__
from pinlater.errors import PasswordInvalid, PinLaterError
from pinlater.ops.admin_actions import AdminActions
from pinlater.ops.admin_reads import DEFAULT_PAGE_SIZE, AdminReads
from pinlater.server.admin_api import error_status
from pinlater.server.admin_auth import AdminAuth, AuthError, Principal, same_origin
from pinlater.server.dashboard import pages
from pinlater.server.dashboard.markup import STATIC, Markup, fill, join, page, static_file
from pinlater.server.http import Request, Response
from pinlater.server.query_params import BadInput, parse_fields, whole_number, yes_no

log = logging.getLogger("pinlater.admin")

PREFIX = "/ui"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
#: seconds between the live parts' refreshes (app.js)
REFRESH_SECONDS = 5
#: queues the overview lists at most (a filter narrows it)
OVERVIEW_MAX_ROWS = 2000
#: flash messages kept (one per session at most, taken by the next page)
MAX_FLASHES = 1000
_NEXT = re.compile(r"/ui/(?![/\\])[!-~]{0,500}", re.ASCII)
_NUMBER = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?", re.ASCII)
_ACTIONS = ("pause", "resume", "retry", "delete-jobs")

Handler = Callable[["Visit"], Response]


class Visit:
    """One dashboard request: the request, its path parameters, the caller and its fields."""

    def __init__(self, request: Request, params: dict[str, str], principal: Principal | None):
        self.request = request
        self.params = params
        self.principal = principal
        self.query = parse_fields(request.query)

    @property
    def actor(self) -> str:
        return f"{self.request.peer.rsplit(':', 1)[0]} (dashboard)"

    @property
    def csrf(self) -> str:
        session = self.principal.session if self.principal else None
        return "" if session is None else session.csrf_token

    def form(self) -> dict[str, str]:
        try:
            text = self.request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput("the form is not valid UTF-8") from None
        return parse_fields(text)


class Dashboard:
    """`Dashboard(...)(request) -> Response` for every path under /ui/ (and `/`)."""

    def __init__(self, reads: AdminReads, actions: AdminActions, auth: AdminAuth, read_only: bool):
        self.reads = reads
        self.actions = actions
        self.auth = auth
        self.read_only = read_only
        self._flashes: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        q = r"/queues/(?P<queue>[^/]+)"
        self.routes: list[tuple[str, re.Pattern, Handler, bool]] = [
            ("GET", re.compile(r"/static/(?P<name>[a-z.]+)"), self._static, True),
            ("GET", re.compile(r"/login"), self._login_form, True),
            ("POST", re.compile(r"/login"), self._login, True),
            ("POST", re.compile(r"/logout"), self._logout, False),
            ("GET", re.compile(r"/?"), self._overview, False),
            ("GET", re.compile(q), self._queue, False),
            ("GET", re.compile(q + "/confirm"), self._confirm, False),
            ("POST", re.compile(q + r"/(?P<action>[a-z-]+)"), self._act, False),
            ("GET", re.compile(r"/jobs"), self._lookup, False),
            ("GET", re.compile(r"/jobs/(?P<descriptor>[^/]+)"), self._job, False),
            ("GET", re.compile(r"/shards"), self._shards, False),
            ("GET", re.compile(r"/janitor"), self._janitor, False),
        ]

    # ---- entry point ----

    def __call__(self, request: Request) -> Response:
        if request.path in ("", "/"):
            return _redirect(PREFIX + "/")
        try:
            return self._dispatch(request)
        except AuthError as exc:
            return self._error(exc.status, "Refused", exc.message)
        except PinLaterError as exc:
            status, _ = error_status(exc)
            return self._error(status, _title(status), exc.message)
        except Exception:
            request_id = uuid.uuid4().hex[:12]
            log.exception(
                "dashboard: unexpected error on %s %s (request id %s)",
                request.method,
                request.path,
                request_id,
            )
            return self._error(
                500,
                "Internal error",
                f"internal error (request id {request_id}); see the server log",
            )

    def _dispatch(self, request: Request) -> Response:
        path = request.path[len(PREFIX) :]
        method = "GET" if request.method == "HEAD" else request.method
        allowed = set()
        for verb, pattern, handler, public in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if verb != method:
                allowed.add(verb)
                continue
            try:
                params = {k: unquote(v, errors="strict") for k, v in match.groupdict().items()}
            except UnicodeDecodeError:
                raise BadInput("the path is not valid UTF-8") from None
            principal = None if public else self._principal(request)
            if principal is None and not public:
                return _redirect(f"{PREFIX}/login?next={quote(_local(request), safe='/')}")
            if method == "POST":
                self._check_post(request, principal, public)
            return handler(Visit(request, params, principal))
        if allowed:
            response = self._error(405, "Method not allowed", f"use {', '.join(sorted(allowed))}")
            response.headers.append(("Allow", ", ".join(sorted(allowed))))
            return response
        return self._error(404, "Not found", f"no such page: {request.path[:200]}")

    def _principal(self, request: Request) -> Principal | None:
        try:
            return self.auth.authenticate(request)
        except AuthError:
            return None
        except PasswordInvalid as exc:  # wrong basic-auth password
            raise AuthError(
                401 if exc.reason == "wrong" else 429, "unauthorized", exc.message
            ) from None

    def _check_post(self, request: Request, principal: Principal | None, public: bool) -> None:
        origin = request.headers.get("Origin")
        # "null" is what a browser sends for this server's own forms: every page is served
        # with Referrer-Policy: no-referrer, which makes form POSTs carry `Origin: null`. The
        # CSRF token (and the SameSite=Strict cookie) still stand for every action.
        if origin is not None and origin != "null" and not same_origin(origin, request):
            raise AuthError(403, "forbidden_origin", f"cross-origin request from {origin!r}")
        if public:
            return
        session = principal.session if principal else None
        if session is None:
            raise AuthError(403, "csrf", "dashboard actions need a logged-in session")
        given = Visit(request, {}, principal).form().get("csrf_token", "")
        if not hmac.compare_digest(given.encode(), session.csrf_token.encode()):
            raise AuthError(403, "csrf", "missing or wrong CSRF token: reload the page and retry")

    # ---- pages ----

    def _html(
        self,
        visit: Visit | None,
        title: str,
        content: Markup,
        status: int = 200,
        headers: list[tuple[str, str]] | None = None,
    ) -> Response:
        principal = visit.principal if visit else None
        body = page(
            "layout.html",
            title=title,
            refresh=REFRESH_SECONDS if principal else 0,
            nav=self._nav() if principal else Markup(""),
            session=self._session_box(visit) if principal and visit else Markup(""),
            flash=self._flash(visit),
            content=content,
            version=__version__,
            rendered=f"rendered {time.strftime('%H:%M:%S', time.gmtime())}",
        )
        return Response(
            status,
            body.encode(),
            "text/html; charset=utf-8",
            [("Content-Security-Policy", CSP), *(headers or [])],
        )

    def _error(self, status: int, title: str, message: str) -> Response:
        return self._html(None, title, pages.error_page(title, message), status)

    def _nav(self) -> Markup:
        items = [
            ("/ui/", "Queues"),
            ("/ui/shards", "Shards"),
            ("/ui/janitor", "Janitor"),
            ("/ui/jobs", "Find a job"),
        ]
        return join((pages.link(href, text) for href, text in items), " ")

    def _session_box(self, visit: Visit) -> Markup:
        parts = []
        if self.read_only:
            parts.append(Markup('<span class="badge info" id="read-only">read-only</span>'))
        parts.append(
            Markup(
                '<label class="refresh"><input type="checkbox" id="auto-refresh" '
                "checked> auto-refresh</label>"
            )
        )
        if visit.csrf:
            parts.append(
                fill(
                    '<form method="post" action="/ui/logout" class="inline">'
                    '<input type="hidden" name="csrf_token" value="$csrf">'
                    '<button type="submit" class="secondary" id="logout">Log out'
                    "</button></form>",
                    csrf=visit.csrf,
                )
            )
        return join(parts, " ")

    def _flash(self, visit: Visit | None) -> Markup:
        session = visit.principal.session if visit and visit.principal else None
        if session is None or visit is None or visit.request.headers.get("X-Refresh"):
            return Markup("")
        with self._lock:
            message = self._flashes.pop(session.key, None)
        return fill('<p class="flash" id="flash">$m</p>', m=message) if message else Markup("")

    def _remember(self, visit: Visit, message: str) -> None:
        session = visit.principal.session if visit.principal else None
        if session is None:
            return
        with self._lock:
            self._flashes[session.key] = message
            while len(self._flashes) > MAX_FLASHES:
                self._flashes.popitem(last=False)

    def _static(self, visit: Visit) -> Response:
        name = visit.params["name"]
        data = static_file(name)
        if data is None:
            return self._error(404, "Not found", "no such file")
        return Response(200, data, STATIC[name], [("Content-Security-Policy", CSP)])

    def _login_form(self, visit: Visit, error: str = "", status: int = 200) -> Response:
        content = page(
            "login.html",
            next=_next(visit.query.get("next") or visit.form().get("next")),
            error=fill('<p class="error" id="login-error">$e</p>', e=error) if error else "",
        )
        return self._html(None, "Log in", content, status)

    def _login(self, visit: Visit) -> Response:
        form = visit.form()
        try:
            token, _ = self.auth.login(form.get("password"), visit.request.peer)
        except PasswordInvalid as exc:
            if exc.reason == "wrong":
                return self._login_form(visit, "Wrong password.", 401)
            return self._login_form(visit, "Too many attempts: wait a minute and try again.", 429)
        log.info("dashboard: login from %s", visit.request.peer.rsplit(":", 1)[0])
        return _redirect(
            _next(form.get("next")), [("Set-Cookie", self.auth.cookie(token, visit.request.secure))]
        )

    def _logout(self, visit: Visit) -> Response:
        assert visit.principal is not None
        self.auth.logout(visit.principal)
        return _redirect(
            PREFIX + "/login", [("Set-Cookie", self.auth.expired_cookie(visit.request.secure))]
        )

    def _overview(self, visit: Visit) -> Response:
        data = self.reads.queues(with_series=True)
        content = pages.overview(
            data, self.reads.server(), visit.query.get("filter", "")[:200], OVERVIEW_MAX_ROWS
        )
        return self._html(visit, "Queues", content)

    def _queue(self, visit: Visit) -> Response:
        summary = self.reads.queue(visit.params["queue"])
        name = summary["name"]
        browse = self._browse(visit)
        jobs = self.reads.jobs(
            name,
            browse["state"],
            priority=browse["priority"],
            future=browse["future"],
            limit=browse["limit"],
            continuation=visit.query.get("continuation"),
        )
        levels = self.reads.ctx.levels
        writable = not self.read_only
        content = pages.queue_page(
            summary,
            pages.job_rows(jobs, browse, browse["page"]),
            browse,
            levels,
            self.reads.ctx.config.dashboard.max_page_size,
            pages.action_forms(name, summary["paused"], levels) if writable else Markup(""),
            pages.settings_forms(name, summary["settings"], visit.csrf) if writable else Markup(""),
        )
        return self._html(visit, f"Queue {name}", content)

    def _browse(self, visit: Visit) -> dict[str, Any]:
        query = visit.query
        return {
            "state": query.get("state") or "pending",
            "priority": whole_number(query, "priority"),
            "future": yes_no(query, "future"),
            "limit": whole_number(query, "limit", DEFAULT_PAGE_SIZE),
            "page": max(1, min(whole_number(query, "page", 1), 10**9)),
        }

    def _confirm(self, visit: Visit) -> Response:
        self._writable()
        queue = self.reads.ctx.existing_queue(visit.params["queue"])
        action = visit.query.get("action", "")
        body = _action_body(action, visit.query)
        detail: Markup = Markup("")
        if action in ("retry", "delete-jobs"):
            run = self.actions.retry_failed if action == "retry" else self.actions.delete_jobs
            dry = run(queue, {**body, "dry_run": True}, visit.actor)
            detail = fill(
                '<p class="dry-run" id="dry-run">Dry run: <strong id="matching">$m</strong> '
                '$state job(s) match; this will change <strong id="would-change">$w</strong>.'
                "</p>",
                m=dry["matching"],
                state=dry["state"],
                w=dry["would_change"],
            )
        elif action == "pause":
            totals = self.reads.queue(queue)["totals"] or {}
            detail = fill(
                '<p class="dry-run" id="dry-run">$n job(s) pending now will wait; '
                "every server refuses dequeues of this queue within a few seconds."
                "</p>",
                n=totals.get("pending", 0),
            )
        fields = join(
            fill('<input type="hidden" name="$k" value="$v">', k=k, v=v)
            for k, v in _form_values(body).items()
        )
        content = page(
            "confirm.html",
            title=f"{_VERBS[action]} in {queue}?",
            question=f"{_VERBS[action]}: queue {queue}" + _scope(body),
            detail=detail,
            action_url=pages.queue_url(queue) + "/" + action,
            csrf=visit.csrf,
            fields=fields,
            button=_VERBS[action],
            button_class="danger" if action == "delete-jobs" else "",
            back=pages.queue_url(queue),
        )
        return self._html(visit, "Confirm", content)

    def _act(self, visit: Visit) -> Response:
        self._writable()
        queue = visit.params["queue"]
        action = visit.params["action"]
        form = visit.form()
        if action == "settings":
            message = self._set(visit, queue, form)
        else:
            body = _action_body(action, form)
            message = self._run(visit, queue, action, body)
        self._remember(visit, message)
        return _redirect(pages.queue_url(self.reads.ctx.queue_name(queue)))

    def _run(self, visit: Visit, queue: str, action: str, body: dict[str, Any]) -> str:
        a = self.actions
        if action == "pause":
            a.pause(queue, {}, visit.actor)
            return f"Paused {queue}: dequeues are refused on every server."
        if action == "resume":
            out = a.resume(queue, {}, visit.actor)
            return out.get("note") or f"Resumed {queue}."
        if action == "retry":
            out = a.retry_failed(queue, body, visit.actor)
            return f"Retried {out['retried']} failed job(s) of {queue}."
        out = a.delete_jobs(queue, {**body, "dry_run": False}, visit.actor)
        return f"Deleted {out['deleted']} {out['state']} job(s) of {queue}."

    def _set(self, visit: Visit, queue: str, form: dict[str, str]) -> str:
        key = form.get("setting", "")
        if key not in ("max_jobs_per_second", "claim_timeout_seconds"):
            raise BadInput(f"setting: {key[:40]!r} is not a setting this page changes")
        text = form.get("value", "").strip()
        if text and not _NUMBER.fullmatch(text):
            raise BadInput(f"{key}: must be a number, got {text[:40]!r}")
        value: float | int | None = None
        if text:
            value = float(text) if "." in text else int(text)
        self.actions.set_settings(queue, {key: value}, visit.actor)
        return f"{key} of {queue}: " + (
            "stored value cleared" if value is None else f"set to {value}"
        )

    def _writable(self) -> None:
        if self.read_only:
            raise AuthError(403, "read_only", "the dashboard is read-only on this server")

    def _lookup(self, visit: Visit) -> Response:
        descriptor = visit.query.get("descriptor", "").strip()
        if descriptor:
            return _redirect(pages.job_url(descriptor))
        return self._html(visit, "Find a job", page("lookup.html"))

    def _job(self, visit: Visit) -> Response:
        job = self.reads.job(visit.params["descriptor"])
        content = page("job.html", descriptor=job["descriptor"], details=pages.job_details(job))
        return self._html(visit, f"Job {job['descriptor']}", content)

    def _shards(self, visit: Visit) -> Response:
        return self._html(visit, "Shards", pages.shards_page(self.reads.shards()))

    def _janitor(self, visit: Visit) -> Response:
        return self._html(visit, "Janitor", pages.janitor_page(self.reads.janitor()))


_VERBS = {
    "pause": "Pause",
    "resume": "Resume",
    "retry": "Retry failed jobs",
    "delete-jobs": "Delete jobs",
}


def _scope(body: dict[str, Any]) -> str:
    parts = [f"{k} {v}" for k, v in body.items()]
    return f" ({', '.join(parts)})" if parts else ""


def _form_values(body: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in body.items()}


def _action_body(action: str, fields: dict[str, str]) -> dict[str, Any]:
    """The body of an action from its form (or confirm page's query) fields."""
    if action not in _ACTIONS:
        raise BadInput(f"action: {action[:40]!r} is not one of {', '.join(_ACTIONS)}")
    body: dict[str, Any] = {}
    if action in ("retry", "delete-jobs"):
        priority = whole_number(fields, "priority")
        if priority is not None:
            body["priority"] = priority
        limit = whole_number(fields, "limit")
        if limit is not None:
            body["limit"] = limit
    if action == "delete-jobs":
        body["state"] = fields.get("state", "")
    return body


def _local(request: Request) -> str:
    return request.path + ("?" + request.query if request.query else "")


def _next(target: str | None) -> str:
    """Where to go after the login: a dashboard path of this server (printable ASCII, so it
    can never leave the server or break out of the Location header), else the overview."""
    if target and _NEXT.fullmatch(target):
        return target
    return PREFIX + "/"


def _redirect(location: str, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(
        303, b"", "text/plain; charset=utf-8", [("Location", location), *(headers or [])]
    )


def _title(status: int) -> str:
    return {
        400: "Bad request",
        401: "Not logged in",
        403: "Refused",
        404: "Not found",
        429: "Too many attempts",
        503: "Storage unavailable",
    }.get(status, "Error")
