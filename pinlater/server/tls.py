"""The server side of TLS on the Thrift port: wrapping accepted sockets and the handshake.

Off by default (`server.tls.enabled`). Why not thriftpy2's TSSLServerSocket: it runs the
handshake inside the accept loop with no timeout, so one silent TCP client freezes every later
one. Here the accept loop only accepts; each connection thread runs its own handshake under one
total deadline (`handshake`), so a silent or trickling client costs one thread for at most
`handshake_timeout_seconds`.
"""

from __future__ import annotations

import select
import socket
import ssl
import time

from pinlater.common.tls import server_context


class HandshakeError(Exception):
    """The TLS handshake failed or did not finish within its deadline."""


def server_context_from(config) -> ssl.SSLContext | None:
    """The context for a validated `pinlater.config.TlsConfig`; None when TLS is off."""
    if not config.enabled:
        return None
    return server_context(config.cert_file, config.key_file, config.client_ca_file)


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
