"""PasswordGuard: refusals happen before any hashing, per client and server-wide."""

from __future__ import annotations

import threading

import pytest

from pinlater.errors import PasswordInvalid
from pinlater.handler.password_guard import PasswordGuard


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingVerify:
    """Stands in for the PBKDF2 check (the real one is pinned in test_cli_passwords.py)."""

    def __init__(self, right: str = "right") -> None:
        self.right = right
        self.calls = 0

    def __call__(self, password: object, stored: str) -> bool:
        self.calls += 1
        return password == self.right


def guard(**options) -> tuple[PasswordGuard, Clock, CountingVerify, list[str]]:
    clock, verify, refused = Clock(), CountingVerify(), []
    options = {"failures_per_minute": 6, "failure_burst": 3, "checks_per_second": 100, **options}
    made = PasswordGuard("stored", clock=clock, verify=verify, on_refused=refused.append, **options)
    return made, clock, verify, refused


def refusal(made: PasswordGuard, password: str, peer: str) -> str:
    with pytest.raises(PasswordInvalid) as info:
        made.check(password, peer)
    return info.value.message


def test_the_right_password_passes_and_wrong_ones_are_refused():
    made, _, verify, refused = guard()
    made.check("right", "10.0.0.1:5000")
    assert refusal(made, "wrong", "10.0.0.1:5000") == "Invalid admin password."
    assert verify.calls == 2
    assert refused == ["wrong"]


def test_a_client_past_its_failure_burst_is_refused_before_hashing():
    made, _, verify, refused = guard()
    for _ in range(3):
        refusal(made, "guess", "10.0.0.1:5000")
    assert "too many wrong admin passwords from 10.0.0.1" in refusal(made, "right", "10.0.0.1:6")
    assert verify.calls == 3  # the fourth attempt cost no hash, even with the right password
    assert refused == ["wrong"] * 3 + ["client_limit"]


def test_the_failure_window_refills_at_the_configured_rate():
    made, clock, verify, _ = guard()
    for _ in range(3):
        refusal(made, "guess", "10.0.0.1:5000")
    clock.now += 9.9  # 6 per minute: one new attempt every 10 s
    assert "retry in 1 s" in refusal(made, "right", "10.0.0.1:1")
    clock.now += 0.1
    made.check("right", "10.0.0.1:1")
    assert verify.calls == 4


def test_other_clients_are_not_limited_by_one_guessing_client():
    made, _, _, _ = guard()
    for _ in range(5):
        with pytest.raises(PasswordInvalid):
            made.check("guess", "10.0.0.1:5000")
    made.check("right", "10.0.0.2:5000")


def test_the_server_wide_rate_bounds_hashes_from_many_clients():
    made, clock, verify, refused = guard(checks_per_second=2)
    messages = [refusal(made, "guess", f"10.0.1.{i}:1") for i in range(5)]
    assert verify.calls == 2
    assert (
        messages[2:] == ["Invalid admin password: too many admin password checks; retry later"] * 3
    )
    assert refused.count("server_limit") == 3
    clock.now += 1
    made.check("right", "10.0.2.1:1")


def test_checks_waiting_for_the_hashing_thread_are_bounded():
    gate = threading.Event()
    started = threading.Event()

    def slow_verify(password: object, stored: str) -> bool:
        started.set()
        gate.wait(5)
        return True

    made = PasswordGuard("stored", checks_per_second=100, max_waiting=1, verify=slow_verify)
    first = threading.Thread(target=made.check, args=("right", "10.0.0.1:1"))
    first.start()
    assert started.wait(5)
    assert "in progress" in refusal(made, "right", "10.0.0.2:1")
    gate.set()
    first.join(5)
    made.check("right", "10.0.0.3:1")
    made.close()


def test_many_clients_are_remembered_with_bounded_memory(monkeypatch):
    from pinlater.handler import password_guard

    monkeypatch.setattr(password_guard, "MAX_CLIENTS", 50)
    made, _, _, _ = guard()
    for i in range(500):
        refusal(made, "guess", f"10.1.{i // 256}.{i % 256}:1")
    assert made.tracked_clients() <= 50
