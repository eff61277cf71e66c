"""TLS for the Thrift port: SSL contexts for both ends and the server-side handshake.

Off by default (`server.tls.enabled`). Why not thriftpy2's TSSLServerSocket: it runs the
handshake inside the accept loop with no timeout, so one silent TCP client freezes every later
one. Here the accept loop only accepts; each connection thread runs its own handshake under one
total deadline (`handshake`), so a silent or trickling client costs one thread for at most
`handshake_timeout_seconds`. Why not thriftpy2's client context: it sets check_hostname=False;
`client_context` keeps Python's defaults (certificate and host name verified).

Both ends refuse anything older than TLS 1.2. With `client_ca_file` the server requires a client
certificate signed by that CA (mutual TLS).
"""

from __future__ import annotations

import select
import socket
import ssl
import time

MIN_VERSION = ssl.TLSVersion.TLSv1_2


class HandshakeError(Exception):
    """The TLS handshake failed or did not finish within its deadline."""


def server_context(cert_file: str, key_file: str | None = None,
                   client_ca_file: str | None = None) -> ssl.SSLContext:
    """A server context; raises OSError/ssl.SSLError when a file cannot be read or loaded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = MIN_VERSION
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(cafile=client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def server_context_from(config) -> ssl.SSLContext | None:
    """The context for a validated `pinlater.config.TlsConfig`; None when TLS is off."""
    if not config.enabled:
        return None
    return server_context(config.cert_file, config.key_file, config.client_ca_file)


def client_context(ca_file: str | None = None, cert_file: str | None = None,
                   key_file: str | None = None) -> ssl.SSLContext:
    """A client context that verifies the server's certificate and host name (against
    `ca_file`, else the system CAs) and presents `cert_file` for mutual TLS when given."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = MIN_VERSION
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


def as_client_context(tls: object) -> ssl.SSLContext | None:
    """Normalise the `tls=` argument of PinLaterClient: None/False (plain TCP), True (system
    CAs), a CA file path, or a ready ssl.SSLContext (used as is)."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return client_context()
    if isinstance(tls, ssl.SSLContext):
        return tls
    if isinstance(tls, str):
        return client_context(ca_file=tls)
    raise TypeError(f"tls must be None, a bool, a CA file path or an ssl.SSLContext, "
                    f"not {type(tls).__name__}")


def wrap_server_side(sock: socket.socket, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    """Wrap without any I/O (the handshake is `handshake`'s job)."""
    return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)


def handshake(tls_sock: ssl.SSLSocket, timeout: float) -> None:
    """Complete the handshake of a wrapped socket within `timeout` seconds in total (a client
    trickling handshake bytes cannot stretch it). Raises HandshakeError."""
    deadline = time.monotonic() + timeout
    tls_sock.setblocking(False)
    poller = select.poll()
    poller.register(tls_sock.fileno(), select.POLLIN)
    while True:
        try:
            tls_sock.do_handshake()
            return
        except ssl.SSLWantReadError:
            events = select.POLLIN
        except ssl.SSLWantWriteError:
            events = select.POLLOUT
        except (ssl.SSLError, OSError) as exc:
            raise HandshakeError(_describe(exc)) from None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HandshakeError(f"no TLS handshake within {timeout:g}s")
        poller.modify(tls_sock.fileno(), events)
        poller.poll(remaining * 1000)


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return f"TLS handshake failed: {reason or exc}"
