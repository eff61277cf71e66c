"""Admin API credentials: sessions end when idle, when old, or when too many; a right basic-auth
password is checked once and remembered; POSTs need JSON, this origin and (with a cookie) the
CSRF token. A controllable clock stands in for time."""

from __future__ import annotations

import base64
from email.message import Message

import pytest

from pinlater.config import AdminConfig
from pinlater.errors import PasswordInvalid
from pinlater.handler.password_guard import PasswordGuard
from pinlater.server.admin_auth import AdminAuth, AuthError
from pinlater.server.http import Request


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(headers: dict[str, str], method: str = "GET", secure: bool = False) -> Request:
    message = Message()
    for name, value in headers.items():
        message[name] = value
    return Request(method, "/api/v1/x", "", message, b"", "10.0.0.1:5000", secure)


@pytest.fixture
def parts():
    clock = Clock()
    checks: list[str] = []
    verified: list[object] = []

    def verify(password, stored):
        verified.append(password)
        return password == "right"

    guard = PasswordGuard("unused", checks_per_second=1000, clock=clock, verify=verify)
    config = AdminConfig(session_idle_seconds=60, session_max_seconds=300, max_sessions=2)
    auth = AdminAuth(guard, config, on_check=checks.append, clock=clock)
    yield auth, clock, checks, verified
    guard.close()


def cookie_of(token: str) -> dict[str, str]:
    return {"Cookie": f"other=1; pinlater_session={token}"}


def test_a_session_ends_after_idle_time_and_after_its_maximum_age(parts):
    auth, clock, checks, _ = parts
    token, _ = auth.login("right", "10.0.0.1:1")
    assert checks == ["ok"]
    for _ in range(5):  # used every 50 s: never idle for 60 s
        clock.now += 50
        assert auth.authenticate(request(cookie_of(token))).kind == "session"
    clock.now += 51  # 301 s after the login
    with pytest.raises(AuthError) as refused:
        auth.authenticate(request(cookie_of(token)))
    assert refused.value.status == 401
    token, _ = auth.login("right", "10.0.0.1:1")
    clock.now += 61
    with pytest.raises(AuthError):
        auth.authenticate(request(cookie_of(token)))


def test_the_oldest_session_goes_beyond_the_maximum(parts):
    auth, *_ = parts
    tokens = [auth.login("right", "10.0.0.1:1")[0] for _ in range(3)]
    assert auth.session_count() == 2
    with pytest.raises(AuthError):
        auth.authenticate(request(cookie_of(tokens[0])))
    for token in tokens[1:]:
        assert auth.authenticate(request(cookie_of(token))).session is not None


def test_a_wrong_login_says_why_and_is_counted(parts):
    auth, _, checks, _ = parts
    with pytest.raises(PasswordInvalid) as refused:
        auth.login("wrong", "10.0.0.1:1")
    assert refused.value.reason == "wrong" and checks == ["wrong"]
    with pytest.raises(PasswordInvalid):
        auth.login(None, "10.0.0.1:1")
    assert checks == ["wrong", "wrong"]


def test_a_right_basic_password_is_hashed_once_then_remembered(parts):
    auth, clock, _, verified = parts
    header = {"Authorization": "Basic " + base64.b64encode(b"any:right").decode()}
    for _ in range(10):
        assert auth.authenticate(request(header)).kind == "basic"
    assert verified == ["right"], "one PBKDF2 check for ten requests"
    clock.now += 301
    auth.authenticate(request(header))
    assert verified == ["right", "right"], "remembered for a while only"
    wrong = {"Authorization": "Basic " + base64.b64encode(b"any:wrong").decode()}
    for _ in range(2):
        with pytest.raises(PasswordInvalid):
            auth.authenticate(request(wrong))
    assert verified.count("wrong") == 2, "wrong passwords are never remembered"


def test_posts_need_json_this_origin_and_the_csrf_token_with_a_cookie(parts):
    auth, *_ = parts
    token, session = auth.login("right", "10.0.0.1:1")
    principal = auth.authenticate(request(cookie_of(token)))
    good = {"Content-Type": "application/json; charset=utf-8", "Host": "h:1"}
    auth.check_post(request({**good, "X-CSRF-Token": session.csrf_token}), principal)
    auth.check_post(request({**good, "Origin": "http://h:1"}), None)
    for headers, code in (
        ({**good, "Content-Type": "text/plain"}, "unsupported_media_type"),
        ({"Host": "h:1"}, "unsupported_media_type"),
        ({**good, "Origin": "http://evil:1"}, "forbidden_origin"),
        ({**good, "Origin": "https://h:1"}, "forbidden_origin"),  # the scheme counts too
        ({**good, "Origin": "null"}, "forbidden_origin"),
        (good, "csrf"),
        ({**good, "X-CSRF-Token": "x" * 43}, "csrf"),
    ):
        with pytest.raises(AuthError) as refused:
            auth.check_post(request(headers), principal)
        assert refused.value.code == code, headers


def test_cookies_attributes(parts):
    auth, *_ = parts
    assert auth.cookie("t", secure=False) == "pinlater_session=t; Path=/; HttpOnly; SameSite=Strict"
    assert auth.cookie("t", secure=True).endswith("; Secure")
    assert "Max-Age=0" in auth.expired_cookie(secure=True)
