"""Leases (docs/semantics.md `S-leases`): one owner at a time, renewed by its owner, free
again once expired or released by its owner alone; live_leases lists the unexpired ones by
name prefix; every handle on the shard (another server) sees the same leases."""

from __future__ import annotations

import functools

from pinlater.storage.shard_kit.kit import Kit, raises
from pinlater.storage.shard_kit.registry import check

TTL_MS = 5000


@check(rule="S-leases")
def a_lease_has_one_owner_until_it_expires(kit: Kit) -> None:
    other = kit.open()  # another server's handle on the same shard
    assert kit.shard.acquire_lease("part/q/1", "server-a", TTL_MS)
    assert not other.acquire_lease("part/q/1", "server-b", TTL_MS)
    assert other.acquire_lease("part/q/2", "server-b", TTL_MS)
    kit.advance(TTL_MS // 2)
    assert kit.shard.acquire_lease("part/q/1", "server-a", TTL_MS)  # renewed by its owner
    kit.advance(TTL_MS // 2 + 500)  # past the first term, within the renewed one
    assert not other.acquire_lease("part/q/1", "server-b", TTL_MS)
    kit.advance(TTL_MS // 2)
    assert other.acquire_lease("part/q/1", "server-b", TTL_MS)  # expired: anyone's
    assert not kit.shard.acquire_lease("part/q/1", "server-a", TTL_MS)
    assert kit.shard.live_leases("part/") == {"part/q/1": "server-b"}  # q/2 expired too


@check(rule="S-leases")
def only_the_owner_releases_a_lease(kit: Kit) -> None:
    assert kit.shard.acquire_lease("part/q/1", "server-a", TTL_MS)
    assert not kit.shard.release_lease("part/q/1", "server-b")
    assert not kit.shard.acquire_lease("part/q/1", "server-b", TTL_MS)
    assert kit.shard.release_lease("part/q/1", "server-a")
    assert not kit.shard.release_lease("part/q/1", "server-a")  # nothing left to release
    assert kit.shard.live_leases("") == {}
    assert kit.shard.acquire_lease("part/q/1", "server-b", TTL_MS)


@check(rule="S-leases")
def live_leases_lists_unexpired_leases_by_name_prefix(kit: Kit) -> None:
    assert kit.shard.acquire_lease("server/a", "a:9000", TTL_MS)
    assert kit.shard.acquire_lease("server/b", "b:9000", 2 * TTL_MS)
    assert kit.shard.acquire_lease("part/q/1", "a:9000", TTL_MS)
    assert kit.shard.acquire_lease("server_x", "x", TTL_MS)  # '_' is no pattern
    assert kit.shard.live_leases("server/") == {"server/a": "a:9000", "server/b": "b:9000"}
    assert set(kit.shard.live_leases("")) == {"server/a", "server/b", "part/q/1", "server_x"}
    assert kit.shard.live_leases("serv%") == {}
    kit.advance(TTL_MS)  # expires_at == now: expired
    assert kit.shard.live_leases("server") == {"server/b": "b:9000"}


@check(rule="S-leases")
def lease_names_owners_and_ttls_are_checked(kit: Kit) -> None:
    bad = (("", "a", 1), ("x y", "a", 1), ("x", "", 1), ("x", "a", 0), ("n" * 201, "a", 1))
    for name, owner, ttl in bad:
        raises(ValueError, functools.partial(kit.shard.acquire_lease, name, owner, ttl))
    raises(ValueError, lambda: kit.shard.release_lease("x", "é"))
    assert kit.shard.live_leases("") == {}
