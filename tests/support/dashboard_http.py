"""A raw client of the dashboard (/ui/) for tests without a browser: HTML forms posted the way a
browser posts them (urlencoded, the session cookie, the CSRF token from the page), answers as
(status, text, headers) without following redirects.

    ui = DashboardHttp(srv.metrics_url)
    ui.login("secret")                         # session cookie and CSRF token from now on
    status, html, _ = ui.get("/ui/queues/q")
    status, _, headers = ui.post("/ui/queues/q/pause")   # csrf_token added unless csrf=False
"""

from __future__ import annotations

import re
import ssl
from http.cookies import SimpleCookie
from urllib.parse import urlencode

from tests.support.admin_http import AdminHttp

FORM = "application/x-www-form-urlencoded"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


class DashboardHttp:
    def __init__(self, base_url: str, context: ssl.SSLContext | None = None):
        self.http = AdminHttp(base_url, context=context)
        self.csrf: str | None = None

    @property
    def cookie(self) -> str | None:
        return self.http.cookie

    def login(self, password: str, next_page: str = "/ui/") -> tuple[int, str, dict[str, str]]:
        status, body, headers = self.post(
            "/ui/login", {"password": password, "next": next_page}, csrf=False
        )
        if status == 303 and "set-cookie" in headers:
            morsel = SimpleCookie(headers["set-cookie"])["pinlater_session"]
            self.http.cookie = f"pinlater_session={morsel.value}"
            page = self.get("/ui/")[1]
            found = _CSRF.search(page)
            self.csrf = found.group(1) if found else None
        return status, body, headers

    def get(self, path: str, headers: dict[str, str] | None = None):
        status, body, answer = self.http.request("GET", path, headers=headers, csrf=False)
        return status, body if isinstance(body, str) else str(body or ""), answer

    def post(
        self,
        path: str,
        fields: dict[str, object] | None = None,
        *,
        csrf: bool = True,
        headers: dict[str, str] | None = None,
    ):
        data = dict(fields or {})
        if csrf and self.csrf:
            data["csrf_token"] = self.csrf
        status, body, answer = self.http.request(
            "POST",
            path,
            raw=urlencode(data).encode(),
            content_type=FORM,
            headers=headers,
            csrf=False,
        )
        return status, body if isinstance(body, str) else str(body or ""), answer
