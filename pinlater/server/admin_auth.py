"""Who may use the admin API: sessions from a login, HTTP basic auth, and the CSRF rules.

Two ways in, both with the one admin password (`admin.password_hash`):
- **Session** (browsers): `POST /api/v1/login {"password": ...}` sets the cookie
  `pinlater_session` (HttpOnly, SameSite=Strict, Path=/, Secure when the listener is TLS) and
  returns a CSRF token. Every POST with the cookie must carry that token in `X-CSRF-Token`.
  Sessions live in this server's memory: they end after `admin.session_idle_seconds` unused,
  `admin.session_max_seconds` after the login, at logout, or when the server restarts; at most
  `admin.max_sessions` (the oldest goes first).
- **Basic auth** (curl, the CLI): `Authorization: Basic base64(ANY_USER:PASSWORD)`. No CSRF
  token: browsers only attach basic credentials they were asked for, and this server never
  asks (no `WWW-Authenticate: Basic` challenge), so a hostile page cannot make a browser send
  them. A right password is remembered (as a keyed hash, for BASIC_CACHE_SECONDS) so a client
  polling with it does not pay a PBKDF2 check (~0.1 s of CPU) per request.

For every POST, whatever the credentials: the body must be `Content-Type: application/json`
(an HTML form cannot send that cross-site without a CORS preflight, which this server never
answers), and an `Origin` header, when present, must name this server.

Password checks go through the PasswordGuard of deleteQueue, so wrong passwords from one
address share one budget (`admin.password_failures_per_minute`) whichever way they arrive;
every check is counted in `pinlater_admin_logins_total{outcome}`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

from pinlater.config import AdminConfig
from pinlater.errors import PasswordInvalid
from pinlater.handler.password_guard import PasswordGuard
from pinlater.server.http import Request

COOKIE = "pinlater_session"
CSRF_HEADER = "X-CSRF-Token"
#: how long a right basic-auth password is remembered
BASIC_CACHE_SECONDS = 300.0
#: passwords remembered at once (only the right one can be cached, so this is ample)
BASIC_CACHE_SIZE = 8


class AuthError(Exception):
    """The request may not proceed: `status` (401/403/415) and an error `code` for the body."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Session:
    key: str  # sha256 of the cookie value (the value itself is never stored)
    csrf_token: str
    created: float
    last_used: float


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: how (`session` or `basic`) and its session (if any)."""

    kind: str
    session: Session | None = None


class AdminAuth:
    def __init__(
        self,
        guard: PasswordGuard,
        config: AdminConfig,
        on_check: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._guard = guard
        self._config = config
        self._on_check = on_check or (lambda outcome: None)
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._basic: OrderedDict[bytes, float] = OrderedDict()
        self._pepper = secrets.token_bytes(32)

    # ---- login / logout ----

    def login(self, password: object, peer: str) -> tuple[str, Session]:
        """(cookie value, session) for the right password; raises PasswordInvalid."""
        self._check_password(password, peer)
        token = secrets.token_urlsafe(32)
        now = self._clock()
        session = Session(_digest(token), secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._sessions[session.key] = session
            while len(self._sessions) > self._config.max_sessions:
                self._sessions.popitem(last=False)
        return token, session

    def logout(self, principal: Principal) -> None:
        if principal.session is not None:
            with self._lock:
                self._sessions.pop(principal.session.key, None)

    def session_count(self) -> int:
        with self._lock:
            return len(self._sessions)

    # ---- every request ----

    def authenticate(self, request: Request) -> Principal:
        """The caller, from the session cookie or basic auth; raises AuthError(401)."""
        header = request.headers.get("Authorization")
        if header:
            return self._basic_auth(header, request.peer)
        session = self._session(request.headers.get("Cookie"))
        if session is None:
            raise AuthError(
                401,
                "unauthorized",
                "log in first (POST /api/v1/login) or send HTTP basic auth with the admin password",
            )
        return Principal("session", session)

    def check_post(self, request: Request, principal: Principal | None) -> None:
        """The rules every POST follows (see the module docstring); raises AuthError."""
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type.lower() != "application/json":
            raise AuthError(
                415, "unsupported_media_type", "POST bodies must be Content-Type: application/json"
            )
        origin = request.headers.get("Origin")
        if origin is not None and not same_origin(origin, request):
            raise AuthError(403, "forbidden_origin", f"cross-origin request from {origin!r}")
        if principal is not None and principal.session is not None:
            given = request.headers.get(CSRF_HEADER) or ""
            if not hmac.compare_digest(given.encode(), principal.session.csrf_token.encode()):
                raise AuthError(
                    403,
                    "csrf",
                    f"missing or wrong {CSRF_HEADER} header (the csrf_token of the login or of "
                    "GET /api/v1/session)",
                )

    def cookie(self, token: str, secure: bool) -> str:
        """The Set-Cookie value of a new session."""
        return f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict" + (
            "; Secure" if secure else ""
        )

    def expired_cookie(self, secure: bool) -> str:
        return f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" + (
            "; Secure" if secure else ""
        )

    # ---- internals ----

    def _check_password(self, password: object, peer: str) -> None:
        if not isinstance(password, str) or not password:
            self._on_check("wrong")
            raise PasswordInvalid("Invalid admin password: none given")
        try:
            self._guard.check(password, peer)
        except PasswordInvalid as exc:
            self._on_check(exc.reason)
            raise
        self._on_check("ok")

    def _basic_auth(self, header: str, peer: str) -> Principal:
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            raise AuthError(401, "unauthorized", "only Basic authorization is accepted")
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise AuthError(401, "unauthorized", "malformed Basic authorization") from None
        _, sep, password = decoded.partition(":")
        if not sep:
            raise AuthError(401, "unauthorized", "malformed Basic authorization (no ':')")
        key = hmac.new(self._pepper, password.encode(), hashlib.sha256).digest()
        now = self._clock()
        with self._lock:
            until = self._basic.get(key)
            if until is not None and until > now:
                return Principal("basic")
        self._check_password(password, peer)  # raises PasswordInvalid
        with self._lock:
            self._basic[key] = now + BASIC_CACHE_SECONDS
            while len(self._basic) > BASIC_CACHE_SIZE:
                self._basic.popitem(last=False)
        return Principal("basic")

    def _session(self, cookie_header: str | None) -> Session | None:
        token = _cookie_value(cookie_header)
        if token is None:
            return None
        key = _digest(token)
        now = self._clock()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if (
                now - session.last_used > self._config.session_idle_seconds
                or now - session.created > self._config.session_max_seconds
            ):
                del self._sessions[key]
                return None
            session.last_used = now
            return session


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _cookie_value(header: str | None) -> str | None:
    if not header:
        return None
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(header)
    except CookieError:
        return None
    morsel = cookies.get(COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


def same_origin(origin: str, request: Request) -> bool:
    """`origin` names the host (and port) the request was sent to, with the right scheme."""
    host = request.headers.get("Host")
    if not host:
        return False
    parts = urlsplit(origin)
    scheme = "https" if request.secure else "http"
    return parts.scheme == scheme and parts.netloc.lower() == host.lower()
