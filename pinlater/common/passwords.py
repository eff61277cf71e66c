"""Admin password hashes for deleteQueue: `pbkdf2_sha256$ITERATIONS$SALT_HEX$HASH_HEX`.

The original stored an unsalted SHA-256 with a constant suffix (fast to brute-force); we store
a salted PBKDF2-HMAC-SHA256 made by `pinlater hash-password` and put it in
`admin.password_hash`. Verification uses `hmac.compare_digest` so timing reveals nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

ALGORITHM = "pbkdf2_sha256"
DEFAULT_ITERATIONS = 600_000  # OWASP 2023 guidance for PBKDF2-HMAC-SHA256
MAX_ITERATIONS = 10_000_000  # bounds the CPU a (mis)configured hash can cost per request
SALT_BYTES = 16
_HASH_BYTES = 32


def hash_password(
    password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> str:
    """A new salted hash of `password` in the stored format."""
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be 1..{MAX_ITERATIONS}")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", _utf8(password), salt, iterations)
    return f"{ALGORITHM}${iterations}${salt.hex()}${digest.hex()}"


def parse_password_hash(stored: str) -> tuple[int, bytes, bytes]:
    """(iterations, salt, digest) from a stored hash; ValueError naming what is wrong."""
    parts = stored.split("$") if isinstance(stored, str) else []
    if len(parts) != 4 or parts[0] != ALGORITHM:
        raise ValueError(f"password hash must look like {ALGORITHM}$ITERATIONS$SALT_HEX$HASH_HEX")
    iterations_text, salt_hex, digest_hex = parts[1:]
    if not (iterations_text.isascii() and iterations_text.isdigit()):
        raise ValueError("password hash: iterations must be a decimal number")
    iterations = int(iterations_text)
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"password hash: iterations must be 1..{MAX_ITERATIONS}")
    try:
        salt, digest = bytes.fromhex(salt_hex), bytes.fromhex(digest_hex)
    except ValueError:
        raise ValueError("password hash: salt and hash must be hex") from None
    if not salt or len(digest) != _HASH_BYTES:
        raise ValueError(f"password hash: need a salt and a {_HASH_BYTES}-byte hash")
    return iterations, salt, digest


def verify_password(password: object, stored: str | None) -> bool:
    """True only if `password` matches `stored`; False for a missing or malformed hash (and
    for a password that is not text or not valid UTF-8)."""
    if not isinstance(password, (str, bytes)) or not stored:
        return False
    try:
        iterations, salt, expected = parse_password_hash(stored)
        secret = _utf8(password)
    except ValueError:  # UnicodeEncodeError is a ValueError
        return False
    actual = hashlib.pbkdf2_hmac("sha256", secret, salt, iterations)
    return hmac.compare_digest(actual, expected)


def _utf8(password: str | bytes) -> bytes:
    """Passwords as UTF-8 bytes; a Thrift string that was not valid UTF-8 arrives as bytes."""
    return password if isinstance(password, bytes) else password.encode("utf-8")
