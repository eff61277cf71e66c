"""Throwaway X.509 material for TLS tests, made with the `openssl` command line (the
`cryptography` package is not a dependency and Python's ssl module cannot create certificates).

    certs = make_certs(tmp_dir)   # CA, server cert for localhost/127.0.0.1, client cert,
                                  # and a server cert for another host name
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl")


@dataclass(frozen=True)
class Certs:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_host_cert: str
    other_host_key: str
    stranger_ca: str


def _run(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _key(name: str, cwd: Path) -> None:
    _run(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-out",
        f"{name}.key",
        cwd=cwd,
    )


def _ca(name: str, cwd: Path) -> None:
    _key(name, cwd)
    _run(
        "req",
        "-x509",
        "-new",
        "-key",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=cwd,
    )


def _leaf(name: str, ca: str, extensions: str, cwd: Path) -> None:
    _key(name, cwd)
    _run(
        "req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=cwd
    )
    (cwd / f"{name}.ext").write_text(extensions)
    _run(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{ca}.pem",
        "-CAkey",
        f"{ca}.key",
        "-CAcreateserial",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-extfile",
        f"{name}.ext",
        cwd=cwd,
    )


def make_certs(directory: Path) -> Certs:
    """Create everything under `directory` (about 0.2 s)."""
    if OPENSSL is None:
        raise RuntimeError("the openssl command is needed to make test certificates")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _ca("ca", d)
    _ca("stranger", d)
    leaf = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
    _leaf(
        "server",
        "ca",
        leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
        d,
    )
    _leaf("client", "ca", leaf + "extendedKeyUsage=clientAuth\n", d)
    _leaf(
        "other", "ca", leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:other.example\n", d
    )
    p = lambda name: str(d / name)  # noqa: E731
    return Certs(
        ca=p("ca.pem"),
        server_cert=p("server.pem"),
        server_key=p("server.key"),
        client_cert=p("client.pem"),
        client_key=p("client.key"),
        other_host_cert=p("other.pem"),
        other_host_key=p("other.key"),
        stranger_ca=p("stranger.pem"),
    )
