"""The tarpit of refused admin passwords (pinlater/handler/tarpit.py): refusals are answered
after the delay, in due order, by one timer thread; nothing waits past close; a full tarpit
or a zero delay answers at once (the caller raises)."""

from __future__ import annotations

import threading
import time

from pinlater.errors import PasswordInvalid
from pinlater.handler.tarpit import Tarpit


def _wire(error):
    return RuntimeError(f"wire: {error.message}")


def _outcome(deferred, seen: list, done: threading.Event) -> None:
    def record(value, error) -> None:
        seen.append((time.monotonic(), str(error)))
        done.set()

    deferred.add_callback(record)


def test_a_refusal_is_answered_after_the_delay_with_its_wire_error():
    tarpit = Tarpit(0.2, _wire)
    started = time.monotonic()
    seen: list = []
    done = threading.Event()
    refusal = tarpit.refuse(PasswordInvalid("wrong"))
    assert refusal is not None and refusal.error.message == "wrong"
    _outcome(refusal, seen, done)
    assert done.wait(10)
    ((answered, error),) = seen
    assert answered - started >= 0.2 and error == "wire: wrong"
    assert tarpit.pending() == 0
    tarpit.close()


def test_refusals_are_answered_in_due_order():
    tarpit = Tarpit(0.1, _wire)
    seen: list = []
    done = [threading.Event() for _ in range(5)]
    for i, event in enumerate(done):
        _outcome(tarpit.refuse(PasswordInvalid(str(i))), seen, event)
        time.sleep(0.01)
    assert all(event.wait(10) for event in done)
    assert [error for _, error in seen] == [f"wire: {i}" for i in range(5)]
    tarpit.close()


def test_close_answers_every_waiting_refusal_at_once():
    tarpit = Tarpit(60, _wire)
    seen: list = []
    done = threading.Event()
    _outcome(tarpit.refuse(PasswordInvalid("later")), seen, done)
    tarpit.close()
    assert done.is_set() and seen[0][1] == "wire: later"
    assert tarpit.refuse(PasswordInvalid("after close")) is None


def test_a_full_tarpit_or_no_delay_answers_at_once():
    full = Tarpit(60, _wire, max_pending=2)
    assert full.refuse(PasswordInvalid("1")) and full.refuse(PasswordInvalid("2"))
    assert full.refuse(PasswordInvalid("3")) is None
    assert full.pending() == 2
    full.close()
    assert Tarpit(0, _wire).refuse(PasswordInvalid("now")) is None
