"""The CLI's client of the server's admin API (docs/admin-api.md), over urllib.

It talks to the server's HTTP listener: `--metrics-url`, else `--metrics-port` (else
$PINLATER_METRICS_PORT, else 9999) on the host the CLI talks to, over HTTPS when the Thrift
TLS options are given (the listener uses the server's certificate then). It authenticates with
HTTP basic auth and the admin password: `--password`, else $PINLATER_ADMIN_PASSWORD, else a
prompt on a terminal.
"""

from __future__ import annotations

import base64
import getpass
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from pinlater.cli import stats as cli_stats
from pinlater.common.tls import client_context

PASSWORD_ENV = "PINLATER_ADMIN_PASSWORD"


class AdminApiError(Exception):
    """The API answered an error: HTTP `status`, its `code` and `message`."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


class AdminUnreachable(Exception):
    """The HTTP listener could not be reached (or it is off)."""


def admin_password(args, prompt: bool = True) -> str | None:
    """--password, else $PINLATER_ADMIN_PASSWORD, else a prompt on a terminal (None when there
    is none and `prompt` is false)."""
    password = getattr(args, "password", None)
    if password is None:
        password = os.environ.get(PASSWORD_ENV)
    if password is None and prompt and sys.stdin.isatty():
        password = getpass.getpass("admin password: ")
    return password


def http_context(args) -> ssl.SSLContext | None:
    """A verifying client context when the TLS options are given (None: plain HTTP)."""
    if not (args.tls or args.tls_ca or args.tls_cert):
        return None
    return client_context(args.tls_ca, args.tls_cert, args.tls_key)


class AdminClient:
    def __init__(
        self,
        base_url: str,
        password: str,
        timeout: float = 10.0,
        context: ssl.SSLContext | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.context = context
        token = base64.b64encode(f"pinlater:{password}".encode()).decode("ascii")
        self._authorization = f"Basic {token}"

    @classmethod
    def from_args(cls, args, password: str, context: ssl.SSLContext | None = None) -> AdminClient:
        """The client of the server the CLI talks to (`context`: from `http_context`)."""
        url = cli_stats.metrics_url(args)
        if url is None:
            raise AdminUnreachable("no HTTP listener to talk to (--metrics-port 0)")
        return cls(url, password, args.timeout, context)

    def get(self, path: str) -> dict[str, Any]:
        return self._call("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", path, json.dumps(body).encode())

    def queue_action(self, queue: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.post(f"/api/v1/queues/{quote(queue, safe='')}/{action}", body)

    def _call(self, method: str, path: str, data: bytes | None) -> dict[str, Any]:
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Authorization", self._authorization)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(
                request, timeout=self.timeout, context=self.context
            ) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                raise _api_error(exc.code, exc.read()) from None
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminUnreachable(f"{self.base_url}: {reason}") from None


def _api_error(status: int, body: bytes) -> AdminApiError:
    try:
        error = json.loads(body)["error"]
        return AdminApiError(status, str(error["code"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:200]
        return AdminApiError(status, f"HTTP_{status}", text or "no message")
