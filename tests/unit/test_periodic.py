"""The one background-thread class and the one file watcher of pinlater.ops."""

from __future__ import annotations

import logging
import threading
import time

from pinlater.ops.periodic import Periodic
from pinlater.ops.watched_file import WatchedFile


class Passes:
    """A duty that records its passes and raises on the ones listed in `fail`."""

    def __init__(self, fail=()):
        self.times: list[float] = []
        self.fail = set(fail)
        self.done = threading.Event()

    def __call__(self) -> None:
        self.times.append(time.monotonic())
        if len(self.times) >= 3:
            self.done.set()
        if len(self.times) in self.fail:
            raise RuntimeError(f"pass {len(self.times)} broke")


def test_first_pass_comes_after_one_interval_unless_run_at_start():
    for at_start, lo, hi in ((False, 0.2, 5.0), (True, 0.0, 0.15)):
        duty = Passes()
        thread = Periodic("t", 0.25, duty, run_at_start=at_start)
        started = time.monotonic()
        thread.start()
        try:
            deadline = time.monotonic() + 5
            while not duty.times and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            thread.stop()
        assert duty.times, at_start
        assert lo <= duty.times[0] - started <= hi, (at_start, duty.times[0] - started)


def test_a_failing_pass_is_logged_and_counted_and_the_next_pass_runs(caplog):
    failures: list[str] = []
    duty = Passes(fail={1, 2})
    thread = Periodic("janitor", 0.01, duty, on_failure=failures.append)
    with caplog.at_level(logging.ERROR, logger="pinlater.ops.periodic"):
        thread.start()
        try:
            assert duty.done.wait(5)
        finally:
            thread.stop()
    assert failures == ["janitor", "janitor"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["janitor: pass failed"] * 2
    assert "pass 1 broke" in caplog.records[0].exc_text


def test_stop_ends_the_thread_between_passes_and_before_start():
    duty = Passes()
    thread = Periodic("t", 3600, duty, run_at_start=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not duty.times and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    thread.stop()
    assert not thread.is_alive() and time.monotonic() - started < 1
    assert len(duty.times) == 1
    idle = Periodic("never", 3600, duty)
    idle.stop()  # never started: nothing to join
    assert not idle.is_alive()


def test_stop_from_the_duty_itself_does_not_deadlock():
    holder: list[Periodic] = []
    ended = threading.Event()

    def duty() -> None:
        holder[0].stop()
        ended.set()

    holder.append(Periodic("self-stop", 0.01, duty))
    holder[0].start()
    assert ended.wait(5)
    holder[0].join(5)
    assert not holder[0].is_alive()


def test_watched_file_reports_each_new_content_once(tmp_path):
    path = tmp_path / "watched.yaml"
    path.write_bytes(b"a")
    watched = WatchedFile(str(path))
    assert not watched.changed()
    path.write_bytes(b"a")  # rewritten with equal bytes: no change
    assert not watched.changed()
    path.write_bytes(b"b")
    assert watched.changed() and not watched.changed()
    path.unlink()  # unreadable: no change, the last content stays the reference
    assert not watched.changed()
    path.write_bytes(b"b")
    assert not watched.changed()
    path.write_bytes(b"c")
    assert watched.changed()


def test_watched_file_that_does_not_exist_yet_changes_when_it_appears(tmp_path):
    path = tmp_path / "later.txt"
    watched = WatchedFile(str(path))
    assert watched.digest is None and not watched.changed()
    path.write_bytes(b"")
    assert watched.changed()


def test_a_callable_interval_is_asked_before_each_wait():
    asked = []

    def interval() -> float:
        asked.append(len(passes.times))
        return 0.01

    passes = Passes()
    thread = Periodic("spread", interval, passes)
    thread.start()
    try:
        assert passes.done.wait(5)
    finally:
        thread.stop()
    assert asked[:3] == [0, 1, 2]
