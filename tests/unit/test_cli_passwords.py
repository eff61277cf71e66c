"""Admin password hashes (`pinlater hash-password`, verified by the deleteQueue handler)."""

from __future__ import annotations

import hashlib
import io

import pytest

from pinlater.cli.main import main
from pinlater.common.passwords import hash_password, parse_password_hash, verify_password


def test_hash_has_the_documented_format_and_verifies():
    stored = hash_password("s3cret", iterations=1000)
    algorithm, iterations, salt_hex, digest_hex = stored.split("$")
    assert (algorithm, iterations) == ("pbkdf2_sha256", "1000")
    expected = hashlib.pbkdf2_hmac("sha256", b"s3cret", bytes.fromhex(salt_hex), 1000)
    assert digest_hex == expected.hex()
    assert verify_password("s3cret", stored)
    assert not verify_password("s3cret ", stored)
    assert not verify_password("", stored)


def test_hashes_are_salted():
    assert hash_password("pw", iterations=10) != hash_password("pw", iterations=10)


def test_non_ascii_password_round_trips_and_bytes_are_accepted():
    stored = hash_password("pässwört", iterations=10)
    assert verify_password("pässwört", stored)
    assert verify_password("pässwört".encode(), stored)
    assert not verify_password("\udcff", stored)  # not encodable: no match, no exception


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "",
        "nonsense",
        "sha256$1$00$00",
        "pbkdf2_sha256$x$00$" + "00" * 32,
        "pbkdf2_sha256$0$00$" + "00" * 32,
        "pbkdf2_sha256$99999999999$00$" + "00" * 32,
        "pbkdf2_sha256$1$zz$" + "00" * 32,
        "pbkdf2_sha256$1$$" + "00" * 32,
        "pbkdf2_sha256$1$00$0000",
        "pbkdf2_sha256$1$00$" + "00" * 32 + "$extra",
    ],
)
def test_malformed_or_missing_hash_never_verifies(stored):
    assert verify_password("pw", stored) is False


def test_parse_explains_what_is_wrong():
    with pytest.raises(ValueError, match="iterations"):
        parse_password_hash("pbkdf2_sha256$0$00$" + "00" * 32)


def test_cli_prints_a_hash_that_verifies():
    out, err = io.StringIO(), io.StringIO()
    assert main(["hash-password", "--password", "pw", "--iterations", "50"], out, err) == 0
    assert verify_password("pw", out.getvalue().strip())


def test_cli_reads_the_password_from_stdin(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("from stdin\nignored\n"))
    out = io.StringIO()
    assert main(["hash-password", "--iterations", "50", "--json"], out, io.StringIO()) == 0
    import json

    assert verify_password("from stdin", json.loads(out.getvalue())["password_hash"])
