"""Runtime queue settings over a real (SQLite) store: two servers' RuntimeSettings share one
document, the version read keeps idle polls cheap, writers race safely, the precedence stored >
file > default holds, and a bad or unreadable document never replaces good settings."""

from __future__ import annotations

import json
from contextlib import closing

import pytest

from pinlater.errors import InvalidRequest, ShardConnectionFailed
from pinlater.ops.queue_settings import QueueConfig, QueueSettings
from pinlater.ops.rate_limiter import QueueRateLimiter
from pinlater.ops.runtime_settings import RuntimeSettings, SettingsHome, decode, encode
from tests.conformance.faults import intercepted
from tests.support.sqlite_env import sharded_store


@pytest.fixture
def store(tmp_path):
    with closing(sharded_store(tmp_path, shards=("1", "2"), queue=None, retries=0)) as store:
        yield store


def server(store, home_class=SettingsHome) -> tuple[RuntimeSettings, QueueRateLimiter]:
    limiter = QueueRateLimiter()
    settings = RuntimeSettings(home_class(store), limiter, default_claim_timeout=600.0)
    settings.poll()
    return settings, limiter


def test_a_change_on_one_server_reaches_the_other_on_its_next_poll(store):
    a, a_limits = server(store)
    b, b_limits = server(store)
    a.change("q", {"paused": True, "claim_timeout_seconds": 30}, "tester")
    assert a_limits.paused("q") and a.claim_timeout_for("q") == 30
    assert not b_limits.paused("q"), "not before b polls"
    assert b.poll() is True
    assert b_limits.paused("q") and b.claim_timeout_for("q") == 30
    assert b.poll() is False, "nothing new"
    assert SettingsHome(store).read("1", b.stored_version()[1]) == (1, None), "a cheap read"


def test_the_document_lives_on_the_first_shard_of_the_map(store):
    a, _ = server(store)
    a.change("q", {"max_jobs_per_second": 3}, "tester")
    version, document = store.shard("1").read_settings(-1)
    assert version == 1 and json.loads(document)["queues"]["q"]["max_jobs_per_second"] == 3
    assert store.shard("2").read_settings(-1) == (0, b"")


def test_precedence_is_stored_then_file_then_default(store):
    settings, limiter = server(store)
    settings.file_changed(QueueConfig({"q": QueueSettings(max_jobs_per_second=8)}), servers=2)
    rate = settings.effective("q")["max_jobs_per_second"]
    assert (rate["value"], rate["source"]) == (8, "file")
    assert limiter.shares() == {"q": 4.0}, "the file's rate split over the two servers"
    settings.change("q", {"max_jobs_per_second": 2}, "tester")
    effective = settings.effective("q")
    assert effective["max_jobs_per_second"] == {
        "value": 2,
        "source": "stored",
        "stored": 2,
        "file": 8,
    }
    assert effective["server_share_jobs_per_second"] == 1.0 and limiter.shares() == {"q": 1.0}
    assert effective["claim_timeout_seconds"]["source"] == "default"
    settings.change("q", {"paused": True}, "tester")
    assert (
        limiter.shares() == {"q": 0.0} and settings.effective("q")["paused"]["source"] == "stored"
    )
    settings.change("q", {"paused": None, "max_jobs_per_second": None}, "tester")
    assert limiter.shares() == {"q": 4.0}, "back to the file"
    settings.file_changed(QueueConfig({"q": QueueSettings(max_jobs_per_second=0)}), servers=1)
    assert settings.effective("q")["paused"] == {"value": True, "source": "file"}


def test_racing_writers_both_get_their_change(store):
    other, _ = server(store)

    class RacingHome(SettingsHome):
        """Lets another server change the document between this one's read and write, once."""

        raced = False

        def write(self, name, expected_version, document):
            if not RacingHome.raced:
                RacingHome.raced = True
                other.change("theirs", {"paused": True}, "the other server")
            return super().write(name, expected_version, document)

    mine, _ = server(store, RacingHome)
    mine.change("mine", {"max_jobs_per_second": 1}, "this server")
    mine.poll()
    assert mine.paused("theirs") and mine.effective("mine")["max_jobs_per_second"]["value"] == 1
    assert store.shard("1").read_settings(0)[0] == 2, "the other write, then this one retried"


def test_bad_values_are_refused_with_the_field_named(store):
    settings, _ = server(store)
    for updates, field in (
        ({"max_jobs_per_second": -1}, "max_jobs_per_second"),
        ({"max_jobs_per_second": float("nan")}, "max_jobs_per_second"),
        ({"claim_timeout_seconds": "10"}, "claim_timeout_seconds"),
        ({"paused": "yes"}, "paused"),
        ({"colour": "red"}, "colour"),
    ):
        with pytest.raises(InvalidRequest, match=field):
            settings.change("q", updates, "tester")
    assert store.shard("1").read_settings(0) == (0, None), "nothing was written"


def test_a_document_this_server_cannot_read_keeps_the_current_settings(store):
    settings, limiter = server(store)
    settings.change("q", {"paused": True}, "tester")
    version = store.shard("1").read_settings(0)[0]
    assert store.shard("1").write_settings(version, b'{"format": 99, "queues": {}}')
    assert settings.poll() is False and limiter.paused("q")
    with pytest.raises(ShardConnectionFailed, match="cannot be read"):
        settings.change("q", {"paused": None}, "tester")


def test_bad_entries_are_skipped_and_the_rest_kept():
    document = json.dumps(
        {
            "format": 1,
            "queues": {
                "good": {"paused": True},
                "bad": {"max_jobs_per_second": -5},
                "worse": "not a mapping",
            },
        }
    ).encode()
    assert set(decode(document)) == {"good"}
    assert decode(encode(decode(document))) == decode(document)


def test_an_unreadable_home_shard_keeps_the_current_settings(store):
    settings, limiter = server(store)
    settings.change("q", {"paused": True}, "tester")
    store.shard("1").close()
    assert settings.poll() is False
    assert limiter.paused("q"), "still applied"
    with pytest.raises(ShardConnectionFailed):
        settings.change("q", {"paused": None}, "tester")


def test_an_unhealthy_home_shard_is_not_called(store):
    settings, limiter = server(store)
    settings.change("q", {"paused": True}, "tester")
    store.health.mark_unhealthy("1")
    with intercepted(store, "read_settings", shards=["1"], keep_health=True) as calls:
        assert settings.poll() is False
        with pytest.raises(ShardConnectionFailed, match="down"):
            settings.change("q", {"paused": None}, "tester")
    assert calls.count["1"] == 0, "no call waits out a dead shard's timeout"
    assert limiter.paused("q")
    store.health.forget("1")
    settings.change("q", {"paused": None}, "tester")
    assert not limiter.paused("q")
