-- SQLite layout (backends/sqlite.py): one database file per shard holding a registry of queues
-- and one job table per (queue, priority), named q<queue_id>_p<priority>. Numeric table names
-- sidestep SQLite's case-insensitive identifiers ("Foo" and "foo" are distinct queues), and
-- AUTOINCREMENT never hands out a queue id or a local id twice.

-- name: create_registry
-- The registry of queues on this shard; the name compares byte-wise (case-sensitive).
CREATE TABLE IF NOT EXISTS queues (
    queue_id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE COLLATE BINARY,
    created_at INTEGER NOT NULL
)

-- name: create_job_table
-- One job table; times are epoch ms, body is a BLOB (byte-identical round trip).
CREATE TABLE IF NOT EXISTS {table} (
    local_id INTEGER PRIMARY KEY AUTOINCREMENT,
    state INTEGER NOT NULL,
    claim TEXT,
    attempts_allowed INTEGER NOT NULL,
    attempts_remaining INTEGER NOT NULL,
    custom_status TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    run_after INTEGER NOT NULL,
    body BLOB NOT NULL
)

-- name: create_dequeue_index
-- Serves dequeue, counts and scans: eligible jobs of a state in (run_after, local_id) order.
CREATE INDEX IF NOT EXISTS {index} ON {table} (state, run_after, local_id)

-- name: create_updated_index
-- Serves claim reclaim and purge: jobs of a state by updated_at.
CREATE INDEX IF NOT EXISTS {index} ON {table} (state, updated_at)

-- name: drop_job_table
-- Remove one job table with every job in it.
DROP TABLE IF EXISTS {table}

-- name: queue_id
-- The id of a queue by exact name.
SELECT queue_id FROM queues WHERE name = :name

-- name: queue_insert
-- Register a queue unless it exists.
INSERT OR IGNORE INTO queues (name, created_at) VALUES (:name, :now)

-- name: queue_delete
-- Unregister a queue.
DELETE FROM queues WHERE name = :name

-- name: queue_list
-- Every registered queue.
SELECT queue_id, name FROM queues

-- name: job_tables
-- Names of the job tables that exist in this file.
SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'q%'
