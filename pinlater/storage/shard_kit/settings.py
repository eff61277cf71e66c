"""The runtime queue settings document (`read_settings` / `write_settings`): empty at first, a
compare-and-set on its version, bytes kept exactly, seen by every handle, and never a queue."""

from __future__ import annotations

import threading

from pinlater.storage.shard_kit.kit import OTHER, QUEUE, Kit
from pinlater.storage.shard_kit.registry import check


@check
def settings_start_empty_at_version_0(kit: Kit) -> None:
    assert kit.shard.read_settings(0) == (0, None), "nothing stored: the version is current"
    assert kit.shard.read_settings(-1) == (0, b"")


@check
def settings_write_is_a_compare_and_set_on_the_version(kit: Kit) -> None:
    shard = kit.shard
    assert shard.write_settings(0, b'{"a":1}') == 1
    assert shard.write_settings(0, b'{"b":2}') is None, "a stale version writes nothing"
    assert shard.read_settings(-1) == (1, b'{"a":1}')
    assert shard.read_settings(1) == (1, None), "unchanged: the document is not sent again"
    assert shard.write_settings(1, b'{"b":2}') == 2
    assert shard.read_settings(1) == (2, b'{"b":2}')
    assert shard.write_settings(5, b"x") is None, "a future version writes nothing either"
    assert shard.read_settings(2) == (2, None)


@check
def settings_bytes_round_trip_on_every_handle(kit: Kit) -> None:
    document = bytes(range(256)) * 800  # every byte value, 200 KiB
    assert kit.shard.write_settings(0, document) == 1
    other_handle = kit.open()  # as another server process would see it
    assert other_handle.read_settings(0) == (1, document)
    assert other_handle.write_settings(1, b"") == 2, "an empty document is a document"
    assert kit.shard.read_settings(1) == (2, b"")


@check
def settings_are_not_a_queue_and_stay_on_their_shard(kit: Kit) -> None:
    assert kit.shard.write_settings(0, b"{}") == 1
    assert kit.shard.queue_names() == {QUEUE}
    kit.shard.delete_queue(QUEUE)
    assert kit.shard.queue_names() == set()
    assert kit.shard.read_settings(0) == (1, b"{}"), "deleting a queue keeps the settings"
    other = kit.open(OTHER)
    assert other.read_settings(-1) == (0, b""), "each shard has its own settings"


@check
def settings_concurrent_writers_one_wins(kit: Kit) -> None:
    assert kit.shard.write_settings(0, b"start") == 1
    handles = [kit.open() for _ in range(6)]
    results: list[int | None] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(handles))

    def write(i: int) -> None:
        barrier.wait()
        result = handles[i].write_settings(1, f"writer {i}".encode())
        with lock:
            results.append(result)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(handles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results, key=lambda r: r or 0) == [None] * 5 + [2], results
    version, document = kit.shard.read_settings(1)
    assert version == 2 and document is not None and document.startswith(b"writer ")
