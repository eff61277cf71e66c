"""Changes made to a backend's storage behind the server's back (raw SQL, raw Redis
commands), for tests that check the server notices them (the ledger's audit)."""

from __future__ import annotations

import sqlite3

from pinlater.storage.descriptors import JobDescriptor


def delete_job_behind_the_server(store, descriptor: str) -> None:
    """Remove one job from its shard's storage without any server primitive: a raw SQL
    DELETE of its row, or the raw Redis commands that drop its fields and index entries."""
    d = JobDescriptor.parse(descriptor)
    shard = store.shard(d.shard)
    kind = store.backend.kind
    if kind == "sqlite":
        conn = sqlite3.connect(shard.path)
        try:
            (queue_id,) = conn.execute(
                "SELECT queue_id FROM queues WHERE name = ?", (d.queue,)
            ).fetchone()
            with conn:
                gone = conn.execute(
                    f"DELETE FROM q{int(queue_id)}_p{int(d.priority)} WHERE local_id = ?",
                    (d.local_id,),
                ).rowcount
        finally:
            conn.close()
    elif kind == "mysql":
        with shard._connection() as conn:
            with conn.cursor() as cur:
                conn.begin()
                table = f"`{shard.database(d.queue)}`.`jobs_p{int(d.priority)}`"
                gone = cur.execute(f"DELETE FROM {table} WHERE local_id = %s", (d.local_id,))
                conn.commit()
    else:
        gone = _redis_delete(shard._client, shard.name, d)
    assert gone == 1, f"{descriptor} was not there to delete"


def _redis_delete(client, shard_name: str, d: JobDescriptor) -> int:
    from backends import redis_keys

    id19 = redis_keys.id19(d.local_id)
    body, meta, status = redis_keys.column_keys(shard_name, d.queue, d.priority)
    found = client.hget(meta, id19)
    if found is None:
        return 0
    state, _, _, _, run_after = found.decode().split("|")[:5]
    prefix = f"{redis_keys.queue_prefix(shard_name, d.queue)}:p{int(d.priority)}"
    member = redis_keys.index_member(int(run_after), d.local_id)
    pipe = client.pipeline()
    pipe.zrem(f"{prefix}:ra{state}", member)
    if state != "0":
        pipe.zrem(f"{prefix}:ua{state}", id19)
    pipe.hdel(body, id19)
    pipe.hdel(meta, id19)
    pipe.hdel(status, id19)
    pipe.execute()
    return 1
