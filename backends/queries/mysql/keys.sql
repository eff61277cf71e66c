-- MySQL unique-key records: one table unique_keys in each queue's database (see
-- common/keys.sql for the columns). key_claim runs first in the enqueue transaction: its
-- INSERT locks each key's index record (an enqueue of the same key from another session waits
-- there until this one commits, then finds the key held), so check and insert are atomic under
-- READ COMMITTED without gap locks. The keys of one statement are sorted (one lock order).
-- Both upserts go through pymysql's executemany (one multi-row statement), which sends the
-- ON DUPLICATE KEY UPDATE tail unformatted: the tail reads the row's values with VALUES().

-- name: create_key_table
-- One queue's unique keys; VARBINARY compares byte-wise ("A" and "a" are two keys) and holds
-- limits.max_unique_key_length (at most 1024) ASCII characters.
CREATE TABLE IF NOT EXISTS {table} (
    ukey VARBINARY(1024) NOT NULL,
    priority TINYINT UNSIGNED NOT NULL,
    local_id BIGINT UNSIGNED NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (ukey),
    KEY expiry (expires_at)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC

-- name: key_claim
-- Take a key unless it is held: a new record, or an expired one replaced, with local_id NULL
-- (bound by key_bind in the same transaction). SET runs left to right, so expires_at, which
-- every condition reads, is assigned last.
INSERT INTO {table} (ukey, priority, local_id, created_at, expires_at)
VALUES (:ukey, :priority, :local_id, :now, :expires)
ON DUPLICATE KEY UPDATE
    priority = IF(expires_at <= VALUES(created_at), VALUES(priority), priority),
    local_id = IF(expires_at <= VALUES(created_at), NULL, local_id),
    created_at = IF(expires_at <= VALUES(created_at), VALUES(created_at), created_at),
    expires_at = IF(expires_at <= VALUES(created_at), VALUES(expires_at), expires_at)

-- name: key_bind
-- Record the local ids of the jobs stored for keys this transaction claimed (every record
-- exists and is locked by this transaction, so the insert part never applies).
INSERT INTO {table} (ukey, priority, local_id, created_at, expires_at)
VALUES (:ukey, :priority, :local_id, :now, :expires)
ON DUPLICATE KEY UPDATE local_id = VALUES(local_id)

-- name: key_purge
-- Delete up to :limit expired key records, oldest expiry first.
DELETE FROM {table} WHERE expires_at <= :now ORDER BY expires_at LIMIT :limit
