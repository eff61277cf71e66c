"""The admin API's HTTP side: routes under /api/v1/, query and body parsing, authentication
(`admin_auth`), and one error answer for everything that goes wrong.

Every answer is JSON. Errors are `{"error": {"code": ..., "message": ...}}` with a 4xx status
for anything the caller can fix (bad input, unknown queue or job, credentials, CSRF,
read-only) and 503 when the storage cannot answer; an unexpected failure is logged with a
request id and answered 500 with that id, never a traceback. The reference, with one curl
example per endpoint, is docs/admin-api.md.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from pinlater.errors import (
    ContinuationInvalid,
    NoHealthyShards,
    PasswordInvalid,
    PinLaterError,
    PriorityNotSupported,
    QueueNameInvalid,
    QueueNameTooLong,
    QueueNotFound,
    ShardConnectionFailed,
)
from pinlater.ops.admin_actions import AdminActions
from pinlater.ops.admin_reads import AdminReads, JobNotFound
from pinlater.server.admin_auth import AdminAuth, AuthError, Principal
from pinlater.server.http import Request, Response
from pinlater.server.query_params import BadInput, parse_fields, whole_number, yes_no

log = logging.getLogger("pinlater.admin")

PREFIX = "/api/v1"


@dataclass(frozen=True)
class Call:
    """What a route handler gets: the request, its path parameters, the caller."""

    request: Request
    params: dict[str, str]
    principal: Principal | None
    query: dict[str, str]

    @property
    def actor(self) -> str:
        kind = self.principal.kind if self.principal else "anonymous"
        return f"{self.request.peer.rsplit(':', 1)[0]} ({kind})"

    def body(self) -> dict[str, Any]:
        """The JSON object of the body ({} when empty); BadInput otherwise."""
        if not self.request.body.strip():
            return {}
        try:
            data = json.loads(self.request.body)
        except (ValueError, RecursionError):
            raise BadInput("the body is not valid JSON") from None
        if not isinstance(data, dict):
            raise BadInput("the body must be a JSON object")
        return data

    def int_param(self, name: str) -> int | None:
        return whole_number(self.query, name)

    def bool_param(self, name: str, default: bool = False) -> bool:
        return yes_no(self.query, name, default)


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern
    handler: Callable[[Call], Response]
    #: changes something (refused in read-only mode)
    action: bool = False
    #: needs no credentials (login)
    public: bool = False


class AdminApi:
    """`AdminApi(...)(request) -> Response`: the handler the HTTP listener calls for /api/."""

    def __init__(self, reads: AdminReads, actions: AdminActions, auth: AdminAuth, read_only: bool):
        self.reads = reads
        self.actions = actions
        self.auth = auth
        self.read_only = read_only
        self.routes = self._routes()

    def _routes(self) -> list[Route]:
        q = r"(?P<queue>[^/]+)"
        r = self.reads
        a = self.actions

        def get(path: str, handler: Callable[[Call], Any]) -> Route:
            return Route("GET", re.compile(PREFIX + path), _json(handler))

        def post(path: str, handler: Callable[[Call], Any], status: int = 200) -> Route:
            return Route("POST", re.compile(PREFIX + path), _json(handler, status), action=True)

        return [
            Route("POST", re.compile(PREFIX + "/login"), self._login, public=True),
            Route("POST", re.compile(PREFIX + "/logout"), self._logout),
            get("/session", self._session),
            get("/server", lambda c: r.server()),
            get("/queues", lambda c: r.queues(with_series=c.bool_param("series"))),
            post("/queues", lambda c: a.create_queue(c.body(), c.actor), status=201),
            get(f"/queues/{q}", lambda c: r.queue(c.params["queue"])),
            get(
                f"/queues/{q}/jobs",
                lambda c: r.jobs(
                    c.params["queue"],
                    c.query.get("state", "pending"),
                    priority=c.int_param("priority"),
                    future=c.bool_param("future"),
                    limit=c.int_param("limit"),
                    continuation=c.query.get("continuation"),
                    body_regex=c.query.get("body_regex"),
                ),
            ),
            post(f"/queues/{q}/pause", lambda c: a.pause(c.params["queue"], c.body(), c.actor)),
            post(f"/queues/{q}/resume", lambda c: a.resume(c.params["queue"], c.body(), c.actor)),
            post(
                f"/queues/{q}/settings",
                lambda c: a.set_settings(c.params["queue"], c.body(), c.actor),
            ),
            post(
                f"/queues/{q}/retry", lambda c: a.retry_failed(c.params["queue"], c.body(), c.actor)
            ),
            post(
                f"/queues/{q}/delete-jobs",
                lambda c: a.delete_jobs(c.params["queue"], c.body(), c.actor),
            ),
            post(f"/queues/{q}/purge", lambda c: a.purge(c.params["queue"], c.body(), c.actor)),
            post(
                f"/queues/{q}/delete",
                lambda c: a.delete_queue(c.params["queue"], c.body(), c.actor, c.request.peer),
            ),
            get("/jobs/(?P<descriptor>[^/]+)", lambda c: r.job(c.params["descriptor"])),
            get("/shards", lambda c: r.shards()),
            get("/janitor", lambda c: r.janitor()),
            get("/ledger", lambda c: r.ledger(c.query.get("queue"))),
        ]

    # ---- entry point ----

    def __call__(self, request: Request) -> Response:
        try:
            return self._dispatch(request)
        except AuthError as exc:
            return _error(exc.status, exc.code, exc.message)
        except PinLaterError as exc:
            return _answer_error(exc)
        except Exception:
            request_id = uuid.uuid4().hex[:12]
            log.exception(
                "admin API: unexpected error on %s %s (request id %s)",
                request.method,
                request.path,
                request_id,
            )
            return _error(
                500, "internal", f"internal error (request id {request_id}); see the server log"
            )

    def _dispatch(self, request: Request) -> Response:
        route, params, allowed = self._match(request)
        if route is None:
            if allowed:
                return _error(
                    405,
                    "method_not_allowed",
                    f"{request.method} is not allowed here; use {', '.join(sorted(allowed))}",
                    [("Allow", ", ".join(sorted(allowed)))],
                )
            return _error(404, "not_found", f"no such endpoint: {request.path[:200]}")
        try:
            principal = None if route.public else self.auth.authenticate(request)
        except PasswordInvalid as exc:  # wrong basic-auth password, or too many of them
            return _password_error(exc, 401)
        if route.method == "POST":
            self.auth.check_post(request, principal)
            if route.action and self.read_only:
                raise AuthError(403, "read_only", "the admin API is read-only on this server")
        call = Call(request, params, principal, parse_fields(request.query, "query parameter"))
        return route.handler(call)

    def _match(self, request: Request) -> tuple[Route | None, dict[str, str], set[str]]:
        allowed: set[str] = set()
        path = request.path.rstrip("/") or "/"
        for route in self.routes:
            match = route.pattern.fullmatch(path)
            if match is None:
                continue
            method = "GET" if request.method == "HEAD" else request.method
            if route.method != method:
                allowed.add(route.method)
                continue
            try:
                params = {k: unquote(v, errors="strict") for k, v in match.groupdict().items()}
            except UnicodeDecodeError:
                raise BadInput("the path is not valid UTF-8") from None
            return route, params, allowed
        return None, {}, allowed

    # ---- sessions ----

    def _login(self, call: Call) -> Response:
        body = call.body()
        unknown = set(body) - {"password"}
        if unknown:
            raise BadInput(f"unknown field(s) {', '.join(sorted(unknown))} (expected: password)")
        try:
            token, session = self.auth.login(body.get("password"), call.request.peer)
        except PasswordInvalid as exc:
            return _password_error(exc, 401)
        log.info("admin API: login from %s", call.request.peer.rsplit(":", 1)[0])
        return Response.json(
            200,
            {"csrf_token": session.csrf_token, "read_only": self.read_only},
            headers=[("Set-Cookie", self.auth.cookie(token, call.request.secure))],
        )

    def _logout(self, call: Call) -> Response:
        assert call.principal is not None
        self.auth.logout(call.principal)
        return Response.json(
            200,
            {"logged_out": call.principal.session is not None},
            headers=[("Set-Cookie", self.auth.expired_cookie(call.request.secure))],
        )

    def _session(self, call: Call) -> dict[str, Any]:
        assert call.principal is not None
        session = call.principal.session
        return {
            "via": call.principal.kind,
            "csrf_token": None if session is None else session.csrf_token,
            "read_only": self.read_only,
        }


def _json(handler: Callable[[Call], Any], status: int = 200) -> Callable[[Call], Response]:
    def run(call: Call) -> Response:
        result = handler(call)
        return result if isinstance(result, Response) else Response.json(status, result)

    return run


#: error class -> (HTTP status, code); the first match in order wins
_STATUS: tuple[tuple[type[PinLaterError], int, str], ...] = (
    (QueueNotFound, 404, "queue_not_found"),
    (JobNotFound, 404, "job_not_found"),
    (ContinuationInvalid, 400, "bad_continuation"),
    (PriorityNotSupported, 400, "priority_not_supported"),
    (QueueNameInvalid, 400, "queue_name_invalid"),
    (QueueNameTooLong, 400, "queue_name_too_long"),
    (NoHealthyShards, 503, "storage_unavailable"),
    (ShardConnectionFailed, 503, "storage_unavailable"),
)


def error_status(exc: PinLaterError) -> tuple[int, str]:
    """(HTTP status, error code) of an error the caller can see (400 invalid_request unless
    listed in _STATUS)."""
    for cls, status, code in _STATUS:
        if isinstance(exc, cls):
            return status, code
    return 400, "invalid_request"


def _answer_error(exc: PinLaterError) -> Response:
    if isinstance(exc, PasswordInvalid):
        return _password_error(exc, 403)
    status, code = error_status(exc)
    return _error(status, code, exc.message)


def _password_error(exc: PasswordInvalid, wrong_status: int) -> Response:
    if exc.reason == "wrong":
        code = "unauthorized" if wrong_status == 401 else "password_invalid"
        return _error(wrong_status, code, exc.message)
    return _error(429, "too_many_attempts", exc.message, [("Retry-After", "60")])


def _error(
    status: int, code: str, message: str, headers: list[tuple[str, str]] | None = None
) -> Response:
    return Response.json(status, {"error": {"code": code, "message": message}}, headers or [])
