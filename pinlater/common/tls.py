"""TLS contexts for both ends of the Thrift port (the server-side handshake is
`pinlater.server.tls`). Why not thriftpy2's client context: it sets check_hostname=False;
`client_context` keeps Python's defaults (certificate and host name verified).

Both ends refuse anything older than TLS 1.2. With `client_ca_file` the server requires a client
certificate signed by that CA (mutual TLS).
"""

from __future__ import annotations

import ssl

MIN_VERSION = ssl.TLSVersion.TLSv1_2


def server_context(
    cert_file: str, key_file: str | None = None, client_ca_file: str | None = None
) -> ssl.SSLContext:
    """A server context; raises OSError/ssl.SSLError when a file cannot be read or loaded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = MIN_VERSION
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(cafile=client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
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
    raise TypeError(
        f"tls must be None, a bool, a CA file path or an ssl.SSLContext, not {type(tls).__name__}"
    )
