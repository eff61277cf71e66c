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

-- name: create_deleted_registry
-- Queues deleted but not yet freed: deleteQueue moves a queue's registry row here (the name is
-- free at once, and a queue created again gets a new id, so fresh tables), deletes its jobs in
-- bounded steps, then drops its tables and this row. Rows left by a crash are finished by the
-- janitor (Shard.finish_deletes).
CREATE TABLE IF NOT EXISTS deleted_queues (
    queue_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    deleted_at INTEGER NOT NULL
)

-- name: create_settings
-- The runtime queue settings (queries/common/settings.sql); the name does not start with 'q',
-- so it is never taken for a job table.
CREATE TABLE IF NOT EXISTS pinlater_settings (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    document BLOB NOT NULL
)

-- name: seed_settings
-- Its one row: version 0, nothing stored.
INSERT OR IGNORE INTO pinlater_settings (id, version, document) VALUES (1, 0, x'')

-- name: create_leases
-- The broker's leases (common/leases.sql); the name does not start with 'q' (no job table).
CREATE TABLE IF NOT EXISTS pinlater_leases (
    name TEXT NOT NULL PRIMARY KEY COLLATE BINARY,
    owner TEXT NOT NULL,
    expires_at INTEGER NOT NULL
)

-- name: lease_prune
-- Forget up to :limit leases that expired before :stale (live_leases runs it: a server's
-- heartbeat is a lease per process, so without it the table grew by a row per restart).
DELETE FROM {table} WHERE name IN (
    SELECT name FROM {table} WHERE expires_at < :stale LIMIT :limit)

-- name: lease_take
-- Take the lease, or renew it: only when it is free, expired or already :owner's.
INSERT INTO {table} (name, owner, expires_at) VALUES (:name, :owner, :expires)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE {table}.owner = excluded.owner OR {table}.expires_at <= :now

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
    body BLOB NOT NULL,
    reserved_until INTEGER
)

-- name: reserve_probe
-- Fails with "no such column" unless {table} has reserved_until (tables made before the
-- prefetching broker get it from add_reserve_column when the shard opens).
SELECT reserved_until FROM {table} LIMIT 0

-- name: add_reserve_column
-- The reservation deadline (common/jobs.sql) on a job table made before it: NULL everywhere.
ALTER TABLE {table} ADD COLUMN reserved_until INTEGER

-- name: create_reserve_index
-- Serves the janitor's return of expired reservations: reserved jobs alone, by deadline
-- (partial: the NULL of every other job costs an enqueue nothing).
CREATE INDEX IF NOT EXISTS {index} ON {table} (reserved_until) WHERE reserved_until IS NOT NULL

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

-- name: queue_hide
-- Record a queue as deleted but not yet freed (queue_delete follows in the same transaction).
INSERT OR IGNORE INTO deleted_queues (queue_id, name, deleted_at)
SELECT queue_id, name, :now FROM queues WHERE name = :name

-- name: deleted_list
-- The ids of queues deleted but not yet freed.
SELECT queue_id FROM deleted_queues

-- name: deleted_forget
-- A deleted queue is freed: its tables are gone.
DELETE FROM deleted_queues WHERE queue_id = :queue_id

-- name: table_indexes
-- The explicit indexes of one table (a deleted queue's are dropped before its rows).
SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :table AND sql IS NOT NULL

-- name: drop_index
-- Remove one index.
DROP INDEX IF EXISTS {index}

-- name: delete_rows_step
-- Up to :limit rows of a deleted queue's table, lowest rowids first (one bounded step; a job
-- table's rowid is its local_id, and its unique-key table has one too).
DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} ORDER BY rowid LIMIT :limit)

-- name: queue_list
-- Every registered queue.
SELECT queue_id, name FROM queues

-- name: job_tables
-- Names of the job tables that exist in this file.
SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'q%'

-- name: used_tables
-- The AUTOINCREMENT tables that ever held a row (SQLite keeps their last id here): a job table
-- missing from it has never had a job, so queue_stats need not read it.
SELECT name FROM sqlite_sequence

-- name: create_ledger_table
-- One queue's ledger (queries/common/ledger.sql): SQLite has one writer at a time, so one slot.
CREATE TABLE IF NOT EXISTS {table} (
    slot INTEGER PRIMARY KEY,
    enqueued INTEGER NOT NULL DEFAULT 0,
    deduplicated INTEGER NOT NULL DEFAULT 0,
    dequeued INTEGER NOT NULL DEFAULT 0,
    succeeded INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    retried INTEGER NOT NULL DEFAULT 0,
    reclaimed INTEGER NOT NULL DEFAULT 0,
    deleted INTEGER NOT NULL DEFAULT 0,
    purged INTEGER NOT NULL DEFAULT 0
)

-- name: table_probe
-- Fails with "no such table" unless {table} exists (a lookup in the schema, not a scan).
SELECT 1 FROM {table} LIMIT 0

-- name: ledger_seed
-- A slot's row unless it exists: :enqueued 0, or the opening balance of a queue that held
-- jobs before it had a ledger (the jobs present then).
INSERT OR IGNORE INTO {table} (slot, enqueued) VALUES (:slot, :enqueued)

-- name: create_fifo_index
-- Serves a FIFO queue's heads (fifo_heads: PENDING jobs in local_id order, no sort): made by
-- the queue's first FIFO dequeue (backends/sql_fifo.py), so other queues never maintain it.
CREATE INDEX IF NOT EXISTS {index} ON {table} (state, local_id)
