-- SQLite unique-key records: one table q<queue_id>_keys per queue (see common/keys.sql for the
-- columns). The enqueue transaction holds SQLite's write lock, so claim, insert and bind can
-- not interleave with another enqueue of the same key.

-- name: create_key_table
-- One queue's unique keys (the key compares byte-wise: "A" and "a" are two keys).
CREATE TABLE IF NOT EXISTS {table} (
    ukey TEXT NOT NULL PRIMARY KEY COLLATE BINARY,
    priority INTEGER NOT NULL,
    local_id INTEGER,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
)

-- name: create_key_expiry_index
-- Serves the janitor's purge of expired keys.
CREATE INDEX IF NOT EXISTS {index} ON {table} (expires_at)

-- name: key_claim
-- Take a key unless it is held: a new record, or an expired one replaced, with local_id NULL
-- (bound to the job by key_bind in the same transaction); a held record is left alone.
INSERT INTO {table} (ukey, priority, local_id, created_at, expires_at)
VALUES (:ukey, :priority, :local_id, :now, :expires)
ON CONFLICT (ukey) DO UPDATE SET
    priority = excluded.priority, local_id = NULL, created_at = excluded.created_at,
    expires_at = excluded.expires_at
WHERE {table}.expires_at <= excluded.created_at

-- name: key_bind
-- Record the local id of the job stored for a key this transaction claimed.
UPDATE {table} SET local_id = :local_id WHERE ukey = :ukey

-- name: key_purge
-- Delete up to :limit expired key records, oldest expiry first.
DELETE FROM {table} WHERE ukey IN (
    SELECT ukey FROM {table} WHERE expires_at <= :now ORDER BY expires_at LIMIT :limit)
