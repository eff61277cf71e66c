"""A raw client of the admin API for tests: any method, header and body, the cookie kept the way
a browser keeps it, and the answer as (status, JSON, headers) without raising.

    api = AdminHttp(srv.metrics_url)
    api.login("secret")                          # cookie + CSRF token from now on
    status, body, headers = api.get("/api/v1/queues")
    status, body, _ = api.post("/api/v1/queues/q/pause", {})
    basic = AdminHttp(url, basic="secret")       # HTTP basic auth instead
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit


class AdminHttp:
    def __init__(
        self,
        base_url: str,
        *,
        basic: str | None = None,
        context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
    ):
        parts = urlsplit(base_url)
        self.secure = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.context = context
        self.timeout = timeout
        self.basic = basic
        self.cookie: str | None = None
        self.csrf: str | None = None

    # ---- sessions ----
    def login(self, password: str) -> tuple[int, Any, dict[str, str]]:
        status, body, headers = self.post("/api/v1/login", {"password": password}, auth=False)
        if status == 200:
            morsel = SimpleCookie(headers["set-cookie"])["pinlater_session"]
            self.cookie = f"pinlater_session={morsel.value}"
            self.csrf = body["csrf_token"]
        return status, body, headers

    # ---- requests ----
    def get(self, path: str, **kwargs) -> tuple[int, Any, dict[str, str]]:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs) -> tuple[int, Any, dict[str, str]]:
        return self.request("POST", path, body=body, **kwargs)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        csrf: bool = True,
        content_type: str | None = "application/json",
    ) -> tuple[int, Any, dict[str, str]]:
        """`body` is sent as JSON (`raw` as is); `auth`/`csrf` False leave the credentials or the
        CSRF token out."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = self._headers(method, data is not None, auth, csrf, content_type)
        sent.update(headers or {})
        conn = self._connection()
        try:
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            payload = response.read()
            answer = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        try:
            decoded = json.loads(payload) if payload else None
        except ValueError:
            decoded = payload.decode("utf-8", "replace")
        return response.status, decoded, answer

    def _headers(
        self, method: str, has_body: bool, auth: bool, csrf: bool, content_type: str | None
    ) -> dict[str, str]:
        """Content type, credentials (basic or the session cookie) and the CSRF token."""
        sent: dict[str, str] = {}
        if has_body and content_type:
            sent["Content-Type"] = content_type
        if auth and self.basic is not None:
            token = base64.b64encode(f"admin:{self.basic}".encode()).decode()
            sent["Authorization"] = f"Basic {token}"
        if auth and self.cookie:
            sent["Cookie"] = self.cookie
        if csrf and self.csrf and method != "GET":
            sent["X-CSRF-Token"] = self.csrf
        return sent

    def _connection(self) -> http.client.HTTPConnection:
        if self.secure:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=self.context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)


def error_code(body: Any) -> str | None:
    """The `error.code` of an error answer."""
    return body["error"]["code"] if isinstance(body, dict) and "error" in body else None
